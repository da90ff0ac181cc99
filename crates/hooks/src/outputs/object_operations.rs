//! `KUBERNETES_PATCH_PATH`: Kubernetes object operations a hook requests.
//!
//! Parsed strictly, like shell-operator: each document must match a fixed
//! schema, unknown keys are rejected, and the first invalid document fails
//! the whole file (no partial batch is executed).

use serde::Deserialize;
use serde_json::Value;

/// The object an operation other than a create addresses.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectRef {
    /// `None`: the API server's preferred version for `kind`.
    pub api_version: Option<String>,
    pub kind: String,
    /// `None`: cluster-scoped.
    pub namespace: Option<String>,
    pub name: String,
    /// e.g. `status`.
    pub subresource: Option<String>,
}

/// One requested operation. The executor (release/lifecycle) performs them
/// in order as one batch after the hook exited successfully.
#[derive(Debug, Clone, PartialEq)]
pub enum ObjectOperation {
    /// Fails if the object exists.
    Create {
        object: Value,
        subresource: Option<String>,
    },
    /// Create, or replace the existing object.
    CreateOrUpdate {
        object: Value,
        subresource: Option<String>,
    },
    /// Create unless an object with that namespace/name exists.
    CreateIfNotExists {
        object: Value,
        subresource: Option<String>,
    },
    /// Foreground deletion; a missing object counts as deleted.
    Delete { target: ObjectRef },
    /// Background propagation.
    DeleteInBackground { target: ObjectRef },
    /// Orphans the dependents.
    DeleteNonCascading { target: ObjectRef },
    /// JSON merge patch (RFC 7386).
    MergePatch {
        target: ObjectRef,
        merge_patch: Value,
        ignore_missing_object: bool,
        ignore_hook_error: bool,
    },
    /// RFC 6902 patch.
    JsonPatch {
        target: ObjectRef,
        json_patch: json_patch::Patch,
        ignore_missing_object: bool,
        ignore_hook_error: bool,
    },
    /// Get, apply the jq program to the object, update.
    JqPatch {
        target: ObjectRef,
        jq_filter: String,
        ignore_missing_object: bool,
        ignore_hook_error: bool,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawOperation {
    operation: String,
    api_version: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
    object: Option<Value>,
    jq_filter: Option<String>,
    merge_patch: Option<Value>,
    json_patch: Option<Value>,
    #[serde(default)]
    ignore_missing_object: bool,
    #[serde(default)]
    ignore_hook_error: bool,
}

/// Parses the file: a stream of JSON documents, else a stream of YAML
/// documents separated by `---`. Empty documents are skipped.
pub fn parse_object_operations(text: &str) -> Result<Vec<ObjectOperation>, String> {
    documents(text)?
        .into_iter()
        .enumerate()
        .filter(|(_, doc)| !doc.is_null())
        .map(|(i, doc)| operation(doc).map_err(|e| format!("document {i}: {e}")))
        .collect()
}

fn documents(text: &str) -> Result<Vec<Value>, String> {
    let json: Result<Vec<Value>, _> = serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .collect();
    match json {
        Ok(docs) => Ok(docs),
        Err(json_error) => serde_saphyr::from_multiple::<Value>(text).map_err(|yaml_error| {
            format!("neither a JSON stream ({json_error}) nor a YAML stream ({yaml_error})")
        }),
    }
}

fn operation(doc: Value) -> Result<ObjectOperation, String> {
    let raw: RawOperation = serde_json::from_value(doc).map_err(|e| e.to_string())?;
    // shell-operator compares operation names case-insensitively.
    let op = raw.operation.to_ascii_lowercase();
    Ok(match op.as_str() {
        "create" => ObjectOperation::Create {
            object: object(raw.object)?,
            subresource: raw.subresource,
        },
        "createorupdate" => ObjectOperation::CreateOrUpdate {
            object: object(raw.object)?,
            subresource: raw.subresource,
        },
        "createifnotexists" => ObjectOperation::CreateIfNotExists {
            object: object(raw.object)?,
            subresource: raw.subresource,
        },
        "delete" => ObjectOperation::Delete {
            target: target(&raw)?,
        },
        "deleteinbackground" => ObjectOperation::DeleteInBackground {
            target: target(&raw)?,
        },
        "deletenoncascading" => ObjectOperation::DeleteNonCascading {
            target: target(&raw)?,
        },
        "mergepatch" => ObjectOperation::MergePatch {
            target: target(&raw)?,
            merge_patch: merge_patch(raw.merge_patch.clone())?,
            ignore_missing_object: raw.ignore_missing_object,
            ignore_hook_error: raw.ignore_hook_error,
        },
        "jsonpatch" => ObjectOperation::JsonPatch {
            target: target(&raw)?,
            json_patch: json_patch(raw.json_patch.clone())?,
            ignore_missing_object: raw.ignore_missing_object,
            ignore_hook_error: raw.ignore_hook_error,
        },
        "jqpatch" => ObjectOperation::JqPatch {
            target: target(&raw)?,
            jq_filter: raw
                .jq_filter
                .clone()
                .filter(|f| !f.is_empty())
                .ok_or("JQPatch requires `jqFilter`")?,
            ignore_missing_object: raw.ignore_missing_object,
            ignore_hook_error: raw.ignore_hook_error,
        },
        _ => {
            return Err(format!(
                "unknown operation {:?}; expected one of Create, CreateOrUpdate, CreateIfNotExists, Delete, \
                 DeleteInBackground, DeleteNonCascading, MergePatch, JSONPatch, JQPatch",
                raw.operation
            ));
        }
    })
}

fn target(raw: &RawOperation) -> Result<ObjectRef, String> {
    let non_empty = |v: &Option<String>| v.clone().filter(|s| !s.is_empty());
    Ok(ObjectRef {
        api_version: non_empty(&raw.api_version),
        kind: non_empty(&raw.kind).ok_or_else(|| format!("{} requires `kind`", raw.operation))?,
        namespace: non_empty(&raw.namespace),
        name: non_empty(&raw.name).ok_or_else(|| format!("{} requires `name`", raw.operation))?,
        subresource: non_empty(&raw.subresource),
    })
}

/// `object` may be a mapping or a string holding JSON or YAML.
fn object(value: Option<Value>) -> Result<Value, String> {
    let object = embedded(value.ok_or("`object` is required")?, "object")?;
    let has = |key: &str| {
        object
            .get(key)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty())
    };
    if !object.is_object() {
        return Err("`object` must be a mapping".to_owned());
    }
    if !has("apiVersion") || !has("kind") {
        return Err("`object` must have `apiVersion` and `kind`".to_owned());
    }
    Ok(object)
}

fn merge_patch(value: Option<Value>) -> Result<Value, String> {
    let patch = embedded(
        value.ok_or("MergePatch requires `mergePatch`")?,
        "mergePatch",
    )?;
    if !patch.is_object() {
        return Err("`mergePatch` must be a mapping".to_owned());
    }
    Ok(patch)
}

fn json_patch(value: Option<Value>) -> Result<json_patch::Patch, String> {
    let patch = embedded(value.ok_or("JSONPatch requires `jsonPatch`")?, "jsonPatch")?;
    serde_json::from_value(patch).map_err(|e| format!("`jsonPatch` is not an RFC 6902 patch: {e}"))
}

/// Decodes a field given either inline or as a string of JSON/YAML.
fn embedded(value: Value, field: &str) -> Result<Value, String> {
    match value {
        Value::String(text) => serde_json::from_str(&text)
            .or_else(|_| serde_saphyr::from_str::<Value>(&text))
            .map_err(|e| format!("`{field}` string is neither JSON nor YAML: {e}")),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_object_and_patch_forms() {
        let text = r#"{"operation":"CreateOrUpdate","object":"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\"}}"}
{"operation":"JSONPatch","kind":"Pod","name":"p","jsonPatch":"[{\"op\":\"remove\",\"path\":\"/x\"}]"}
{"operation":"MergePatch","kind":"Pod","name":"p","namespace":"ns","subresource":"status","mergePatch":"status:\n  ready: true\n","ignoreHookError":true}"#;
        let ops = parse_object_operations(text).expect("valid operations");
        assert_eq!(ops.len(), 3);
        assert!(
            matches!(&ops[0], ObjectOperation::CreateOrUpdate { object, .. } if object["kind"] == "ConfigMap")
        );
        assert!(
            matches!(&ops[1], ObjectOperation::JsonPatch { json_patch, .. } if json_patch.0.len() == 1)
        );
        match &ops[2] {
            ObjectOperation::MergePatch {
                target,
                merge_patch,
                ignore_hook_error,
                ..
            } => {
                assert_eq!(target.subresource.as_deref(), Some("status"));
                assert_eq!(merge_patch["status"]["ready"], true);
                assert!(ignore_hook_error);
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn missing_required_fields() {
        for (text, needle) in [
            (r#"{"operation":"Delete","kind":"Pod"}"#, "requires `name`"),
            (r#"{"operation":"Create"}"#, "`object` is required"),
            (
                r#"{"operation":"JQPatch","kind":"Pod","name":"x"}"#,
                "jqFilter",
            ),
            (
                r#"{"operation":"Explode","kind":"Pod","name":"x"}"#,
                "unknown operation",
            ),
        ] {
            let e = parse_object_operations(text).unwrap_err();
            assert!(e.contains(needle), "expected {needle:?} in {e}");
        }
    }
}
