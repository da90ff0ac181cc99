//! The one path form berth shows users for a place inside settings or values.
//!
//! Form: `.` is the root; object fields are `.name`; array elements are `[2]`; field names that
//! are not plain identifiers (`[A-Za-z0-9_-]+`) are quoted: `["app.kubernetes.io/name"]`.
//! Examples: `.replicas`, `.ingress.host`, `.items[2].port`. It reads like the `.Values.x`
//! templates use and like `jq`, which hooks already speak.

use serde_json::Value;

/// Builds the display path of a JSON pointer (`/a/0/b`) evaluated against `root`. The instance
/// decides whether a numeric segment is an array index or an object key named like a number.
pub(crate) fn from_pointer(root: &Value, pointer: &str) -> String {
    let mut out = String::new();
    let mut current = Some(root);
    for raw in pointer.split('/').skip(1) {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        match current {
            Some(Value::Array(items)) if segment.parse::<usize>().is_ok() => {
                out.push_str(&format!("[{segment}]"));
                current = segment.parse::<usize>().ok().and_then(|i| items.get(i));
            }
            _ => {
                push_field(&mut out, &segment);
                current = current.and_then(|v| v.get(&segment));
            }
        }
    }
    if out.is_empty() { ".".to_owned() } else { out }
}

/// Appends `.name` (or `["odd name"]`) to a display path.
pub(crate) fn push_field(path: &mut String, name: &str) {
    if path == "." {
        path.clear();
    }
    let plain = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        path.push('.');
        path.push_str(name);
    } else {
        path.push('[');
        path.push_str(&Value::String(name.to_owned()).to_string());
        path.push(']');
    }
}

/// `parent` joined with a field name.
pub(crate) fn child(parent: &str, name: &str) -> String {
    let mut out = parent.to_owned();
    push_field(&mut out, name);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn formats_fields_indexes_and_odd_keys() {
        let doc = json!({"items": [{"port": 1}, {"port": 2}], "10": {"a.b": 1}});
        assert_eq!(from_pointer(&doc, ""), ".");
        assert_eq!(from_pointer(&doc, "/items/1/port"), ".items[1].port");
        assert_eq!(from_pointer(&doc, "/10/a.b"), ".10[\"a.b\"]");
        assert_eq!(child(".", "replicas"), ".replicas");
        assert_eq!(child(".a", "x/y"), ".a[\"x/y\"]");
    }
}
