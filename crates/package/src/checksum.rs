//! Checksums of settings and values, used to tell whether anything changed.
//!
//! `serde_json` is built with `preserve_order` in this workspace, so two equal objects can
//! serialise differently; the checksum therefore hashes a canonical form with object keys sorted.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// `sha256:<hex>` of the canonical JSON of `value` (object keys sorted, no whitespace).
pub fn checksum(value: &Value) -> String {
    let mut hasher = Sha256::new();
    write_canonical(value, &mut hasher);
    format!("sha256:{}", hex::encode(hasher.finalize()))
}

fn write_canonical(value: &Value, hasher: &mut Sha256) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            hasher.update(b"{");
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    hasher.update(b",");
                }
                hasher.update(Value::String(key.clone()).to_string().as_bytes());
                hasher.update(b":");
                if let Some(child) = map.get(key) {
                    write_canonical(child, hasher);
                }
            }
            hasher.update(b"}");
        }
        Value::Array(items) => {
            hasher.update(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    hasher.update(b",");
                }
                write_canonical(item, hasher);
            }
            hasher.update(b"]");
        }
        scalar => hasher.update(scalar.to_string().as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_does_not_matter_but_content_does() {
        let a: Value =
            serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": null}}"#).expect("json");
        let b: Value =
            serde_json::from_str(r#"{"a": {"x": null, "y": [1, 2]}, "b": 1}"#).expect("json");
        assert_eq!(checksum(&a), checksum(&b));
        assert_ne!(
            checksum(&a),
            checksum(&json!({"b": 1, "a": {"y": [2, 1], "x": null}}))
        );
        assert_ne!(checksum(&json!({"a": "1"})), checksum(&json!({"a": 1})));
        assert!(checksum(&a).starts_with("sha256:"));
    }
}
