//! The scheduler: fires the schedule bindings of every package as HookRun tasks, from their
//! crontabs. It runs beside the gRPC service, which only tells it what changed.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use berth_hooks::HookConfig;
use berth_hooks::binding_context::{self, BindingContext};
use berth_names::Generation;
use berth_proto::queue::Task;
use berth_proto::tasks::BindingType;
use chrono::Utc;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::convert::schedule_binding;
use crate::enqueue::Enqueuer;
use crate::kube::{KubeManager, hook_run_task};
use crate::schedule::Schedule;
use crate::shards::Shards;

/// Longest the scheduler sleeps without re-checking (clock jumps, missed wake-ups).
const MAX_SLEEP: Duration = Duration::from_secs(30);

/// The schedules in force, shared by the service (which replaces them) and the firing loop.
#[derive(Clone)]
pub struct Scheduler {
    schedules: Arc<Mutex<Vec<Schedule>>>,
    wake: Arc<Notify>,
    enqueuer: Enqueuer,
    /// Where snapshots and hook configurations come from, for schedules that include them.
    kube: Option<Arc<KubeManager>>,
    /// Only the schedules of packages whose shard this replica owns fire.
    shards: Arc<Shards>,
}

impl Scheduler {
    pub fn new(
        schedules: Vec<Schedule>,
        enqueuer: Enqueuer,
        kube: Option<Arc<KubeManager>>,
        shards: Arc<Shards>,
    ) -> Scheduler {
        Scheduler {
            schedules: Arc::new(Mutex::new(schedules)),
            wake: Arc::new(Notify::new()),
            enqueuer,
            kube,
            shards,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Schedule>> {
        self.schedules.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the package's schedules (none: removes them) and wakes the loop.
    pub fn replace(&self, package: &str, new: Vec<Schedule>) {
        let mut all = self.lock();
        all.retain(|s| s.package.as_str() != package);
        all.extend(new);
        drop(all);
        self.wake.notify_one();
    }

    /// Replaces the schedules of every package `which` selects with `new` (a shard taken
    /// over: its stored schedules; a shard given up: none) and wakes the loop.
    pub fn replace_where(&self, which: impl Fn(&str) -> bool, new: Vec<Schedule>) {
        let mut all = self.lock();
        all.retain(|s| !which(s.package.as_str()));
        all.extend(new);
        drop(all);
        self.wake.notify_one();
    }

    /// Fires from now on carry `generation` (never lowers it).
    pub fn adopt_generation(&self, package: &str, generation: Generation) {
        for s in self
            .lock()
            .iter_mut()
            .filter(|s| s.package.as_str() == package)
        {
            s.generation = s.generation.max(generation);
        }
    }

    /// Fires due schedules until `shutdown`. Fires missed while hookevent was down are not caught
    /// up, as with cron.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut last = Utc::now();
        loop {
            let now = Utc::now();
            let (due, next) = {
                let all = self.lock();
                let due: Vec<Schedule> = all
                    .iter()
                    .filter(|s| s.next_after(last).is_some_and(|t| t <= now))
                    // A shard given up a moment ago may still have schedules here.
                    .filter(|s| self.shards.owns(s.package.as_str()))
                    .cloned()
                    .collect();
                let next = all.iter().filter_map(|s| s.next_after(now)).min();
                (due, next)
            };
            last = now;
            if !due.is_empty() {
                let tasks = due.iter().map(|s| self.fire(s)).collect();
                self.enqueuer.send(tasks).await;
            }
            let sleep = next
                .and_then(|t| (t - Utc::now()).to_std().ok())
                .unwrap_or(MAX_SLEEP)
                .min(MAX_SLEEP);
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = self.wake.notified() => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// The HookRun of one schedule fire, with the snapshots it asks for.
    fn fire(&self, s: &Schedule) -> Task {
        // Each fire is a trace of its own (the scheduler's loop is not traced).
        let span = tracing::info_span!(parent: None, "hookevent.schedule", package.key = %s.package, hook = %s.hook, binding = %s.binding);
        let _guard = span.enter();
        let binding = schedule_binding(s);
        let (config, snapshots) = match &self.kube {
            Some(kube) if binding.group.is_some() || !binding.include_snapshots_from.is_empty() => {
                (
                    kube.hook_config(s.package.as_str(), &s.hook),
                    kube.hook_snapshots(s.package.as_str(), &s.hook),
                )
            }
            _ => (HookConfig::default(), Default::default()),
        };
        let ctx = BindingContext::schedule(&binding, &config, &snapshots);
        hook_run_task(
            &s.package,
            s.generation,
            &s.hook,
            BindingType::Schedule,
            binding.queue.as_deref(),
            s.allow_failure,
            binding_context::to_json(&[ctx]),
        )
    }
}
