//! Discovery as kube-rs uses it, and CRDs making their kinds servable.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{Discovery, Scope};
use serde_json::json;

use crate::common::{code, eventually, namespace, target};

#[tokio::test]
async fn discovery_finds_builtin_kinds() {
    let t = target().await;
    let discovery = Discovery::new(t.client.clone())
        .run()
        .await
        .expect("discovery");
    let (ar, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
        .expect("Deployment");
    assert_eq!(ar.plural, "deployments");
    assert_eq!(caps.scope, Scope::Namespaced);
    let (ns, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Namespace"))
        .expect("Namespace");
    assert_eq!(
        (ns.plural.as_str(), caps.scope),
        ("namespaces", Scope::Cluster)
    );
    assert!(
        discovery
            .resolve_gvk(&GroupVersionKind::gvk(
                "rbac.authorization.k8s.io",
                "v1",
                "ClusterRoleBinding"
            ))
            .is_some()
    );
    let version = t.client.apiserver_version().await.expect("version");
    assert_eq!(version.major, "1");
}

#[tokio::test]
async fn aggregated_discovery_works() {
    let t = target().await;
    let discovery = Discovery::new(t.client.clone())
        .run_aggregated()
        .await
        .expect("aggregated discovery");
    assert!(
        discovery
            .resolve_gvk(&GroupVersionKind::gvk("batch", "v1", "Job"))
            .is_some()
    );
    assert!(
        discovery
            .resolve_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"))
            .is_some()
    );
}

#[tokio::test]
async fn unknown_kinds_are_not_found() {
    let t = target().await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("nothing.example.com", "v1", "Nothing"),
        "nothings",
    );
    let api: Api<DynamicObject> = Api::all_with(t.client.clone(), &ar);
    assert_eq!(
        code(
            &api.list(&Default::default())
                .await
                .expect_err("unknown kind")
        ),
        404
    );
}

#[tokio::test]
async fn crd_makes_its_kind_servable() {
    let t = target().await;
    let group = format!(
        "g{}.berth.example.com",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": { "name": format!("widgets.{group}") },
        "spec": { "group": group, "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wdg"] },
            "versions": [ { "name": "v1", "served": true, "storage": true, "subresources": { "status": {} },
                "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } } } ] }
    })).expect("crd");
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    let name = format!("widgets.{group}");
    eventually("the CRD to be Established", || async {
        let c = crds.get(&name).await.expect("get crd");
        c.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
            .then_some(())
    })
    .await;
    let ns = namespace(&t.client, "crd").await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(&group, "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &ns, &ar);
    let w: DynamicObject = serde_json::from_value(json!({ "apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": { "name": "w" }, "spec": { "size": 3 }, "status": { "ignored": true } })).expect("widget");
    let created = eventually("the kind to be servable", || async {
        widgets.create(&PostParams::default(), &w).await.ok()
    })
    .await;
    assert_eq!(created.data["spec"]["size"], 3);
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create with a status subresource"
    );
    let discovery = Discovery::new(t.client.clone())
        .run()
        .await
        .expect("discovery");
    assert!(
        discovery
            .resolve_gvk(&GroupVersionKind::gvk(&group, "v1", "Widget"))
            .is_some()
    );
    crds.delete(&name, &Default::default())
        .await
        .expect("delete crd");
    eventually("the kind to stop being served", || async {
        match widgets.list(&Default::default()).await {
            Err(e) if code(&e) == 404 => Some(()),
            _ => None,
        }
    })
    .await;
}
