//! Settings and values schemas: an OpenAPI v3 subset, compiled with the `jsonschema` crate.
//!
//! The OpenAPI document is translated to JSON Schema 2020-12 (see [`openapi`]) and compiled once;
//! the original document is kept so lifecycle can store it and rebuild the same `Schema` later.
//! External `$ref`s are never fetched (the crate is built without resolvers).

mod defaults;
mod openapi;
pub(crate) mod path;

use std::fmt;
use std::sync::Arc;

use jsonschema::error::ValidationErrorKind;
use serde_json::Value;

/// Longest message kept from the validator: messages embed the offending value, which may be a
/// whole settings subtree.
const MAX_MESSAGE_LEN: usize = 300;

/// A schema document that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("schema at {location} must be a mapping")]
    NotAMapping { location: String },
    #[error("schema at {location} must be a list of schemas")]
    NotAList { location: String },
    #[error("schema does not compile: {message}")]
    Compile { message: String },
}

/// One reason a value does not match a schema.
///
/// `path` uses the form documented in [`path`](crate::schema::path): `.` for the root, `.field`,
/// `[index]`, `["odd key"]`. A missing required field and an unknown field are reported at the
/// field's own path (`.message`), not at its parent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ValidationError {
    pub path: String,
    pub message: String,
}

impl ValidationError {
    pub(crate) fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Joins errors into one line for error messages: `.a: msg; .b: msg`.
pub(crate) fn join_errors(errors: &[ValidationError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A compiled schema. Cheap to clone; safe to share between threads.
#[derive(Clone)]
pub struct Schema {
    original: Arc<Value>,
    translated: Arc<Value>,
    validator: Arc<jsonschema::Validator>,
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schema")
            .field("openapi", &self.original)
            .finish_non_exhaustive()
    }
}

impl Schema {
    /// Translates and compiles an OpenAPI v3 schema document.
    pub fn from_openapi(doc: &Value) -> Result<Schema, SchemaError> {
        let translated = openapi::translate(doc)?;
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(&translated)
            .map_err(|e| SchemaError::Compile {
                message: truncate(e.to_string()),
            })?;
        Ok(Schema {
            original: Arc::new(doc.clone()),
            translated: Arc::new(translated),
            validator: Arc::new(validator),
        })
    }

    /// Fills in `default`s recursively (see [`defaults`] for the exact rules).
    pub fn apply_defaults(&self, value: &mut Value) {
        defaults::apply(&self.translated, value);
    }

    /// Validates `value`, returning every problem found, sorted by path.
    pub fn validate(&self, value: &Value) -> Result<(), Vec<ValidationError>> {
        let mut errors: Vec<ValidationError> = self
            .validator
            .iter_errors(value)
            .flat_map(|e| convert(value, &e))
            .collect();
        // Sorted by path so reports are stable and related problems sit together.
        errors.sort_by(|a, b| a.path.cmp(&b.path));
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    /// The OpenAPI document this schema was built from.
    pub fn as_json(&self) -> &Value {
        &self.original
    }
}

fn convert(root: &Value, error: &jsonschema::ValidationError<'_>) -> Vec<ValidationError> {
    let at = path::from_pointer(root, error.instance_path().as_str());
    match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            vec![ValidationError::new(
                path::child(&at, &name),
                "required field is missing",
            )]
        }
        ValidationErrorKind::AdditionalProperties { unexpected } => unexpected
            .iter()
            .map(|name| {
                ValidationError::new(
                    path::child(&at, name),
                    "unknown field (not declared in the schema)",
                )
            })
            .collect(),
        _ => vec![ValidationError::new(at, truncate(error.to_string()))],
    }
}

fn truncate(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_LEN {
        let mut cut = MAX_MESSAGE_LEN;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(doc: Value) -> Schema {
        Schema::from_openapi(&doc).expect("schema compiles")
    }

    fn paths(result: Result<(), Vec<ValidationError>>) -> Vec<String> {
        result
            .expect_err("invalid")
            .into_iter()
            .map(|e| e.path)
            .collect()
    }

    #[test]
    fn type_error_names_the_field() {
        let s = schema(json!({"type": "object", "properties": {"replicas": {"type": "integer"}}}));
        let errors = s.validate(&json!({"replicas": "x"})).expect_err("invalid");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, ".replicas");
        assert!(
            errors[0].message.contains("integer"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn required_and_unknown_fields_are_reported_at_the_field() {
        let s = schema(
            json!({"type": "object", "required": ["message"], "properties": {
                "message": {"type": "string"},
                "ingress": {"type": "object", "required": ["host"], "properties": {"host": {"type": "string"}}}
            }}),
        );
        assert_eq!(
            paths(s.validate(&json!({"ingress": {}}))),
            [".ingress.host", ".message"]
        );
        assert_eq!(
            paths(s.validate(&json!({"message": "m", "typo": 1}))),
            [".typo"]
        );
    }

    #[test]
    fn array_items_and_constraints() {
        let s = schema(
            json!({"type": "object", "properties": {"ports": {"type": "array", "items": {
            "type": "integer", "minimum": 1, "maximum": 65535}}, "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5}}}),
        );
        assert_eq!(
            paths(s.validate(&json!({"ports": [80, 0, 70000]}))),
            [".ports[1]", ".ports[2]"]
        );
        assert_eq!(paths(s.validate(&json!({"name": "ABC"}))), [".name"]);
        assert_eq!(paths(s.validate(&json!({"name": "abcdefg"}))), [".name"]);
        assert!(s.validate(&json!({"ports": [443], "name": "web"})).is_ok());
    }

    #[test]
    fn nullable_allows_null_only_where_declared() {
        let s = schema(json!({"type": "object", "properties": {
            "a": {"type": "string", "nullable": true},
            "b": {"type": "string"}
        }}));
        assert!(s.validate(&json!({"a": null})).is_ok());
        assert_eq!(paths(s.validate(&json!({"b": null}))), [".b"]);
    }

    #[test]
    fn enum_unknown_format_and_extensions() {
        let s = schema(
            json!({"type": "object", "x-extend": {"schema": "config-values.yaml"}, "properties": {
                "mode": {"type": "string", "enum": ["a", "b"], "x-doc-default": "a"},
                "size": {"type": "string", "format": "kubernetes-quantity"}
            }}),
        );
        assert!(s.validate(&json!({"mode": "a", "size": "1Gi"})).is_ok());
        assert_eq!(paths(s.validate(&json!({"mode": "c"}))), [".mode"]);
    }

    #[test]
    fn bad_schemas_do_not_compile() {
        assert!(matches!(
            Schema::from_openapi(&json!({"type": "banana"})),
            Err(SchemaError::Compile { .. })
        ));
        assert!(matches!(
            Schema::from_openapi(&json!({"pattern": "("})),
            Err(SchemaError::Compile { .. })
        ));
        assert!(matches!(
            Schema::from_openapi(&json!("str")),
            Err(SchemaError::NotAMapping { .. })
        ));
    }

    #[test]
    fn as_json_round_trips() {
        let doc = json!({"type": "object", "properties": {"a": {"type": "integer", "default": 1}}});
        let rebuilt = Schema::from_openapi(schema(doc.clone()).as_json()).expect("rebuilds");
        assert_eq!(rebuilt.as_json(), &doc);
        let mut v = json!({});
        rebuilt.apply_defaults(&mut v);
        assert_eq!(v, json!({"a": 1}));
    }

    #[test]
    fn schema_is_shareable_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Schema>();
    }
}
