//! The authorization scenario of the differential test: the same identities, bindings and
//! requests on the dev cluster and on kube-apiserver, every answer compared.
//!
//! Identities (ServiceAccounts of the test namespace unless said otherwise):
//! - `reader`: a Role in the test namespace (configmaps, pods and their logs, one named Secret,
//!   `*/scale`, `serviceaccounts/token`);
//! - `cluster-reader`: a ClusterRole bound cluster-wide (namespaces, one named ClusterRole,
//!   Deployments everywhere, non-resource URLs with a wildcard);
//! - `nobody`: nothing beyond what every authenticated user has;
//! - `editor`: the aggregated ClusterRole `edit`, bound in the second namespace only;
//! - `broken`: bound to a Role that does not exist (RBAC's resolution error in the 403);
//! - `alice`: a user impersonated by the admin with the group `authz-team-<sfx>`, which is bound
//!   to `view` in the test namespace;
//! - `anonymous`: no credentials.
//!
//! Each is asked about a matrix of verbs × resources (subresources, cluster-scoped kinds,
//! non-resource URLs) × namespaces three ways: SelfSubjectAccessReview, a real request (writes
//! as `dryRun=All`; compared as "authorized" or the exact 401/403), and `kubectl auth can-i`
//! (a subset, plus `--list` and `auth whoami`). Then RBAC's escalation prevention,
//! impersonation's refusals, and TokenRequest (bounds, deleted and re-created ServiceAccounts,
//! bound objects, audiences).

use std::path::Path;

use http::Method;
use serde_json::{Value, json};

use super::engine::{Harness, MERGE, Req, View};

const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";
const SSAR: &str = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
const SSR: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";
/// The second namespace.
const NS2: &str = "authz-b-{{sfx}}";
const TEAM: &str = "authz-team-{{sfx}}";

const ACCOUNTS: &[&str] = &[
    "reader",
    "cluster-reader",
    "nobody",
    "editor",
    "broken",
    "rbac-writer",
    "escalator",
    "imp-legacy",
    "imp-constrained",
    "token-holder",
];

/// The identities of the matrix.
const WHO: &[&str] = &[
    "reader",
    "cluster-reader",
    "nobody",
    "editor",
    "broken",
    "alice",
    "anonymous",
];

/// `code` and `body.kind` only: setup steps whose bodies are not what this test is about.
fn code_only(a: &Value) -> Value {
    json!({ "code": a["code"] })
}

/// A request's authorization outcome: its 401/403 answer in full, or "authorized".
fn authorization(a: &Value) -> Value {
    match a["code"].as_u64() {
        Some(401 | 403) => json!({ "code": a["code"], "body": a["body"] }),
        _ => json!({ "code": "authorized" }),
    }
}

/// A TokenRequest answer without the token itself (which differs by construction).
fn without_token(a: &Value) -> Value {
    let mut a = a.clone();
    if let Some(status) = a["body"].get_mut("status").and_then(Value::as_object_mut)
        && status.contains_key("token")
    {
        status.insert("token".into(), json!("<token>"));
    }
    a
}

/// Runs `req` on both clusters and asserts both answered `code` (a refusal this test is
/// about must not pass just because both sides agree on something else).
async fn expect(h: &mut Harness, req: Req, code: u16) {
    let (dev, real) = h.run(req).await;
    assert_eq!(real["code"], code, "kube-apiserver: {real}");
    assert_eq!(dev["code"], code, "dev cluster: {dev}");
}

/// `req` sent as `who`: a registered client, or the admin impersonating alice.
fn by(req: Req, who: &str) -> Req {
    match who {
        "alice" => req
            .header("Impersonate-User", "alice")
            .header("Impersonate-Group", TEAM),
        who => req.by(who),
    }
}

pub async fn run(h: &mut Harness, dev_kubeconfig: &Path, real_kubeconfig: &Path, tmp: &Path) {
    let started = std::time::Instant::now();
    let lap = |what: &str| eprintln!("authz: {what} done after {:?}", started.elapsed());
    setup(h).await;
    identities(h, dev_kubeconfig, real_kubeconfig).await;
    lap("setup");
    access_reviews(h).await;
    lap("access reviews");
    requests(h).await;
    lap("requests");
    kubectl(h, dev_kubeconfig, real_kubeconfig, tmp).await;
    lap("kubectl");
    impersonation(h).await;
    token_requests(h, dev_kubeconfig, real_kubeconfig).await;
    // Last: it binds `admin` to nobody.
    escalation(h).await;
    anonymous(h).await;
    cleanup(h).await;
    lap("the rest");
}

fn role(name: &str, rules: Value) -> Value {
    json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": { "name": name }, "rules": rules })
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": { "name": name }, "rules": rules })
}

fn binding(kind: &str, name: &str, role_kind: &str, role: &str, subjects: Value) -> Value {
    json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role },
        "subjects": subjects })
}

