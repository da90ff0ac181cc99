//! How a target receives a pipeline's output (Δ-controller's write rules).
//!
//! - **Updater** writes whole objects: every top-level key but `metadata` is the output's (a
//!   key the output lacks is removed), labels and annotations are merged over the object's
//!   (an Updater never removes them), and the rest of the object's metadata is kept. A delete
//!   deletes the object.
//! - **Patcher** merge-patches (RFC 7386) objects that exist and never creates or deletes
//!   one; a delete sends the output with every leaf set to null, removing exactly the fields
//!   it had set.

use serde_json::{Map, Value};

/// The object an Updater makes of `output` over `existing`.
pub fn updater_object(existing: Option<&Value>, output: &Value) -> Value {
    let mut out = Map::new();
    let empty = Map::new();
    let out_meta = output
        .get("metadata")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let mut meta = existing
        .and_then(|e| e.get("metadata"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (k, v) in out_meta {
        match (k.as_str(), meta.get_mut(k), v) {
            ("labels" | "annotations", Some(Value::Object(have)), Value::Object(new)) => {
                for (lk, lv) in new {
                    have.insert(lk.clone(), lv.clone());
                }
            }
            _ => {
                meta.insert(k.clone(), v.clone());
            }
        }
    }
    for (k, v) in output.as_object().unwrap_or(&empty) {
        if k != "metadata" {
            out.insert(k.clone(), v.clone());
        }
    }
    out.insert("metadata".into(), Value::Object(meta));
    Value::Object(out)
}

/// Applies an RFC 7386 merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(map) = target else {
        return;
    };
    for (k, v) in patch {
        if v.is_null() {
            map.remove(k);
        } else {
            merge_patch(map.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// The patch that takes back what `output` set: every leaf null, the object's identity kept.
pub fn removal_patch(output: &Value) -> Value {
    fn nulls(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (k.clone(), nulls(v))).collect())
            }
            _ => Value::Null,
        }
    }
    let mut patch = nulls(output);
    for key in ["apiVersion", "kind"] {
        if let Some(v) = output.get(key) {
            patch[key] = v.clone();
        }
    }
    for key in ["name", "namespace"] {
        if let Some(v) = output.pointer(&format!("/metadata/{key}")) {
            patch["metadata"][key] = v.clone();
        }
    }
    patch
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn updater_replaces_content_and_merges_labels() {
        let existing = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "uid": "u1", "labels": {"keep": "1", "x": "old"}},
            "data": {"old": "1"}, "extra": true});
        let output = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"x": "new"}}, "data": {"new": "2"}});
        assert_eq!(
            updater_object(Some(&existing), &output),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "uid": "u1", "labels": {"keep": "1", "x": "new"}},
                "data": {"new": "2"}})
        );
    }

    #[test]
    fn patcher_merges_and_takes_back_its_fields() {
        let mut obj =
            json!({"metadata": {"name": "s", "annotations": {"a": "1"}}, "spec": {"x": 1}});
        let out = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "annotations": {"b": "2"}}});
        merge_patch(&mut obj, &out);
        assert_eq!(obj["metadata"]["annotations"], json!({"a": "1", "b": "2"}));
        merge_patch(&mut obj, &removal_patch(&out));
        assert_eq!(obj["metadata"]["annotations"], json!({"a": "1"}));
        assert_eq!(obj["metadata"]["name"], json!("s"));
        assert_eq!(obj["spec"], json!({"x": 1}));
    }
}
