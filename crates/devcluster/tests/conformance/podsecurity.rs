//! Pod Security admission: a namespace labelled `enforce: baseline` refuses a pod that would
//! be root on its node, naming each violation, and admits an ordinary one. The exact wording
//! of every check is compared with kube-apiserver in `differential/podsecurity.rs`.

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::common::{code, eventually, namespace, target};

fn pod(name: &str, spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({ "metadata": { "name": name }, "spec": spec })).expect("pod")
}

#[tokio::test]
async fn a_baseline_namespace_refuses_the_nodes_root_and_admits_a_plain_pod() {
    let t = target().await;
    let ns = namespace(&t.client, "podsec").await;
    let namespaces: Api<Namespace> = Api::all(t.client.clone());
    namespaces
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": {
                "pod-security.kubernetes.io/enforce": "baseline",
                "pod-security.kubernetes.io/enforce-version": "latest" } } })),
        )
        .await
        .expect("label the namespace");
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &ns);
    let root = pod(
        "root",
        json!({ "hostPID": true,
            "containers": [ { "name": "x", "image": "busybox",
                "securityContext": { "capabilities": { "add": ["SYS_ADMIN"] } },
                "volumeMounts": [ { "name": "root", "mountPath": "/host" } ] } ],
            "volumes": [ { "name": "root", "hostPath": { "path": "/" } } ] }),
    );
    // kube-apiserver reads namespace labels through an informer: wait (with dry runs, which
    // admission sees too) until it has seen them.
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    eventually("the enforce label to take effect", || async {
        pods.create(&dry_run, &root).await.err()
    })
    .await;
    let refusal = pods
        .create(&PostParams::default(), &root)
        .await
        .expect_err("the node's root is refused");
    assert_eq!(code(&refusal), 403, "{refusal:?}");
    let message = refusal.to_string();
    for named in [
        "violates PodSecurity \"baseline:latest\"",
        "non-default capabilities (container \"x\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add)",
        "host namespaces (hostPID=true)",
        "hostPath volumes (volume \"root\")",
    ] {
        assert!(message.contains(named), "{named:?} not in {message}");
    }
    assert!(pods.get_opt("root").await.expect("get").is_none());

    let plain = pod(
        "plain",
        json!({ "containers": [ { "name": "app", "image": "busybox" } ] }),
    );
    pods.create(&PostParams::default(), &plain)
        .await
        .expect("a pod within baseline is admitted");
}
