//! Custom resources are pruned, defaulted and validated against their CRD schema.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use crate::common::{code, eventually, namespace, target};

#[tokio::test]
async fn custom_resources_follow_their_schema() {
    let t = target().await;
    let group = format!(
        "s{}.berth.example.com",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": { "name": format!("gadgets.{group}") },
        "spec": { "group": group, "scope": "Namespaced",
            "names": { "plural": "gadgets", "singular": "gadget", "kind": "Gadget" },
            "versions": [ { "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "properties": {
                    "spec": { "type": "object", "required": ["size"], "properties": {
                        "size": { "type": "integer", "minimum": 1 },
                        "mode": { "type": "string", "enum": ["fast", "slow"], "default": "fast" }
                    } }
                } } } } ] }
    }))
    .expect("crd");
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    let ns = namespace(&t.client, "schema").await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, "v1", "Gadget"),
        "gadgets",
    );
    let gadgets: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &ns, &ar);
    let obj = |name: &str, spec: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({ "apiVersion": format!("{group}/v1"), "kind": "Gadget", "metadata": { "name": name }, "spec": spec }))
            .expect("gadget")
    };
    let created = eventually("the kind to be servable", || async {
        gadgets
            .create(
                &PostParams::default(),
                &obj("g", json!({ "size": 2, "unknown": true })),
            )
            .await
            .ok()
    })
    .await;
    assert_eq!(created.data["spec"]["mode"], "fast", "defaulted");
    assert!(created.data["spec"].get("unknown").is_none(), "pruned");
    for (name, spec) in [
        ("bad-type", json!({ "size": "big" })),
        ("bad-enum", json!({ "size": 1, "mode": "medium" })),
        ("missing", json!({})),
    ] {
        let err = gadgets
            .create(&PostParams::default(), &obj(name, spec))
            .await
            .expect_err(name);
        assert_eq!(code(&err), 422, "{name}: {err:?}");
    }
    crds.delete(&format!("gadgets.{group}"), &Default::default())
        .await
        .expect("delete crd");
}
