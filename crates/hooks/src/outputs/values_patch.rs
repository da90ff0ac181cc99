//! `VALUES_JSON_PATCH_PATH` / `CONFIG_VALUES_JSON_PATCH_PATH`.

use json_patch::{Patch, PatchOperation};
use serde_json::Value;

/// Parses a stream of JSON values, each an RFC-6902 array or a single
/// operation object, concatenated into one patch. Empty text = no patch.
///
/// Hooks often append one operation per line (`jq -c … >> $VALUES_JSON_PATCH_PATH`),
/// which is why a stream and bare operations are accepted.
pub fn parse_values_patch(text: &str) -> Result<Patch, String> {
    let mut operations = Vec::new();
    let stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    for (doc, value) in stream.enumerate() {
        let value = value.map_err(|e| format!("document {doc}: invalid JSON: {e}"))?;
        match value {
            Value::Array(items) => {
                for (i, item) in items.into_iter().enumerate() {
                    operations.push(
                        operation(item)
                            .map_err(|e| format!("document {doc}, operation {i}: {e}"))?,
                    );
                }
            }
            Value::Object(_) => {
                operations.push(operation(value).map_err(|e| format!("document {doc}: {e}"))?)
            }
            other => {
                return Err(format!(
                    "document {doc}: expected an array or an operation object, got {other}"
                ));
            }
        }
    }
    Ok(Patch(operations))
}

fn operation(value: Value) -> Result<PatchOperation, String> {
    serde_json::from_value(value).map_err(|e| format!("not a JSON patch operation: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_stream_and_empty() {
        assert!(parse_values_patch("").expect("empty").0.is_empty());
        assert!(parse_values_patch("  \n").expect("blank").0.is_empty());
        let p = parse_values_patch(
            r#"[{"op":"add","path":"/a","value":1},{"op":"remove","path":"/b"}]"#,
        )
        .expect("array");
        assert_eq!(p.0.len(), 2);
        let p = parse_values_patch("{\"op\":\"add\",\"path\":\"/a\",\"value\":1}\n{\"op\":\"replace\",\"path\":\"/c\",\"value\":\"x\"}\n")
            .expect("stream");
        assert_eq!(p.0.len(), 2);
    }

    #[test]
    fn rejects_garbage() {
        let e = parse_values_patch(r#"{"op":"frobnicate","path":"/a"}"#).unwrap_err();
        assert!(e.contains("document 0"), "{e}");
        assert!(parse_values_patch("42").is_err());
        assert!(parse_values_patch("[{\"op\":\"add\"").is_err());
    }
}
