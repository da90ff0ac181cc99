//! Identity of a cluster object and the release metadata berth stamps on what it applies.

use serde_json::Value;

/// Label Helm sets on release objects.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "Helm");
pub const RELEASE_NAME_ANNOTATION: &str = "meta.helm.sh/release-name";
pub const RELEASE_NAMESPACE_ANNOTATION: &str = "meta.helm.sh/release-namespace";
/// An existing object that no release owns is taken over only when this annotation names the
/// release, `<release namespace>/<release name>` (docs/decisions/object-ownership.md).
pub const ADOPT_ANNOTATION: &str = "berth.io/adopt";
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

/// Whether release `release` of `release_ns` may write over `live` (the object `key` as it is
/// on the cluster): when its Helm annotations name this release; or, with none, when its
/// `berth.io/adopt` annotation does. Else the reason, naming the object and its owner (Helm's
/// "invalid ownership metadata"). CRDs are shared by the charts that ship them and are not
/// checked; nor is the release's own namespace, which berth makes before the install.
pub fn ownership(
    key: &ObjectKey,
    live: &Value,
    release: &str,
    release_ns: &str,
) -> Result<(), String> {
    if key.kind == "CustomResourceDefinition" || (key.kind == "Namespace" && key.name == release_ns)
    {
        return Ok(());
    }
    let annotation = |k: &str| {
        live.pointer("/metadata/annotations")
            .and_then(|a| a.get(k))
            .and_then(Value::as_str)
    };
    let this = format!("{release_ns}/{release}");
    match (
        annotation(RELEASE_NAMESPACE_ANNOTATION),
        annotation(RELEASE_NAME_ANNOTATION),
    ) {
        (Some(ns), Some(name)) if ns == release_ns && name == release => Ok(()),
        (ns, Some(name)) => Err(format!(
            "{key} belongs to release {}/{name}, not to {this} (remove it from one of the two \
             charts, or move it: see `berth.io/adopt`)",
            ns.unwrap_or("?")
        )),
        (_, None) if annotation(ADOPT_ANNOTATION).map(str::trim) == Some(this.as_str()) => Ok(()),
        (_, None) => Err(format!(
            "{key} exists and belongs to no release; berth takes it over only when it is \
             annotated {ADOPT_ANNOTATION}: \"{this}\""
        )),
    }
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

    /// Issue 31.2: one owner per object.
    #[test]
    fn an_object_is_its_releases_or_adopted_by_annotation() {
        let key = ObjectKey {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: "shared".into(),
        };
        let owned = |ns: &str, name: &str| {
            json!({"metadata": {"annotations": {
                "meta.helm.sh/release-name": name, "meta.helm.sh/release-namespace": ns}}})
        };
        assert_eq!(ownership(&key, &owned("ns", "a"), "a", "ns"), Ok(()));
        let taken = ownership(&key, &owned("ns", "b"), "a", "ns").unwrap_err();
        assert!(
            taken.contains("v1/ConfigMap ns/shared belongs to release ns/b, not to ns/a"),
            "{taken}"
        );
        let bare = json!({"metadata": {"name": "shared"}});
        let unowned = ownership(&key, &bare, "a", "ns").unwrap_err();
        assert!(
            unowned.contains("belongs to no release")
                && unowned.contains("berth.io/adopt: \"ns/a\""),
            "{unowned}"
        );
        let adopted = json!({"metadata": {"annotations": {"berth.io/adopt": "ns/a"}}});
        assert_eq!(ownership(&key, &adopted, "a", "ns"), Ok(()));
        assert!(
            ownership(&key, &adopted, "b", "ns").is_err(),
            "it names one release"
        );
        // Another release's object is not taken by an adopt annotation.
        let mut both = owned("ns", "b");
        both["metadata"]["annotations"]["berth.io/adopt"] = json!("ns/a");
        assert!(ownership(&key, &both, "a", "ns").is_err());
        let ns = ObjectKey {
            kind: "Namespace".into(),
            namespace: String::new(),
            name: "ns".into(),
            ..key.clone()
        };
        assert_eq!(
            ownership(&ns, &bare, "a", "ns"),
            Ok(()),
            "the namespace berth made"
        );
    }

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
