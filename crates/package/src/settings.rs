//! The settings check shared by ValidateSettings and ApplySettings.
//!
//! Settings are user input that reaches hooks and templates, so besides the schema they are bounded
//! in size and nesting before anything else looks at them.

use std::io;

use serde_json::{Map, Value};

use crate::schema::{Schema, ValidationError};

/// Deepest nesting accepted in settings (objects and arrays both count).
pub const MAX_SETTINGS_DEPTH: usize = 32;
/// Largest settings document accepted, measured as compact JSON.
pub const MAX_SETTINGS_BYTES: usize = 1024 * 1024;

/// Defaults, then validates `settings` against the package's settings schema.
///
/// `null` counts as empty settings. Settings must be an object. A package without a settings
/// schema accepts only empty settings. Returns the settings with defaults applied.
pub fn validate_settings(
    schema: Option<&Schema>,
    settings: &Value,
) -> Result<Value, Vec<ValidationError>> {
    let mut settings = match settings {
        Value::Null => Value::Object(Map::new()),
        Value::Object(_) => settings.clone(),
        other => {
            return Err(vec![ValidationError::new(
                ".",
                format!("settings must be an object, got {}", kind(other)),
            )]);
        }
    };
    check_bounds(&settings)?;
    let Some(schema) = schema else {
        let empty = settings.as_object().is_none_or(Map::is_empty);
        return if empty {
            Ok(settings)
        } else {
            Err(vec![ValidationError::new(
                ".",
                "the package has no settings schema, so settings must be empty",
            )])
        };
    };
    schema.apply_defaults(&mut settings);
    schema.validate(&settings)?;
    Ok(settings)
}

fn check_bounds(settings: &Value) -> Result<(), Vec<ValidationError>> {
    let size = json_size(settings);
    if size > MAX_SETTINGS_BYTES {
        return Err(vec![ValidationError::new(
            ".",
            format!("settings are {size} bytes as JSON; the limit is {MAX_SETTINGS_BYTES}"),
        )]);
    }
    if let Some(path) = too_deep(settings, 1, ".") {
        return Err(vec![ValidationError::new(
            path,
            format!("settings are nested deeper than {MAX_SETTINGS_DEPTH} levels"),
        )]);
    }
    Ok(())
}

/// Returns the path of the first container found at `MAX_SETTINGS_DEPTH + 1` levels.
fn too_deep(value: &Value, depth: usize, path: &str) -> Option<String> {
    let children: Box<dyn Iterator<Item = (String, &Value)>> = match value {
        Value::Object(map) => Box::new(
            map.iter()
                .map(|(k, v)| (crate::schema::path::child(path, k), v)),
        ),
        Value::Array(items) => {
            let base = if path == "." { "" } else { path };
            Box::new(
                items
                    .iter()
                    .enumerate()
                    .map(move |(i, v)| (format!("{base}[{i}]"), v)),
            )
        }
        _ => return None,
    };
    if depth > MAX_SETTINGS_DEPTH {
        return Some(path.to_owned());
    }
    children
        .into_iter()
        .find_map(|(child_path, child)| too_deep(child, depth + 1, &child_path))
}

/// Counts the bytes of the compact JSON encoding without building it.
fn json_size(value: &Value) -> usize {
    struct Counter(usize);
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a `Value` to an infallible sink cannot fail; fall back to "too large" if it did.
    match serde_json::to_writer(&mut counter, value) {
        Ok(()) => counter.0,
        Err(_) => usize::MAX,
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |inner, _| json!({"a": inner}))
    }

    #[test]
    fn no_schema_accepts_only_empty_settings() {
        assert_eq!(
            validate_settings(None, &Value::Null).expect("empty ok"),
            json!({})
        );
        assert_eq!(
            validate_settings(None, &json!({})).expect("empty ok"),
            json!({})
        );
        let errors = validate_settings(None, &json!({"x": 1})).expect_err("rejected");
        assert!(
            errors[0].message.contains("no settings schema"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn defaults_then_validate() {
        let schema = Schema::from_openapi(&json!({"type": "object", "required": ["mode"], "properties": {
            "mode": {"type": "string", "default": "fast"}, "replicas": {"type": "integer", "minimum": 1}
        }}))
        .expect("compiles");
        assert_eq!(
            validate_settings(Some(&schema), &json!({})).expect("valid"),
            json!({"mode": "fast"})
        );
        let errors =
            validate_settings(Some(&schema), &json!({"replicas": 0})).expect_err("invalid");
        assert_eq!(errors[0].path, ".replicas");
    }

    #[test]
    fn rejects_non_objects() {
        let errors = validate_settings(None, &json!([1])).expect_err("rejected");
        assert_eq!(errors[0].path, ".");
        assert!(errors[0].message.contains("a list"));
    }

    #[test]
    fn depth_bound() {
        let open = Schema::from_openapi(&json!({"type": "object"})).expect("compiles");
        assert!(validate_settings(Some(&open), &nested(MAX_SETTINGS_DEPTH)).is_ok());
        let errors =
            validate_settings(Some(&open), &nested(MAX_SETTINGS_DEPTH + 1)).expect_err("too deep");
        assert!(
            errors[0].message.contains("deeper than 32"),
            "{}",
            errors[0].message
        );
        assert!(errors[0].path.starts_with(".a.a.a"), "{}", errors[0].path);
    }

    #[test]
    fn size_bound() {
        let big = json!({"blob": "x".repeat(MAX_SETTINGS_BYTES)});
        let errors = validate_settings(None, &big).expect_err("too large");
        assert!(
            errors[0].message.contains("limit is 1048576"),
            "{}",
            errors[0].message
        );
    }
}
