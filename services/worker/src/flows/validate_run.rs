//! ValidateRun: candidate settings checked as an Update would apply them, for a ValidateSettings
//! (or an Update) lifecycle holds open. The worker computes the values the package would have
//! (its schema, the hooks' stored patches replayed on the new settings), runs the package's
//! settings check (`hook check`), and asks the release service for the plan of an install with
//! those values (a render and a server-side dry-run apply of every object). The outcome goes
//! back through lifecycle's AnswerValidation. Nothing is written anywhere; never retried:
//! lifecycle stops waiting at the run's deadline.

use std::time::Duration;

use berth_proto::lifecycle::{AnswerValidationRequest, Loaded};
use berth_proto::queue::Task;
use berth_proto::tasks::{self, ValidateRun};
use berth_proto::v1;
use berth_queue::worker::TaskError;
use serde_json::Value;

use super::remaining;
use crate::client::CallError;
use crate::context::TaskContext;
use crate::hooks::check_settings;
use crate::package::{Unavailable, Values, ensure};

pub async fn validate_run(cx: &TaskContext<'_>, task: &Task) -> Result<(), TaskError> {
    let payload: ValidateRun =
        tasks::payload(task).map_err(|e| TaskError::permanent(e.to_string()))?;
    let Some(left) = remaining(payload.deadline_unix_ms) else {
        // Lifecycle stopped waiting; nobody would read the answer.
        tracing::info!("validation skipped: its caller stopped waiting");
        return Ok(());
    };
    let outcome = if payload.version.is_empty() {
        validate(cx, &payload, left).await
    } else {
        describe(cx, &payload).await
    };
    let mut answer = match outcome {
        Ok(answer) => answer,
        Err(error) => AnswerValidationRequest {
            error,
            ..Default::default()
        },
    };
    answer.request_id = payload.request_id;
    answer.package = cx.key().to_owned();
    if let Err(s) = cx
        .services
        .lifecycle
        .clone()
        .answer_validation(answer)
        .await
    {
        // The caller then falls back to the schema check at its deadline.
        tracing::warn!(error = %s.message(), "could not hand a validation to lifecycle");
    }
    Ok(())
}

/// An Update's new version, described as its Load would report it (schema, settings version,
/// conversions): lifecycle converts the settings it would keep with them and checks them
/// against the schema before it accepts the Update. A version whose files do not load is
/// `invalid`, naming why; files that cannot be fetched now leave no verdict.
async fn describe(
    cx: &TaskContext<'_>,
    payload: &ValidateRun,
) -> Result<AnswerValidationRequest, String> {
    let candidate = cx.for_version(
        (&payload.repository, payload.repository_definition.as_ref()),
        &payload.package,
        &payload.version,
    );
    let pkg = match crate::package::ensure_files(&candidate).await {
        Ok(pkg) => pkg,
        Err(Unavailable {
            error,
            load_failed: true,
        }) => {
            return Ok(AnswerValidationRequest {
                invalid: error.message,
                ..Default::default()
            });
        }
        Err(e) => return Err(e.error.message),
    };
    Ok(AnswerValidationRequest {
        loaded: Some(Loaded {
            settings_schema: super::start::settings_schema(&pkg),
            version: pkg.definition.version.to_string(),
            settings_version: pkg.conversions.latest(),
            conversions: super::start::conversions(&pkg),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// The outcome: `Ok` with `invalid` set or not; `Err` when no verdict could be reached.
async fn validate(
    cx: &TaskContext<'_>,
    payload: &ValidateRun,
    left: Duration,
) -> Result<AnswerValidationRequest, String> {
    let invalid = |why: String, warnings: Vec<String>| AnswerValidationRequest {
        invalid: why,
        warnings,
        ..Default::default()
    };
    let settings: Value = payload.settings_json();
    let pkg = ensure(cx).await.map_err(|e| e.message)?;
    // The schema (and every values rule) first: what Update's ApplySettings would refuse.
    let values = match Values::compute_with(&pkg, cx, settings.clone()) {
        Ok(values) => values,
        Err(e) => return Ok(invalid(e.message, vec![])),
    };
    let mut warnings = Vec::new();
    let timeout = left.min(cx.config.hook_timeout);
    if let Some(check) = check_settings(cx, &pkg, &settings, timeout)
        .await
        .map_err(|e| e.message)?
    {
        if let Some(refused) = check.refusal() {
            return Ok(invalid(refused, check.warnings));
        }
        warnings = check.warnings;
    }
    if !pkg.is_helm {
        return Ok(AnswerValidationRequest {
            warnings,
            ..Default::default()
        });
    }
    let files = crate::package::chart_files(&pkg)
        .await
        .map_err(|e| e.message)?;
    // The plan's dry runs are made as the package's principal, as its install would be.
    cx.identities.ensure(cx).await.map_err(|e| e.message)?;
    let planned = tokio::time::timeout(
        left,
        cx.services
            .release
            .clone()
            .plan(cx.install_request(files, &values.current)),
    )
    .await
    .map_err(|_| format!("the release service did not plan within {left:?}"))?;
    let plan = match planned.map_err(|s| CallError::new("release Plan", s)) {
        Ok(plan) => plan.into_inner(),
        // A render error, a render past a render limit, an object the API server refuses or
        // one another release owns (the Update would be refused naming it): these settings
        // cannot be installed as they are.
        Err(s)
            if s.is_invalid()
                || s.is_render_limit()
                || s.is(berth_proto::failure::OBJECT_TAKEN) =>
        {
            return Ok(invalid(format!("release plan: {}", s.message()), warnings));
        }
        Err(s) => return Err(s.to_string()),
    };
    Ok(AnswerValidationRequest {
        warnings,
        plan: plan.changes.into_iter().map(planned_change).collect(),
        ..Default::default()
    })
}

fn planned_change(c: berth_proto::release::PlannedChange) -> v1::PlannedChange {
    use berth_proto::release::PlanAction as R;
    let action = match c.action() {
        R::Create => v1::PlanAction::Create,
        R::Update => v1::PlanAction::Update,
        R::Delete => v1::PlanAction::Delete,
        R::Unchanged => v1::PlanAction::Unchanged,
        R::Unspecified => v1::PlanAction::Unspecified,
    };
    let object = c.object.unwrap_or_default();
    v1::PlannedChange {
        api_version: object.api_version,
        kind: object.kind,
        namespace: object.namespace,
        name: object.name,
        action: action as i32,
        changed: c.changed,
    }
}
