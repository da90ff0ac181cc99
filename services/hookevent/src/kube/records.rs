//! Hooks may not write release records. The release service keeps a package's release history
//! in Helm-format Secrets (type `helm.sh/release.v1`, labelled `owner: helm`, named
//! `sh.helm.release.v1.<release>.v<N>`); what it acts on is authenticated by a MAC only it can
//! make, so a forged record is never acted on. Refusing them here as well gives the hook a
//! clear error, naming the object, instead of a record berth then ignores. This holds for Apps
//! and Modules alike: berth's own chart is installed by Helm, never through a hook.
//!
//! Deleting a record is allowed (it forges nothing; a module may clean up after a release it
//! replaced).

use serde_json::Value;

/// Helm's type of release record Secrets.
const RECORD_TYPE: &str = "helm.sh/release.v1";
/// The prefix of every release record's Secret name.
const RECORD_NAME_PREFIX: &str = "sh.helm.release.v1.";

/// Why `object` (a whole Secret, as created or as a JQPatch left it) would be a release
/// record, if it would.
pub fn record_like(object: &Value) -> Option<String> {
    let str_at = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("");
    if str_at("/type") == RECORD_TYPE {
        Some(format!("type {RECORD_TYPE}"))
    } else if str_at("/metadata/labels/owner") == "helm" {
        Some("labelled owner: helm".into())
    } else if str_at("/metadata/name").starts_with(RECORD_NAME_PREFIX) {
        Some(format!("named {RECORD_NAME_PREFIX}*"))
    } else {
        None
    }
}

/// Why operation `op` on the Secret `name` (with `body`: the object, a merge patch or a JSON
/// patch) would write a release record, if it would. A JQPatch's result is checked when it is
/// known (see [`record_like`]).
pub fn refusal(op: &str, name: &str, body: &Value) -> Option<String> {
    let why = match op {
        "Create" | "CreateIfNotExists" | "CreateOrUpdate" => record_like(body),
        "Delete" | "DeleteInBackground" | "DeleteNonCascading" => None,
        _ if name.starts_with(RECORD_NAME_PREFIX) => {
            Some(format!("named {RECORD_NAME_PREFIX}*: a release record"))
        }
        "MergePatch" => {
            let owner = body
                .pointer("/metadata/labels/owner")
                .and_then(Value::as_str);
            if body.get("type").is_some() {
                Some("sets its type".into())
            } else if owner == Some("helm") {
                Some("labels it owner: helm".into())
            } else {
                None
            }
        }
        "JSONPatch" => body.as_array().and_then(|ops| {
            ops.iter().find_map(|o| {
                let path = o.get("path").and_then(Value::as_str).unwrap_or("");
                let value = o.get("value");
                let labels_owner = value.and_then(|v| v.get("owner")).and_then(Value::as_str);
                match path {
                    "/type" => Some("sets its type".to_owned()),
                    "/metadata/labels/owner" if value.and_then(Value::as_str) == Some("helm") => {
                        Some("labels it owner: helm".to_owned())
                    }
                    "/metadata/labels" if labels_owner == Some("helm") => {
                        Some("labels it owner: helm".to_owned())
                    }
                    "/metadata" => value.and_then(|m| {
                        (m.pointer("/labels/owner").and_then(Value::as_str) == Some("helm"))
                            .then(|| "labels it owner: helm".to_owned())
                    }),
                    "" => value.and_then(record_like),
                    _ => None,
                }
            })
        }),
        _ => None,
    }?;
    Some(format!(
        "{why}; release records are berth's own, and hooks may not write them"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(extra: Value) -> Value {
        let mut o = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        if let (Some(o), Some(e)) = (o.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                o.insert(k.clone(), v.clone());
            }
        }
        o
    }

    #[test]
    fn creating_a_record_is_refused_by_type_label_or_name() {
        assert!(refusal("Create", "s", &secret(json!({}))).is_none());
        let typed = refusal("CreateOrUpdate", "s", &secret(json!({"type": RECORD_TYPE})));
        assert!(typed.is_some_and(|r| r.contains("type helm.sh/release.v1")));
        let labelled = secret(json!({"metadata": {"name": "s", "labels": {"owner": "helm"}}}));
        assert!(refusal("CreateIfNotExists", "s", &labelled).is_some());
        let named = secret(json!({"metadata": {"name": "sh.helm.release.v1.web.v9"}}));
        assert!(refusal("Create", "sh.helm.release.v1.web.v9", &named).is_some());
    }

    #[test]
    fn changing_a_record_or_making_one_by_patch_is_refused() {
        let record = "sh.helm.release.v1.web.v2";
        assert!(refusal("MergePatch", record, &json!({"data": {}})).is_some());
        assert!(refusal("JQPatch", record, &Value::Null).is_some());
        assert!(
            refusal(
                "MergePatch",
                "s",
                &json!({"metadata": {"labels": {"owner": "helm"}}})
            )
            .is_some()
        );
        assert!(
            refusal(
                "MergePatch",
                "s",
                &json!({"metadata": {"labels": {"a": "b"}}})
            )
            .is_none()
        );
        assert!(
            refusal(
                "JSONPatch",
                "s",
                &json!([{"op": "add", "path": "/metadata/labels/owner", "value": "helm"}])
            )
            .is_some()
        );
        assert!(
            refusal(
                "JSONPatch",
                "s",
                &json!([{"op": "replace", "path": "/metadata/labels", "value": {"owner": "helm"}}])
            )
            .is_some()
        );
        assert!(
            refusal(
                "JSONPatch",
                "s",
                &json!([{"op": "add", "path": "/data/x", "value": "eA=="}])
            )
            .is_none()
        );
        // Deleting forges nothing.
        assert!(refusal("Delete", record, &Value::Null).is_none());
    }
}