fn sa(name: &str) -> Value {
    json!([{ "kind": "ServiceAccount", "name": name, "namespace": "{{ns}}" }])
}

fn pod(name: &str) -> Value {
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name },
        "spec": { "containers": [ { "name": "c", "image": "registry.k8s.io/pause:3.10" } ] } })
}

fn deployment(name: &str) -> Value {
    json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": name },
        "spec": { "replicas": 1, "selector": { "matchLabels": { "app": name } },
            "template": { "metadata": { "labels": { "app": name } },
                "spec": { "containers": [ { "name": "c", "image": "registry.k8s.io/pause:3.10" } ] } } } })
}

async fn setup(h: &mut Harness) {
    let step = |path: &str, body: Value| {
        Req::post("authz setup", path, body).view(View::Project(code_only))
    };
    h.run(step(
        "/api/v1/namespaces",
        json!({ "apiVersion": "v1", "kind": "Namespace",
            "metadata": { "name": NS2, "labels": { "berth.io/test": "true" } } }),
    ))
    .await;
    for account in ACCOUNTS {
        h.run(step(
            "/api/v1/namespaces/{{ns}}/serviceaccounts",
            json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": account } }),
        ))
        .await;
    }
    // Pods need the namespace's default ServiceAccount (kube-controller-manager makes it).
    for ns in ["{{ns}}", NS2] {
        h.wait(
            Req::get(
                "authz setup: default serviceaccount",
                &format!("/api/v1/namespaces/{ns}/serviceaccounts/default"),
            )
            .view(View::Project(code_only)),
            "the default ServiceAccount",
            |a| a["code"] == 200,
        )
        .await;
        for (path, body) in [
            (
                "configmaps",
                json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "cm1" } }),
            ),
            (
                "secrets",
                json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s1" } }),
            ),
            (
                "secrets",
                json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s2" } }),
            ),
            ("pods", pod("p1")),
        ] {
            h.run(step(&format!("/api/v1/namespaces/{ns}/{path}"), body))
                .await;
        }
        h.run(step(
            &format!("/apis/apps/v1/namespaces/{ns}/deployments"),
            deployment("web"),
        ))
        .await;
        h.run(step(
            &format!("/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"),
            json!({ "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": { "name": "l1" } }),
        ))
        .await;
    }
    let roles = format!("{RBAC}/namespaces/{{{{ns}}}}/roles");
    let bindings = format!("{RBAC}/namespaces/{{{{ns}}}}/rolebindings");
    h.run(step(
        &roles,
        role(
            "reader",
            json!([
                { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"] },
                { "apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get"] },
                { "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s1"], "verbs": ["get"] },
                { "apiGroups": ["apps"], "resources": ["*/scale"], "verbs": ["get", "update"] },
                { "apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"] },
            ]),
        ),
    ))
    .await;
    h.run(step(
        &bindings,
        binding("RoleBinding", "reader", "Role", "reader", sa("reader")),
    ))
    .await;
    h.run(step(
        &format!("{RBAC}/clusterroles"),
        cluster_role(
            "authz-{{sfx}}-cluster",
            json!([
                { "apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"] },
                { "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": ["view"], "verbs": ["get"] },
                { "apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"] },
                { "nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"] },
            ]),
        ),
    ))
    .await;
    h.run(step(
        &format!("{RBAC}/clusterrolebindings"),
        binding(
            "ClusterRoleBinding",
            "authz-{{sfx}}-cluster",
            "ClusterRole",
            "authz-{{sfx}}-cluster",
            sa("cluster-reader"),
        ),
    ))
    .await;
    h.run(step(
        &format!("{RBAC}/namespaces/{NS2}/rolebindings"),
        binding("RoleBinding", "editor", "ClusterRole", "edit", sa("editor")),
    ))
    .await;
    h.run(step(
        &bindings,
        binding(
            "RoleBinding",
            "viewers",
            "ClusterRole",
            "view",
            json!([{ "apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": TEAM }]),
        ),
    ))
    .await;
    h.run(step(
        &bindings,
        binding(
            "RoleBinding",
            "broken",
            "Role",
            "does-not-exist",
            sa("broken"),
        ),
    ))
    .await;
    // Escalation: rbac-writer may write Roles and bindings (not escalate, not bind) and read
    // ConfigMaps; escalator may escalate Roles and bind `admin`.
    h.run(step(
        &roles,
        role(
            "rbac-writer",
            json!([
                { "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create", "update", "patch", "get"] },
                { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"] },
            ]),
        ),
    ))
    .await;
    h.run(step(
        &bindings,
        binding(
            "RoleBinding",
            "rbac-writer",
            "Role",
            "rbac-writer",
            sa("rbac-writer"),
        ),
    ))
    .await;
    h.run(step(
        &format!("{RBAC}/clusterroles"),
        cluster_role(
            "authz-{{sfx}}-clusterrole-writer",
            json!([{ "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["create"] }]),
        ),
    ))
    .await;
    h.run(step(
        &format!("{RBAC}/clusterrolebindings"),
        binding(
            "ClusterRoleBinding",
            "authz-{{sfx}}-clusterrole-writer",
            "ClusterRole",
            "authz-{{sfx}}-clusterrole-writer",
            sa("rbac-writer"),
        ),
    ))
    .await;
    h.run(step(
        &roles,
        role(
            "escalator",
            json!([
                { "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["create", "escalate"] },
                { "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings"], "verbs": ["create"] },
                { "apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "resourceNames": ["admin"], "verbs": ["bind"] },
            ]),
        ),
    ))
    .await;
    h.run(step(
        &bindings,
        binding(
            "RoleBinding",
            "escalator",
            "Role",
            "escalator",
            sa("escalator"),
        ),
    ))
    .await;
    // Impersonation: legacy (impersonate users/bob) and constrained (impersonate-on a list of
    // ConfigMaps, as carol).
    h.run(step(
        &format!("{RBAC}/clusterroles"),
        cluster_role(
            "authz-{{sfx}}-imp-legacy",
            json!([{ "apiGroups": [""], "resources": ["users"], "resourceNames": ["bob"], "verbs": ["impersonate"] }]),
        ),
    ))
    .await;
    h.run(step(
        &format!("{RBAC}/clusterrolebindings"),
        binding(
            "ClusterRoleBinding",
            "authz-{{sfx}}-imp-legacy",
            "ClusterRole",
            "authz-{{sfx}}-imp-legacy",
            sa("imp-legacy"),
        ),
    ))
    .await;
    h.run(step(
        &format!("{RBAC}/clusterroles"),
        cluster_role(
            "authz-{{sfx}}-imp-constrained",
            json!([
                { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["impersonate-on:user-info:list"] },
                { "apiGroups": ["authentication.k8s.io"], "resources": ["users"], "resourceNames": ["carol"], "verbs": ["impersonate:user-info"] },
            ]),
        ),
    ))
    .await;
    h.run(step(
        &format!("{RBAC}/clusterrolebindings"),
        binding(
            "ClusterRoleBinding",
            "authz-{{sfx}}-imp-constrained",
            "ClusterRole",
            "authz-{{sfx}}-imp-constrained",
            sa("imp-constrained"),
        ),
    ))
    .await;
    for account in ACCOUNTS {
        h.run(
            Req::post(
                "authz setup: token",
                &format!("/api/v1/namespaces/{{{{ns}}}}/serviceaccounts/{account}/token"),
                json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {} }),
            )
            .save(&format!("tok_{account}"), "/status/token")
            .view(View::Project(without_token)),
        )
        .await;
    }
}

/// A client per ServiceAccount (its token) and for anonymous requests, on both sides.
async fn identities(h: &mut Harness, dev_kubeconfig: &Path, real_kubeconfig: &Path) {
    for account in ACCOUNTS {
        let token = h.dev().var(&format!("tok_{account}"));
        let client = crate::common::client_as(dev_kubeconfig, Some(&token)).await;
        h.dev().add_identity(account, client);
        let token = h.real().var(&format!("tok_{account}"));
        let client = crate::common::client_as(real_kubeconfig, Some(&token)).await;
        h.real().add_identity(account, client);
    }
    let client = crate::common::client_as(dev_kubeconfig, None).await;
    h.dev().add_identity("anonymous", client);
    let client = crate::common::client_as(real_kubeconfig, None).await;
    h.real().add_identity("anonymous", client);
}

/// What the matrix asks about: group, resource, subresource, namespaced, the object's name,
/// and the verbs that apply.
struct Target {
    group: &'static str,
    resource: &'static str,
    sub: &'static str,
    namespaced: bool,
    name: &'static str,
    verbs: &'static [&'static str],
}

