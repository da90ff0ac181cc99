//! [`TaskRunner`]: the queue's [`Handler`] that runs berth's tasks. It opens each task's
//! context (skipping superseded tasks), hands it to the flow of its kind, and reports a
//! failure to lifecycle.

use std::sync::Arc;
use std::time::Instant;

use berth_proto::queue::Task;
use berth_proto::tasks::TaskKind;
use berth_queue::worker::{Handler, TaskError};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::client::{ConnectError, Services};
use crate::config::TaskConfig;
use crate::context::TaskContext;
use crate::flows;
use crate::hook_cache::HookCache;
use crate::identity::Identities;
use crate::task_metrics::{Outcome, TaskMetrics};

/// The [`Handler`] that runs berth's tasks.
pub struct TaskRunner {
    services: Services,
    config: TaskConfig,
    hooks: HookCache,
    identities: Identities,
    metrics: TaskMetrics,
}

impl TaskRunner {
    /// A runner whose task metrics are registered in `metrics`.
    pub fn new(
        config: TaskConfig,
        metrics: &berth_runtime::Metrics,
    ) -> Result<Arc<TaskRunner>, ConnectError> {
        let services = Services::connect_lazy(&config)?;
        let task_metrics = TaskMetrics::default();
        metrics.register(|r| task_metrics.register(r));
        Ok(Arc::new(TaskRunner {
            services,
            config,
            hooks: HookCache::default(),
            identities: Identities::default(),
            metrics: task_metrics,
        }))
    }
}

/// What became of a task that did not fail.
enum Ran {
    Done,
    Skipped,
}

/// How a task ended, for the metrics.
fn outcome(result: &Result<Ran, TaskError>, cancel: &CancellationToken) -> Outcome {
    match result {
        Ok(Ran::Done) => Outcome::Done,
        Ok(Ran::Skipped) => Outcome::Skipped,
        Err(e) if e.defer.is_some() => Outcome::Deferred,
        Err(_) if cancel.is_cancelled() => Outcome::Cancelled,
        Err(e) if e.retry => Outcome::Retry,
        Err(_) => Outcome::Failed,
    }
}

/// Whether a failed task fails its generation: a permanent error (one retrying cannot fix) in
/// a task that converges the package. Not a cancelled task (superseded, or the worker
/// stopping), and not a HookRun (one event's run failing leaves the package as it is) or a
/// removal task (Remove always finishes).
fn fails_generation(kind: TaskKind, error: &TaskError, cancel: &CancellationToken) -> bool {
    use TaskKind::*;
    !error.retry
        && !cancel.is_cancelled()
        && matches!(
            kind,
            Download | Load | ApplySettings | Startup | Run | Start
        )
}

impl Handler for TaskRunner {
    async fn handle(&self, task: Task, cancel: CancellationToken) -> Result<(), TaskError> {
        let started = Instant::now();
        let kind = TaskKind::parse(&task.kind);
        let span = berth_runtime::with_traceparent(
            tracing::info_span!("task", task.id = %task.id, task.kind = %task.kind, package.key = %task.package, generation = task.generation),
            &task.traceparent,
        );
        let result = self.run(kind, &task, cancel.clone()).instrument(span).await;
        self.metrics
            .observe(kind, outcome(&result, &cancel), started.elapsed());
        result.map(|_| ())
    }
}

impl TaskRunner {
    async fn run(
        &self,
        kind: Option<TaskKind>,
        task: &Task,
        cancel: CancellationToken,
    ) -> Result<Ran, TaskError> {
        let Some(kind) = kind else {
            return Err(TaskError::permanent(format!(
                "unknown task kind {:?}",
                task.kind
            )));
        };
        let Some(cx) = TaskContext::start(
            &self.services,
            &self.config,
            &self.hooks,
            &self.identities,
            task,
            cancel,
        )
        .await?
        else {
            tracing::debug!("superseded; skipped");
            return Ok(Ran::Skipped);
        };
        // Hooks of a package the scheduler has not enabled (its requirements do not hold
        // yet) run only through its task flows, once enabled: a schedule or an event fired
        // since its Load is dropped, as its bindings are not in force yet.
        if kind == TaskKind::HookRun && !cx.spec.enabled {
            tracing::debug!("package not enabled by the scheduler; hook run skipped");
            return Ok(Ran::Skipped);
        }
        let mut result = flows::dispatch(&cx, kind, task).await;
        // What the task reported reaches lifecycle before the task settles (however it
        // ended), so the task that follows it reads a spec that knows it. A report that
        // cannot be sent fails a task that succeeded: its retry reports again.
        let flushed = cx.flush_reports().await;
        if let (Ok(()), Err(e)) = (&result, flushed) {
            result = Err(e);
        }
        match &result {
            Ok(()) => tracing::info!("task done"),
            Err(e) if e.defer.is_some() => {
                tracing::debug!(reason = %e.message, "task handed back for later")
            }
            Err(e) => {
                tracing::warn!(error = %e.message, "task failed");
                cx.report_error(kind, &e.message, fails_generation(kind, e, &cx.cancel))
                    .await;
            }
        }
        result.map(|()| Ran::Done)
    }
}
