//! Conversions between JSON values as Δ-controller's expressions make them, and the stable
//! encodings `@hash` and `@gather` need.

use std::fmt::Write as _;

use md5::{Digest, Md5};
use serde_json::{Number, Value};

/// The name of a value's type, for errors.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

/// A value shortened for an error message.
pub fn show(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() <= 80 {
        return text;
    }
    let head: String = text.chars().take(77).collect();
    format!("{head}...")
}

/// An integer: an integer number, or a string of one (as upstream's `AsInt`).
pub fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A float: any number, or a string of one.
pub fn as_float(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A string: strings as they are, numbers in decimal, booleans as `true`/`false`.
pub fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(number_text(n)),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A number as Go's encoding/json writes it: integers in decimal, floats in their shortest
/// form without a trailing `.0`.
fn number_text(n: &Number) -> String {
    if let Some(f) = n.as_f64().filter(|_| n.is_f64()) {
        if f.fract() == 0.0 && f.abs() < 1e21 {
            return format!("{f:.0}");
        }
        if (1e-6..1e21).contains(&f.abs()) {
            return format!("{f}");
        }
        // Go's exponent form: `1e-07`, `1e+21`.
        let text = format!("{f:e}");
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let (sign, digits) = match exponent.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exponent),
        };
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    n.to_string()
}

/// A number from an integer.
pub fn int(i: i64) -> Value {
    Value::Number(i.into())
}

/// A number from a float; NaN and infinities, which JSON has not, become null.
pub fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// The JSON Go's encoding/json writes for a value: map keys sorted, `<`, `>` and `&` escaped,
/// no spaces. Upstream hashes this text, so `@hash` gives the names Δ-controller gives.
pub fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(v, &mut out);
    out
}

fn write_go_json(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number_text(n)),
        Value::String(s) => write_go_string(s, out),
        Value::Array(list) => {
            out.push('[');
            for (i, item) in list.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_string(key, out);
                out.push(':');
                write_go_json(&map[key], out);
            }
            out.push('}');
        }
    }
}

fn write_go_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `@hash`: the MD5 of the value's Go JSON as a base-36 number, zero-padded to 25 digits, its
/// first 6 characters.
pub fn hash6(v: &Value) -> String {
    let digest: [u8; 16] = Md5::digest(go_json(v).as_bytes()).into();
    let mut n = u128::from_be_bytes(digest);
    let mut digits = Vec::with_capacity(25);
    while n > 0 {
        let d = u32::try_from(n % 36).unwrap_or(0);
        digits.push(char::from_digit(d, 36).unwrap_or('0'));
        n /= 36;
    }
    while digits.len() < 25 {
        digits.push('0');
    }
    digits.iter().rev().take(6).collect()
}

/// A stable key for grouping and sorting values (`@gather`).
pub fn key_of(v: &Value) -> String {
    go_json(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_json_sorts_keys_and_escapes_html() {
        let v = json!({"b": [1, 2.5, 3.0], "a": "<x & y>", "c": null});
        assert_eq!(
            go_json(&v),
            r#"{"a":"\u003cx \u0026 y\u003e","b":[1,2.5,3],"c":null}"#
        );
        assert_eq!(go_json(&json!(1e-7)), "1e-07");
        assert_eq!(go_json(&json!("a\u{8}\u{c}\u{1}")), r#""a\b\f\u0001""#);
        assert_eq!(go_json(&json!(1.5e300)), "1.5e+300");
    }

    #[test]
    fn hash_is_six_base36_characters_and_stable() {
        let a = hash6(&json!({"port": 80, "name": "http"}));
        let b = hash6(&json!({"name": "http", "port": 80}));
        assert_eq!(a, b);
        assert_eq!(a.len(), 6);
        assert!(
            a.chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase())
        );
        assert_ne!(a, hash6(&json!({"name": "http", "port": 81})));
        // MD5("{}") is 99914b932bd37a50b983c5e7c90ae93b; in base 36, 25 digits zero-padded.
        let n = u128::from_str_radix("99914b932bd37a50b983c5e7c90ae93b", 16).expect("hex");
        let mut expect = String::new();
        let mut m = n;
        while m > 0 {
            expect.insert(0, char::from_digit((m % 36) as u32, 36).expect("digit"));
            m /= 36;
        }
        let expect = format!("{expect:0>25}");
        assert_eq!(hash6(&json!({})), expect[..6]);
    }

    #[test]
    fn conversions_follow_upstream() {
        assert_eq!(as_int(&json!("42")), Some(42));
        assert_eq!(as_int(&json!(4.5)), None);
        assert_eq!(as_float(&json!(3)), Some(3.0));
        assert_eq!(as_string(&json!(3)), Some("3".into()));
        assert_eq!(as_string(&json!(2.5)), Some("2.5".into()));
        assert_eq!(as_string(&json!([1])), None);
    }
}
