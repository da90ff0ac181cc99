//! Structural-schema handling for custom resources, as apiextensions-apiserver does it on
//! every write: prune fields the schema does not declare, apply `default`s, then
//! validate (types, `nullable`, `required`, `enum`, bounds, lengths, item counts).
//!
//! Written by hand because the order and the Kubernetes extensions
//! (`x-kubernetes-preserve-unknown-fields`, `x-kubernetes-int-or-string`,
//! `x-kubernetes-embedded-resource`, `nullable`) are what clients observe, and a generic
//! JSON Schema validator knows none of them. Not covered: `pattern`, `format`,
//! `oneOf`/`anyOf`/`allOf`/`not`, CEL `x-kubernetes-validations`, list-type uniqueness.

use serde_json::{Map, Value};

/// Prunes, defaults and validates `object` (a whole custom resource) against the
/// version's `openAPIV3Schema`. Returns the validation failures, field-path first.
pub fn apply(schema: &Value, object: &mut Value) -> Result<(), Vec<String>> {
    prune_and_default(schema, object, true);
    let mut errors = Vec::new();
    validate_object_fields(schema, object, "", &mut errors, true);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

fn preserves(schema: &Value) -> bool {
    schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
}

fn default_field(map: &mut Map<String, Value>, key: &str, schema: &Value) {
    if !map.contains_key(key)
        && let Some(d) = schema.get("default")
    {
        map.insert(key.to_string(), d.clone());
    }
}

/// `resource_root` marks a whole object (the custom resource, or an embedded resource),
/// whose apiVersion, kind and metadata are never pruned.
fn prune_and_default(schema: &Value, value: &mut Value, resource_root: bool) {
    if schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return;
    }
    match value {
        Value::Object(map) => {
            let keep_meta = resource_root
                || schema
                    .get("x-kubernetes-embedded-resource")
                    .and_then(Value::as_bool)
                    == Some(true);
            if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for v in map.values_mut() {
                    prune_and_default(additional, v, false);
                }
                return;
            }
            let props = schema.get("properties").and_then(Value::as_object);
            if !preserves(schema) {
                map.retain(|k, _| {
                    props.is_some_and(|p| p.contains_key(k))
                        || (keep_meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata"))
                });
            }
            if let Some(props) = props {
                for (k, sub) in props {
                    if keep_meta && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                        continue;
                    }
                    default_field(map, k, sub);
                    if let Some(v) = map.get_mut(k) {
                        prune_and_default(sub, v, false);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for i in items {
                    prune_and_default(item_schema, i, false);
                }
            }
        }
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn validate_object_fields(
    schema: &Value,
    value: &Value,
    path: &str,
    errors: &mut Vec<String>,
    root: bool,
) {
    let Value::Object(map) = value else { return };
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for r in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(r) {
                errors.push(format!("{}: Required value", child(path, r)));
            }
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, sub) in props {
            if root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                continue;
            }
            if let Some(v) = map.get(k) {
                validate(sub, v, &child(path, k), errors);
            }
        }
    }
    if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        for (k, v) in map {
            validate(additional, v, &child(path, k), errors);
        }
    }
}

fn validate(schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    let actual = type_name(value);
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) != Some(true)
            && schema.get("type").is_some()
        {
            errors.push(format!(
                "{path}: Invalid value: \"null\": {path} in body must be of type {}: \"null\"",
                schema["type"].as_str().unwrap_or("object")
            ));
        }
        return;
    }
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true);
    if int_or_string {
        if !matches!(actual, "integer" | "string") {
            errors.push(format!(
                "{path}: Invalid value: \"{actual}\": {path} in body must be of type int-or-string"
            ));
        }
        return;
    }
    if let Some(wanted) = schema.get("type").and_then(Value::as_str) {
        let ok = wanted == actual || (wanted == "number" && actual == "integer");
        if !ok {
            errors.push(format!("{path}: Invalid value: \"{actual}\": {path} in body must be of type {wanted}: \"{actual}\""));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        errors.push(format!(
            "{path}: Unsupported value: {value}: supported values: {}",
            list.join(", ")
        ));
    }
    bounds(schema, value, path, errors);
    match value {
        Value::Object(_) => validate_object_fields(schema, value, path, errors, false),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        _ => {}
    }
}

fn bounds(schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    let num = |k: &str| schema.get(k).and_then(Value::as_f64);
    if let Some(x) = value.as_f64() {
        if let Some(min) = num("minimum").filter(|m| x < *m) {
            errors.push(format!("{path}: Invalid value: {value}: {path} in body should be greater than or equal to {min}"));
        }
        if let Some(max) = num("maximum").filter(|m| x > *m) {
            errors.push(format!("{path}: Invalid value: {value}: {path} in body should be less than or equal to {max}"));
        }
    }
    let len = match value {
        Value::String(s) => Some((
            s.chars().count() as f64,
            "minLength",
            "maxLength",
            "chars long",
        )),
        Value::Array(a) => Some((a.len() as f64, "minItems", "maxItems", "items")),
        Value::Object(m) => Some((
            m.len() as f64,
            "minProperties",
            "maxProperties",
            "properties",
        )),
        _ => None,
    };
    if let Some((n, min_key, max_key, unit)) = len {
        if let Some(min) = num(min_key).filter(|m| n < *m) {
            errors.push(format!(
                "{path}: Invalid value: {value}: {path} in body should be at least {min} {unit}"
            ));
        }
        if let Some(max) = num(max_key).filter(|m| n > *m) {
            errors.push(format!("{path}: Too long: may have at most {max} {unit}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({ "type": "object", "properties": {
            "spec": { "type": "object", "required": ["size"], "properties": {
                "size": { "type": "integer", "minimum": 1 },
                "mode": { "type": "string", "enum": ["fast", "slow"], "default": "fast" },
                "extra": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
                "labels": { "type": "object", "additionalProperties": { "type": "string" } },
                "port": { "x-kubernetes-int-or-string": true }
            } },
            "status": { "type": "object", "properties": { "ready": { "type": "boolean" } } }
        } })
    }

    #[test]
    fn prunes_unknown_fields_and_applies_defaults() {
        let mut obj = json!({ "apiVersion": "x/v1", "kind": "W", "metadata": { "name": "w" },
            "spec": { "size": 2, "bogus": 1, "extra": { "anything": [1] }, "labels": { "a": "b" }, "port": "http" }, "junk": true });
        apply(&schema(), &mut obj).expect("valid");
        assert!(obj.get("junk").is_none() && obj["spec"].get("bogus").is_none());
        assert_eq!(obj["spec"]["mode"], "fast");
        assert_eq!(obj["spec"]["extra"]["anything"], json!([1]));
        assert_eq!(obj["metadata"]["name"], "w");
    }

    #[test]
    fn reports_type_required_enum_and_bounds_failures() {
        let mut obj = json!({ "spec": { "size": "big", "mode": "medium" } });
        let errors = apply(&schema(), &mut obj).expect_err("invalid");
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("spec.size: Invalid value")
                    && e.contains("must be of type integer")),
            "{errors:?}"
        );
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("spec.mode: Unsupported value")),
            "{errors:?}"
        );
        let mut missing = json!({ "spec": { "size": 0 } });
        let errors = apply(&schema(), &mut missing).expect_err("invalid");
        assert!(
            errors
                .iter()
                .any(|e| e.contains("greater than or equal to 1")),
            "{errors:?}"
        );
        let mut none = json!({ "spec": {} });
        assert_eq!(
            apply(&schema(), &mut none).expect_err("required"),
            vec!["spec.size: Required value".to_string()]
        );
    }
}