const ALL: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

const TARGETS: &[Target] = &[
    Target {
        group: "",
        resource: "configmaps",
        sub: "",
        namespaced: true,
        name: "cm1",
        verbs: ALL,
    },
    Target {
        group: "",
        resource: "secrets",
        sub: "",
        namespaced: true,
        name: "s1",
        verbs: ALL,
    },
    Target {
        group: "",
        resource: "secrets",
        sub: "",
        namespaced: true,
        name: "s2",
        verbs: &["get", "update", "delete"],
    },
    Target {
        group: "",
        resource: "pods",
        sub: "",
        namespaced: true,
        name: "p1",
        verbs: ALL,
    },
    Target {
        group: "",
        resource: "pods",
        sub: "log",
        namespaced: true,
        name: "p1",
        verbs: &["get"],
    },
    Target {
        group: "apps",
        resource: "deployments",
        sub: "",
        namespaced: true,
        name: "web",
        verbs: ALL,
    },
    Target {
        group: "apps",
        resource: "deployments",
        sub: "scale",
        namespaced: true,
        name: "web",
        verbs: &["get", "update", "patch"],
    },
    Target {
        group: "",
        resource: "serviceaccounts",
        sub: "token",
        namespaced: true,
        name: "token-holder",
        verbs: &["create"],
    },
    Target {
        group: "coordination.k8s.io",
        resource: "leases",
        sub: "",
        namespaced: true,
        name: "l1",
        verbs: ALL,
    },
    Target {
        group: "rbac.authorization.k8s.io",
        resource: "roles",
        sub: "",
        namespaced: true,
        name: "reader",
        verbs: &["get", "list", "create", "delete"],
    },
    Target {
        group: "",
        resource: "namespaces",
        sub: "",
        namespaced: false,
        name: "{{ns}}",
        verbs: &["get", "list", "watch", "update", "delete"],
    },
    Target {
        group: "rbac.authorization.k8s.io",
        resource: "clusterroles",
        sub: "",
        namespaced: false,
        name: "view",
        verbs: &["get", "list", "create", "escalate", "bind"],
    },
];

