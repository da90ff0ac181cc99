//! HookRun: one hook run with the binding contexts of its event (or schedule), under the
//! hook's `settings` throttle (a throttled run is handed back to its queue until then).

use berth_hooks::binding_context;
use berth_proto::lifecycle::HookRunReport;
use berth_proto::lifecycle::report_request::Report;
use berth_proto::queue::Task;
use berth_proto::tasks::{self, HookRun};
use berth_queue::worker::TaskError;

use crate::bindings::{self, hook_snapshots};
use crate::context::TaskContext;
use crate::hooks::{apply_outputs, report_run, run_hook};
use crate::package::{Values, ensure};

pub async fn hook_run(cx: &TaskContext<'_>, task: &Task) -> Result<(), TaskError> {
    let payload: HookRun = tasks::payload(task).map_err(|e| TaskError::permanent(e.to_string()))?;
    let mut contexts =
        tasks::binding_contexts(task).map_err(|e| TaskError::permanent(e.to_string()))?;
    let name = payload.hook.as_str();
    let pkg = ensure(cx).await?;
    let hooks = cx.package_hooks(&pkg).await?;
    let hook = hooks.iter().find(|h| h.name == name).ok_or_else(|| {
        TaskError::permanent(format!("package {} has no hook {name:?}", cx.key()))
    })?;
    // A throttled run goes back to its queue rather than wait here: events that arrive
    // meanwhile then join it when it is leased again (compaction), as in shell-operator, where
    // the throttle comes before the queue is compacted.
    if let Err(wait) = cx.hooks.throttle(cx.key(), hook) {
        return Err(TaskError::defer(
            wait,
            format!("hook {name} waits for its settings throttle (executionMinInterval)"),
        ));
    }
    let mut values = Values::compute(&pkg, cx)?;
    // Snapshots as they are now, not as they were when the event was queued (shell-operator
    // fills them when the hook runs).
    if binding_context::has_snapshots(&contexts) {
        let all = bindings::snapshots(cx, &hooks, false).await?;
        binding_context::refresh_snapshots(&mut contexts, &hook_snapshots(&all, name));
    }
    let result = match run_hook(cx, &pkg, hook, contexts, &values).await {
        Ok(output) => apply_outputs(cx, &pkg, hook, output, &mut values).await,
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        report_run(cx, name, &e.message).await;
        return Err(e);
    }
    cx.report(Report::HookRun(HookRunReport {
        name: name.to_owned(),
        error: String::new(),
        values: Some(values.report(false)),
    }))
    .await?;
    Ok(())
}
