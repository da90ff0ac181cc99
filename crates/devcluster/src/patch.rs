//! The three non-apply PATCH formats: JSON merge patch (RFC 7386), JSON patch
//! (RFC 6902) and strategic merge patch (built-in kinds only).
//!
//! Merge and JSON patch come from the `json-patch` crate. Strategic merge patch is written
//! here because no Rust crate implements it; we support what kubectl and helm send:
//! maps merged recursively, `null` deletes, lists with a merge key (see `merge_keys`)
//! merged item by item, `$patch: replace|delete`, `$deleteFromPrimitiveList/<field>`,
//! and the `$setElementOrder/`/`$retainKeys` directives are accepted and ignored.

use serde_json::Value;

use crate::fieldset::all_keyed;
use crate::merge_keys::merge_key;
use crate::status::ApiError;

const ACCEPTED: &str = "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json";

/// The PATCH body formats, by Content-Type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply,
}

impl PatchKind {
    pub fn from_content_type(content_type: &str) -> Result<PatchKind, ApiError> {
        let media = content_type.split(';').next().unwrap_or_default().trim();
        match media {
            "application/merge-patch+json" => Ok(PatchKind::Merge),
            "application/json-patch+json" => Ok(PatchKind::Json),
            "application/strategic-merge-patch+json" => Ok(PatchKind::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(PatchKind::Apply),
            other => Err(ApiError::unsupported_media_type(other, ACCEPTED)),
        }
    }
}

/// Applies a merge, JSON or strategic patch body to `target`.
pub fn apply_patch(kind: PatchKind, target: &Value, body: &[u8]) -> Result<Value, ApiError> {
    let mut out = target.clone();
    match kind {
        PatchKind::Merge => {
            let patch: Value = parse_json(body)?;
            json_patch::merge(&mut out, &patch);
        }
        PatchKind::Json => {
            let patch: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut out, &patch).map_err(|e| {
                ApiError::invalid(
                    "",
                    "",
                    "",
                    format!("the JSON patch could not be applied: {e}"),
                )
            })?;
        }
        PatchKind::Strategic => {
            let patch: Value = parse_json(body)?;
            strategic_merge(&mut out, &patch, &mut Vec::new());
        }
        PatchKind::Apply => {
            return Err(ApiError::internal(
                "apply patches are handled by server-side apply",
            ));
        }
    }
    Ok(out)
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch body: {e}")))
}

fn directive(v: &Value) -> Option<&str> {
    v.get("$patch").and_then(Value::as_str)
}

/// Strategic merge of `patch` into `target`; `names` is the field path for merge-key lookup.
pub fn strategic_merge(target: &mut Value, patch: &Value, names: &mut Vec<String>) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if directive(patch) == Some("replace") || !target.is_object() {
        *target = strip_directives(patch);
        return;
    }
    let Value::Object(t) = target else { return };
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Value::Array(gone)) = (t.get_mut(field), v) {
                items.retain(|i| !gone.contains(i));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        if v.is_null() || directive(v) == Some("delete") {
            t.remove(k);
            continue;
        }
        names.push(k.clone());
        match (t.get_mut(k), v) {
            (Some(existing @ Value::Object(_)), Value::Object(_)) => {
                strategic_merge(existing, v, names)
            }
            (Some(Value::Array(existing)), Value::Array(items)) => {
                merge_list(existing, items, names)
            }
            _ => {
                t.insert(k.clone(), strip_directives(v));
            }
        }
        names.pop();
    }
}

fn merge_list(existing: &mut Vec<Value>, patch: &[Value], names: &mut Vec<String>) {
    let replace = patch
        .iter()
        .any(|i| directive(i) == Some("replace") && i.as_object().is_some_and(|o| o.len() == 1));
    let items: Vec<&Value> = patch
        .iter()
        .filter(|i| !(directive(i).is_some() && i.as_object().is_some_and(|o| o.len() == 1)))
        .collect();
    let key = merge_key(names).filter(|k| all_keyed(existing, k));
    match key {
        Some(key) if !replace => {
            for item in items {
                let Some(wanted) = item.get(key) else {
                    continue;
                };
                let pos = existing.iter().position(|e| e.get(key) == Some(wanted));
                match (pos, directive(item)) {
                    (Some(i), Some("delete")) => {
                        existing.remove(i);
                    }
                    (None, Some("delete")) => {}
                    (Some(i), _) => strategic_merge(&mut existing[i], item, names),
                    (None, _) => existing.push(strip_directives(item)),
                }
            }
        }
        _ => *existing = items.into_iter().map(strip_directives).collect(),
    }
}

/// Removes `$`-directives from a value that is inserted rather than merged.
fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({ "spec": { "template": { "spec": { "containers": [
            { "name": "web", "image": "nginx:1", "ports": [ { "containerPort": 80 } ], "env": [ { "name": "A", "value": "1" } ] },
            { "name": "side", "image": "busybox" }
        ] } } } })
    }

    #[test]
    fn strategic_merge_merges_containers_ports_and_env_by_key() {
        let patch = json!({ "spec": { "template": { "spec": { "containers": [
            { "name": "web", "image": "nginx:2", "ports": [ { "containerPort": 443 } ], "env": [ { "name": "A", "value": "2" }, { "name": "B", "value": "3" } ] }
        ] } } } });
        let out = apply_patch(
            PatchKind::Strategic,
            &deployment(),
            patch.to_string().as_bytes(),
        )
        .expect("patch");
        let c = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(c.as_array().map(Vec::len), Some(2), "sidecar kept");
        assert_eq!(c[0]["image"], "nginx:2");
        assert_eq!(
            c[0]["ports"],
            json!([ { "containerPort": 80 }, { "containerPort": 443 } ])
        );
        assert_eq!(
            c[0]["env"],
            json!([ { "name": "A", "value": "2" }, { "name": "B", "value": "3" } ])
        );
    }

    #[test]
    fn strategic_delete_directive_and_null() {
        let patch = json!({ "spec": { "template": { "spec": { "containers": [ { "name": "side", "$patch": "delete" } ] } } } });
        let out = apply_patch(
            PatchKind::Strategic,
            &deployment(),
            patch.to_string().as_bytes(),
        )
        .expect("patch");
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"]
                .as_array()
                .map(Vec::len),
            Some(1)
        );
        let out = apply_patch(PatchKind::Strategic, &out, br#"{"spec":{"template":null}}"#)
            .expect("null");
        assert_eq!(out["spec"], json!({}));
    }

    #[test]
    fn merge_patch_replaces_lists_and_json_patch_reports_bad_paths() {
        let out = apply_patch(
            PatchKind::Merge,
            &deployment(),
            br#"{"spec":{"template":{"spec":{"containers":[]}}}}"#,
        )
        .expect("merge");
        assert_eq!(out["spec"]["template"]["spec"]["containers"], json!([]));
        let err = apply_patch(
            PatchKind::Json,
            &deployment(),
            br#"[{"op":"remove","path":"/nope"}]"#,
        )
        .expect_err("bad path");
        assert_eq!(err.code, 422);
        assert_eq!(
            PatchKind::from_content_type("text/plain")
                .expect_err("415")
                .code,
            415
        );
    }
}
