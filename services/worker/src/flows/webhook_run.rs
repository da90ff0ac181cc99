//! WebhookRun: one hook run answering an admission or conversion request that hookevent holds
//! open. The answer (the text of the hook's response file) goes back to hookevent at once; a
//! run that cannot answer says why, and hookevent gives the request its failurePolicy. Never
//! retried: the API server stops waiting at the request's deadline.

use berth_hooks::{RunRequest, binding_context};
use berth_proto::hookevent::AnswerWebhookRequest;
use berth_proto::queue::Task;
use berth_proto::tasks::{self, WebhookRun, WebhookType};
use berth_queue::worker::TaskError;
use tracing::Instrument as _;

use super::remaining;
use crate::bindings::{self, hook_snapshots};
use crate::context::TaskContext;
use crate::hooks::report_run;
use crate::package::{Values, ensure};

pub async fn webhook_run(cx: &TaskContext<'_>, task: &Task) -> Result<(), TaskError> {
    let payload: WebhookRun =
        tasks::payload(task).map_err(|e| TaskError::permanent(e.to_string()))?;
    let answer = answer(cx, &payload).await;
    let (response, error) = match answer {
        Ok(text) => (text, String::new()),
        Err(e) => (String::new(), e),
    };
    // The answer is bounded by the gRPC message bound; a larger one cannot travel.
    let (response, error) = if response.len() > berth_runtime::MAX_MESSAGE_BYTES - 4096 {
        (
            String::new(),
            format!(
                "hook {}: its answer of {} bytes exceeds the limit of {} bytes",
                payload.hook,
                response.len(),
                berth_runtime::MAX_MESSAGE_BYTES - 4096
            ),
        )
    } else {
        (response, error)
    };
    let request = AnswerWebhookRequest {
        request_id: payload.request_id.clone(),
        package: cx.key().to_owned(),
        response,
        error: error.clone(),
    };
    if let Err(e) = bindings::answer_webhook(cx, request).await {
        // The request then ends at its deadline with its failurePolicy.
        tracing::warn!(error = %e.message, "could not hand a webhook answer to hookevent");
    }
    report_run(cx, &payload.hook, &error).await;
    Ok(())
}

/// Runs the hook within the request's deadline and returns what it wrote to its response file.
async fn answer(cx: &TaskContext<'_>, payload: &WebhookRun) -> Result<String, String> {
    let remaining = remaining(payload.deadline_unix_ms)
        .ok_or("the request's deadline passed before a worker could run the hook")?;
    let name = payload.hook.as_str();
    let pkg = ensure(cx).await.map_err(|e| e.message)?;
    let hooks = cx.package_hooks(&pkg).await.map_err(|e| e.message)?;
    let hook = hooks
        .iter()
        .find(|h| h.name == name)
        .ok_or_else(|| format!("package {} has no hook {name:?}", cx.key()))?;
    let values = Values::compute(&pkg, cx).map_err(|e| e.message)?;
    let mut contexts = payload.contexts_json();
    if binding_context::has_snapshots(&contexts) {
        let all = bindings::snapshots(cx, &hooks, false)
            .await
            .map_err(|e| e.message)?;
        binding_context::refresh_snapshots(&mut contexts, &hook_snapshots(&all, name));
    }
    let (sandbox, env) = crate::hooks::sandbox_with_identity(cx, &pkg)
        .await
        .map_err(|e| e.message)?;
    let span = tracing::info_span!("hook", hook.name = %hook.name);
    let output = async {
        berth_hooks::run(RunRequest {
            hook,
            binding_context: contexts,
            values: values.current.clone(),
            config_values: values.settings.clone(),
            env,
            timeout: remaining.min(cx.config.hook_timeout),
            cancel: cx.cancel.clone(),
            tmp_dir: cx.config.hook_tmp_dir.clone(),
            sandbox: Some(sandbox),
        })
        .await
    }
    .instrument(span)
    .await
    .map_err(|e| e.to_string())?;
    // Only the answer counts: values patches and object operations of a webhook run are not
    // applied (an admission answer must not wait for them); its metrics are kept.
    crate::metrics::record(cx.key(), &hook.name, &output.metrics);
    Ok(match payload.webhook_type() {
        WebhookType::Conversion => output.conversion_response,
        _ => output.admission_response,
    })
}
