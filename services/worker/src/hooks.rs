//! Running a package's hooks from a task: discovery (cached per package directory) and runs with
//! the package's values, identity and trace context.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use berth_hooks::binding_context::{self, BindingContext};
use berth_hooks::{Hook, LifecycleBinding, RunOutput, RunRequest, Throttle};
use berth_package::Package;
use serde_json::Value;

use super::bindings::{self, hook_snapshots};
use super::context::TaskContext;
use super::local::Values;
use crate::worker::TaskError;

/// Packages whose discovered hooks are kept; the cache is cleared when it grows past this, since a
/// rediscovery only costs a `--config` run per hook.
const HOOK_CACHE_ENTRIES: usize = 256;

/// Discovered hooks per package directory: discovery runs every hook with `--config`, too costly
/// to repeat for every event.
#[derive(Default)]
pub struct HookCache {
    entries: Mutex<HashMap<PathBuf, Arc<Vec<Hook>>>>,
    /// Token buckets of hooks with `settings` (executionMinInterval/executionBurst), by
    /// `<package>/<hook>`. Per worker: several workers each allow the configured rate.
    throttles: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Throttle>>>>,
}

impl HookCache {
    pub async fn get(&self, pkg: &Package, cx: &TaskContext<'_>) -> Result<Arc<Vec<Hook>>, TaskError> {
        let Some(dir) = pkg.hooks_dir.clone() else {
            return Ok(Arc::new(vec![]));
        };
        if let Some(hooks) = self.lock().get(&dir) {
            return Ok(hooks.clone());
        }
        let hooks = Arc::new(
            berth_hooks::discover(&dir, cx.config.hook_timeout)
                .await
                .map_err(|e| TaskError::retry(e.to_string()))?,
        );
        let mut entries = self.lock();
        if entries.len() >= HOOK_CACHE_ENTRIES {
            entries.clear();
        }
        entries.insert(dir, hooks.clone());
        Ok(hooks)
    }

    /// Waits until the hook's `settings` throttle lets it run (at once without settings).
    pub async fn throttle(&self, package: &str, hook: &Hook, cancel: &tokio_util::sync::CancellationToken) -> Result<(), TaskError> {
        let Some(settings) = hook.config.settings else { return Ok(()) };
        let bucket = {
            let mut all = self.throttles.lock().unwrap_or_else(|p| p.into_inner());
            if all.len() >= HOOK_CACHE_ENTRIES * 8 {
                all.clear();
            }
            all.entry(format!("{package}/{}", hook.name)).or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Throttle::new(settings)))).clone()
        };
        tokio::select! {
            _ = async { bucket.lock().await.acquire().await } => Ok(()),
            _ = cancel.cancelled() => Err(TaskError::permanent("cancelled while throttled")),
        }
    }

    pub fn forget(&self, dir_prefix: &std::path::Path) {
        self.lock().retain(|k, _| !k.starts_with(dir_prefix));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Arc<Vec<Hook>>>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs one hook with `binding_context` and the current values.
pub async fn run_hook(
    cx: &TaskContext<'_>,
    hook: &Hook,
    binding_context: Value,
    values: &Values,
) -> Result<RunOutput, TaskError> {
    let span = tracing::info_span!("hook", hook.name = %hook.name);
    let _ = &span;
    berth_hooks::run(RunRequest {
        hook,
        binding_context,
        values: values.current.clone(),
        config_values: values.settings.clone(),
        env: cx.hook_env(),
        timeout: cx.config.hook_timeout,
        cancel: cx.cancel.clone(),
        tmp_dir: cx.config.hook_tmp_dir.clone(),
    })
    .await
    .map_err(|e| TaskError::retry(e.to_string()))
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
    let snapshots = if binding == LifecycleBinding::OnStartup { Default::default() } else { bindings::snapshots(cx, hooks, false).await? };
    let mut changed = false;
    for hook in bound {
        let context = BindingContext::lifecycle(binding, &hook.config, &hook_snapshots(&snapshots, &hook.name));
        let output = run_hook(cx, hook, binding_context::to_json(&[context]), values).await?;
        changed |= apply_outputs(cx, pkg, hook, output, values).await?;
        report_run(cx, &hook.name, "").await;
    }
    Ok(changed)
}

/// Applies a successful run's outputs: the values patch (strict, schema-checked), then the
/// object operations as one batch, then the metrics. Returns whether the values changed.
pub async fn apply_outputs(
    cx: &TaskContext<'_>,
    pkg: &Package,
    hook: &Hook,
    output: RunOutput,
    values: &mut Values,
) -> Result<bool, TaskError> {
    let changed = values.apply(pkg, &hook.name, output.values_patch)?;
    bindings::apply_operations(cx, &hook.name, &output.kubernetes_operations).await?;
    super::metrics::record(cx.key(), &hook.name, &output.metrics);
    Ok(changed)
}

/// Records a hook run for Dump; best effort.
pub async fn report_run(cx: &TaskContext<'_>, hook: &str, error: &str) {
    let report = berth_proto::lifecycle::ReportRequest {
        hook_run: Some(berth_proto::lifecycle::HookRunReport { name: hook.to_owned(), error: error.to_owned() }),
        ..Default::default()
    };
    if let Err(e) = cx.report(report).await {
        tracing::warn!(error = %e.message, "could not report a hook run");
    }
}
