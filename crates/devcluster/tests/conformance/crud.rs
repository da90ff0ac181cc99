//! Create, read, update, delete, optimistic concurrency, selectors, finalizers.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{code, eventually, namespace, reason, target};

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(
        json!({ "metadata": { "name": name, "labels": labels }, "data": { "k": "v" } }),
    )
    .expect("configmap")
}

#[tokio::test]
async fn configmap_round_trip_and_status_codes() {
    let t = target().await;
    let ns = namespace(&t.client, "crud").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);

    let created = api
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .expect("create");
    let meta = &created.metadata;
    assert!(
        meta.uid.is_some() && meta.creation_timestamp.is_some() && meta.resource_version.is_some()
    );
    assert_eq!(api.get("a").await.expect("get").data, created.data);

    let dup = api
        .create(&PostParams::default(), &cm("a", json!({})))
        .await
        .expect_err("duplicate");
    assert_eq!((code(&dup), reason(&dup).as_str()), (409, "AlreadyExists"));

    let mut changed = created.clone();
    changed.data = Some([("k".to_string(), "v2".to_string())].into());
    let updated = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .expect("update");
    assert_ne!(
        updated.metadata.resource_version,
        created.metadata.resource_version
    );
    let stale = api
        .replace("a", &PostParams::default(), &changed)
        .await
        .expect_err("stale resourceVersion");
    assert_eq!((code(&stale), reason(&stale).as_str()), (409, "Conflict"));

    api.delete("a", &DeleteParams::default())
        .await
        .expect("delete");
    let gone = api.get("a").await.expect_err("deleted");
    assert_eq!((code(&gone), reason(&gone).as_str()), (404, "NotFound"));
    assert_eq!(
        code(
            &api.delete("a", &DeleteParams::default())
                .await
                .expect_err("delete again")
        ),
        404
    );
}

#[tokio::test]
async fn label_and_field_selectors() {
    let t = target().await;
    let ns = namespace(&t.client, "sel").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    // Every object carries `suite=sel`, so objects the cluster puts in each namespace
    // (kube-root-ca.crt) never match.
    for (name, labels) in [
        (
            "web",
            json!({ "suite": "sel", "app": "web", "tier": "front" }),
        ),
        ("api", json!({ "suite": "sel", "app": "api" })),
        ("bare", json!({ "suite": "sel" })),
    ] {
        api.create(&PostParams::default(), &cm(name, labels))
            .await
            .expect("create");
    }
    let names = |sel: &'static str| {
        let api = api.clone();
        async move {
            let scoped = format!("suite=sel,{sel}");
            let mut n: Vec<String> = api
                .list(&ListParams::default().labels(&scoped))
                .await
                .expect(sel)
                .items
                .into_iter()
                .filter_map(|c| c.metadata.name)
                .collect();
            n.sort();
            n
        }
    };
    assert_eq!(names("app=web").await, vec!["web"]);
    assert_eq!(names("app in (web,api)").await, vec!["api", "web"]);
    assert_eq!(names("app notin (web)").await, vec!["api", "bare"]);
    assert_eq!(names("!app").await, vec!["bare"]);
    assert_eq!(names("tier").await, vec!["web"]);
    assert_eq!(names("app!=api").await, vec!["bare", "web"]);
    let by_name = api
        .list(&ListParams::default().fields("metadata.name=api"))
        .await
        .expect("field selector");
    assert_eq!(by_name.items.len(), 1);
    let all_ns: Api<ConfigMap> = Api::all(t.client.clone());
    let in_ns = all_ns
        .list(
            &ListParams::default()
                .fields(&format!("metadata.namespace={ns}"))
                .labels("suite=sel"),
        )
        .await
        .expect("namespace selector");
    assert_eq!(in_ns.items.len(), 3);
}

#[tokio::test]
async fn limit_and_continue_page_through_a_list() {
    let t = target().await;
    let ns = namespace(&t.client, "page").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    for i in 0..5 {
        api.create(
            &PostParams::default(),
            &cm(&format!("c{i}"), json!({ "suite": "page" })),
        )
        .await
        .expect("create");
    }
    let lp = ListParams::default().labels("suite=page").limit(2);
    let first = api.list(&lp).await.expect("page 1");
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().expect("continue token");
    let mut seen: Vec<String> = first
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    let mut token = Some(token);
    while let Some(t) = token.take() {
        let page = api
            .list(&lp.clone().continue_token(&t))
            .await
            .expect("next page");
        seen.extend(page.items.iter().filter_map(|c| c.metadata.name.clone()));
        token = page.metadata.continue_.filter(|c| !c.is_empty());
    }
    assert_eq!(seen, vec!["c0", "c1", "c2", "c3", "c4"]);
}

