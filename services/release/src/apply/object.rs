//! Identity of a cluster object and the release metadata berth stamps on what it applies.

use serde_json::Value;

/// Label Helm sets on release objects.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "Helm");
pub const RELEASE_NAME_ANNOTATION: &str = "meta.helm.sh/release-name";
pub const RELEASE_NAMESPACE_ANNOTATION: &str = "meta.helm.sh/release-namespace";
/// Objects annotated with this (value `keep`) survive prune and uninstall.
pub const RESOURCE_POLICY_ANNOTATION: &str = "helm.sh/resource-policy";

/// Which object: `namespace` is empty for cluster-scoped kinds.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{} {}", self.api_version, self.kind, self.name)
        } else {
            write!(
                f,
                "{}/{} {}/{}",
                self.api_version, self.kind, self.namespace, self.name
            )
        }
    }
}

pub fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// True for objects annotated `helm.sh/resource-policy: keep`.
pub fn is_kept(object: &Value) -> bool {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(RESOURCE_POLICY_ANNOTATION))
        .and_then(Value::as_str)
        .is_some_and(|p| p.trim().eq_ignore_ascii_case("keep"))
}

/// Adds the labels and annotations that let Helm adopt the object, and the namespace.
pub fn stamp(object: &mut Value, release: &str, release_namespace: &str, namespace: Option<&str>) {
    let Some(obj) = object.as_object_mut() else {
        return;
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    match namespace {
        Some(ns) => {
            meta.insert("namespace".into(), Value::String(ns.to_string()));
        }
        None => {
            meta.remove("namespace");
        }
    }
    insert_into(meta, "labels", MANAGED_BY.0, MANAGED_BY.1);
    insert_into(meta, "annotations", RELEASE_NAME_ANNOTATION, release);
    insert_into(
        meta,
        "annotations",
        RELEASE_NAMESPACE_ANNOTATION,
        release_namespace,
    );
}

fn insert_into(meta: &mut serde_json::Map<String, Value>, field: &str, key: &str, value: &str) {
    let map = meta
        .entry(field)
        .or_insert_with(|| Value::Object(Default::default()));
    if !map.is_object() {
        *map = Value::Object(Default::default());
    }
    if let Some(m) = map.as_object_mut() {
        m.insert(key.to_string(), Value::String(value.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stamp_sets_helm_ownership_and_namespace() {
        let mut o = json!({"kind": "ConfigMap", "metadata": {"name": "a", "labels": {"x": "1"}}});
        stamp(&mut o, "rel", "ns", Some("ns"));
        assert_eq!(
            o,
            json!({"kind": "ConfigMap", "metadata": {
                "name": "a", "namespace": "ns",
                "labels": {"x": "1", "app.kubernetes.io/managed-by": "Helm"},
                "annotations": {"meta.helm.sh/release-name": "rel", "meta.helm.sh/release-namespace": "ns"}
            }})
        );
        assert!(!is_kept(&o));
        assert!(is_kept(
            &json!({"metadata": {"annotations": {"helm.sh/resource-policy": "keep"}}})
        ));
    }
}
