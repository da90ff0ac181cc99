//! The principal objects of a package, as release applies them, and how they are compared
//! with what is live.

use berth_clients::scope::PackageScope;
use berth_proto::lifecycle::PolicyRule;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use super::Rights;

/// The ClusterRole every App's RoleBinding names: everything, which the binding confines to
/// the App's namespace (cluster-scoped resources and non-resource URLs cannot be granted by a
/// RoleBinding).
pub const APP_ROLE: &str = "berth-app";
/// The ClusterRole a Module without `rbac:` is bound to (the documented default).
pub const CLUSTER_ADMIN: &str = "cluster-admin";
const RBAC_API: &str = "rbac.authorization.k8s.io/v1";
/// Says which package a principal object belongs to (an annotation: keys are too long for
/// label values).
pub const PACKAGE_ANNOTATION: &str = "berth.io/package";
/// `app` or `module`: selects principal objects (`kubectl get sa -l berth.io/principal`).
pub const PRINCIPAL_LABEL: &str = "berth.io/principal";

fn metadata(name: &str, namespace: Option<&str>, scope: Option<&PackageScope>) -> Value {
    let mut labels = json!({"app.kubernetes.io/managed-by": "berth"});
    let mut meta = json!({"name": name});
    if let Some(ns) = namespace {
        meta["namespace"] = json!(ns);
    }
    if let Some(scope) = scope {
        let (kind, key) = match scope {
            PackageScope::App { name, namespace } => ("app", format!("{namespace}.{name}")),
            PackageScope::Module { name } => ("module", name.clone()),
        };
        labels[PRINCIPAL_LABEL] = json!(kind);
        meta["annotations"] = json!({ PACKAGE_ANNOTATION: key });
    }
    meta["labels"] = labels;
    meta
}

/// The package's ServiceAccount. Its token is for berth's hooks: pods do not mount it unless
/// they ask.
pub fn service_account(scope: &PackageScope) -> Value {
    let sa = scope.service_account();
    json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(&sa.name, Some(&sa.namespace), Some(scope)),
        "automountServiceAccountToken": false,
    })
}

/// `berth-app`: all verbs on all resources of all groups.
pub fn app_role() -> Value {
    json!({
        "apiVersion": RBAC_API,
        "kind": "ClusterRole",
        "metadata": metadata(APP_ROLE, None, None),
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}],
    })
}

/// An App's RoleBinding of its ServiceAccount to `berth-app`, in its namespace.
pub fn app_binding(scope: &PackageScope) -> Value {
    let sa = scope.service_account();
    json!({
        "apiVersion": RBAC_API,
        "kind": "RoleBinding",
        "metadata": metadata(&sa.name, Some(&sa.namespace), Some(scope)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": APP_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": sa.name, "namespace": sa.namespace}],
    })
}

/// A Module's own ClusterRole, of its declared rules.
pub fn module_role(module: &str, rules: &[Value]) -> Value {
    let scope = PackageScope::Module {
        name: module.to_owned(),
    };
    let name = scope.service_account().name;
    json!({
        "apiVersion": RBAC_API,
        "kind": "ClusterRole",
        "metadata": metadata(&name, None, Some(&scope)),
        "rules": rules,
    })
}

/// A Module's ClusterRoleBinding of its ServiceAccount to `role`.
pub fn module_binding(module: &str, role: &str) -> Value {
    let scope = PackageScope::Module {
        name: module.to_owned(),
    };
    let sa = scope.service_account();
    json!({
        "apiVersion": RBAC_API,
        "kind": "ClusterRoleBinding",
        "metadata": metadata(&sa.name, None, Some(&scope)),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": sa.name, "namespace": sa.namespace}],
    })
}

/// A declared rule as the API server stores it (empty lists left out).
pub fn policy_rule(r: &PolicyRule) -> Value {
    let mut rule = serde_json::Map::new();
    for (field, list) in [
        ("apiGroups", &r.api_groups),
        ("resources", &r.resources),
        ("verbs", &r.verbs),
        ("resourceNames", &r.resource_names),
        ("nonResourceURLs", &r.non_resource_urls),
    ] {
        if !list.is_empty() {
            rule.insert(field.into(), json!(list));
        }
    }
    Value::Object(rule)
}

/// The API resource of a principal object's kind.
pub fn resource(object: &Value) -> Option<ApiResource> {
    let (group, plural) = match object.get("kind")?.as_str()? {
        "ServiceAccount" => ("", "serviceaccounts"),
        "RoleBinding" => ("rbac.authorization.k8s.io", "rolebindings"),
        "ClusterRole" => ("rbac.authorization.k8s.io", "clusterroles"),
        "ClusterRoleBinding" => ("rbac.authorization.k8s.io", "clusterrolebindings"),
        _ => return None,
    };
    let api_version = object.get("apiVersion")?.as_str()?.to_owned();
    Some(ApiResource {
        group: group.into(),
        version: api_version.rsplit('/').next().unwrap_or("v1").into(),
        api_version,
        kind: object.get("kind")?.as_str()?.to_owned(),
        plural: plural.into(),
    })
}

