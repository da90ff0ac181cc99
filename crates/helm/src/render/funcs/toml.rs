//! Sprig's `toToml` and `fromToml`.
//!
//! `fromToml` parses with the `toml` crate. `toToml` is written here because charts see the
//! exact text of Go's `BurntSushi/toml` encoder, whose layout no Rust crate reproduces: keys
//! of a table sorted, plain values before sub-tables, sub-tables indented two spaces per
//! level, a blank line before each top-level table and each `[[array]]` entry, floats in Go's
//! `%g` form with `.0` added to whole numbers, null values left out.

use super::args::{exact, str_arg, string};
use crate::render::value::{go_float, map_value};
use gotmpl::{FuncMap, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

pub fn register(fm: &mut FuncMap) {
    fm.insert(
        "toToml".into(),
        Arc::new(|a: &[Value]| {
            exact("toToml", a, 1)?;
            // Sprig returns the encoder's error text as the result.
            Ok(string(to_toml(&a[0]).unwrap_or_else(|e| e)))
        }),
    );
    fm.insert(
        "fromToml".into(),
        Arc::new(|a: &[Value]| {
            exact("fromToml", a, 1)?;
            Ok(from_toml(&str_arg("fromToml", a, 0)?))
        }),
    );
}

/// `fromToml`: the document as a map; a parse error comes back under the `Error` key.
fn from_toml(text: &str) -> Value {
    match toml::from_str::<toml::Table>(text) {
        Ok(t) => table_value(&t),
        Err(e) => {
            let mut m = BTreeMap::new();
            m.insert(
                Arc::<str>::from("Error"),
                string(format!("toml: {}", e.message())),
            );
            map_value(m)
        }
    }
}

fn table_value(t: &toml::Table) -> Value {
    map_value(
        t.iter()
            .map(|(k, v)| (Arc::<str>::from(k.as_str()), toml_value(v)))
            .collect(),
    )
}

fn toml_value(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => string(s.as_str()),
        toml::Value::Integer(i) => Value::Int(*i),
        toml::Value::Float(f) => Value::Float(*f),
        toml::Value::Boolean(b) => Value::Bool(*b),
        // Go decodes dates into time values, which print in RFC 3339 form.
        toml::Value::Datetime(d) => string(d.to_string()),
        toml::Value::Array(a) => Value::List(a.iter().map(toml_value).collect()),
        toml::Value::Table(t) => table_value(t),
    }
}

/// `toToml`: the TOML text of a map (or the bare value of anything else).
pub fn to_toml(v: &Value) -> std::result::Result<String, String> {
    let mut enc = Encoder::default();
    enc.encode(&[], v)?;
    Ok(enc.out)
}

#[derive(Default)]
struct Encoder {
    out: String,
    written: bool,
}

fn is_table(v: &Value) -> std::result::Result<bool, String> {
    Ok(match v {
        Value::Map(_) => true,
        Value::List(l) => is_table_array(l)?,
        _ => false,
    })
}

/// An array whose entries are all maps is written as `[[key]]` tables.
fn is_table_array(items: &[Value]) -> std::result::Result<bool, String> {
    if items.is_empty() {
        return Ok(false);
    }
    let mut all_maps = true;
    for item in items {
        match item {
            Value::Nil => return Err("toml: cannot encode array with nil element".into()),
            Value::Map(_) => {}
            _ => all_maps = false,
        }
    }
    Ok(all_maps)
}

