//! Taking a package down: Disable (its bindings), Uninstall (delete hooks around the release
//! uninstall) and Cleanup (this worker's state and cached files).

use berth_hooks::LifecycleBinding;
use berth_proto::hookevent::RemoveBindingsRequest;
use berth_proto::lifecycle::report_request::Report;
use berth_proto::lifecycle::{ConditionStatus, ConditionType, Removed};
use berth_proto::release::{PrincipalRequest, UninstallRequest};
use berth_queue::worker::TaskError;

use crate::client::CallError;
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
        .map_err(|s| CallError::new("hookevent RemoveBindings", s))?;
    Ok(())
}

pub async fn uninstall(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    // Remove always finishes: the release is uninstalled and the state cleaned even when the
    // delete hooks cannot run (package files gone, hooks no longer discoverable, a hook that
    // fails or hangs until its timeout, outputs that cannot be applied). Each skipped hook
    // leaves a warning condition naming it; retrying would only repeat the failure.
    let mut skipped = Vec::new();
    let pkg = match ensure(cx).await {
        Ok(p) => Some(p),
        Err(e) => {
            skipped.push(format!("package files: {}", e.message));
            None
        }
    };
    let hooks = match &pkg {
        Some(p) => match cx.package_hooks(p).await {
            Ok(hooks) => Some(hooks),
            Err(e) => {
                skipped.push(format!("hook discovery: {}", e.message));
                None
            }
        },
        None => None,
    };
    let mut values = match &pkg {
        Some(p) => match Values::compute(p, cx) {
            Ok(v) => Some(v),
            Err(e) => {
                skipped.push(format!("values: {}", e.message));
                None
            }
        },
        None => None,
    };
    if let (Some(p), Some(h), Some(v)) = (&pkg, &hooks, values.as_mut())
        && let Err(e) = run_lifecycle(
            cx,
            p,
            h,
            LifecycleBinding::BeforeDeleteHelm,
            "beforeDeleteHelm",
            v,
        )
        .await
    {
        skipped.push(format!("beforeDeleteHelm: {}", e.message));
    }
    let which = if hooks.is_some() && values.is_some() {
        "beforeDeleteHelm"
    } else {
        "delete"
    };
    warn_skipped(cx, &skipped, which).await;
    // Release deletes the release's objects as the package's principal.
    cx.identities.ensure(cx).await?;
    let (name, namespace) = cx.release();
    let uninstalled = cx
        .services
        .release
        .clone()
        .uninstall(UninstallRequest {
            name,
            namespace,
            package: cx.key().to_owned(),
        })
        .await
        .map_err(|s| CallError::new("release Uninstall", s));
    if let Err(e) = uninstalled {
        if e.is(berth_proto::failure::REMOVE_BLOCKED) {
            // Objects held by finalizers: Ready says which, and the task is retried (backoff)
            // until they are gone.
            cx.set_condition(
                ConditionType::Ready,
                ConditionStatus::False,
                "RemoveBlocked",
                e.message(),
            )
            .await?;
        }
        return Err(e.into());
    }
    if let (Some(p), Some(h), Some(v)) = (&pkg, &hooks, values.as_mut())
        && let Err(e) = run_lifecycle(
            cx,
            p,
            h,
            LifecycleBinding::AfterDeleteHelm,
            "afterDeleteHelm",
            v,
        )
        .await
    {
        // The condition's message names every skipped hook of the removal: this warning
        // replaces the one above (the same condition), and a task's reports may reach
        // lifecycle together, as one change.
        let which = if skipped.is_empty() {
            "afterDeleteHelm"
        } else {
            "delete"
        };
        skipped.push(format!("afterDeleteHelm: {}", e.message));
        warn_skipped(cx, &skipped, which).await;
    }
    Ok(())
}

/// Logs and reports (best effort) the delete hooks that could not run.
async fn warn_skipped(cx: &TaskContext<'_>, skipped: &[String], which: &str) {
    if skipped.is_empty() {
        return;
    }
    let message = format!(
        "removing without {which} hooks that could not run: {}",
        skipped.join("; ")
    );
    tracing::warn!(package.key = %cx.key(), "{message}");
    if let Err(e) = cx
        .set_condition(
            ConditionType::HooksProcessed,
            ConditionStatus::False,
            "DeleteHooksSkipped",
            &message,
        )
        .await
    {
        tracing::warn!(error = %e.message, "could not report skipped delete hooks");
    }
}

pub async fn cleanup(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    remove_principal(cx).await?;
    let dir = cx.config.cache_dir.join(cx.key());
    cx.hooks.forget(&dir);
    if dir.exists() {
        tokio::fs::remove_dir_all(&dir)
            .await
            .map_err(|e| TaskError::retry(format!("deleting {}: {e}", dir.display())))?;
    }
    // Nothing of the package's lives on in this worker: every process of its principal's uid
    // is killed (its runs' cgroups already ended each run).
    let principal = cx.spec.principal;
    let _ =
        tokio::task::spawn_blocking(move || berth_hooks::isolation::end_principal(principal)).await;
    cx.report(Report::Removed(Removed {})).await?;
    Ok(())
}

/// Deletes the package's ServiceAccount and bindings, now that its release is uninstalled and
/// its delete hooks ran (the Uninstall task before this one).
async fn remove_principal(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    let removed = cx
        .services
        .release
        .clone()
        .remove_principal(PrincipalRequest {
            package: cx.key().to_owned(),
        })
        .await
        .map_err(|s| CallError::new("release RemovePrincipal", s));
    match removed {
        Ok(answer) => {
            let deleted = answer.into_inner().deleted;
            tracing::info!(deleted = deleted.len(), "principal removed");
        }
        // No principals to remove (the release service acts as no package).
        Err(e) if e.is_not_served() => {}
        // Updated again while being removed: the new generation keeps its principal.
        Err(e) if e.is_failed_precondition() => {
            tracing::info!(reason = %e.message(), "principal kept");
        }
        Err(e) => return Err(e.into()),
    }
    cx.identities.forget(cx.key());
    Ok(())
}
