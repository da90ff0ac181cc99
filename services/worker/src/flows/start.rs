//! The task flows themselves.

use std::time::{Duration, Instant};

use berth_hooks::LifecycleBinding;
use berth_hooks::binding_context::{self, BindingContext};
use berth_proto::hookevent::RemoveBindingsRequest;
use berth_proto::lifecycle::{HookInfo, ReportRequest};
use berth_proto::queue::Task;
use berth_proto::release::{ChartFile, InstallRequest, StatusRequest, UninstallRequest};
use berth_proto::tasks::TaskKind;
use serde_json::Value;

use super::context::{TaskContext, rpc_error};
use super::bindings::{self, hook_snapshots};
use super::hooks::{apply_outputs, report_run, run_hook, run_lifecycle};
use super::local::{Values, ensure};
use crate::worker::TaskError;

pub async fn dispatch(cx: &TaskContext<'_>, kind: TaskKind, task: &Task) -> Result<(), TaskError> {
    match kind {
        TaskKind::Download => download(cx).await,
        TaskKind::Load => load(cx).await,
        TaskKind::ApplySettings => apply_settings(cx).await,
        TaskKind::Startup => startup(cx).await,
        TaskKind::Run => run(cx).await,
        TaskKind::HookRun => hook_run(cx, task).await,
        TaskKind::Disable => disable(cx).await,
        TaskKind::Uninstall => uninstall(cx).await,
        TaskKind::Cleanup => cleanup(cx).await,
    }
}

async fn download(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    cx.progress("Downloading", &[]).await?;
    match ensure(cx).await {
        Ok(_) => cx.progress("", &[("Downloaded", "True", "Downloaded", "")]).await,
        Err(e) => {
            cx.progress("", &[("Downloaded", "False", "DownloadFailed", &e.message)]).await?;
            Err(e)
        }
    }
}

async fn load(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    let pkg = ensure(cx).await?;
    let hooks = match cx.hooks.get(&pkg, cx).await {
        Ok(h) => h,
        Err(e) => {
            cx.progress("", &[("Loaded", "False", "HookConfigInvalid", &e.message)]).await?;
            return Err(e);
        }
    };
    let request = bindings::set_bindings_request(cx, &hooks);
    if let Err(status) = cx.services.hookevent.clone().set_bindings(request).await {
        // A binding the cluster cannot serve (unknown kind, bad jqFilter) is a broken package.
        if status.code() == tonic::Code::InvalidArgument {
            cx.progress("", &[("Loaded", "False", "BindingInvalid", status.message())]).await?;
        }
        return Err(rpc_error("hookevent SetBindings", status));
    }
    cx.report(ReportRequest {
        phase: "Loaded".to_owned(),
        conditions: vec![condition("Loaded", "True", "Loaded", "")],
        has_settings_schema: true,
        settings_schema_json: pkg.settings_schema.as_ref().map(|s| s.as_json().to_string()).unwrap_or_default(),
        has_hooks: true,
        hooks: hooks
            .iter()
            .map(|h| HookInfo { name: h.name.clone(), bindings: h.binding_summaries() })
            .collect(),
        ..Default::default()
    })
    .await?;
    Ok(())
}

