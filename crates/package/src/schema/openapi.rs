//! OpenAPI v3 schema subset → JSON Schema 2020-12.
//!
//! What changes on the way:
//! - `nullable: true` becomes `"null"` in `type` (and in `enum` when there is one); JSON Schema
//!   has no `nullable`.
//! - OpenAPI 3.0's boolean `exclusiveMinimum`/`exclusiveMaximum` become the numeric 2020-12 form.
//! - An object schema that lists `properties` but does not set `additionalProperties` is closed
//!   (`additionalProperties: false`), the addon-operator convention that makes typos in settings
//!   an error. `x-kubernetes-preserve-unknown-fields: true` keeps it open, and the direct members
//!   of `allOf`/`anyOf`/`oneOf` are left open because closing each part would reject the others'
//!   fields.
//! - `x-*` extension keys are dropped; other unknown keywords (`format`, `example`, …) are kept and
//!   ignored by the validator.

use serde_json::{Map, Value};

use super::SchemaError;

/// Keys whose value is a map from names to sub-schemas.
const SCHEMA_MAPS: [&str; 4] = ["properties", "patternProperties", "definitions", "$defs"];
/// Keys whose value is a list of sub-schemas, each left open (see the module documentation).
const SCHEMA_LISTS: [&str; 3] = ["allOf", "anyOf", "oneOf"];
/// Keys whose value is one sub-schema.
const SCHEMA_SINGLES: [&str; 3] = ["additionalProperties", "items", "not"];

/// Translates a whole document; `location` in errors is a JSON pointer into the OpenAPI input.
pub(super) fn translate(doc: &Value) -> Result<Value, SchemaError> {
    if !doc.is_object() {
        return Err(SchemaError::NotAMapping {
            location: "/".to_owned(),
        });
    }
    let mut out = node(doc, "", false)?;
    if let Value::Object(map) = &mut out {
        map.remove("$schema");
    }
    Ok(out)
}

fn node(schema: &Value, location: &str, in_combinator: bool) -> Result<Value, SchemaError> {
    let map = match schema {
        Value::Object(map) => map,
        Value::Bool(_) => return Ok(schema.clone()),
        _ => {
            return Err(SchemaError::NotAMapping {
                location: display(location),
            });
        }
    };
    let mut out = Map::with_capacity(map.len());
    for (key, value) in map {
        if key.starts_with("x-") || key == "nullable" {
            continue;
        }
        let here = format!("{location}/{}", escape(key));
        let translated = if SCHEMA_MAPS.contains(&key.as_str()) {
            schema_map(value, &here)?
        } else if SCHEMA_LISTS.contains(&key.as_str()) {
            schema_list(value, &here)?
        } else if SCHEMA_SINGLES.contains(&key.as_str()) {
            node(value, &here, false)?
        } else {
            value.clone()
        };
        out.insert(key.clone(), translated);
    }
    exclusive_bounds(&mut out);
    if map.get("nullable") == Some(&Value::Bool(true)) {
        allow_null(&mut out);
    }
    let preserve_unknown =
        map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    if out.contains_key("properties")
        && !out.contains_key("additionalProperties")
        && !preserve_unknown
        && !in_combinator
    {
        out.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
    Ok(Value::Object(out))
}

fn schema_map(value: &Value, location: &str) -> Result<Value, SchemaError> {
    let Value::Object(entries) = value else {
        return Err(SchemaError::NotAMapping {
            location: display(location),
        });
    };
    let mut out = Map::with_capacity(entries.len());
    for (name, sub) in entries {
        out.insert(
            name.clone(),
            node(sub, &format!("{location}/{}", escape(name)), false)?,
        );
    }
    Ok(Value::Object(out))
}

fn schema_list(value: &Value, location: &str) -> Result<Value, SchemaError> {
    let Value::Array(items) = value else {
        return Err(SchemaError::NotAList {
            location: display(location),
        });
    };
    items
        .iter()
        .enumerate()
        .map(|(i, sub)| node(sub, &format!("{location}/{i}"), true))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

fn exclusive_bounds(out: &mut Map<String, Value>) {
    for (exclusive, bound) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        if let Some(Value::Bool(flag)) = out.get(exclusive).cloned() {
            out.remove(exclusive);
            if flag && let Some(limit) = out.remove(bound) {
                out.insert(exclusive.to_owned(), limit);
            }
        }
    }
}

fn allow_null(out: &mut Map<String, Value>) {
    match out.get_mut("type") {
        Some(Value::String(t)) if t != "null" => {
            let t = std::mem::take(t);
            out.insert(
                "type".to_owned(),
                Value::Array(vec![Value::String(t), "null".into()]),
            );
        }
        Some(Value::Array(types)) if !types.iter().any(|t| t == "null") => {
            types.push("null".into())
        }
        _ => {}
    }
    if let Some(Value::Array(values)) = out.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
}

fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

fn display(location: &str) -> String {
    if location.is_empty() {
        "/".to_owned()
    } else {
        location.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nullable_adds_null_to_type_and_enum() {
        let out = translate(&json!({"type": "string", "enum": ["a"], "nullable": true}))
            .expect("translates");
        assert_eq!(
            out,
            json!({"type": ["string", "null"], "enum": ["a", null]})
        );
    }

    #[test]
    fn objects_with_properties_are_closed_unless_preserved() {
        let out = translate(&json!({
            "type": "object",
            "properties": {
                "a": {"type": "object", "properties": {"b": {"type": "string"}}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"c": {}}},
                "open": {"type": "object", "additionalProperties": {"type": "integer"}}
            }
        }))
        .expect("translates");
        assert_eq!(out["additionalProperties"], json!(false));
        assert_eq!(out["properties"]["a"]["additionalProperties"], json!(false));
        assert!(
            out["properties"]["free"]
                .get("additionalProperties")
                .is_none()
        );
        assert!(
            out["properties"]["free"]
                .get("x-kubernetes-preserve-unknown-fields")
                .is_none()
        );
        assert_eq!(
            out["properties"]["open"]["additionalProperties"],
            json!({"type": "integer"})
        );
    }

    #[test]
    fn combinator_members_stay_open() {
        let out =
            translate(&json!({"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}))
                .expect("translates");
        assert!(out["allOf"][0].get("additionalProperties").is_none());
    }

    #[test]
    fn boolean_exclusive_bounds_become_numeric() {
        let out = translate(&json!({"type": "integer", "minimum": 1, "exclusiveMinimum": true, "maximum": 5, "exclusiveMaximum": false}))
            .expect("translates");
        assert_eq!(
            out,
            json!({"type": "integer", "exclusiveMinimum": 1, "maximum": 5})
        );
    }

    #[test]
    fn non_mapping_sub_schema_is_located() {
        let err = translate(&json!({"properties": {"a": 5}})).expect_err("rejected");
        assert_eq!(
            err,
            SchemaError::NotAMapping {
                location: "/properties/a".to_owned()
            }
        );
    }
}
