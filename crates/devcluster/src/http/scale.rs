//! The `/scale` subresource of Deployments, ReplicaSets and StatefulSets.
//!
//! `kubectl scale` (and HorizontalPodAutoscalers) never touch the workload itself: they
//! read and patch an `autoscaling/v1` `Scale` view of it, whose `spec.replicas` is the
//! workload's and whose `status.selector` is its label selector in string form. This
//! module presents that view and turns writes to it into a merge patch of the
//! workload's `spec.replicas`, so generation, managedFields and watches behave as for
//! any other spec change.

use axum::response::Response;
use http::{Method, StatusCode};
use serde_json::{Value, json};

use super::resource::{Request, parse_body};
use super::{App, json_response};
use crate::patch::{PatchKind, apply_patch};
use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::store::{Part, meta_str};

/// Whether `rt` serves `/scale` (the built-in scalable workloads; CRDs' scale
/// subresources are not implemented).
pub fn has_scale(rt: &ResourceType) -> bool {
    !rt.custom
        && rt.group == "apps"
        && matches!(
            rt.plural.as_str(),
            "deployments" | "replicasets" | "statefulsets"
        )
}

/// The `responseKind` discovery reports for `/scale`.
pub fn scale_kind() -> Value {
    json!({ "group": "autoscaling", "version": "v1", "kind": "Scale" })
}

pub fn handle(
    app: &App,
    rt: &ResourceType,
    req: &Request<'_>,
    namespace: &str,
    name: &str,
) -> Result<Response, ApiError> {
    let current = || app.store.get(rt, namespace, name).map(|o| to_scale(&o));
    let desired = match *req.method {
        Method::GET => return Ok(json_response(StatusCode::OK, &current()?)),
        Method::PUT => parse_body(req.headers, req.body)?,
        Method::PATCH => {
            let content_type = req
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            let kind = PatchKind::from_content_type(content_type)?;
            if kind == PatchKind::Apply {
                return Err(ApiError::unsupported_media_type(
                    content_type,
                    "application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json",
                ));
            }
            apply_patch(kind, &current()?, req.body)?
        }
        ref m => {
            return Err(ApiError::method_not_allowed(format!(
                "{m} is not supported on {}/scale",
                rt.qualified_name()
            )));
        }
    };
    let replicas = desired
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .ok_or_else(|| ApiError::bad_request("Scale spec.replicas: Required value"))?;
    if replicas < 0 {
        return Err(ApiError::bad_request(format!(
            "Scale spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0"
        )));
    }
    // A resourceVersion in the Scale is an optimistic-concurrency precondition on the
    // workload, exactly as on the workload itself.
    let mut patch = json!({ "spec": { "replicas": replicas } });
    if let Some(rv) = desired
        .pointer("/metadata/resourceVersion")
        .filter(|v| v.is_string())
    {
        patch["metadata"] = json!({ "resourceVersion": rv });
    }
    let opts = super::query::write_options(&req.query, req.headers)?;
    let body = serde_json::to_vec(&patch)
        .map_err(|e| ApiError::internal(format!("encoding the scale patch: {e}")))?;
    let (object, _) = app.store.patch(
        rt,
        namespace,
        name,
        PatchKind::Merge,
        &body,
        Part::Main,
        &opts,
    )?;
    Ok(json_response(StatusCode::OK, &to_scale(&object)))
}

/// The `autoscaling/v1` Scale view of a workload.
fn to_scale(o: &Value) -> Value {
    let selector = o
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    let mut metadata =
        json!({ "name": meta_str(o, "name"), "namespace": meta_str(o, "namespace") });
    for field in ["uid", "resourceVersion", "creationTimestamp"] {
        if let Some(v) = o.pointer(&format!("/metadata/{field}")) {
            metadata[field] = v.clone();
        }
    }
    json!({
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": metadata,
        "spec": { "replicas": o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1) },
        "status": {
            "replicas": o.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0),
            "selector": selector,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_view_carries_replicas_and_selector() {
        let d = json!({
            "metadata": { "name": "web", "namespace": "n", "resourceVersion": "7" },
            "spec": { "replicas": 3, "selector": { "matchLabels": { "app": "web", "tier": "fe" } } },
            "status": { "replicas": 2 },
        });
        let s = to_scale(&d);
        assert_eq!(s["spec"]["replicas"], 3);
        assert_eq!(
            s["status"],
            json!({ "replicas": 2, "selector": "app=web,tier=fe" })
        );
        assert_eq!(s["metadata"]["resourceVersion"], "7");
    }
}
