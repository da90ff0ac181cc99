//! The bootstrap RBAC policy a fresh kube-apiserver creates, as far as it concerns clients:
//! `cluster-admin` for `system:masters`; the user-facing `admin`, `edit` and `view` roles
//! (aggregated from `system:aggregate-to-*` and from each other by the aggregation controller,
//! `controllers::aggregation`); discovery, self-reviews and the public health and version
//! endpoints for every authenticated user; health and version (and `/.well-known`) for
//! anonymous ones; `system:auth-delegator` and the service-account issuer discovery.
//!
//! The roles of kube-controller-manager's controllers, kubelets, the scheduler and the other
//! system components are left out: none of them runs here.
//!
//! Like kube-apiserver (which marks these objects `rbac.authorization.kubernetes.io/autoupdate`),
//! the dev cluster puts back at start what is missing from them: a deleted role or binding, a
//! rule or a subject taken out. What was added to them stays.

use serde_json::{Value, json};

use super::rbac::{GROUP, PolicyRule};

const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";
const BOOTSTRAPPING: &str = "kubernetes.io/bootstrapping";

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({ "verbs": verbs, "apiGroups": groups, "resources": resources })
}

fn urls(verbs: &[&str], urls: &[&str]) -> Value {
    json!({ "verbs": verbs, "nonResourceURLs": urls })
}

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// One bootstrap ClusterRole: name, extra labels, rules, and the aggregation labels it
/// collects (for `admin`, `edit`, `view`).
struct Role {
    name: &'static str,
    labels: &'static [(&'static str, &'static str)],
    rules: Vec<Value>,
    aggregates: Option<&'static str>,
}