fn condition(t: &str, s: &str, r: &str, m: &str) -> berth_proto::lifecycle::ConditionUpdate {
    berth_proto::lifecycle::ConditionUpdate { r#type: t.into(), status: s.into(), reason: r.into(), message: m.into() }
}

async fn apply_settings(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    let pkg = ensure(cx).await?;
    // A settings-only Update keeps the registered bindings: their runs must carry this
    // generation from now on, or workers would skip them as superseded. (After a Load the
    // bindings already carry it; adopting is then a no-op.)
    cx.services
        .hookevent
        .clone()
        .adopt_generation(berth_proto::hookevent::AdoptGenerationRequest { package: cx.key().to_owned(), generation: cx.spec.generation })
        .await
        .map_err(|s| rpc_error("hookevent AdoptGeneration", s))?;
    match Values::compute(&pkg, cx) {
        Ok(values) => {
            cx.report(ReportRequest {
                conditions: vec![condition("SettingsValid", "True", "Valid", "")],
                values: Some(berth_proto::json::to_struct(&values.current)),
                ..Default::default()
            })
            .await?;
            Ok(())
        }
        Err(e) => {
            cx.progress("", &[("SettingsValid", "False", "Invalid", &e.message)]).await?;
            Err(e)
        }
    }
}

async fn startup(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    let pkg = ensure(cx).await?;
    let hooks = cx.hooks.get(&pkg, cx).await?;
    let mut values = Values::compute(&pkg, cx)?;
    // Decision (ARCHITECTURE.md): Synchronization runs before onStartup, as in the Deckhouse
    // runtime.
    synchronize(cx, &pkg, &hooks, &mut values).await?;
    run_lifecycle(cx, &pkg, &hooks, LifecycleBinding::OnStartup, "onStartup", &mut values).await?;
    report_values(cx, &values, true).await
}

/// Runs the Synchronization of every kubernetes binding that package start waits for
/// (`waitForSynchronization`, the default), hooks in name order, bindings in config order; then
/// tells hookevent to release the events it held meanwhile. Bindings that do not wait were
/// synchronized by hookevent on their own queue.
async fn synchronize(cx: &TaskContext<'_>, pkg: &berth_package::Package, hooks: &[berth_hooks::Hook], values: &mut Values) -> Result<(), TaskError> {
    let all = bindings::snapshots(cx, hooks, true).await?;
    if all.is_empty() {
        return Ok(());
    }
    let mut ordered: Vec<&berth_hooks::Hook> = hooks.iter().collect();
    ordered.sort_by(|a, b| a.name.cmp(&b.name));
    for hook in ordered {
        let snapshots = hook_snapshots(&all, &hook.name);
        for k in &hook.config.kubernetes {
            if !k.wait_for_synchronization || !k.execute_hook_on_synchronization {
                continue;
            }
            let Some(b) = all.get(&hook.name).and_then(|h| h.get(&k.name)) else { continue };
            if b.synchronized {
                continue;
            }
            let context = BindingContext::synchronization(k, &b.objects, &hook.config, &snapshots);
            let output = match run_hook(cx, hook, binding_context::to_json(&[context]), values).await {
                Ok(o) => o,
                Err(e) if k.allow_failure => {
                    tracing::warn!(hook = %hook.name, binding = %k.name, error = %e.message, "Synchronization failed; allowed");
                    report_run(cx, &hook.name, &e.message).await;
                    continue;
                }
                Err(e) => {
                    report_run(cx, &hook.name, &e.message).await;
                    return Err(e);
                }
            };
            apply_outputs(cx, pkg, hook, output, values).await?;
            report_run(cx, &hook.name, "").await;
        }
    }
    bindings::synchronization_done(cx).await
}

async fn report_values(cx: &TaskContext<'_>, values: &Values, inside_run: bool) -> Result<(), TaskError> {
    cx.report(ReportRequest {
        values: Some(berth_proto::json::to_struct(&values.current)),
        values_patch_json: values.new_ops_json(),
        patch_inside_run: inside_run,
        ..Default::default()
    })
    .await
    .map(|_| ())
}

async fn install(cx: &TaskContext<'_>, pkg: &berth_package::Package, values: &Values) -> Result<(), TaskError> {
    let files = pkg
        .chart_files()
        .map_err(|e| TaskError::retry(format!("reading the chart: {e}")))?
        .into_iter()
        .map(|(path, content)| ChartFile { path, content })
        .collect();
    let (name, namespace) = cx.release();
    let installed = cx
        .services
        .release
        .clone()
        .install(InstallRequest { name, namespace, files, values_json: values.current.to_string() })
        .await;
    match installed {
        Ok(r) => {
            let r = r.into_inner();
            let msg = format!("revision {} with {} objects", r.revision, r.objects.len());
            cx.progress("", &[("ManifestsApplied", "True", "Applied", &msg)]).await
        }
        Err(s) => {
            cx.progress("", &[("ManifestsApplied", "False", "ApplyFailed", s.message())]).await?;
            Err(rpc_error("release Install", s))
        }
    }
}

async fn run(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    let pkg = ensure(cx).await?;
    let hooks = cx.hooks.get(&pkg, cx).await?;
    let mut values = Values::compute(&pkg, cx)?;
    let hooks_result = async {
        run_lifecycle(cx, &pkg, &hooks, LifecycleBinding::BeforeHelm, "beforeHelm", &mut values).await?;
        if pkg.is_helm {
            install(cx, &pkg, &values).await?;
        }
        let changed = run_lifecycle(cx, &pkg, &hooks, LifecycleBinding::AfterHelm, "afterHelm", &mut values).await?;
        // afterHelm hooks that change the values get one more upgrade, as addon-operator does.
        if changed && pkg.is_helm {
            install(cx, &pkg, &values).await?;
        }
        Ok::<(), TaskError>(())
    }
    .await;
    if let Err(e) = hooks_result {
        cx.progress("", &[("HooksProcessed", "False", "HookFailed", &e.message)]).await?;
        return Err(e);
    }
    report_values(cx, &values, true).await?;
    cx.progress("", &[("HooksProcessed", "True", "Processed", "")]).await?;
    if pkg.is_helm {
        wait_ready(cx).await?;
    }
    cx.report(ReportRequest {
        phase: "Running".to_owned(),
        conditions: vec![condition("Ready", "True", "Ready", "")],
        clear_error: true,
        ..Default::default()
    })
    .await?;
    Ok(())
}

/// Longest one waiting Status call is asked to hold on; the loop calls again until the ready
/// timeout, so a restarted release service costs one call, not the whole wait.
const STATUS_WAIT: Duration = Duration::from_secs(30);

/// Waits until the release service reports every object ready, or the configured timeout. The
/// release service follows readiness through watches (`StatusRequest.wait_ms`), so the answer
/// comes on the event that makes the last object ready, not at the next poll.
async fn wait_ready(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    let (name, namespace) = cx.release();
    let deadline = Instant::now() + cx.config.ready_timeout;
    let mut wait = Duration::ZERO;
    let mut reported = false;
    loop {
        let request = StatusRequest {
            name: name.clone(),
            namespace: namespace.clone(),
            wait_ms: i32::try_from(wait.as_millis()).unwrap_or(i32::MAX),
        };
        let mut release = cx.services.release.clone();
        let status = tokio::select! {
            answer = release.status(request) => answer.map_err(|s| rpc_error("release Status", s))?.into_inner(),
            _ = cx.cancel.cancelled() => return Err(TaskError::permanent("cancelled")),
        };
        if status.ready {
            return Ok(());
        }
        let waiting = status.not_ready.join(", ");
        if !reported {
            cx.progress("", &[("Ready", "False", "WaitingForObjects", &waiting)]).await?;
            reported = true;
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(TaskError::retry(format!("not ready after {:?}: {waiting}", cx.config.ready_timeout)));
        }
        wait = (deadline - now).min(STATUS_WAIT);
    }
}

async fn hook_run(cx: &TaskContext<'_>, task: &Task) -> Result<(), TaskError> {
    let payload: Value = serde_json::from_str(&task.payload_json)
        .map_err(|e| TaskError::permanent(format!("HookRun payload is not JSON: {e}")))?;
    let name = payload["hook"].as_str().unwrap_or_default();
    let contexts = payload.get("binding_contexts").cloned().unwrap_or_else(|| Value::Array(vec![]));
    let pkg = ensure(cx).await?;
    let hooks = cx.hooks.get(&pkg, cx).await?;
    let hook = hooks
        .iter()
        .find(|h| h.name == name)
        .ok_or_else(|| TaskError::permanent(format!("package {} has no hook {name:?}", cx.key())))?;
    let mut values = Values::compute(&pkg, cx)?;
    cx.hooks.throttle(cx.key(), hook, &cx.cancel).await?;
    let result = match run_hook(cx, hook, contexts, &values).await {
        Ok(output) => apply_outputs(cx, &pkg, hook, output, &mut values).await,
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        report_run(cx, name, &e.message).await;
        return Err(e);
    }
    cx.report(ReportRequest {
        values: Some(berth_proto::json::to_struct(&values.current)),
        values_patch_json: values.new_ops_json(),
        hook_run: Some(berth_proto::lifecycle::HookRunReport { name: name.to_owned(), error: String::new() }),
        ..Default::default()
    })
    .await?;
    Ok(())
}

async fn disable(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    cx.services
        .hookevent
        .clone()
        .remove_bindings(RemoveBindingsRequest { package: cx.key().to_owned() })
        .await
        .map_err(|s| rpc_error("hookevent RemoveBindings", s))?;
    Ok(())
}

async fn uninstall(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    // The package files may be unavailable (repository gone): the release is uninstalled anyway,
    // only the delete hooks are skipped.
    let pkg = match ensure(cx).await {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::warn!(error = %e.message, "uninstalling without delete hooks");
            None
        }
    };
    let hooks = match &pkg {
        Some(p) => cx.hooks.get(p, cx).await?,
        None => Default::default(),
    };
    let mut values = match &pkg {
        Some(p) => Values::compute(p, cx).ok(),
        None => None,
    };
    if let (Some(p), Some(v)) = (&pkg, values.as_mut()) {
        run_lifecycle(cx, p, &hooks, LifecycleBinding::BeforeDeleteHelm, "beforeDeleteHelm", v).await?;
    }
    let (name, namespace) = cx.release();
    cx.services
        .release
        .clone()
        .uninstall(UninstallRequest { name, namespace })
        .await
        .map_err(|s| rpc_error("release Uninstall", s))?;
    if let (Some(p), Some(v)) = (&pkg, values.as_mut()) {
        run_lifecycle(cx, p, &hooks, LifecycleBinding::AfterDeleteHelm, "afterDeleteHelm", v).await?;
    }
    Ok(())
}

async fn cleanup(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    let dir = cx.config.cache_dir.join(cx.key());
    cx.hooks.forget(&dir);
    if dir.exists() {
        tokio::fs::remove_dir_all(&dir)
            .await
            .map_err(|e| TaskError::retry(format!("deleting {}: {e}", dir.display())))?;
    }
    cx.report(ReportRequest { removed: true, ..Default::default() }).await?;
    Ok(())
}