/// Whether `live` already is `desired`: its labels and annotations include the desired ones,
/// and every other field desired is equal (a rule's lists the API server left out count as
/// empty).
pub fn matches(desired: &Value, live: &Value) -> bool {
    let includes = |field: &str| {
        let want = desired.pointer(&format!("/metadata/{field}"));
        let have = live.pointer(&format!("/metadata/{field}"));
        want.and_then(Value::as_object).is_none_or(|want| {
            want.iter()
                .all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v))
        })
    };
    if !includes("labels") || !includes("annotations") {
        return false;
    }
    let Some(fields) = desired.as_object() else {
        return false;
    };
    fields
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
        .all(|(k, want)| match k.as_str() {
            "rules" => normalized_rules(Some(want)) == normalized_rules(live.get("rules")),
            _ => live.get(k) == Some(want),
        })
}

fn normalized_rules(rules: Option<&Value>) -> Vec<Value> {
    rules
        .and_then(Value::as_array)
        .map(|rules| {
            rules
                .iter()
                .map(|r| {
                    let mut r = r.as_object().cloned().unwrap_or_default();
                    r.retain(|_, v| v.as_array().is_none_or(|a| !a.is_empty()));
                    Value::Object(r)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// What to ask the authorizer to see that `rights` took effect: `("resourceAttributes" or
/// "nonResourceAttributes", attributes)` of something the first rule grants, literally (a
/// rule's `*` matches a request's `*`). `None` when nothing is granted.
pub fn probe(scope: &PackageScope, rights: &Rights) -> Option<(&'static str, Value)> {
    let all = json!({"verb": "*", "group": "*", "resource": "*"});
    match rights {
        Rights::Unknown => None,
        Rights::Namespace => {
            let mut a = all;
            a["namespace"] = json!(scope.app_namespace().unwrap_or_default());
            Some(("resourceAttributes", a))
        }
        Rights::ClusterAdmin => Some(("resourceAttributes", all)),
        Rights::Rules(rules) => {
            let rule = rules.first()?;
            let first = |field: &str| {
                rule.get(field)
                    .and_then(Value::as_array)
                    .and_then(|a| a.first())
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            };
            let verb = first("verbs")?;
            if let Some(path) = first("nonResourceURLs") {
                return Some(("nonResourceAttributes", json!({"verb": verb, "path": path})));
            }
            let resource = first("resources")?;
            let (resource, subresource) = match resource.split_once('/') {
                Some((r, s)) => (r.to_owned(), s.to_owned()),
                None => (resource, String::new()),
            };
            let mut a = json!({
                "verb": verb,
                "group": first("apiGroups")?,
                "resource": resource,
            });
            if !subresource.is_empty() {
                a["subresource"] = json!(subresource);
            }
            if let Some(name) = first("resourceNames") {
                a["name"] = json!(name);
            }
            Some(("resourceAttributes", a))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app() -> PackageScope {
        PackageScope::App {
            name: "web".into(),
            namespace: "team".into(),
        }
    }

    #[test]
    fn an_apps_binding_confines_berth_app_to_its_namespace() {
        let b = app_binding(&app());
        assert_eq!(b["kind"], "RoleBinding");
        assert_eq!(b["metadata"]["namespace"], "team");
        assert_eq!(b["metadata"]["name"], "berth-app-web");
        assert_eq!(b["roleRef"]["name"], APP_ROLE);
        assert_eq!(b["subjects"][0]["name"], "berth-app-web");
        assert_eq!(b["metadata"]["annotations"][PACKAGE_ANNOTATION], "team.web");
        assert_eq!(
            b["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            "berth"
        );
    }

    #[test]
    fn live_objects_with_more_than_berth_wrote_still_match() {
        let sa = service_account(&app());
        let mut live = sa.clone();
        live["metadata"]["labels"]["other"] = json!("x");
        live["metadata"]["uid"] = json!("1");
        live["secrets"] = json!([]);
        assert!(matches(&sa, &live));
        live["automountServiceAccountToken"] = json!(true);
        assert!(!matches(&sa, &live));
        let mut unlabelled = sa.clone();
        unlabelled["metadata"]["labels"] = json!({});
        assert!(!matches(&sa, &unlabelled));

        let rule = json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]});
        let role = module_role("m", std::slice::from_ref(&rule));
        let mut live = role.clone();
        live["rules"][0]["resourceNames"] = json!([]);
        assert!(matches(&role, &live), "an empty list is no list");
        live["rules"][0]["verbs"] = json!(["get", "list"]);
        assert!(!matches(&role, &live));
    }

    #[test]
    fn the_probe_asks_for_what_the_first_rule_grants() {
        let module = PackageScope::Module { name: "m".into() };
        let rules = Rights::Rules(vec![json!({
            "apiGroups": ["apps"], "resources": ["deployments/scale"], "verbs": ["update"],
            "resourceNames": ["one"]
        })]);
        let (kind, a) = probe(&module, &rules).unwrap();
        assert_eq!(kind, "resourceAttributes");
        assert_eq!(
            a,
            json!({"verb": "update", "group": "apps", "resource": "deployments",
                   "subresource": "scale", "name": "one"})
        );
        let urls = Rights::Rules(vec![
            json!({"nonResourceURLs": ["/healthz"], "verbs": ["get"]}),
        ]);
        assert_eq!(
            probe(&module, &urls).unwrap(),
            (
                "nonResourceAttributes",
                json!({"verb": "get", "path": "/healthz"})
            )
        );
        assert_eq!(probe(&module, &Rights::Rules(vec![])), None);
        assert_eq!(
            probe(&app(), &Rights::Namespace).unwrap().1["namespace"],
            "team"
        );
    }
}
