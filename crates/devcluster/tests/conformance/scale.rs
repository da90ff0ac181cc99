//! The `/scale` subresource of Deployments through kube-rs: read, patch, and the
//! workload's `spec.replicas` following it.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{namespace, target};

#[tokio::test]
async fn deployment_scale_subresource_reads_and_writes_replicas() {
    let t = target().await;
    let ns = namespace(&t.client, "scale").await;
    let api = Api::<Deployment>::namespaced(t.client.clone(), &ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "web" } },
            "template": { "metadata": { "labels": { "app": "web" } },
                          "spec": { "containers": [{ "name": "web", "image": "nginx" }] } },
        },
    }))
    .expect("deployment");
    api.create(&PostParams::default(), &d)
        .await
        .expect("create");

    let scale = api.get_scale("web").await.expect("get scale");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    assert_eq!(
        scale.status.and_then(|s| s.selector).as_deref(),
        Some("app=web")
    );

    let patched = api
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "replicas": 5 } })),
        )
        .await
        .expect("patch scale");
    assert_eq!(patched.spec.and_then(|s| s.replicas), Some(5));
    let d = api.get("web").await.expect("get deployment");
    assert_eq!(d.spec.replicas, Some(5));
    assert_eq!(d.metadata.generation, Some(2), "a scale is a spec change");
}
