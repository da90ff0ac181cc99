//! Admission webhooks: the dev cluster calls the ValidatingWebhookConfigurations and
//! MutatingWebhookConfigurations stored in it for the objects it admits, as kube-apiserver does
//! (AdmissionReview v1 over HTTPS, trusting the webhook's `caBundle`): mutating webhooks first,
//! their JSON patches applied in turn, then validating ones. A denial is answered as
//! kube-apiserver words it (`admission webhook "NAME" denied the request: MESSAGE`, the
//! webhook's status code); a webhook that cannot be called, times out or answers nonsense gets
//! its `failurePolicy`.
//!
//! A webhook's `warnings` are answered as `Warning` headers, allowed or denied.
//!
//! Limits (see the crate docs): only `clientConfig.url` is called (a `service` reference cannot
//! be reached from outside a cluster, so it counts as a failed call); `matchConditions` are not
//! evaluated (the webhook is called); subresources are never sent to webhooks; `CONNECT` never
//! happens here.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};

use super::App;
use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::store::ListOptions;

const GROUP: &str = "admissionregistration.k8s.io";
/// Largest answer read from a webhook.
const MAX_ANSWER_BYTES: usize = 8 << 20;

/// One admission request to run through the webhooks.
pub struct Attempt<'a> {
    pub rt: &'a ResourceType,
    pub operation: &'static str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The object as it would be stored (`None` for DELETE).
    pub object: Option<Value>,
    pub old_object: Option<Value>,
    pub dry_run: bool,
    /// The answer's `Warning`s: webhooks' `warnings` are added here, as kube-apiserver does.
    pub warnings: &'a super::resource::Warnings,
}

/// Whether any webhook configuration is stored (when none, writes skip admission entirely).
pub fn any(app: &App) -> bool {
    [
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
    ]
    .iter()
    .any(|p| !webhooks(app, p).is_empty())
}

/// Runs the mutating then the validating webhooks that match; returns the object the mutating
/// ones produced (unchanged when none patched it).
pub async fn admit(app: &App, attempt: Attempt<'_>) -> Result<Option<Value>, ApiError> {
    if attempt.rt.group == GROUP {
        // kube-apiserver never sends webhook configurations to webhooks, so a broken webhook
        // can always be removed.
        return Ok(attempt.object);
    }
    let mutating = webhooks(app, "mutatingwebhookconfigurations");
    let validating = webhooks(app, "validatingwebhookconfigurations");
    if mutating.is_empty() && validating.is_empty() {
        return Ok(attempt.object);
    }
    let namespace_labels = namespace_object(app, attempt.rt, attempt.namespace, &attempt);
    let mut object = attempt.object.clone();
    for hook in &mutating {
        if !matches(hook, &attempt, object.as_ref(), namespace_labels.as_ref()) {
            continue;
        }
        let answer = call(hook, &attempt, object.as_ref()).await?;
        if let Some(answer) = answer
            && let (Some(patch), Some(obj)) =
                (answer.get("patch").and_then(Value::as_str), object.as_mut())
        {
            apply_patch(hook, obj, patch)?;
        }
    }
    for hook in &validating {
        if matches(hook, &attempt, object.as_ref(), namespace_labels.as_ref()) {
            call(hook, &attempt, object.as_ref()).await?;
        }
    }
    Ok(object)
}

