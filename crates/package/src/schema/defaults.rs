//! Defaulting with Kubernetes structural-schema semantics, written by hand because the
//! `jsonschema` crate only validates.
//!
//! For every object value, each declared property that is absent (or `null` where the property
//! does not accept `null`) receives a deep copy of its `default`; then defaulting recurses into
//! every present property, so defaults inside an object that was itself just created by a
//! `default` are filled too. Intermediate objects without a `default` are not invented: a nested
//! default only applies once its parent exists. Recursion follows `properties`,
//! `additionalProperties` (for undeclared keys), `items` and `allOf`; `anyOf`/`oneOf` branches are
//! not defaulted because which branch applies is ambiguous.

use serde_json::Value;

/// Applies the defaults of the (already translated) `schema` to `value` in place.
pub(super) fn apply(schema: &Value, value: &mut Value) {
    let Value::Object(schema) = schema else {
        return;
    };
    if let Some(Value::Array(parts)) = schema.get("allOf") {
        for part in parts {
            apply(part, value);
        }
    }
    match value {
        Value::Object(fields) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            if let Some(properties) = properties {
                for (name, prop) in properties {
                    let missing = fields
                        .get(name)
                        .is_none_or(|v| v.is_null() && !allows_null(prop));
                    if missing && let Some(default) = prop.get("default") {
                        fields.insert(name.clone(), default.clone());
                    }
                    if let Some(child) = fields.get_mut(name) {
                        apply(prop, child);
                    }
                }
            }
            if let Some(extra @ Value::Object(_)) = schema.get("additionalProperties") {
                for (name, child) in fields.iter_mut() {
                    if properties.is_none_or(|p| !p.contains_key(name)) {
                        apply(extra, child);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema @ Value::Object(_)) = schema.get("items") {
                for item in items {
                    apply(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Whether `null` is a legal value, so an explicit `null` must be kept rather than defaulted.
fn allows_null(schema: &Value) -> bool {
    match schema.get("type") {
        None => true,
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
        Some(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fills_nested_defaults_of_created_objects() {
        let schema = json!({"properties": {
            "ingress": {"type": "object", "default": {}, "properties": {
                "host": {"type": "string", "default": "example.com"},
                "tls": {"type": "object", "default": {"enabled": false}, "properties": {"secret": {"type": "string", "default": "tls"}}}
            }},
            "untouched": {"type": "object", "properties": {"x": {"type": "integer", "default": 1}}}
        }});
        let mut value = json!({});
        apply(&schema, &mut value);
        assert_eq!(
            value,
            json!({"ingress": {"host": "example.com", "tls": {"enabled": false, "secret": "tls"}}})
        );
    }

    #[test]
    fn keeps_given_values_and_nullable_nulls() {
        let schema = json!({"properties": {
            "a": {"type": "integer", "default": 1},
            "b": {"type": ["string", "null"], "default": "x"},
            "c": {"type": "string", "default": "y"}
        }});
        let mut value = json!({"a": 5, "b": null, "c": null});
        apply(&schema, &mut value);
        assert_eq!(value, json!({"a": 5, "b": null, "c": "y"}));
    }

    #[test]
    fn defaults_array_items_and_map_values() {
        let schema = json!({"properties": {
            "list": {"type": "array", "items": {"type": "object", "properties": {"port": {"default": 80}}}},
            "map": {"type": "object", "additionalProperties": {"type": "object", "properties": {"on": {"default": true}}}}
        }});
        let mut value = json!({"list": [{}, {"port": 1}], "map": {"x": {}}});
        apply(&schema, &mut value);
        assert_eq!(
            value,
            json!({"list": [{"port": 80}, {"port": 1}], "map": {"x": {"on": true}}})
        );
    }
}
