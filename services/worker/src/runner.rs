//! Task handlers: what a worker does for each kind of task (DESIGN.md section 4). Each handler is
//! idempotent — delivered twice, it converges to the same state:
//!
//! | task | effect | delivered twice |
//! |---|---|---|
//! | Download | copy the package version into this worker's cache | second copy is skipped (same digest) |
//! | Load | read the package, discover hooks, report schema and hooks, register schedule and kubernetes bindings | same report, bindings replaced |
//! | ApplySettings | bindings adopt the generation; validate settings, compute values, report them | same values |
//! | Startup | Synchronization runs of kubernetes bindings, release their events, then onStartup hooks | hooks run again (hooks must be idempotent, as in shell-operator) |
//! | Run | beforeHelm hooks → release install/upgrade → afterHelm hooks → wait ready | server-side apply is idempotent |
//! | HookRun | run one hook with its binding contexts, apply its outputs | the hook runs again |
//! | Disable | remove the package's bindings | no-op |
//! | Uninstall | beforeDeleteHelm → release uninstall → afterDeleteHelm | uninstall of a missing release is a no-op |
//! | Cleanup | forget the package's state and cached files | no-op |
//!
//! A task of a generation older than the package's current one is skipped: it was superseded.

mod bindings;
mod context;
mod hooks;
mod local;
pub mod metrics;
mod run;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth_proto::hookevent::hook_events_client::HookEventsClient;
use berth_proto::lifecycle::lifecycle_client::LifecycleClient;
use berth_proto::queue::Task;
use berth_proto::release::releases_client::ReleasesClient;
use berth_proto::tasks::TaskKind;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::worker::{Handler, TaskError};

pub use context::TaskContext;

/// Where a worker finds the other services, and its local limits.
#[derive(Clone, Debug)]
pub struct TaskConfig {
    pub lifecycle_endpoint: String,
    pub release_endpoint: String,
    pub hookevent_endpoint: String,
    /// Package cache of this worker (`<data-dir>/packages`).
    pub cache_dir: PathBuf,
    /// Longest a hook may run before its process group is killed.
    pub hook_timeout: Duration,
    /// Longest a Run waits for the release to become ready before it fails (and is retried).
    pub ready_timeout: Duration,
    /// Where each hook run's temporary files (binding context, values, output files) go;
    /// `None` = the system temp directory. Creating them is most of a hook's start overhead on
    /// a disk file system, so a tmpfs (an `emptyDir` with `medium: Memory`) is the place.
    pub hook_tmp_dir: Option<PathBuf>,
}

/// The clients a handler needs; cheap to clone.
#[derive(Clone)]
pub struct Services {
    pub lifecycle: LifecycleClient<berth_telemetry::Channel>,
    pub release: ReleasesClient<berth_telemetry::Channel>,
    pub hookevent: HookEventsClient<berth_telemetry::Channel>,
}

/// The [`Handler`] that runs berth's tasks.
pub struct TaskRunner {
    services: Services,
    config: TaskConfig,
    hooks: hooks::HookCache,
}

impl TaskRunner {
    pub fn new(config: TaskConfig) -> Result<Arc<TaskRunner>, tonic::transport::Error> {
        let services = Services {
            lifecycle: LifecycleClient::new(berth_telemetry::connect_lazy(&config.lifecycle_endpoint)?),
            release: ReleasesClient::new(berth_telemetry::connect_lazy(&config.release_endpoint)?),
            hookevent: HookEventsClient::new(berth_telemetry::connect_lazy(&config.hookevent_endpoint)?),
        };
        Ok(Arc::new(TaskRunner { services, config, hooks: hooks::HookCache::default() }))
    }
}

impl Handler for TaskRunner {
    async fn handle(&self, task: Task, cancel: CancellationToken) -> Result<(), TaskError> {
        let span = berth_telemetry::with_traceparent(
            tracing::info_span!("task", task.id = %task.id, task.kind = %task.kind, package.key = %task.package, generation = task.generation),
            &task.traceparent,
        );
        async move {
            let Some(kind) = TaskKind::parse(&task.kind) else {
                return Err(TaskError::permanent(format!("unknown task kind {:?}", task.kind)));
            };
            let Some(cx) = TaskContext::start(self, &task, cancel).await? else {
                tracing::debug!("superseded; skipped");
                return Ok(());
            };
            let result = run::dispatch(&cx, kind, &task).await;
            match &result {
                Ok(()) => tracing::info!("task done"),
                Err(e) => {
                    tracing::warn!(error = %e.message, "task failed");
                    cx.report_error(kind, &e.message).await;
                }
            }
            result
        }
        .instrument(span)
        .await
    }
}
