//! The hookevent gRPC adapter and the scheduler that fires schedule bindings as HookRun tasks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_proto::hookevent::hook_events_server::HookEvents;
use berth_proto::hookevent::{
    RemoveBindingsRequest, RemoveBindingsResponse, SetBindingsRequest, SetBindingsResponse,
};
use berth_proto::queue::broker_client::BrokerClient;
use berth_proto::queue::{EnqueueRequest, Task};
use berth_proto::tasks::TaskKind;
use chrono::Utc;
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::schedule::{Schedule, parse_crontab};
use crate::store::Store;

/// Most schedule bindings one package may register.
const MAX_BINDINGS_PER_PACKAGE: usize = 1000;
/// Longest the scheduler sleeps without re-checking (clock jumps, missed wake-ups).
const MAX_SLEEP: Duration = Duration::from_secs(30);
/// Enqueue attempts for one fire while the broker is unreachable.
const ENQUEUE_ATTEMPTS: u32 = 5;

#[derive(Clone)]
pub struct HookEventService {
    store: Store,
    schedules: Arc<Mutex<Vec<Schedule>>>,
    wake: Arc<Notify>,
}

impl HookEventService {
    pub async fn new(store: Store) -> Result<Self, crate::store::StoreError> {
        let schedules = store.load_all().await?;
        Ok(HookEventService { store, schedules: Arc::new(Mutex::new(schedules)), wake: Arc::new(Notify::new()) })
    }

    fn replace(&self, package: &str, new: Vec<Schedule>) {
        let mut all = self.schedules.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|s| s.package != package);
        all.extend(new);
        drop(all);
        self.wake.notify_one();
    }

    /// Fires due schedules until `shutdown`. Fires missed while hookevent was down are not caught
    /// up, as with cron.
    pub async fn run_scheduler(self, broker: BrokerClient<berth_telemetry::Channel>, shutdown: CancellationToken) {
        let mut last = Utc::now();
        loop {
            let now = Utc::now();
            let (due, next) = {
                let all = self.schedules.lock().unwrap_or_else(|p| p.into_inner());
                let due: Vec<Schedule> = all
                    .iter()
                    .filter(|s| s.next_after(last).is_some_and(|t| t <= now))
                    .cloned()
                    .collect();
                let next = all.iter().filter_map(|s| s.next_after(now)).min();
                (due, next)
            };
            last = now;
            for schedule in due {
                tokio::spawn(fire(broker.clone(), schedule));
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
}

/// Enqueues one HookRun for a schedule fire, in a trace of its own.
async fn fire(mut broker: BrokerClient<berth_telemetry::Channel>, s: Schedule) {
    let span = tracing::info_span!("hookevent.schedule", package.key = %s.package, hook = %s.hook, binding = %s.binding);
    let _guard = span.enter();
    let task = Task {
        id: uuid::Uuid::new_v4().to_string(),
        queue: s.queue_name(),
        package: s.package.clone(),
        generation: s.generation,
        kind: TaskKind::HookRun.as_str().to_owned(),
        payload_json: json!({
            "hook": s.hook,
            "binding_type": "Schedule",
            "binding_contexts": [{"binding": s.binding, "type": "Schedule"}],
        })
        .to_string(),
        traceparent: berth_telemetry::current_traceparent(),
        allow_failure: s.allow_failure,
        ..Default::default()
    };
    let mut delay = Duration::from_millis(100);
    for attempt in 1..=ENQUEUE_ATTEMPTS {
        match broker.enqueue(EnqueueRequest { tasks: vec![task.clone()] }).await {
            Ok(_) => {
                tracing::debug!("schedule fired");
                return;
            }
            Err(status) if attempt < ENQUEUE_ATTEMPTS => {
                tracing::warn!(error = %status.message(), attempt, "enqueue of a schedule fire failed; retrying");
                tokio::time::sleep(delay).await;
                delay *= 2;
            }
            Err(status) => tracing::error!(error = %status.message(), "schedule fire dropped: broker unavailable"),
        }
    }
}

#[tonic::async_trait]
impl HookEvents for HookEventService {
    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn set_bindings(&self, req: Request<SetBindingsRequest>) -> Result<Response<SetBindingsResponse>, Status> {
        let req = req.into_inner();
        if req.package.is_empty() {
            return Err(Status::invalid_argument("package: required"));
        }
        if req.schedules.len() > MAX_BINDINGS_PER_PACKAGE {
            return Err(Status::invalid_argument(format!(
                "schedules: {} bindings exceed the limit of {MAX_BINDINGS_PER_PACKAGE}",
                req.schedules.len()
            )));
        }
        let mut parsed = Vec::with_capacity(req.schedules.len());
        for (i, b) in req.schedules.iter().enumerate() {
            let cron = parse_crontab(&b.crontab)
                .map_err(|e| Status::invalid_argument(format!("schedules[{i}] (hook {}): {e}", b.hook)))?;
            parsed.push(Schedule {
                package: req.package.clone(),
                generation: req.generation,
                hook: b.hook.clone(),
                binding: b.binding.clone(),
                crontab: b.crontab.clone(),
                allow_failure: b.allow_failure,
                queue: b.queue.clone(),
                cron,
            });
        }
        self.store.replace(&req.package, &parsed).await.map_err(|e| Status::internal(e.to_string()))?;
        self.replace(&req.package, parsed);
        Ok(Response::new(SetBindingsResponse {}))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn remove_bindings(
        &self,
        req: Request<RemoveBindingsRequest>,
    ) -> Result<Response<RemoveBindingsResponse>, Status> {
        let package = &req.get_ref().package;
        self.store.replace(package, &[]).await.map_err(|e| Status::internal(e.to_string()))?;
        self.replace(package, vec![]);
        Ok(Response::new(RemoveBindingsResponse {}))
    }
}