const PATHS: &[&str] = &[
    "/api",
    "/apis/apps",
    "/healthz",
    "/version",
    "/metrics",
    "/logs/kube.log",
    "/readyz",
];

fn scopes(t: &Target) -> Vec<&'static str> {
    if t.namespaced {
        vec!["{{ns}}", NS2]
    } else {
        vec![""]
    }
}

async fn access_reviews(h: &mut Harness) {
    for who in WHO {
        for t in TARGETS {
            for ns in scopes(t) {
                for verb in t.verbs {
                    let mut attrs =
                        json!({ "verb": verb, "group": t.group, "resource": t.resource });
                    if !ns.is_empty() {
                        attrs["namespace"] = json!(ns);
                    }
                    if !t.sub.is_empty() {
                        attrs["subresource"] = json!(t.sub);
                    }
                    if !matches!(*verb, "list" | "watch" | "create" | "deletecollection") {
                        attrs["name"] = json!(t.name);
                    }
                    let req = Req::post(
                        "authz: access review",
                        SSAR,
                        json!({ "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                            "spec": { "resourceAttributes": attrs } }),
                    );
                    h.run(by(req, who)).await;
                }
            }
        }
        for path in PATHS {
            let req = Req::post(
                "authz: access review (non-resource)",
                SSAR,
                json!({ "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": { "nonResourceAttributes": { "path": path, "verb": "get" } } }),
            );
            h.run(by(req, who)).await;
        }
        let req = Req::post(
            "authz: rules review",
            "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews",
            json!({ "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                "spec": { "namespace": "{{ns}}" } }),
        )
        .view(View::Project(sorted_rules));
        h.run(by(req, who)).await;
        h.run(by(Req::post("authz: whoami", SSR, json!({})), who))
            .await;
    }
}

/// A rules review with its rule lists sorted (kube-apiserver lists bindings in no fixed order).
fn sorted_rules(a: &Value) -> Value {
    let mut a = a.clone();
    for key in ["resourceRules", "nonResourceRules"] {
        if let Some(list) = a["body"]["status"]
            .get_mut(key)
            .and_then(Value::as_array_mut)
        {
            list.sort_by_key(|r| r.to_string());
        }
    }
    a
}

fn collection(t: &Target, ns: &str) -> String {
    let base = if t.group.is_empty() {
        "/api/v1".to_string()
    } else {
        format!("/apis/{}/v1", t.group)
    };
    if t.namespaced {
        format!("{base}/namespaces/{ns}/{}", t.resource)
    } else {
        format!("{base}/{}", t.resource)
    }
}

/// A body good enough for a dry-run create or update of `t`.
fn body_for(t: &Target, name: &str) -> Value {
    match (t.resource, t.sub) {
        ("deployments", "scale") => json!({ "apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": { "name": name }, "spec": { "replicas": 1 } }),
        ("serviceaccounts", "token") => {
            json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {} })
        }
        ("pods", _) => pod(name),
        ("deployments", _) => deployment(name),
        ("configmaps", _) => {
            json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": name } })
        }
        ("secrets", _) => {
            json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": name } })
        }
        ("leases", _) => {
            json!({ "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": { "name": name } })
        }
        ("roles", _) => role(name, json!([])),
        ("clusterroles", _) => cluster_role(name, json!([])),
        ("namespaces", _) => {
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } })
        }
        _ => json!({}),
    }
}

