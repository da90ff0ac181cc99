//! What the apiserver does to an object before storing it: type and name checks,
//! server-owned metadata, status-subresource separation, generation, and the few
//! per-kind defaults clients can observe.

use base64::Engine;
use serde_json::{Value, json};

use super::{meta_str, set_meta};
use crate::resources::ResourceType;
use crate::status::ApiError;

/// Current time in the apiserver's format (RFC 3339, second precision, `Z`).
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Checks (and fills in when absent) apiVersion and kind against the URL's type.
pub fn check_type(rt: &ResourceType, object: &mut Value) -> Result<(), ApiError> {
    if !object.is_object() {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    }
    let expected = rt.api_version();
    match object.get("apiVersion").and_then(Value::as_str) {
        None | Some("") => object["apiVersion"] = Value::String(expected),
        Some(v) if v == expected => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({expected})"
            )));
        }
    }
    match object.get("kind").and_then(Value::as_str) {
        None | Some("") => object["kind"] = Value::String(rt.kind.clone()),
        Some(k) if k == rt.kind => {}
        Some(k) => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                rt.kind
            )));
        }
    }
    Ok(())
}

/// Fills `metadata.name` from `generateName` and validates it.
pub fn resolve_name(rt: &ResourceType, object: &mut Value) -> Result<String, ApiError> {
    let mut name = meta_str(object, "name");
    if name.is_empty() {
        let prefix = meta_str(object, "generateName");
        if prefix.is_empty() {
            return Err(ApiError::invalid(
                &rt.group,
                &rt.kind,
                "",
                "metadata.name: Required value: name or generateName is required",
            ));
        }
        name = format!("{prefix}{}", random_suffix());
        set_meta(object, "name", Value::String(name.clone()));
    }
    validate_name(rt, &name)?;
    Ok(name)
}

/// Five characters from the alphabet the apiserver uses for generateName (no vowels,
/// no look-alikes), taken from a v4 UUID's random bytes.
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4().as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Name rules: namespaces are DNS labels, RBAC objects only need to be valid path
/// segments (they use `system:` names), everything else is a DNS subdomain.
pub fn validate_name(rt: &ResourceType, name: &str) -> Result<(), ApiError> {
    let ok = if rt.group == "rbac.authorization.k8s.io" {
        !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains('/')
            && !name.contains('%')
    } else {
        let max = if rt.kind == "Namespace" && !rt.custom {
            63
        } else {
            253
        };
        let label_only = max == 63;
        name.len() <= max
            && name.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && name.chars().all(|c| {
                c.is_ascii_lowercase()
                    || c.is_ascii_digit()
                    || c == '-'
                    || (c == '.' && !label_only)
            })
    };
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(
            &rt.group,
            &rt.kind,
            name,
            format!(
                "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 name must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
        ))
    }
}

/// Server-owned metadata of a new object.
pub fn init_server_fields(rt: &ResourceType, object: &mut Value, now: &str) {
    set_meta(
        object,
        "uid",
        Value::String(uuid::Uuid::new_v4().to_string()),
    );
    set_meta(object, "creationTimestamp", Value::String(now.to_string()));
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for f in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
            "selfLink",
            "generation",
        ] {
            meta.remove(f);
        }
    }
    if rt.tracks_generation {
        set_meta(object, "generation", json!(1));
    }
    if rt.has_status
        && let Some(m) = object.as_object_mut()
    {
        m.remove("status");
    }
}

/// Keeps the server-owned metadata of `old` on an update.
pub fn carry_server_fields(old: &Value, new: &mut Value) {
    for f in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "name",
        "namespace",
    ] {
        match old.get("metadata").and_then(|m| m.get(f)) {
            Some(v) => set_meta(new, f, v.clone()),
            None => {
                if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.remove(f);
                }
            }
        }
    }
}

/// On a kind with a status subresource, a write to the main resource keeps the stored
/// status and a write to `/status` keeps everything but status (and managed fields).
pub fn separate_status(rt: &ResourceType, old: &Value, new: Value, status_write: bool) -> Value {
    if status_write {
        let mut out = old.clone();
        match new.get("status") {
            Some(s) => out["status"] = s.clone(),
            None => {
                if let Some(m) = out.as_object_mut() {
                    m.remove("status");
                }
            }
        }
        if let Some(mf) = new.pointer("/metadata/managedFields") {
            set_meta(&mut out, "managedFields", mf.clone());
        }
        out
    } else if rt.has_status {
        let mut out = new;
        if let Some(m) = out.as_object_mut() {
            match old.get("status") {
                Some(s) => {
                    m.insert("status".into(), s.clone());
                }
                None => {
                    m.remove("status");
                }
            }
        }
        out
    } else {
        new
    }
}

/// Bumps `metadata.generation` when anything outside metadata (and outside status, for
/// kinds with a status subresource) changed.
pub fn bump_generation(rt: &ResourceType, old: &Value, new: &mut Value) {
    if !rt.tracks_generation {
        return;
    }
    let spec_of = |v: &Value| -> Value {
        let mut c = v.clone();
        if let Some(m) = c.as_object_mut() {
            m.remove("metadata");
            m.remove("apiVersion");
            m.remove("kind");
            if rt.has_status {
                m.remove("status");
            }
        }
        c
    };
    let generation = old
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let next = if spec_of(old) != spec_of(new) {
        generation + 1
    } else {
        generation
    };
    set_meta(new, "generation", json!(next));
}