#[tokio::test]
async fn generation_moves_on_spec_changes_only() {
    let t = target().await;
    let ns = namespace(&t.client, "gen").await;
    let api: Api<Deployment> = Api::namespaced(t.client.clone(), &ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "web" } },
            "template": { "metadata": { "labels": { "app": "web" } }, "spec": { "containers": [ { "name": "web", "image": "nginx:1" } ] } } }
    })).expect("deployment");
    let created = api
        .create(&PostParams::default(), &d)
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));
    let pp = PatchParams::default();
    let labelled = api
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({ "metadata": { "labels": { "x": "y" } } })),
        )
        .await
        .expect("label");
    assert_eq!(labelled.metadata.generation, Some(1));
    let scaled = api
        .patch(
            "web",
            &pp,
            &Patch::Merge(json!({ "spec": { "replicas": 3 } })),
        )
        .await
        .expect("scale");
    assert_eq!(scaled.metadata.generation, Some(2));
    let status = api
        .patch_status(
            "web",
            &pp,
            &Patch::Merge(json!({ "status": { "observedGeneration": 2 } })),
        )
        .await
        .expect("status");
    assert_eq!(status.metadata.generation, Some(2));
    assert_eq!(status.status.and_then(|s| s.observed_generation), Some(2));
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let t = target().await;
    let ns = namespace(&t.client, "fin").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let mut c = cm("held", json!({}));
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &c)
        .await
        .expect("create");
    api.delete("held", &DeleteParams::default())
        .await
        .expect("delete");
    let held = api.get("held").await.expect("still there");
    assert!(held.metadata.deletion_timestamp.is_some());
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Json::<()>(
            serde_json::from_value(json!([{ "op": "remove", "path": "/metadata/finalizers" }]))
                .expect("patch"),
        ),
    )
    .await
    .expect("remove finalizer");
    eventually("the object to be gone", || async {
        api.get_opt("held")
            .await
            .expect("get")
            .is_none()
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn patches_merge_json_and_strategic() {
    let t = target().await;
    let ns = namespace(&t.client, "patch").await;
    let api: Api<Deployment> = Api::namespaced(t.client.clone(), &ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "selector": { "matchLabels": { "app": "web" } },
            "template": { "metadata": { "labels": { "app": "web" } }, "spec": { "containers": [
                { "name": "web", "image": "nginx:1", "env": [ { "name": "A", "value": "1" } ] },
                { "name": "side", "image": "busybox" } ] } } }
    }))
    .expect("deployment");
    api.create(&PostParams::default(), &d)
        .await
        .expect("create");
    let pp = PatchParams::default();
    let patched = api.patch("web", &pp, &Patch::Strategic(json!({ "spec": { "template": { "spec": { "containers": [ { "name": "web", "image": "nginx:2", "env": [ { "name": "B", "value": "2" } ] } ] } } } }))).await.expect("strategic");
    let containers = patched
        .spec
        .template
        .spec
        .map(|s| s.containers)
        .expect("containers");
    assert_eq!(containers.len(), 2, "strategic merge keeps the sidecar");
    assert_eq!(containers[0].image.as_deref(), Some("nginx:2"));
    assert_eq!(
        containers[0].env.as_ref().map(Vec::len),
        Some(2),
        "env merged by name"
    );

    let s: Api<Secret> = Api::namespaced(t.client.clone(), &ns);
    let secret: Secret = serde_json::from_value(
        json!({ "metadata": { "name": "s" }, "stringData": { "password": "hunter2" } }),
    )
    .expect("secret");
    let created = s
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret");
    assert_eq!(
        created
            .data
            .and_then(|d| d.get("password").map(|b| b.0.clone())),
        Some(b"hunter2".to_vec())
    );
    let bad = api
        .patch(
            "web",
            &pp,
            &Patch::Json::<()>(
                serde_json::from_value(
                    json!([{ "op": "test", "path": "/metadata/name", "value": "other" }]),
                )
                .expect("patch"),
            ),
        )
        .await
        .expect_err("failed test op");
    assert_eq!(code(&bad), 422, "{bad:?}");
}

#[tokio::test]
async fn dry_run_stores_nothing() {
    let t = target().await;
    let ns = namespace(&t.client, "dry").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let shown = api
        .create(&pp, &cm("ghost", json!({})))
        .await
        .expect("dry-run create");
    assert_eq!(shown.metadata.name.as_deref(), Some("ghost"));
    assert!(api.get_opt("ghost").await.expect("get").is_none());
}

#[tokio::test]
async fn server_defaults_are_filled_in() {
    let t = target().await;
    let ns = namespace(&t.client, "defaults").await;
    let svcs: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(t.client.clone(), &ns);
    let svc = serde_json::from_value(json!({ "metadata": { "name": "web" }, "spec": { "selector": { "app": "web" }, "ports": [ { "port": 80 } ] } })).expect("service");
    let created = svcs
        .create(&PostParams::default(), &svc)
        .await
        .expect("service");
    let spec = created.spec.expect("spec");
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert!(
        spec.cluster_ip
            .as_deref()
            .is_some_and(|ip| ip.parse::<std::net::IpAddr>().is_ok()),
        "{:?}",
        spec.cluster_ip
    );
    let port = &spec.ports.expect("ports")[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    let deployments: Api<Deployment> = Api::namespaced(t.client.clone(), &ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "selector": { "matchLabels": { "app": "web" } },
            "template": { "metadata": { "labels": { "app": "web" } }, "spec": { "containers": [ { "name": "web", "image": "nginx:1.27" } ] } } }
    })).expect("deployment");
    let d = deployments
        .create(&PostParams::default(), &d)
        .await
        .expect("deployment");
    assert_eq!(d.spec.replicas, Some(1));
    let pod = d.spec.template.spec.expect("pod spec");
    assert_eq!(pod.restart_policy.as_deref(), Some("Always"));
    assert_eq!(
        pod.containers[0].image_pull_policy.as_deref(),
        Some("IfNotPresent")
    );
}