/// The request that does `verb` on `t` in `ns` (writes as dry runs), if there is one.
fn request_for(t: &Target, ns: &str, verb: &str) -> Option<Req> {
    let kind = "authz: request";
    let coll = collection(t, ns);
    let object = if t.sub.is_empty() {
        format!("{coll}/{}", t.name)
    } else {
        format!("{coll}/{}/{}", t.name, t.sub)
    };
    Some(match verb {
        "get" => Req::get(kind, &object),
        "list" if t.sub.is_empty() => Req::get(kind, &coll),
        // A watch that is allowed streams until its timeout: one kind is enough.
        "watch" if t.resource == "configmaps" => {
            Req::get(kind, &format!("{coll}?watch=true&timeoutSeconds=1"))
        }
        "create" if t.sub == "token" => Req::post(kind, &object, body_for(t, t.name)),
        "create" if t.sub.is_empty() => Req::post(
            kind,
            &format!("{coll}?dryRun=All"),
            body_for(t, "authz-new"),
        ),
        "update" => Req::put(kind, &format!("{object}?dryRun=All"), body_for(t, t.name)),
        "patch" => Req::patch(
            kind,
            &format!("{object}?dryRun=All"),
            MERGE,
            if t.sub == "scale" {
                json!({ "spec": { "replicas": 1 } })
            } else {
                json!({ "metadata": { "labels": { "authz": "patched" } } })
            },
        ),
        "delete" if t.sub.is_empty() => Req::delete(kind, &format!("{object}?dryRun=All")),
        "deletecollection" if t.sub.is_empty() => Req::delete(kind, &format!("{coll}?dryRun=All")),
        _ => return None,
    })
}

async fn requests(h: &mut Harness) {
    for who in WHO {
        for t in TARGETS {
            for ns in scopes(t) {
                for verb in t.verbs {
                    if let Some(req) = request_for(t, ns, verb) {
                        h.run(by(req.view(View::Project(authorization)), who)).await;
                    }
                }
            }
        }
        for path in PATHS {
            let req =
                Req::get("authz: request (non-resource)", path).view(View::Project(authorization));
            h.run(by(req, who)).await;
        }
        // A non-resource write, and a list narrowed to one object by a field selector (which
        // RBAC sees as a request about that object).
        let req = Req::post(
            "authz: request (non-resource)",
            "/apis/authz-test",
            json!({}),
        )
        .view(View::Project(authorization));
        h.run(by(req, who)).await;
        let req = Req::get(
            "authz: request",
            "/api/v1/namespaces/{{ns}}/secrets?fieldSelector=metadata.name%3Ds1",
        )
        .view(View::Project(authorization));
        h.run(by(req, who)).await;
    }
}

/// A kubeconfig for `base`'s cluster presenting `token` (or nothing), written to `path`.
fn kubeconfig_as(base: &Path, token: Option<&str>, path: &Path) {
    let kc = kube::config::Kubeconfig::read_from(base).expect("kubeconfig is readable");
    let mut v = serde_json::to_value(&kc).expect("kubeconfig serializes");
    for u in v["users"].as_array_mut().into_iter().flatten() {
        u["user"] = match token {
            Some(t) => json!({ "token": t }),
            None => json!({}),
        };
    }
    std::fs::write(path, serde_json::to_string(&v).expect("json")).expect("write kubeconfig");
}

/// The same kubectl command as each identity on both sides, the answers compared.
async fn kubectl(h: &mut Harness, dev_kubeconfig: &Path, real_kubeconfig: &Path, tmp: &Path) {
    let Some(program) = crate::tools::locate("kubectl") else {
        return;
    };
    let asks: &[(&str, &str, &str)] = &[
        ("get", "configmaps", "{{ns}}"),
        ("list", "secrets", "{{ns}}"),
        ("get", "secrets/s1", "{{ns}}"),
        ("get", "pods/log", "{{ns}}"),
        ("create", "pods", NS2),
        ("update", "deployments.apps/scale", "{{ns}}"),
        ("create", "serviceaccounts/token", "{{ns}}"),
        ("list", "namespaces", ""),
        ("get", "clusterroles.rbac.authorization.k8s.io/view", ""),
        ("get", "/metrics", ""),
        ("get", "/logs/kube.log", ""),
        ("*", "*", "{{ns}}"),
    ];
    for who in WHO {
        let mut outputs = Vec::new();
        for (side, base) in [(0, dev_kubeconfig), (1, real_kubeconfig)] {
            let s = if side == 0 { h.dev() } else { h.real() };
            let kubeconfig = tmp.join(format!(
                "{}-{who}.kubeconfig",
                if side == 0 { "dev" } else { "real" }
            ));
            let (token, extra): (Option<String>, Vec<String>) = match *who {
                "alice" => (
                    None,
                    vec![
                        "--as".into(),
                        "alice".into(),
                        "--as-group".into(),
                        s.expand(TEAM),
                    ],
                ),
                "anonymous" => (None, vec![]),
                who => (Some(s.var(&format!("tok_{who}"))), vec![]),
            };
            if *who == "alice" {
                std::fs::copy(base, &kubeconfig).expect("copy kubeconfig");
            } else {
                kubeconfig_as(base, token.as_deref(), &kubeconfig);
            }
            let mut commands: Vec<Vec<String>> = Vec::new();
            for (verb, what, ns) in asks {
                let mut args = vec![
                    "auth".into(),
                    "can-i".into(),
                    verb.to_string(),
                    s.expand(what),
                ];
                if !ns.is_empty() {
                    args.extend(["-n".into(), s.expand(ns)]);
                }
                commands.push(args);
            }
            commands.push(vec![
                "auth".into(),
                "can-i".into(),
                "--list".into(),
                "-n".into(),
                s.expand("{{ns}}"),
            ]);
            commands.push(vec![
                "auth".into(),
                "whoami".into(),
                "-o".into(),
                "json".into(),
            ]);
            let mut answers = Vec::new();
            for args in commands {
                let mut all = vec!["--kubeconfig".to_string(), kubeconfig.display().to_string()];
                all.extend(extra.iter().cloned());
                all.extend(args);
                // Asynchronously: the dev cluster serves from this test's runtime.
                let out = tokio::process::Command::new(&program)
                    .args(&all)
                    .kill_on_drop(true)
                    .output()
                    .await
                    .expect("kubectl runs");
                let code = out.status.code().unwrap_or(-1);
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                let mut answer = json!({ "args": all[2..], "exit": code });
                if all.iter().any(|a| a == "--list") {
                    // Bindings come in no fixed order: compare the table's lines as a set.
                    let mut lines: Vec<&str> = stdout.lines().collect();
                    lines.sort();
                    answer["stdout"] = json!(lines);
                } else if let Ok(parsed) = serde_json::from_str::<Value>(&stdout) {
                    answer["stdout"] = parsed;
                } else {
                    answer["stdout"] = json!(stdout);
                }
                if code > 1 {
                    answer["stderr"] = json!(String::from_utf8_lossy(&out.stderr));
                }
                answers.push(answer);
            }
            outputs.push(s.normalize(Value::Array(answers)));
        }
        let real = outputs.pop().expect("real");
        let dev = outputs.pop().expect("dev");
        h.check(&format!("authz: kubectl auth ({who})"), dev, real);
    }
}

