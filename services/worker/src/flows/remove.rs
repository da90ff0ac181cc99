//! Taking a package down: Disable (its bindings), Uninstall (delete hooks around the release
//! uninstall) and Cleanup (this worker's state and cached files).

use berth_hooks::LifecycleBinding;
use berth_proto::hookevent::RemoveBindingsRequest;
use berth_proto::lifecycle::Removed;
use berth_proto::lifecycle::report_request::Report;
use berth_proto::release::UninstallRequest;
use berth_queue::worker::TaskError;

use crate::client::rpc_error;
use crate::context::TaskContext;
use crate::hooks::run_lifecycle;
use crate::package::{Values, ensure};

pub async fn disable(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    cx.services
        .hookevent
        .clone()
        .remove_bindings(RemoveBindingsRequest {
            package: cx.key().to_owned(),
        })
        .await
        .map_err(|s| rpc_error("hookevent RemoveBindings", s))?;
    Ok(())
}

pub async fn uninstall(cx: &TaskContext<'_>) -> Result<(), TaskError> {
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
        Some(p) => cx.package_hooks(p).await?,
        None => Default::default(),
    };
    let mut values = match &pkg {
        Some(p) => Values::compute(p, cx).ok(),
        None => None,
    };
    if let (Some(p), Some(v)) = (&pkg, values.as_mut()) {
        run_lifecycle(
            cx,
            p,
            &hooks,
            LifecycleBinding::BeforeDeleteHelm,
            "beforeDeleteHelm",
            v,
        )
        .await?;
    }
    let (name, namespace) = cx.release();
    cx.services
        .release
        .clone()
        .uninstall(UninstallRequest { name, namespace })
        .await
        .map_err(|s| rpc_error("release Uninstall", s))?;
    if let (Some(p), Some(v)) = (&pkg, values.as_mut()) {
        run_lifecycle(
            cx,
            p,
            &hooks,
            LifecycleBinding::AfterDeleteHelm,
            "afterDeleteHelm",
            v,
        )
        .await?;
    }
    Ok(())
}

pub async fn cleanup(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    let dir = cx.config.cache_dir.join(cx.key());
    cx.hooks.forget(&dir);
    if dir.exists() {
        tokio::fs::remove_dir_all(&dir)
            .await
            .map_err(|e| TaskError::retry(format!("deleting {}: {e}", dir.display())))?;
    }
    cx.report(Report::Removed(Removed {})).await?;
    Ok(())
}
