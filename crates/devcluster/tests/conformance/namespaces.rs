//! Namespace termination and owner-reference garbage collection.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::common::{
    NAMESPACE_DEADLINE, TEST_LABEL, code, delete_namespace_now, eventually, eventually_within,
    namespace, target,
};

#[tokio::test]
async fn deleting_a_namespace_deletes_its_contents() {
    let t = target().await;
    let ns = namespace(&t.client, "nsdel").await;
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let c: ConfigMap = serde_json::from_value(json!({ "metadata": { "name": "c" } })).expect("cm");
    cms.create(&PostParams::default(), &c)
        .await
        .expect("create");
    let nss: Api<Namespace> = Api::all(t.client.clone());
    nss.delete(&ns, &DeleteParams::default())
        .await
        .expect("delete namespace");
    // While terminating (if still visible) it reports so, and refuses new content.
    if let Some(n) = nss.get_opt(&ns).await.expect("get") {
        assert!(n.metadata.deletion_timestamp.is_some());
        let c2: ConfigMap =
            serde_json::from_value(json!({ "metadata": { "name": "late" } })).expect("cm");
        if let Err(e) = cms.create(&PostParams::default(), &c2).await {
            assert!(matches!(code(&e), 403 | 404), "{e:?}");
        }
    }
    eventually_within(NAMESPACE_DEADLINE, "the namespace to disappear", || async {
        nss.get_opt(&ns).await.expect("get").is_none().then_some(())
    })
    .await;
    let all: Api<ConfigMap> = Api::all(t.client.clone());
    let left = all
        .list(&kube::api::ListParams::default().fields(&format!("metadata.namespace={ns}")))
        .await
        .expect("list");
    assert!(left.items.is_empty());
}

/// What a test's namespace guard does on a real cluster when dropped: the namespace carries
/// the test label, and the clean-up returns once the deletion is accepted, after which the
/// namespace terminates.
#[tokio::test]
async fn test_namespaces_are_labelled_and_cleaned_up() {
    let t = target().await;
    let ns = namespace(&t.client, "cleanup").await;
    let nss: Api<Namespace> = Api::all(t.client.clone());
    let labels = nss
        .get(&ns)
        .await
        .expect("get")
        .metadata
        .labels
        .unwrap_or_default();
    let (key, value) = TEST_LABEL;
    assert_eq!(labels.get(key).map(String::as_str), Some(value));
    // On a blocking thread, as the guard's Drop blocks its caller; this runtime keeps serving
    // the dev cluster meanwhile.
    let (kubeconfig, name) = (t.kubeconfig.clone(), ns.to_string());
    tokio::task::spawn_blocking(move || delete_namespace_now(&kubeconfig, &name))
        .await
        .expect("clean-up ran");
    let terminating = nss.get_opt(&ns).await.expect("get");
    assert!(
        terminating.is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
        "deletion was accepted before the clean-up returned"
    );
    eventually_within(NAMESPACE_DEADLINE, "the namespace to disappear", || async {
        nss.get_opt(&ns).await.expect("get").is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn creating_in_a_missing_namespace_is_not_found() {
    let t = target().await;
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), "no-such-namespace-berth");
    let c: ConfigMap = serde_json::from_value(json!({ "metadata": { "name": "c" } })).expect("cm");
    assert_eq!(
        code(
            &cms.create(&PostParams::default(), &c)
                .await
                .expect_err("no namespace")
        ),
        404
    );
}

#[tokio::test]
async fn owner_deletion_collects_dependents() {
    let t = target().await;
    let ns = namespace(&t.client, "gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let owner: ConfigMap = serde_json::from_value(
        json!({ "metadata": { "name": "owner", "labels": { "suite": "gc" } } }),
    )
    .expect("cm");
    let owner = cms
        .create(&PostParams::default(), &owner)
        .await
        .expect("owner");
    let uid = owner.metadata.uid.expect("uid");
    for name in ["dep1", "dep2"] {
        let dep: ConfigMap = serde_json::from_value(
            json!({ "metadata": { "name": name, "labels": { "suite": "gc" }, "ownerReferences": [
            { "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid }
        ] } }),
        )
        .expect("cm");
        cms.create(&PostParams::default(), &dep)
            .await
            .expect("dependent");
    }
    let keep: ConfigMap = serde_json::from_value(
        json!({ "metadata": { "name": "dep3", "labels": { "suite": "gc" }, "ownerReferences": [
        { "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid }
    ] } }),
    )
    .expect("cm");
    cms.create(&PostParams::default(), &keep)
        .await
        .expect("dependent");
    cms.delete("owner", &DeleteParams::foreground())
        .await
        .expect("delete owner");
    eventually("dependents and owner to be collected", || async {
        let names: Vec<String> = cms
            .list(&kube::api::ListParams::default().labels("suite=gc"))
            .await
            .expect("list")
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .collect();
        names.is_empty().then_some(())
    })
    .await;
}

#[tokio::test]
async fn orphan_propagation_keeps_dependents() {
    let t = target().await;
    let ns = namespace(&t.client, "orphan").await;
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let owner = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": "owner" } })).expect("cm"),
        )
        .await
        .expect("owner");
    let uid = owner.metadata.uid.expect("uid");
    let dep: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "dep", "ownerReferences": [
        { "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid }
    ] } }))
        .expect("cm");
    cms.create(&PostParams::default(), &dep)
        .await
        .expect("dependent");
    cms.delete("owner", &DeleteParams::orphan())
        .await
        .expect("delete owner");
    eventually("owner gone", || async {
        cms.get_opt("owner")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
    let kept = cms.get("dep").await.expect("dependent survives");
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test]
async fn new_namespaces_get_a_default_service_account() {
    let t = target().await;
    let ns = namespace(&t.client, "sa").await;
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(t.client.clone(), &ns);
    eventually("the default service account", || async {
        sas.get_opt("default").await.expect("get")
    })
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    eventually("kube-root-ca.crt", || async {
        cms.get_opt("kube-root-ca.crt").await.expect("get")
    })
    .await;
}

#[tokio::test]
async fn delete_collection_removes_matching_objects() {
    let t = target().await;
    let ns = namespace(&t.client, "delcol").await;
    let cms: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    for (name, suite) in [("a", "x"), ("b", "x"), ("c", "y")] {
        let c: ConfigMap = serde_json::from_value(
            json!({ "metadata": { "name": name, "labels": { "suite": suite } } }),
        )
        .expect("cm");
        cms.create(&PostParams::default(), &c)
            .await
            .expect("create");
    }
    cms.delete_collection(
        &DeleteParams::default(),
        &kube::api::ListParams::default().labels("suite=x"),
    )
    .await
    .expect("deletecollection");
    eventually("x objects gone", || async {
        cms.list(&kube::api::ListParams::default().labels("suite=x"))
            .await
            .expect("list")
            .items
            .is_empty()
            .then_some(())
    })
    .await;
    assert!(
        cms.get_opt("c").await.expect("get").is_some(),
        "non-matching object stays"
    );
}