async fn escalation(h: &mut Harness) {
    let roles = format!("{RBAC}/namespaces/{{{{ns}}}}/roles");
    let bindings = format!("{RBAC}/namespaces/{{{{ns}}}}/rolebindings");
    let secrets_rule =
        json!([{ "apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"] }]);
    let configmaps_rule =
        json!([{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"] }]);
    let kind = "authz: escalation";
    expect(
        h,
        Req::post(kind, &roles, role("esc-secrets", secrets_rule.clone())).by("rbac-writer"),
        403,
    )
    .await;
    expect(
        h,
        Req::post(kind, &roles, role("held", configmaps_rule.clone())).by("rbac-writer"),
        201,
    )
    .await;
    expect(
        h,
        Req::put(
            kind,
            &format!("{roles}/held"),
            role(
                "held",
                json!([{ "apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get"], "resourceNames": ["a", "b"] }]),
            ),
        )
        .by("rbac-writer"),
        403,
    )
    .await;
    h.run(
        Req::patch(
            kind,
            &format!("{roles}/held"),
            MERGE,
            json!({ "metadata": { "labels": { "x": "y" } } }),
        )
        .by("rbac-writer"),
    )
    .await;
    expect(
        h,
        Req::post(
            kind,
            &bindings,
            binding(
                "RoleBinding",
                "esc-view",
                "ClusterRole",
                "view",
                sa("nobody"),
            ),
        )
        .by("rbac-writer"),
        403,
    )
    .await;
    expect(
        h,
        Req::post(
            kind,
            &bindings,
            binding("RoleBinding", "esc-missing", "Role", "nope", sa("nobody")),
        )
        .by("rbac-writer"),
        404,
    )
    .await;
    expect(
        h,
        Req::post(
            kind,
            &bindings,
            binding("RoleBinding", "held", "Role", "held", sa("nobody")),
        )
        .by("rbac-writer"),
        201,
    )
    .await;
    expect(
        h,
        Req::post(
            kind,
            &format!("{RBAC}/clusterroles"),
            json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": { "name": "authz-{{sfx}}-aggregated" },
                "aggregationRule": { "clusterRoleSelectors": [ { "matchLabels": { "authz": "{{sfx}}" } } ] } }),
        )
        .by("rbac-writer"),
        403,
    )
    .await;
    expect(
        h,
        Req::post(
            kind,
            &format!("{RBAC}/clusterroles"),
            cluster_role("authz-{{sfx}}-wide", configmaps_rule.clone()),
        )
        .by("rbac-writer"),
        403,
    )
    .await;
    expect(
        h,
        Req::post(kind, &roles, role("escalated", secrets_rule)).by("escalator"),
        201,
    )
    .await;
    expect(
        h,
        Req::post(
            kind,
            &bindings,
            binding(
                "RoleBinding",
                "bound-admin",
                "ClusterRole",
                "admin",
                sa("nobody"),
            ),
        )
        .by("escalator"),
        201,
    )
    .await;
    expect(
        h,
        Req::post(
            kind,
            &bindings,
            binding(
                "RoleBinding",
                "bound-edit",
                "ClusterRole",
                "edit",
                sa("nobody"),
            ),
        )
        .by("escalator"),
        403,
    )
    .await;
}

