//! The task flows, one module per group of task kinds; [`dispatch`] picks the flow of a task.

mod hook_run;
mod remove;
mod run;
mod start;
mod validate_run;
mod webhook_run;

use berth_proto::queue::Task;
use berth_proto::tasks::TaskKind;
use berth_queue::worker::TaskError;

use crate::context::TaskContext;

pub async fn dispatch(cx: &TaskContext<'_>, kind: TaskKind, task: &Task) -> Result<(), TaskError> {
    match kind {
        TaskKind::Download => start::download(cx).await,
        TaskKind::Load => start::load(cx).await,
        TaskKind::ApplySettings => start::apply_settings(cx).await,
        TaskKind::Startup => start::startup(cx).await,
        TaskKind::Run => run::run(cx).await,
        TaskKind::Start => start::start(cx, task).await,
        TaskKind::AfterAll => run::after_all(cx).await,
        TaskKind::HookRun => hook_run::hook_run(cx, task).await,
        TaskKind::Disable => remove::disable(cx).await,
        TaskKind::Uninstall => remove::uninstall(cx).await,
        TaskKind::Cleanup => remove::cleanup(cx).await,
        TaskKind::WebhookRun => webhook_run::webhook_run(cx, task).await,
        TaskKind::ValidateRun => validate_run::validate_run(cx, task).await,
        // `TaskKind::parse` never gives it; a task without a kind cannot be run.
        TaskKind::Unspecified => Err(TaskError::permanent("a task without a kind")),
    }
}

/// Time left until `deadline_unix_ms` (a run someone waits for: a webhook request, a
/// validation); `None` once it passed.
fn remaining(deadline_unix_ms: i64) -> Option<std::time::Duration> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default();
    let left = deadline_unix_ms.checked_sub(now)?;
    (left > 0).then(|| std::time::Duration::from_millis(left as u64))
}
