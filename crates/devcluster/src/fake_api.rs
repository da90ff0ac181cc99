//! A stand-in API server for discovery tests: what the dev cluster cannot show, an aggregated
//! API whose backend is down.

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

/// An APIResourceList of `(name, kind)` resources; `deployments` carries the short name
/// `deploy`. A name with a `/` is a subresource.
fn resources(gv: &str, list: &[(&str, &str)]) -> Value {
    let resources: Vec<Value> = list
        .iter()
        .map(|(name, kind)| {
            let singular = if name.contains('/') {
                ""
            } else {
                name.trim_end_matches('s')
            };
            let short: &[&str] = if *name == "deployments" {
                &["deploy"]
            } else {
                &[]
            };
            json!({
                "name": name, "singularName": singular, "namespaced": true, "kind": kind,
                "verbs": ["get", "list"], "shortNames": short,
            })
        })
        .collect();
    json!({"kind": "APIResourceList", "groupVersion": gv, "resources": resources})
}

/// A kube client whose API server (v1.31.4) lists `metrics.k8s.io/v1beta1` first, whose
/// resources answer 503 as an aggregated API with its service down does, then `apps/v1`
/// (deployments, with subresources) and the core group (configmaps, pods, with a subresource),
/// which answer.
pub fn client_with_an_unavailable_aggregated_api() -> kube::Client {
    let service = tower::service_fn(|req: Request<Body>| async move {
        let (status, body) = match req.uri().path() {
            "/version" => (
                StatusCode::OK,
                json!({"major": "1", "minor": "31", "gitVersion": "v1.31.4"}),
            ),
            "/api" => (
                StatusCode::OK,
                json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
            ),
            "/apis" => (
                StatusCode::OK,
                json!({"kind": "APIGroupList", "groups": [
                    {"name": "metrics.k8s.io",
                     "versions": [{"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}],
                     "preferredVersion": {"groupVersion": "metrics.k8s.io/v1beta1", "version": "v1beta1"}},
                    {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
                     "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}
                ]}),
            ),
            "/api/v1" => (
                StatusCode::OK,
                resources(
                    "v1",
                    &[
                        ("configmaps", "ConfigMap"),
                        ("pods", "Pod"),
                        ("pods/log", "Pod"),
                    ],
                ),
            ),
            "/apis/apps/v1" => (
                StatusCode::OK,
                resources(
                    "apps/v1",
                    &[
                        ("deployments", "Deployment"),
                        ("deployments/status", "Deployment"),
                        ("deployments/scale", "Scale"),
                    ],
                ),
            ),
            _ => (
                StatusCode::SERVICE_UNAVAILABLE,
                json!({
                    "kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "message": "the server is currently unable to handle the request",
                    "reason": "ServiceUnavailable", "code": 503
                }),
            ),
        };
        let response = Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&body).expect("json")))
            .expect("response");
        Ok::<_, std::convert::Infallible>(response)
    });
    kube::Client::new(service, "default")
}