/// Every webhook of the stored configurations of `plural`, in configuration-name order.
fn webhooks(app: &App, plural: &str) -> Vec<Value> {
    let Some(rt) = app.store.resolve(GROUP, "v1", plural) else {
        return vec![];
    };
    let Ok(list) = app.store.list(&rt, &ListOptions::default()) else {
        return vec![];
    };
    let mut configs: Vec<Arc<Value>> = list.items;
    configs.sort_by_key(|c| {
        c["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    configs
        .iter()
        .flat_map(|c| c["webhooks"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// The Namespace whose labels a namespaceSelector sees: the object's namespace, or the
/// Namespace object itself.
fn namespace_object(
    app: &App,
    rt: &ResourceType,
    namespace: &str,
    attempt: &Attempt<'_>,
) -> Option<Value> {
    if rt.group.is_empty() && rt.plural == "namespaces" {
        return attempt
            .object
            .clone()
            .or_else(|| attempt.old_object.clone());
    }
    if !rt.namespaced {
        return None;
    }
    let ns_rt = app.store.resolve("", "v1", "namespaces")?;
    app.store.get(&ns_rt, "", namespace).ok()
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn matches(
    hook: &Value,
    attempt: &Attempt<'_>,
    object: Option<&Value>,
    namespace: Option<&Value>,
) -> bool {
    let rt = attempt.rt;
    let rule_matches = |rule: &Value| {
        let has =
            |key: &str, value: &str| strings(&rule[key]).iter().any(|v| *v == "*" || *v == value);
        let scope = match rule["scope"].as_str().unwrap_or("*") {
            "Namespaced" => rt.namespaced,
            "Cluster" => !rt.namespaced,
            _ => true,
        };
        has("operations", attempt.operation)
            && has("apiGroups", &rt.group)
            && has("apiVersions", &rt.version)
            && has("resources", &rt.plural)
            && scope
    };
    if !hook["rules"]
        .as_array()
        .is_some_and(|r| r.iter().any(rule_matches))
    {
        return false;
    }
    // The namespaceSelector applies to namespaced objects and to Namespaces themselves.
    let selects_namespace = rt.namespaced || (rt.group.is_empty() && rt.plural == "namespaces");
    if selects_namespace
        && let Some(sel) = hook.get("namespaceSelector")
        && !crate::selectors::structured_matches(sel, namespace.unwrap_or(&Value::Null))
    {
        return false;
    }
    if let Some(sel) = hook.get("objectSelector") {
        let new = object.is_some_and(|o| crate::selectors::structured_matches(sel, o));
        let old = attempt
            .old_object
            .as_ref()
            .is_some_and(|o| crate::selectors::structured_matches(sel, o));
        if !new && !old {
            return false;
        }
    }
    true
}

/// Calls one webhook: `Ok(Some(response))` when it allowed, `Ok(None)` when its failure was
/// ignored, `Err` when it denied or failed under `failurePolicy: Fail`.
async fn call(
    hook: &Value,
    attempt: &Attempt<'_>,
    object: Option<&Value>,
) -> Result<Option<Value>, ApiError> {
    let name = hook["name"].as_str().unwrap_or_default();
    let uid = uuid::Uuid::new_v4().to_string();
    let rt = attempt.rt;
    let kind = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let resource = json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
    let options_kind = match attempt.operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        _ => "DeleteOptions",
    };
    let mut request = json!({
        "uid": uid,
        "kind": kind, "resource": resource,
        "requestKind": kind, "requestResource": resource,
        "name": attempt.name,
        "operation": attempt.operation,
        "userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]},
        "object": object.cloned().unwrap_or(Value::Null),
        "oldObject": attempt.old_object.clone().unwrap_or(Value::Null),
        "dryRun": attempt.dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind},
    });
    if rt.namespaced {
        request["namespace"] = Value::from(attempt.namespace);
    }
    let review =
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
    let fail = |why: String| -> Result<Option<Value>, ApiError> {
        if hook["failurePolicy"].as_str() == Some("Ignore") {
            tracing::warn!(webhook = name, error = %why, "failed calling webhook; ignored (failurePolicy Ignore)");
            Ok(None)
        } else {
            let message =
                format!("Internal error occurred: failed calling webhook {name:?}: {why}");
            let mut e = ApiError::new(500, "InternalError", message.clone());
            e.details = Some(json!({"causes": [{"message": message}]}));
            Err(e)
        }
    };
    let response = match post(hook, &review).await {
        Ok(r) => r,
        Err(why) => return fail(why),
    };
    let answer = &response["response"];
    if answer["uid"].as_str() != Some(uid.as_str()) {
        return fail(format!(
            "expected response.uid={uid:?}, got {:?}",
            answer["uid"].as_str().unwrap_or_default()
        ));
    }
    // Warnings reach the client whether the webhook allowed or denied.
    if let Some(warnings) = answer["warnings"].as_array() {
        attempt
            .warnings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(warnings.iter().filter_map(Value::as_str).map(String::from));
    }
    if answer["allowed"].as_bool() == Some(true) {
        return Ok(Some(answer.clone()));
    }
    let status = &answer["status"];
    let code = status["code"].as_u64().map_or(400, |c| c.max(400)) as u16;
    let reason = match status["reason"].as_str() {
        Some("Forbidden") => "Forbidden",
        Some("Invalid") => "Invalid",
        Some("NotFound") => "NotFound",
        Some("Conflict") => "Conflict",
        Some("Unauthorized") => "Unauthorized",
        Some("BadRequest") => "BadRequest",
        _ => "",
    };
    let denied = format!("admission webhook {name:?} denied the request");
    let message = match (status["message"].as_str(), status["reason"].as_str()) {
        (Some(m), _) if !m.is_empty() => format!("{denied}: {m}"),
        (_, Some(r)) if !r.is_empty() => format!("{denied}: {r}"),
        _ => format!("{denied} without explanation"),
    };
    Err(ApiError::new(code, reason, message))
}

/// POSTs the review to the webhook's URL, trusting only its caBundle.
async fn post(hook: &Value, review: &Value) -> Result<Value, String> {
    let config = &hook["clientConfig"];
    let url = config["url"]
        .as_str()
        .ok_or("clientConfig.service is not reachable from the dev cluster (only clientConfig.url is called)")?;
    let timeout = Duration::from_secs(hook["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30));
    let mut roots = rustls::RootCertStore::empty();
    if let Some(ca) = config["caBundle"].as_str() {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(ca)
            .map_err(|e| format!("caBundle: {e}"))?;
        use rustls::pki_types::pem::PemObject as _;
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
            roots
                .add(cert.map_err(|e| format!("caBundle: {e}"))?)
                .map_err(|e| format!("caBundle: {e}"))?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(timeout)
        .build()
        .map_err(|e| e.to_string())?;
    let answer = client
        .post(url)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(review.to_string())
        .send()
        .await
        .map_err(|e| format!("failed to call webhook: Post {url:?}: {e}"))?;
    let status = answer.status();
    let body = answer.bytes().await.map_err(|e| e.to_string())?;
    if body.len() > MAX_ANSWER_BYTES {
        return Err(format!("the answer exceeds {MAX_ANSWER_BYTES} bytes"));
    }
    if !status.is_success() {
        return Err(format!(
            "failed to call webhook: the server responded with status {}: {}",
            status.as_u16(),
            String::from_utf8_lossy(&body).trim()
        ));
    }
    serde_json::from_slice(&body).map_err(|e| format!("the answer is not an AdmissionReview: {e}"))
}

fn apply_patch(hook: &Value, object: &mut Value, b64: &str) -> Result<(), ApiError> {
    let name = hook["name"].as_str().unwrap_or_default();
    let bad = |why: String| {
        ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: failed calling webhook {name:?}: {why}"),
        )
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .map_err(|e| bad(format!("patch: {e}")))?;
    let patch: json_patch::Patch =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("patch: {e}")))?;
    json_patch::patch(object, &patch).map_err(|e| bad(format!("patch: {e}")))
}
