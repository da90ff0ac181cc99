//! CustomResourceDefinitions: turning a stored CRD into servable resource types, and the
//! status a real apiextensions-apiserver would give it.

use serde_json::{Value, json};

use crate::resources::{GroupResource, ResourceType};
use crate::status::ApiError;

const CRD_GROUP: &str = "apiextensions.k8s.io";

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The resource types a CRD makes servable, one per served version, preferred first.
pub fn resource_types(crd: &Value) -> Result<Vec<ResourceType>, ApiError> {
    let name = str_at(crd, "/metadata/name").unwrap_or_default();
    let invalid =
        |msg: &str| ApiError::invalid(CRD_GROUP, "CustomResourceDefinition", name, msg.to_string());
    let group = str_at(crd, "/spec/group").ok_or_else(|| invalid("spec.group: Required value"))?;
    let plural = str_at(crd, "/spec/names/plural")
        .ok_or_else(|| invalid("spec.names.plural: Required value"))?;
    let kind = str_at(crd, "/spec/names/kind")
        .ok_or_else(|| invalid("spec.names.kind: Required value"))?;
    if name != format!("{plural}.{group}") {
        return Err(invalid(&format!(
            "metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
        )));
    }
    let scope = str_at(crd, "/spec/scope").unwrap_or("Namespaced");
    let strings = |pointer: &str| -> Vec<String> {
        crd.pointer(pointer)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| invalid("spec.versions: Required value"))?;
    let mut types: Vec<ResourceType> = versions
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(true))
        .filter_map(|v| {
            Some(ResourceType {
                group: group.to_string(),
                version: v.get("name")?.as_str()?.to_string(),
                kind: kind.to_string(),
                list_kind: str_at(crd, "/spec/names/listKind")
                    .map_or_else(|| format!("{kind}List"), String::from),
                plural: plural.to_string(),
                singular: str_at(crd, "/spec/names/singular")
                    .map_or_else(|| kind.to_lowercase(), String::from),
                short_names: strings("/spec/names/shortNames"),
                categories: strings("/spec/names/categories"),
                namespaced: scope == "Namespaced",
                has_status: v.pointer("/subresources/status").is_some(),
                tracks_generation: true,
                custom: true,
                create_only: false,
                printer_columns: v
                    .get("additionalPrinterColumns")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            })
        })
        .collect();
    types.sort_by_key(|t| std::cmp::Reverse(version_priority(&t.version)));
    Ok(types)
}

/// Kubernetes version ordering: GA before beta before alpha, higher numbers first
/// (`v2` > `v1` > `v1beta2` > `v1beta1` > `v1alpha1`), non-conforming names last.
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u32>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    let (stage, num) = if tail.is_empty() {
        (3, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n.parse().unwrap_or(0))
    } else {
        return (0, 0, 0);
    };
    (stage, major, num)
}

/// The status an accepted CRD has: names accepted and Established.
pub fn accepted_status(crd: &Value, now: &str) -> Value {
    let condition = |t: &str, reason: &str, message: &str| json!({ "type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message });
    let stored: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect()
        })
        .unwrap_or_default();
    json!({
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or_else(|| json!({})),
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "storedVersions": stored,
    })
}

/// Whether a resource type is the CRD type itself.
pub fn is_crd(rt: &ResourceType) -> bool {
    is_crd_gr(&rt.gr())
}

pub fn is_crd_gr(gr: &GroupResource) -> bool {
    gr.group == CRD_GROUP && gr.resource == "customresourcedefinitions"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_versions_become_types_preferred_first() {
        let crd = json!({
            "metadata": { "name": "widgets.example.com" },
            "spec": { "group": "example.com", "scope": "Cluster",
                "names": { "plural": "widgets", "kind": "Widget", "shortNames": ["wd"] },
                "versions": [
                    { "name": "v1beta1", "served": true, "storage": false },
                    { "name": "v1", "served": true, "storage": true, "subresources": { "status": {} } },
                    { "name": "v0", "served": false, "storage": false }
                ] }
        });
        let types = resource_types(&crd).expect("valid");
        let versions: Vec<&str> = types.iter().map(|t| t.version.as_str()).collect();
        assert_eq!(versions, vec!["v1", "v1beta1"]);
        assert!(!types[0].namespaced && types[0].has_status && !types[1].has_status);
        assert_eq!(types[0].short_names, vec!["wd".to_string()]);
    }

    #[test]
    fn misnamed_crd_is_invalid() {
        let crd = json!({ "metadata": { "name": "x" }, "spec": { "group": "g.io", "names": { "plural": "ws", "kind": "W" }, "versions": [ { "name": "v1" } ] } });
        assert_eq!(resource_types(&crd).expect_err("misnamed").code, 422);
    }
}