async fn impersonation(h: &mut Harness) {
    let kind = "authz: impersonation";
    // Allowed impersonations are compared by their outcome, not by what the list holds.
    let outcome = View::Project(authorization);
    let cms = "/api/v1/namespaces/{{ns}}/configmaps";
    h.run(
        Req::get(kind, cms)
            .by("nobody")
            .header("Impersonate-User", "bob")
            .view(outcome),
    )
    .await;
    h.run(
        Req::get(kind, cms)
            .by("nobody")
            .header("Impersonate-User", "system:serviceaccount:{{ns}}:reader"),
    )
    .await;
    // The legacy impersonator: a user it may not impersonate first (kube-apiserver words later
    // refusals differently once a caller succeeded the legacy way), then bob.
    expect(
        h,
        Req::get(kind, cms)
            .by("imp-legacy")
            .header("Impersonate-User", "dave"),
        403,
    )
    .await;
    h.run(
        Req::get(kind, cms)
            .by("imp-legacy")
            .header("Impersonate-User", "bob"),
    )
    .await;
    // The constrained impersonator may impersonate carol to list ConfigMaps, nothing else.
    h.run(
        Req::get(kind, &format!("{cms}/cm1"))
            .by("imp-constrained")
            .header("Impersonate-User", "carol"),
    )
    .await;
    h.run(
        Req::get(kind, cms)
            .by("imp-constrained")
            .header("Impersonate-User", "bob"),
    )
    .await;
    h.run(
        Req::get(kind, cms)
            .by("imp-constrained")
            .header("Impersonate-User", "carol")
            .header("Impersonate-Group", "g1"),
    )
    .await;
    h.run(
        Req::get(kind, cms)
            .by("imp-constrained")
            .header("Impersonate-User", "carol")
            .view(outcome),
    )
    .await;
    // The admin: groups without a user; a ServiceAccount (its groups); a user with groups,
    // uid and extras.
    expect(
        h,
        Req::get(kind, cms).header("Impersonate-Group", "g1"),
        400,
    )
    .await;
    h.run(
        Req::post(kind, SSR, json!({}))
            .header("Impersonate-User", "system:serviceaccount:{{ns}}:reader"),
    )
    .await;
    h.run(
        Req::post(kind, SSR, json!({}))
            .header("Impersonate-User", "erin")
            .header("Impersonate-Group", "g1")
            .header("Impersonate-Group", "system:authenticated")
            .header("Impersonate-Uid", "u-1")
            .header("Impersonate-Extra-Scopes", "a")
            .header("Impersonate-Extra-Scopes", "b")
            .header("Impersonate-Extra-Acme.com%2fteam", "x"),
    )
    .await;
    h.run(Req::post(kind, SSR, json!({})).header("Impersonate-User", "system:anonymous"))
        .await;
    h.run(
        Req::get(kind, "/version")
            .header("Impersonate-User", "system:anonymous")
            .view(View::Project(code_only)),
    )
    .await;
}