fn roles() -> Vec<Role> {
    let agg = |n| Some(n);
    vec![
        Role {
            name: "cluster-admin",
            labels: &[],
            rules: vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
            aggregates: None,
        },
        Role {
            name: "admin",
            labels: &[],
            rules: vec![],
            aggregates: agg("rbac.authorization.k8s.io/aggregate-to-admin"),
        },
        Role {
            name: "edit",
            labels: &[("rbac.authorization.k8s.io/aggregate-to-admin", "true")],
            rules: vec![],
            aggregates: agg("rbac.authorization.k8s.io/aggregate-to-edit"),
        },
        Role {
            name: "view",
            labels: &[("rbac.authorization.k8s.io/aggregate-to-edit", "true")],
            rules: vec![],
            aggregates: agg("rbac.authorization.k8s.io/aggregate-to-view"),
        },
        Role {
            name: "system:aggregate-to-admin",
            labels: &[("rbac.authorization.k8s.io/aggregate-to-admin", "true")],
            rules: vec![
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                ),
                rule(ALL_VERBS, &[GROUP], &["rolebindings", "roles"]),
            ],
            aggregates: None,
        },
        Role {
            name: "system:aggregate-to-edit",
            labels: &[("rbac.authorization.k8s.io/aggregate-to-edit", "true")],
            rules: vec![
                rule(
                    READ,
                    &[""],
                    &[
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                        "secrets",
                        "services/proxy",
                    ],
                ),
                rule(&["impersonate"], &[""], &["serviceaccounts"]),
                rule(
                    WRITE,
                    &[""],
                    &[
                        "pods",
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                    ],
                ),
                rule(&["create"], &[""], &["pods/eviction"]),
                rule(
                    WRITE,
                    &[""],
                    &[
                        "configmaps",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "secrets",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                    ],
                ),
                rule(&["create"], &[""], &["serviceaccounts/token"]),
                rule(WRITE, &["", "events.k8s.io"], &["events"]),
                rule(
                    WRITE,
                    &["apps"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/scale",
                        "statefulsets",
                        "statefulsets/scale",
                    ],
                ),
                rule(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
                rule(WRITE, &["batch"], &["cronjobs", "jobs"]),
                rule(
                    WRITE,
                    &["extensions"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "ingresses",
                        "networkpolicies",
                        "replicasets",
                        "replicasets/scale",
                        "replicationcontrollers/scale",
                    ],
                ),
                rule(WRITE, &["policy"], &["poddisruptionbudgets"]),
                rule(
                    WRITE,
                    &["networking.k8s.io"],
                    &["ingresses", "networkpolicies"],
                ),
                rule(ALL_VERBS, &["coordination.k8s.io"], &["leases"]),
                rule(
                    WRITE,
                    &["resource.k8s.io"],
                    &["resourceclaims", "resourceclaimtemplates"],
                ),
            ],
            aggregates: None,
        },
        Role {
            name: "system:aggregate-to-view",
            labels: &[("rbac.authorization.k8s.io/aggregate-to-view", "true")],
            rules: vec![
                rule(
                    READ,
                    &[""],
                    &[
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                    ],
                ),
                rule(
                    READ,
                    &[""],
                    &[
                        "bindings",
                        "limitranges",
                        "namespaces/status",
                        "pods/log",
                        "pods/status",
                        "replicationcontrollers/status",
                        "resourcequotas",
                        "resourcequotas/status",
                    ],
                ),
                rule(READ, &[""], &["namespaces"]),
                rule(READ, &["", "events.k8s.io"], &["events"]),
                rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
                rule(
                    READ,
                    &["apps"],
                    &[
                        "controllerrevisions",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "statefulsets",
                        "statefulsets/scale",
                        "statefulsets/status",
                    ],
                ),
                rule(
                    READ,
                    &["autoscaling"],
                    &[
                        "horizontalpodautoscalers",
                        "horizontalpodautoscalers/status",
                    ],
                ),
                rule(
                    READ,
                    &["batch"],
                    &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
                ),
                rule(
                    READ,
                    &["extensions"],
                    &[
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "ingresses",
                        "ingresses/status",
                        "networkpolicies",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "replicationcontrollers/scale",
                    ],
                ),
                rule(
                    READ,
                    &["policy"],
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"],
                ),
                rule(
                    READ,
                    &["networking.k8s.io"],
                    &["ingresses", "ingresses/status", "networkpolicies"],
                ),
                rule(
                    READ,
                    &["resource.k8s.io"],
                    &[
                        "resourceclaims",
                        "resourceclaims/status",
                        "resourceclaimtemplates",
                    ],
                ),
            ],
            aggregates: None,
        },
        Role {
            name: "system:discovery",
            labels: &[],
            rules: vec![urls(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
            aggregates: None,
        },
        Role {
            name: "system:basic-user",
            labels: &[],
            rules: vec![
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(
                    &["create"],
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                ),
            ],
            aggregates: None,
        },
        Role {
            name: "system:public-info-viewer",
            labels: &[],
            rules: vec![urls(
                &["get"],
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
            aggregates: None,
        },
        Role {
            name: "system:openshift:public-info-viewer",
            labels: &[],
            rules: vec![urls(&["get"], &["/.well-known", "/.well-known/*"])],
            aggregates: None,
        },
        Role {
            name: "system:service-account-issuer-discovery",
            labels: &[],
            rules: vec![urls(
                &["get"],
                &[
                    "/.well-known/openid-configuration",
                    "/.well-known/openid-configuration/",
                    "/openid/v1/jwks",
                    "/openid/v1/jwks/",
                ],
            )],
            aggregates: None,
        },
        Role {
            name: "system:auth-delegator",
            labels: &[],
            rules: vec![
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
            ],
            aggregates: None,
        },
    ]
}

/// Bootstrap ClusterRoleBindings: name (= the ClusterRole's) and the groups bound.
const BINDINGS: &[(&str, &[&str])] = &[
    ("cluster-admin", &["system:masters"]),
    ("system:basic-user", &["system:authenticated"]),
    ("system:discovery", &["system:authenticated"]),
    (
        "system:public-info-viewer",
        &["system:authenticated", "system:unauthenticated"],
    ),
    (
        "system:openshift:public-info-viewer",
        &["system:authenticated", "system:unauthenticated"],
    ),
    (
        "system:service-account-issuer-discovery",
        &["system:serviceaccounts"],
    ),
];

fn metadata(name: &str, extra_labels: &[(&str, &str)]) -> Value {
    let mut labels = serde_json::Map::new();
    labels.insert(BOOTSTRAPPING.into(), json!("rbac-defaults"));
    for (k, v) in extra_labels {
        labels.insert((*k).into(), json!(v));
    }
    json!({ "name": name, "labels": labels, "annotations": { AUTOUPDATE: "true" } })
}

/// The bootstrap ClusterRoles, as stored objects.
pub fn cluster_roles() -> Vec<Value> {
    roles()
        .into_iter()
        .map(|r| {
            let mut role = json!({
                "apiVersion": format!("{GROUP}/v1"),
                "kind": "ClusterRole",
                "metadata": metadata(r.name, r.labels),
            });
            if let Some(label) = r.aggregates {
                role["aggregationRule"] =
                    json!({ "clusterRoleSelectors": [ { "matchLabels": { label: "true" } } ] });
            } else {
                role["rules"] = Value::Array(r.rules);
            }
            role
        })
        .collect()
}

/// The bootstrap ClusterRoleBindings, as stored objects.
pub fn cluster_role_bindings() -> Vec<Value> {
    BINDINGS
        .iter()
        .map(|(name, groups)| {
            let subjects: Vec<Value> = groups
                .iter()
                .map(|g| json!({ "apiGroup": GROUP, "kind": "Group", "name": g }))
                .collect();
            json!({
                "apiVersion": format!("{GROUP}/v1"),
                "kind": "ClusterRoleBinding",
                "metadata": metadata(name, &[]),
                "roleRef": { "apiGroup": GROUP, "kind": "ClusterRole", "name": name },
                "subjects": subjects,
            })
        })
        .collect()
}

/// What a stored bootstrap object lacks of its bootstrap form (`None`: nothing, or it is not
/// marked for automatic updates): the object with the missing rules or subjects added.
pub fn reconcile(stored: &Value, wanted: &Value) -> Option<Value> {
    let autoupdate = stored
        .pointer(&format!(
            "/metadata/annotations/{}",
            AUTOUPDATE.replace('/', "~1")
        ))
        .and_then(Value::as_str)
        != Some("false");
    if !autoupdate {
        return None;
    }
    let mut out = stored.clone();
    let mut changed = false;
    for key in ["rules", "subjects"] {
        let Some(want) = wanted.get(key).and_then(Value::as_array) else {
            continue;
        };
        // Aggregated roles get their rules from the aggregation controller.
        if key == "rules" && stored.get("aggregationRule").is_some() {
            continue;
        }
        let have = out
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut merged = have.clone();
        for w in want {
            let present = if key == "rules" {
                let w = PolicyRule::from_json(w);
                have.iter().any(|h| PolicyRule::from_json(h) == w)
            } else {
                have.iter()
                    .any(|h| h.get("kind") == w.get("kind") && h.get("name") == w.get("name"))
            };
            if !present {
                merged.push(w.clone());
                changed = true;
            }
        }
        out[key] = Value::Array(merged);
    }
    if wanted.get("aggregationRule").is_some() && stored.get("aggregationRule").is_none() {
        out["aggregationRule"] = wanted["aggregationRule"].clone();
        changed = true;
    }
    changed.then_some(out)
}
