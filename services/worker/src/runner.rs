//! [`TaskRunner`]: the queue's [`Handler`] that runs berth's tasks. It opens each task's
//! context (skipping superseded tasks), hands it to the flow of its kind, and reports a
//! failure to lifecycle.

use std::sync::Arc;

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

/// The [`Handler`] that runs berth's tasks.
pub struct TaskRunner {
    services: Services,
    config: TaskConfig,
    hooks: HookCache,
}

impl TaskRunner {
    pub fn new(config: TaskConfig) -> Result<Arc<TaskRunner>, ConnectError> {
        let services = Services::connect_lazy(&config)?;
        Ok(Arc::new(TaskRunner {
            services,
            config,
            hooks: HookCache::default(),
        }))
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
        && matches!(kind, Download | Load | ApplySettings | Startup | Run)
}

impl Handler for TaskRunner {
    async fn handle(&self, task: Task, cancel: CancellationToken) -> Result<(), TaskError> {
        let span = berth_telemetry::with_traceparent(
            tracing::info_span!("task", task.id = %task.id, task.kind = %task.kind, package.key = %task.package, generation = task.generation),
            &task.traceparent,
        );
        async move {
            let Some(kind) = TaskKind::parse(&task.kind) else {
                return Err(TaskError::permanent(format!(
                    "unknown task kind {:?}",
                    task.kind
                )));
            };
            let Some(cx) =
                TaskContext::start(&self.services, &self.config, &self.hooks, &task, cancel)
                    .await?
            else {
                tracing::debug!("superseded; skipped");
                return Ok(());
            };
            // Hooks of a package the scheduler has not enabled (its requirements do not hold
            // yet) run only through its task flows, once enabled: a schedule or an event fired
            // since its Load is dropped, as its bindings are not in force yet.
            if kind == TaskKind::HookRun && !cx.spec.enabled {
                tracing::debug!("package not enabled by the scheduler; hook run skipped");
                return Ok(());
            }
            let result = flows::dispatch(&cx, kind, &task).await;
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
            result
        }
        .instrument(span)
        .await
    }
}