async fn token_requests(h: &mut Harness, dev_kubeconfig: &Path, real_kubeconfig: &Path) {
    let kind = "authz: token request";
    let token = |sa: &str| format!("/api/v1/namespaces/{{{{ns}}}}/serviceaccounts/{sa}/token");
    let spec = |s: Value| json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": s });
    h.run(
        Req::post(kind, &token("token-holder"), spec(json!({}))).view(View::Project(without_token)),
    )
    .await;
    expect(
        h,
        Req::post(
            kind,
            &token("token-holder"),
            spec(json!({ "expirationSeconds": 599 })),
        ),
        422,
    )
    .await;
    expect(
        h,
        Req::post(
            kind,
            &token("token-holder"),
            spec(json!({ "expirationSeconds": 4294967297u64 })),
        ),
        422,
    )
    .await;
    h.run(
        Req::post(
            kind,
            &token("token-holder"),
            spec(json!({ "expirationSeconds": 600, "audiences": ["vault"] })),
        )
        .save("tok_vault", "/status/token")
        .view(View::Project(without_token)),
    )
    .await;
    expect(
        h,
        Req::post(kind, &token("no-such-account"), spec(json!({}))),
        404,
    )
    .await;
    // The reader may mint tokens (serviceaccounts/token create); nobody may not.
    h.run(
        Req::post(kind, &token("token-holder"), spec(json!({})))
            .by("reader")
            .view(View::Project(without_token)),
    )
    .await;
    expect(
        h,
        Req::post(kind, &token("token-holder"), spec(json!({}))).by("nobody"),
        403,
    )
    .await;
    // A token bound to a Secret, one of a ServiceAccount that is deleted and re-created.
    h.run(
        Req::post(
            "authz setup",
            "/api/v1/namespaces/{{ns}}/secrets",
            json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "binder" } }),
        )
        .view(View::Project(code_only)),
    )
    .await;
    h.run(
        Req::post(kind, &token("token-holder"),
            spec(json!({ "boundObjectRef": { "kind": "Secret", "apiVersion": "v1", "name": "binder" } })))
        .save("tok_bound", "/status/token")
        .view(View::Project(without_token)),
    )
    .await;
    h.run(
        Req::post("authz setup", "/api/v1/namespaces/{{ns}}/serviceaccounts",
            json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": "doomed" } }))
        .view(View::Project(code_only)),
    )
    .await;
    h.run(
        Req::post(kind, &token("doomed"), spec(json!({})))
            .save("tok_doomed", "/status/token")
            .view(View::Project(without_token)),
    )
    .await;
    for name in ["vault", "bound", "doomed"] {
        let t = h.dev().var(&format!("tok_{name}"));
        let c = crate::common::client_as(dev_kubeconfig, Some(&t)).await;
        h.dev().add_identity(name, c);
        let t = h.real().var(&format!("tok_{name}"));
        let c = crate::common::client_as(real_kubeconfig, Some(&t)).await;
        h.real().add_identity(name, c);
    }
    h.run(Req::post(kind, SSR, json!({})).by("bound")).await;
    h.run(Req::post(kind, SSR, json!({})).by("doomed")).await;
    expect(h, Req::post(kind, SSR, json!({})).by("vault"), 401).await;
    h.run(
        Req::delete("authz setup", "/api/v1/namespaces/{{ns}}/secrets/binder")
            .view(View::Project(code_only)),
    )
    .await;
    h.run(
        Req::delete(
            "authz setup",
            "/api/v1/namespaces/{{ns}}/serviceaccounts/doomed",
        )
        .view(View::Project(code_only)),
    )
    .await;
    // kube-apiserver keeps a token's successful authentication for 10 s: wait for the refusal
    // (the dev cluster refuses at once).
    h.wait(
        Req::post(kind, SSR, json!({})).by("bound"),
        "the bound token refused",
        |a| a["code"] == 401,
    )
    .await;
    h.wait(
        Req::post(kind, SSR, json!({})).by("doomed"),
        "the token refused",
        |a| a["code"] == 401,
    )
    .await;
    h.run(
        Req::post("authz setup", "/api/v1/namespaces/{{ns}}/serviceaccounts",
            json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": "doomed" } }))
        .view(View::Project(code_only)),
    )
    .await;
    // A ServiceAccount of the same name is another one: the old token stays refused.
    expect(h, Req::post(kind, SSR, json!({})).by("doomed"), 401).await;
}

/// Attack 2: without credentials, kube-system's Secrets cannot be listed and a
/// ClusterRoleBinding cannot be created; a made-up token is refused outright.
async fn anonymous(h: &mut Harness) {
    let kind = "authz: anonymous";
    expect(
        h,
        Req::get(kind, "/api/v1/namespaces/kube-system/secrets").by("anonymous"),
        403,
    )
    .await;
    expect(
        h,
        Req::post(
            kind,
            &format!("{RBAC}/clusterrolebindings"),
            binding(
                "ClusterRoleBinding",
                "authz-{{sfx}}-anonymous-admin",
                "ClusterRole",
                "cluster-admin",
                json!([{ "apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:unauthenticated" }]),
            ),
        )
        .by("anonymous"),
        403,
    )
    .await;
    expect(
        h,
        Req::get(
            kind,
            &format!("{RBAC}/clusterrolebindings/authz-{{{{sfx}}}}-anonymous-admin"),
        ),
        404,
    )
    .await;
    for path in [
        "/healthz",
        "/livez",
        "/readyz",
        "/api",
        "/apis",
        "/openapi/v3",
    ] {
        h.run(
            Req::get(kind, path)
                .by("anonymous")
                .view(View::Project(authorization)),
        )
        .await;
    }
    h.run(
        Req::get(kind, "/version")
            .by("anonymous")
            .view(View::Project(code_only)),
    )
    .await;
    expect(
        h,
        Req::new_method(kind, Method::GET, "/api/v1/namespaces/kube-system/secrets")
            .by("anonymous")
            .header("Authorization", "Bearer made-up"),
        401,
    )
    .await;
    h.run(
        Req::get(kind, "/healthz")
            .header("Authorization", "Bearer made-up")
            .by("anonymous"),
    )
    .await;
}

async fn cleanup(h: &mut Harness) {
    let step = |path: String| Req::delete("authz setup", &path).view(View::Project(code_only));
    for name in [
        "cluster",
        "clusterrole-writer",
        "imp-legacy",
        "imp-constrained",
    ] {
        h.run(step(format!(
            "{RBAC}/clusterrolebindings/authz-{{{{sfx}}}}-{name}"
        )))
        .await;
        h.run(step(format!(
            "{RBAC}/clusterroles/authz-{{{{sfx}}}}-{name}"
        )))
        .await;
    }
    h.run(step(format!("/api/v1/namespaces/{NS2}"))).await;
}