/// Whether an update changes nothing a client can observe (resourceVersion and
/// managed-fields timestamps aside); such writes are not committed, as in kube-apiserver.
pub fn same_content(a: &Value, b: &Value) -> bool {
    let norm = |v: &Value| -> Value {
        let mut c = v.clone();
        if let Some(meta) = c.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
            if let Some(Value::Array(entries)) = meta.get_mut("managedFields") {
                for e in entries.iter_mut().filter_map(Value::as_object_mut) {
                    e.remove("time");
                }
            }
        }
        c
    };
    norm(a) == norm(b)
}

/// Per-kind behaviour a client can observe on write.
pub fn kind_defaults(
    rt: &ResourceType,
    object: &mut Value,
    created: bool,
    now: &str,
) -> Result<(), ApiError> {
    if rt.custom {
        return Ok(());
    }
    omit_empty(rt, object);
    super::defaults::apply(rt, object);
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Secret") => secret_string_data(object),
        ("", "Namespace") if created => {
            let name = meta_str(object, "name");
            object["metadata"]["labels"]["kubernetes.io/metadata.name"] = Value::String(name);
            object["spec"] = json!({ "finalizers": ["kubernetes"] });
            object["status"] = json!({ "phase": "Active" });
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => {
            crate::crd::resource_types(object)?;
            object["status"] = crate::crd::accepted_status(object, now);
        }
        _ => {}
    }
    Ok(())
}

/// Built-in kinds are Go structs in kube-apiserver, whose empty `omitempty` maps and lists
/// are not stored: `labels: {}` reads back as no labels. Server-side apply sees that too (a
/// manager applying `labels: {}` changes the object, so it conflicts with another owner of
/// `.metadata.labels`).
fn omit_empty(rt: &ResourceType, object: &mut Value) {
    let empty = |v: &Value| match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Null => true,
        _ => false,
    };
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, v| {
            !(matches!(
                k.as_str(),
                "labels" | "annotations" | "finalizers" | "ownerReferences"
            ) && empty(v))
        });
    }
    let fields: &[&str] = match rt.kind.as_str() {
        "ConfigMap" => &["data", "binaryData"],
        "Secret" => &["data"],
        _ => &[],
    };
    if let Some(m) = object.as_object_mut() {
        m.retain(|k, v| !(fields.contains(&k.as_str()) && empty(v)));
    }
}

/// `stringData` is write-only: it is base64-encoded into `data` and never stored.
fn secret_string_data(object: &mut Value) {
    let Some(m) = object.as_object_mut() else {
        return;
    };
    if !m.contains_key("type") {
        m.insert("type".into(), Value::String("Opaque".into()));
    }
    let Some(Value::Object(string_data)) = m.remove("stringData") else {
        return;
    };
    let data = m.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    for (k, v) in string_data {
        let text = v
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| v.to_string());
        data[k] = Value::String(base64::engine::general_purpose::STANDARD.encode(text));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Registry;

    fn rt(group: &str, plural: &str) -> ResourceType {
        Registry::with_builtins()
            .all()
            .find(|r| r.group == group && r.plural == plural)
            .cloned()
            .expect("type")
    }

    #[test]
    fn generation_moves_on_spec_changes_only() {
        let d = rt("apps", "deployments");
        let old = json!({ "metadata": { "generation": 1, "labels": {} }, "spec": { "replicas": 1 }, "status": { "x": 1 } });
        let mut new = json!({ "metadata": { "generation": 1, "labels": { "a": "b" } }, "spec": { "replicas": 1 }, "status": { "x": 2 } });
        bump_generation(&d, &old, &mut new);
        assert_eq!(new["metadata"]["generation"], 1);
        new["spec"]["replicas"] = json!(2);
        bump_generation(&d, &old, &mut new);
        assert_eq!(new["metadata"]["generation"], 2);
    }

    #[test]
    fn secret_string_data_is_encoded() {
        let s = rt("", "secrets");
        let mut obj = json!({ "metadata": { "name": "s" }, "stringData": { "k": "v" } });
        kind_defaults(&s, &mut obj, true, "t").expect("defaults");
        assert_eq!(obj["data"]["k"], "dg==");
        assert!(obj.get("stringData").is_none());
        assert_eq!(obj["type"], "Opaque");
    }

    #[test]
    fn names_are_validated_per_kind() {
        assert!(validate_name(&rt("", "configmaps"), "a.b-c").is_ok());
        assert_eq!(
            validate_name(&rt("", "configmaps"), "Bad")
                .expect_err("upper")
                .code,
            422
        );
        assert!(validate_name(&rt("", "namespaces"), "a.b").is_err());
        assert!(
            validate_name(&rt("rbac.authorization.k8s.io", "clusterroles"), "system:x").is_ok()
        );
    }
}
