//! Running a package's hooks from a task (discovered through the worker's `HookCache`) with
//! the package's values, identity and trace context, and applying their outputs.

use berth_hooks::binding_context::{self, BindingContext};
use berth_hooks::{Hook, LifecycleBinding, RunOutput, RunRequest};
use berth_package::Package;
use berth_proto::lifecycle::HookRunReport;
use berth_proto::lifecycle::report_request::Report;
use berth_queue::worker::TaskError;
use serde_json::Value;
use tracing::Instrument as _;

use crate::bindings::{self, hook_snapshots};
use crate::context::TaskContext;
use crate::package::Values;

/// How one hook run of the package is confined ([`TaskContext::sandbox`]) and the environment
/// it gets, with the package's Kubernetes identity when it has one (see
/// [`crate::identity::Identities::for_hooks`]): the kubeconfig and in-cluster files in its run
/// directory, the service address in its environment.
pub async fn sandbox_with_identity(
    cx: &TaskContext<'_>,
    pkg: &Package,
) -> Result<(berth_hooks::Sandbox, Vec<(String, String)>), TaskError> {
    let mut sandbox = cx.sandbox(pkg)?;
    let mut env = cx.hook_env();
    if let Some(identity) = cx.identities.for_hooks(cx).await? {
        identity.give(&mut sandbox, &mut env);
    }
    Ok((sandbox, env))
}

/// Runs one hook with `binding_context` and the current values.
pub async fn run_hook(
    cx: &TaskContext<'_>,
    pkg: &Package,
    hook: &Hook,
    binding_context: Value,
    values: &Values,
) -> Result<RunOutput, TaskError> {
    // The hook's own span: its run time shows in the trace, and the process's TRACEPARENT
    // (taken inside it) makes whatever the hook traces a child of it.
    let span = tracing::info_span!("hook", hook.name = %hook.name);
    let (sandbox, env) = sandbox_with_identity(cx, pkg).await?;
    async {
        berth_hooks::run(RunRequest {
            hook,
            binding_context,
            values: values.current.clone(),
            config_values: values.config_values(pkg),
            env,
            timeout: cx.config.hook_timeout,
            cancel: cx.cancel.clone(),
            tmp_dir: cx.config.hook_tmp_dir.clone(),
            sandbox: Some(sandbox),
        })
        .await
    }
    .instrument(span)
    .await
    .map_err(run_error)
}

/// A failed run as a task error: one that reached a limit of its package's is permanent (the
/// same hook under the same limit does the same; the package's `limits:` must change), the
/// others are retried.
pub fn run_error(e: berth_hooks::RunError) -> TaskError {
    match e {
        berth_hooks::RunError::Limit { .. } => TaskError::permanent(format!(
            "{e}\n(raise package.yaml limits, or make the hook use less)"
        )),
        _ => TaskError::retry(e.to_string()),
    }
}

/// Runs the hooks bound to a lifecycle binding in order, applying each one's outputs before
/// the next runs. Hooks other than onStartup see all their kubernetes snapshots. Returns
/// whether the values changed.
pub async fn run_lifecycle(
    cx: &TaskContext<'_>,
    pkg: &Package,
    hooks: &[Hook],
    binding: LifecycleBinding,
    _name: &str,
    values: &mut Values,
) -> Result<bool, TaskError> {
    let bound = berth_hooks::ordered(hooks, binding);
    if bound.is_empty() {
        return Ok(false);
    }
    let snapshots = if binding == LifecycleBinding::OnStartup {
        Default::default()
    } else {
        bindings::snapshots(cx, hooks, false).await?
    };
    let mut changed = false;
    for hook in bound {
        let context = BindingContext::lifecycle(
            binding,
            &hook.config,
            &hook_snapshots(&snapshots, &hook.name),
        );
        let output = run_hook(cx, pkg, hook, binding_context::to_json(&[context]), values).await?;
        changed |= apply_outputs(cx, pkg, hook, output, values).await?;
        report_run(cx, &hook.name, "").await;
    }
    Ok(changed)
}

/// Applies a successful run's outputs: the config values patch (the settings), the values
/// patch (strict, schema-checked), then the object operations as one batch, then the metrics.
/// Returns whether the values changed.
pub async fn apply_outputs(
    cx: &TaskContext<'_>,
    pkg: &Package,
    hook: &Hook,
    output: RunOutput,
    values: &mut Values,
) -> Result<bool, TaskError> {
    let mut changed = values.apply_config(pkg, &hook.name, &output.config_values_patch)?;
    changed |= values.apply(pkg, &hook.name, output.values_patch)?;
    bindings::apply_operations(cx, &hook.name, &output.kubernetes_operations).await?;
    crate::metrics::record(cx.key(), &hook.name, &output.metrics);
    Ok(changed)
}

/// Records a hook run for Dump; best effort.
pub async fn report_run(cx: &TaskContext<'_>, hook: &str, error: &str) {
    let report = Report::HookRun(HookRunReport {
        name: hook.to_owned(),
        error: error.to_owned(),
        values: None,
    });
    if let Err(e) = cx.report(report).await {
        tracing::warn!(error = %e.message, "could not report a hook run");
    }
}

/// Runs the package's settings check (module-sdk `hook check`) on `settings`, if it has one:
/// `Ok(None)` without a check, the verdict otherwise. A check that cannot give a verdict (it
/// crashed, timed out, or printed no result) is an error worth retrying.
pub async fn check_settings(
    cx: &TaskContext<'_>,
    pkg: &Package,
    settings: &Value,
    timeout: std::time::Duration,
) -> Result<Option<berth_hooks::SettingsCheck>, TaskError> {
    let sandbox = cx.sandbox(pkg)?;
    let Some(executable) = cx
        .hooks
        .settings_check(
            pkg,
            cx.spec.hook_configs.as_ref(),
            cx.config.hook_timeout,
            &sandbox,
        )
        .await?
    else {
        return Ok(None);
    };
    let span = tracing::info_span!("hook.check", hook.name = %executable.display());
    berth_hooks::check_settings(berth_hooks::SettingsCheckRequest {
        executable: &executable,
        settings,
        env: cx.hook_env(),
        timeout,
        cancel: cx.cancel.clone(),
        tmp_dir: cx.config.hook_tmp_dir.clone(),
        sandbox: Some(sandbox),
    })
    .instrument(span)
    .await
    .map(Some)
    .map_err(run_error)
}
