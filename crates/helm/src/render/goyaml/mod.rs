//! A YAML emitter that reproduces the output of Helm's `toYaml`, and (`load`) the reader that
//! matches how Helm reads YAML.
//!
//! Helm marshals values with `sigs.k8s.io/yaml`, which goes through JSON and then through go-yaml
//! v2's emitter. Chart authors rely on that exact text: keys sorted in go-yaml's "natural" order,
//! sequences not indented under their key, multi-line strings as literal blocks, strings that
//! would read back as another type double-quoted, long lines folded at a space past column 80.
//! No Rust YAML crate emits that dialect, so it is written here by hand after libyaml's emitter
//! rules: `scalar` picks and writes scalar styles, `resolve` holds the YAML 1.1 resolver and the
//! key order.

mod fast;
pub mod load;
mod resolve;
mod scalar;
#[cfg(test)]
mod tests;

pub use resolve::natural_cmp;
use scalar::{At, column, scalar};
use serde_json::Value;

/// Serializes `value` the way `yaml.Marshal` from `sigs.k8s.io/yaml` does (with the trailing
/// newline that `toYaml` later trims).
pub fn to_yaml(value: &Value) -> String {
    emit(value, Style::V2)
}

/// Serializes `value` as Helm's `toYamlPretty` does (go-yaml v3's encoder with a two-space
/// indent): sequences are indented under their key and long lines are not folded; everything
/// else (key order, scalar styles) as [`to_yaml`].
pub fn to_yaml_pretty(value: &Value) -> String {
    emit(value, Style::Pretty)
}

/// The two dialects Helm writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    /// `toYaml`: go-yaml v2 through `sigs.k8s.io/yaml`.
    V2,
    /// `toYamlPretty`: go-yaml v3, indent 2.
    Pretty,
}

fn emit(value: &Value, style: Style) -> String {
    let mut out = String::new();
    match value {
        Value::Object(m) if !m.is_empty() => emit_map(&mut out, m, 0, style),
        Value::Array(a) if !a.is_empty() => emit_seq(&mut out, a, 0, style),
        // A top-level scalar is indented like a node one level down (libyaml's `indent < 0`).
        other => {
            emit_inline(&mut out, other, 2, style);
            out.push('\n');
        }
    }
    out
}

/// Writes a non-empty mapping whose first key starts at the current cursor; later keys are
/// indented by `indent` spaces.
fn emit_map(out: &mut String, map: &serde_json::Map<String, Value>, indent: usize, style: Style) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_by(|a, b| natural_cmp(a, b));
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            push_indent(out, indent);
        }
        let at = At {
            column: column(out),
            indent,
            simple_key: true,
            fold: style == Style::V2,
        };
        out.push_str(&scalar(key, at));
        out.push(':');
        let value = &map[key.as_str()];
        match value {
            Value::Object(m) if !m.is_empty() => {
                out.push('\n');
                push_indent(out, indent + 2);
                emit_map(out, m, indent + 2, style);
            }
            // go-yaml v2 does not indent a sequence that is the value of a mapping key; v3
            // (toYamlPretty) does.
            Value::Array(a) if !a.is_empty() => {
                let at = if style == Style::Pretty {
                    indent + 2
                } else {
                    indent
                };
                out.push('\n');
                push_indent(out, at);
                emit_seq(out, a, at, style);
            }
            other => {
                out.push(' ');
                emit_inline(out, other, indent + 2, style);
                out.push('\n');
            }
        }
    }
}

/// Writes a non-empty sequence whose first `- ` starts at the current cursor.
fn emit_seq(out: &mut String, items: &[Value], indent: usize, style: Style) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            push_indent(out, indent);
        }
        out.push_str("- ");
        match item {
            Value::Object(m) if !m.is_empty() => emit_map(out, m, indent + 2, style),
            Value::Array(a) if !a.is_empty() => emit_seq(out, a, indent + 2, style),
            other => {
                emit_inline(out, other, indent + 2, style);
                out.push('\n');
            }
        }
    }
}

/// Writes a scalar or an empty collection; `block_indent` is where literal block lines go.
fn emit_inline(out: &mut String, value: &Value, block_indent: usize, style: Style) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&format_number(n)),
        Value::String(s) => {
            let at = At {
                column: column(out),
                indent: block_indent,
                simple_key: false,
                fold: style == Style::V2,
            };
            out.push_str(&scalar(s, at));
        }
        Value::Array(_) => out.push_str("[]"),
        Value::Object(_) => out.push_str("{}"),
    }
}

pub(super) fn push_indent(out: &mut String, n: usize) {
    out.extend(std::iter::repeat_n(' ', n));
}

/// Numbers pass through JSON first in Helm, so an integral float prints as an integer.
pub fn format_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
        Some(f) => format!("{f}"),
        None => n.to_string(),
    }
}