fn is_bare_key(k: &str) -> bool {
    !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn key_part(k: &str) -> String {
    if is_bare_key(k) {
        k.to_string()
    } else {
        quote(k)
    }
}

fn dotted(key: &[&str]) -> String {
    key.iter()
        .map(|k| key_part(k))
        .collect::<Vec<_>>()
        .join(".")
}

fn indent(key: &[&str]) -> String {
    "  ".repeat(key.len().saturating_sub(1))
}

impl Encoder {
    fn write(&mut self, s: &str) {
        self.out.push_str(s);
        self.written = true;
    }

    fn newline(&mut self) {
        if self.written {
            self.write("\n");
        }
    }

    fn encode(&mut self, key: &[&str], v: &Value) -> std::result::Result<(), String> {
        // A map reached through many paths is written once per path: the render's memory
        // budget bounds the text.
        use crate::render::meter::{Built, fits, over};
        if !fits(self.out.len(), Built::String) {
            return Err(over().map(|e| e.to_string()).unwrap_or_default());
        }
        match v {
            Value::Nil => Ok(()),
            Value::Map(m) => {
                if key.len() == 1 {
                    self.newline();
                }
                if !key.is_empty() {
                    self.write(&format!("{}[{}]", indent(key), dotted(key)));
                    self.newline();
                }
                self.map(key, m, false)
            }
            Value::List(items) if is_table_array(items)? => {
                for item in items.iter() {
                    let Value::Map(m) = item else { continue };
                    self.newline();
                    self.write(&format!("{}[[{}]]", indent(key), dotted(key)));
                    self.newline();
                    self.map(key, m, false)?;
                }
                Ok(())
            }
            other => self.key_value(key, other, false),
        }
    }

    fn map(
        &mut self,
        key: &[&str],
        m: &BTreeMap<Arc<str>, Value>,
        inline: bool,
    ) -> std::result::Result<(), String> {
        let mut direct = Vec::new();
        let mut sub = Vec::new();
        for (k, v) in m {
            if is_table(v)? {
                sub.push((k, v));
            } else {
                direct.push((k, v));
            }
        }
        if inline {
            self.write("{");
        }
        let trailing_comma = !sub.is_empty();
        for (group, comma_after_last) in [(direct, trailing_comma), (sub, false)] {
            let n = group.len();
            for (i, (k, v)) in group.into_iter().enumerate() {
                if matches!(v, Value::Nil) {
                    continue;
                }
                if inline {
                    self.key_value(&[k], v, true)?;
                    if comma_after_last || i + 1 != n {
                        self.write(", ");
                    }
                } else {
                    let mut path = key.to_vec();
                    path.push(k);
                    self.encode(&path, v)?;
                }
            }
        }
        if inline {
            self.write("}");
        }
        Ok(())
    }

    fn key_value(
        &mut self,
        key: &[&str],
        v: &Value,
        inline: bool,
    ) -> std::result::Result<(), String> {
        let Some(last) = key.last() else {
            return self.element(v);
        };
        self.write(&format!("{}{} = ", indent(key), key_part(last)));
        self.element(v)?;
        if !inline {
            self.newline();
        }
        Ok(())
    }

    fn element(&mut self, v: &Value) -> std::result::Result<(), String> {
        match v {
            Value::String(s) => self.write(&quote(s)),
            Value::Bool(b) => self.write(if *b { "true" } else { "false" }),
            Value::Int(i) => self.write(&i.to_string()),
            Value::Uint(u) => self.write(&u.to_string()),
            Value::Float(f) => {
                let sign = if f.is_sign_negative() { "-" } else { "" };
                if f.is_nan() {
                    self.write(&format!("{sign}nan"));
                } else if f.is_infinite() {
                    self.write(&format!("{sign}inf"));
                } else {
                    let mut s = go_float(*f);
                    if !s.contains(['.', 'e']) {
                        s.push_str(".0");
                    }
                    self.write(&s);
                }
            }
            Value::List(items) => {
                self.write("[");
                for (i, item) in items.iter().enumerate() {
                    if matches!(item, Value::Nil) {
                        return Err("toml: cannot encode array with nil element".into());
                    }
                    self.element(item)?;
                    if i + 1 != items.len() {
                        self.write(", ");
                    }
                }
                self.write("]");
            }
            Value::Map(m) => self.map(&[], m, true)?,
            other => {
                return Err(format!(
                    "toml: cannot encode a value of type {}",
                    other.type_name()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::value::from_json;
    use serde_json::json;

    #[test]
    fn writes_the_layout_of_go_s_toml_encoder() {
        let v = from_json(&json!({
            "name": "app", "port": 8080.0, "big": 1e6, "list": [1.0, "two"], "n": null,
            "nested": {"deep": {"k": "v"}, "arr": [{"a": 1}, {"a": 2}]}, "a.b": 1
        }));
        let want = "\"a.b\" = 1\nbig = 1e+06\nlist = [1.0, \"two\"]\nname = \"app\"\nport = 8080.0\n\n\
                    [nested]\n\n  [[nested.arr]]\n    a = 1\n\n  [[nested.arr]]\n    a = 2\n  \
                    [nested.deep]\n    k = \"v\"\n";
        assert_eq!(to_toml(&v).as_deref(), Ok(want));
        assert_eq!(to_toml(&from_json(&json!([1, 2]))).as_deref(), Ok("[1, 2]"));
        assert!(to_toml(&from_json(&json!({"l": [1, null]}))).is_err());
    }

    #[test]
    fn reads_toml_documents() {
        let v = from_toml("a = 1\nb = 'x'\n[t]\nc = [1, 2]\ne = 1979-05-27T07:32:00Z\n");
        assert_eq!(
            v.to_string(),
            "map[a:1 b:x t:map[c:[1 2] e:1979-05-27T07:32:00Z]]"
        );
        assert!(from_toml("a = ").field("Error").is_some());
    }
}
