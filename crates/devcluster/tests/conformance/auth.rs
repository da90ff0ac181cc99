//! Authentication and authorization that hold on the dev cluster and on kube-apiserver alike
//! (the differential test in `differential/authz.rs` compares the two request by request;
//! these assert what a user observes on whichever cluster the tests run against).

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

use crate::common::{client_as, code, namespace, target};

fn status_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(s) => s.message.clone(),
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Attack 2 of issue 30: without a token, kube-system's Secrets cannot be listed and a
/// ClusterRoleBinding making everyone cluster-admin cannot be created (nothing is created); a
/// made-up token is refused outright.
#[tokio::test]
async fn unauthenticated_callers_can_neither_read_secrets_nor_bind_roles() {
    let t = target().await;
    let anonymous = client_as(&t.kubeconfig, None).await;
    let err = Api::<Secret>::namespaced(anonymous.clone(), "kube-system")
        .list(&Default::default())
        .await
        .expect_err("anonymous list of kube-system Secrets");
    assert_eq!(code(&err), 403);
    assert_eq!(
        status_message(&err),
        "secrets is forbidden: User \"system:anonymous\" cannot list resource \"secrets\" in API group \"\" in the namespace \"kube-system\""
    );
    let name = format!(
        "anonymous-admin-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let binding: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin" },
        "subjects": [ { "apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:unauthenticated" } ],
    }))
    .expect("binding");
    let err = Api::<ClusterRoleBinding>::all(anonymous)
        .create(&PostParams::default(), &binding)
        .await
        .expect_err("anonymous create of a ClusterRoleBinding");
    assert_eq!(code(&err), 403);
    let err = Api::<ClusterRoleBinding>::all(t.client.clone())
        .get(&name)
        .await
        .expect_err("nothing was created");
    assert_eq!(code(&err), 404);
    let forged = client_as(&t.kubeconfig, Some("made-up")).await;
    let err = Api::<Secret>::namespaced(forged, "kube-system")
        .list(&Default::default())
        .await
        .expect_err("a made-up token");
    assert_eq!(code(&err), 401);
}

/// A ServiceAccount's token (TokenRequest) authenticates as the account, which may do what its
/// Role grants in its namespace and nothing else; it cannot grant itself more (escalation).
#[tokio::test]
async fn a_service_account_may_do_what_its_role_grants_and_cannot_escalate() {
    let t = target().await;
    let ns = namespace(&t.client, "rbac").await;
    Api::<ServiceAccount>::namespaced(t.client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": "app" } })).expect("sa"),
        )
        .await
        .expect("create sa");
    let role: Role = serde_json::from_value(json!({
        "metadata": { "name": "app" },
        "rules": [
            { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"] },
            { "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["create"] },
        ],
    }))
    .expect("role");
    Api::<Role>::namespaced(t.client.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await
        .expect("create role");
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": { "name": "app" },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "app" },
        "subjects": [ { "kind": "ServiceAccount", "name": "app", "namespace": ns.to_string() } ],
    }))
    .expect("binding");
    Api::<RoleBinding>::namespaced(t.client.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .expect("create binding");
    let request = serde_json::from_value(json!({ "spec": {} })).expect("token request");
    let token = Api::<ServiceAccount>::namespaced(t.client.clone(), &ns)
        .create_token_request("app", &PostParams::default(), &request)
        .await
        .expect("token")
        .status
        .expect("status")
        .token
        .expect("a token");
    let app = client_as(&t.kubeconfig, Some(&token)).await;
    // RBAC is evaluated on every request, and a binding takes effect at once on both.
    crate::common::eventually("the binding to take effect", || async {
        Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(app.clone(), &ns)
            .list(&Default::default())
            .await
            .ok()
    })
    .await;
    let err = Api::<Secret>::namespaced(app.clone(), &ns)
        .list(&Default::default())
        .await
        .expect_err("secrets are not granted");
    assert_eq!(code(&err), 403);
    assert_eq!(
        status_message(&err),
        format!(
            "secrets is forbidden: User \"system:serviceaccount:{ns}:app\" cannot list resource \"secrets\" in API group \"\" in the namespace \"{ns}\""
        )
    );
    let err = Api::<Secret>::namespaced(app.clone(), "kube-system")
        .list(&Default::default())
        .await
        .expect_err("nor elsewhere");
    assert_eq!(code(&err), 403);
    let wider: Role = serde_json::from_value(json!({
        "metadata": { "name": "wider" },
        "rules": [ { "apiGroups": [""], "resources": ["secrets"], "verbs": ["get"] } ],
    }))
    .expect("role");
    let err = Api::<Role>::namespaced(app, &ns)
        .create(&PostParams::default(), &wider)
        .await
        .expect_err("a Role granting what the account does not hold");
    assert_eq!(code(&err), 403);
    assert!(
        status_message(&err).contains(
            "is attempting to grant RBAC permissions not currently held:\n{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}"
        ),
        "{}",
        status_message(&err)
    );
}
