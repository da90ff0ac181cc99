//! A YAML emitter that reproduces the output of Helm's `toYaml`.
//!
//! Helm marshals values with `sigs.k8s.io/yaml`, which goes through JSON and then through go-yaml
//! v2's emitter. Chart authors rely on that exact text (keys sorted in go-yaml's "natural" order,
//! sequences not indented under their key, multi-line strings as literal blocks, strings that
//! would read back as another type double-quoted). No Rust YAML crate emits that dialect, so it
//! is written here by hand. Known gap: go-yaml folds plain scalars longer than 80 columns at
//! spaces; this emitter never folds.

use serde_json::Value;
use std::cmp::Ordering;

/// Serializes `value` the way `yaml.Marshal` from `sigs.k8s.io/yaml` does (with the trailing
/// newline that `toYaml` later trims).
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(m) if !m.is_empty() => emit_map(&mut out, m, 0),
        Value::Array(a) if !a.is_empty() => emit_seq(&mut out, a, 0),
        other => {
            emit_inline(&mut out, other, 0);
            out.push('\n');
        }
    }
    out
}

/// Writes a non-empty mapping whose first key starts at the current cursor; later keys are
/// indented by `indent` spaces.
fn emit_map(out: &mut String, map: &serde_json::Map<String, Value>, indent: usize) {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort_by(|a, b| natural_cmp(a, b));
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            push_indent(out, indent);
        }
        out.push_str(&scalar(key, indent, true));
        out.push(':');
        let value = &map[key.as_str()];
        match value {
            Value::Object(m) if !m.is_empty() => {
                out.push('\n');
                push_indent(out, indent + 2);
                emit_map(out, m, indent + 2);
            }
            // go-yaml v2 does not indent a sequence that is the value of a mapping key.
            Value::Array(a) if !a.is_empty() => {
                out.push('\n');
                push_indent(out, indent);
                emit_seq(out, a, indent);
            }
            other => {
                out.push(' ');
                emit_inline(out, other, indent + 2);
                out.push('\n');
            }
        }
    }
}

/// Writes a non-empty sequence whose first `- ` starts at the current cursor.
fn emit_seq(out: &mut String, items: &[Value], indent: usize) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            push_indent(out, indent);
        }
        out.push_str("- ");
        match item {
            Value::Object(m) if !m.is_empty() => emit_map(out, m, indent + 2),
            Value::Array(a) if !a.is_empty() => emit_seq(out, a, indent + 2),
            other => {
                emit_inline(out, other, indent + 2);
                out.push('\n');
            }
        }
    }
}

/// Writes a scalar or an empty collection; `block_indent` is where literal block lines go.
fn emit_inline(out: &mut String, value: &Value, block_indent: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&format_number(n)),
        Value::String(s) => out.push_str(&scalar(s, block_indent, false)),
        Value::Array(_) => out.push_str("[]"),
        Value::Object(_) => out.push_str("{}"),
    }
}

fn push_indent(out: &mut String, n: usize) {
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

/// Renders a string scalar in the style go-yaml v2 picks for it.
fn scalar(s: &str, block_indent: usize, simple_key: bool) -> String {
    if resolves_to_non_string(s) {
        return double_quoted(s);
    }
    let a = analyze(s);
    if s.contains('\n') {
        if !simple_key && a.block_allowed {
            return literal(s, block_indent);
        }
        return double_quoted(s);
    }
    if a.plain_allowed {
        s.to_string()
    } else if a.single_allowed {
        format!("'{}'", s.replace('\'', "''"))
    } else {
        double_quoted(s)
    }
}

struct Analysis {
    plain_allowed: bool,
    single_allowed: bool,
    block_allowed: bool,
}

fn is_blank_or_end(c: Option<char>) -> bool {
    matches!(c, None | Some(' ' | '\t' | '\n' | '\r'))
}

/// YAML's notion of a printable character (libyaml `IS_PRINTABLE`).
fn is_printable(c: char) -> bool {
    matches!(c as u32,
        0x0A | 0x20..=0x7E | 0x85 | 0xA0..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10FFFF)
        && c != '\u{FEFF}'
}

/// Mirrors libyaml's `yaml_emitter_analyze_scalar` for block context.
fn analyze(s: &str) -> Analysis {
    let chars: Vec<char> = s.chars().collect();
    let mut block_indicators = s.starts_with("---") || s.starts_with("...");
    let mut special = false;
    let (mut space_break, mut break_space) = (false, false);
    let mut line_breaks = false;
    for (i, &c) in chars.iter().enumerate() {
        let next = chars.get(i + 1).copied();
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' | '-' if is_blank_or_end(next) => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if is_blank_or_end(next) => block_indicators = true,
                '#' if matches!(chars[i - 1], ' ' | '\t' | '\n') => block_indicators = true,
                _ => {}
            }
        }
        if !is_printable(c) || (!c.is_ascii() && c == '\u{FEFF}') {
            special = true;
        }
        if c == '\n' {
            line_breaks = true;
        }
        if c == ' ' && next == Some('\n') {
            space_break = true;
        }
        if c == '\n' && next == Some(' ') {
            break_space = true;
        }
    }
    let first = chars.first().copied();
    let last = chars.last().copied();
    let leading = matches!(first, Some(' ' | '\n'));
    let trailing = matches!(last, Some(' ' | '\n'));
    let trailing_space = last == Some(' ');
    let mut a = Analysis {
        plain_allowed: !(block_indicators || leading || trailing || line_breaks),
        single_allowed: true,
        block_allowed: !trailing_space,
    };
    if break_space {
        a.plain_allowed = false;
        a.single_allowed = false;
    }
    if space_break || special {
        a.plain_allowed = false;
        a.single_allowed = false;
        a.block_allowed = false;
    }
    a
}

/// A literal block scalar (`|`, `|-`, `|+`) whose lines sit at `indent`.
fn literal(s: &str, indent: usize) -> String {
    let mut out = String::from("|");
    if s.starts_with([' ', '\n']) {
        out.push('2');
    }
    let body = if !s.ends_with('\n') {
        out.push('-');
        s
    } else if s.len() == 1 || s.ends_with("\n\n") {
        out.push('+');
        &s[..s.len() - 1]
    } else {
        &s[..s.len() - 1]
    };
    for line in body.split('\n') {
        out.push('\n');
        if !line.is_empty() {
            push_indent(&mut out, indent);
            out.push_str(line);
        }
    }
    out
}

fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\0' => out.push_str("\\0"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{B}' => out.push_str("\\v"),
            '\u{C}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            '\u{1B}' => out.push_str("\\e"),
            '\u{85}' => out.push_str("\\N"),
            '\u{A0}' => out.push_str("\\_"),
            '\u{2028}' => out.push_str("\\L"),
            '\u{2029}' => out.push_str("\\P"),
            c if is_printable(c) => out.push(c),
            c if (c as u32) <= 0xFF => out.push_str(&format!("\\x{:02X}", c as u32)),
            c if (c as u32) <= 0xFFFF => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push_str(&format!("\\U{:08X}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// True when go-yaml v2's resolver would read the plain text back as something other than a
/// string (bool, null, int, float, YAML 1.1 sexagesimal), which forces double quotes.
fn resolves_to_non_string(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "", "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
        "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
        ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
        "-.Inf", "-.INF", "<<",
    ];
    if WORDS.contains(&s) {
        return true;
    }
    let Some(first) = s.chars().next() else {
        return true;
    };
    if !matches!(first, '+' | '-' | '.' | '0'..='9') {
        return false;
    }
    looks_like_int(s) || looks_like_float(s) || looks_like_base60(s)
}

fn looks_like_int(s: &str) -> bool {
    let plain: String = s.chars().filter(|c| *c != '_').collect();
    let body = plain.strip_prefix(['+', '-']).unwrap_or(&plain);
    if body.is_empty() {
        return false;
    }
    if let Some(bin) = body.strip_prefix("0b") {
        return !bin.is_empty() && bin.chars().all(|c| c == '0' || c == '1');
    }
    if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        return !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit());
    }
    if let Some(oct) = body.strip_prefix("0o") {
        return !oct.is_empty() && oct.chars().all(|c| ('0'..='7').contains(&c));
    }
    if body.len() > 1 && body.starts_with('0') {
        return body.chars().all(|c| ('0'..='7').contains(&c));
    }
    body.chars().all(|c| c.is_ascii_digit())
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`, go-yaml's float pattern.
fn looks_like_float(s: &str) -> bool {
    let plain: String = s.chars().filter(|c| *c != '_').collect();
    let body = plain.strip_prefix(['+', '-']).unwrap_or(&plain);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => !frac.is_empty() && frac.chars().all(|c| c.is_ascii_digit()),
        Some((int, frac)) => {
            int.chars().all(|c| c.is_ascii_digit()) && frac.chars().all(|c| c.is_ascii_digit())
        }
        None => !mantissa.is_empty() && mantissa.chars().all(|c| c.is_ascii_digit()),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
        !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
    });
    mantissa_ok && exponent_ok
}

/// YAML 1.1 sexagesimal numbers like `1:20` or `190:20:30.15`.
fn looks_like_base60(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (head, rest) = match body.split_once(':') {
        Some(p) => p,
        None => return false,
    };
    if head.is_empty()
        || !head.starts_with(|c: char| c.is_ascii_digit())
        || !head.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return false;
    }
    let (groups, frac) = match rest.split_once('.') {
        Some((g, f)) => (g, Some(f)),
        None => (rest, None),
    };
    let groups_ok = groups.split(':').all(|g| {
        !g.is_empty()
            && g.len() <= 2
            && g.chars().all(|c| c.is_ascii_digit())
            && (g.len() == 1 || g.starts_with(|c: char| ('0'..='5').contains(&c)))
    });
    groups_ok && frac.is_none_or(|f| f.chars().all(|c| c.is_ascii_digit() || c == '_'))
}

/// go-yaml v2's key order: letters compare by code point, a non-letter sorts before a letter,
/// and runs of digits compare by numeric value (so `a2` < `a10`).
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let ar: Vec<char> = a.chars().collect();
    let br: Vec<char> = b.chars().collect();
    let mut i = 0;
    while i < ar.len() && i < br.len() {
        if ar[i] == br[i] {
            i += 1;
            continue;
        }
        let (al, bl) = (ar[i].is_alphabetic(), br[i].is_alphabetic());
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            return if bl {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let (mut an, mut bn) = (0i64, 0i64);
        if ar[i] == '0' || br[i] == '0' {
            let mut j = i;
            while j > 0 && ar[j - 1].is_ascii_digit() {
                j -= 1;
                if ar[j] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let mut ai = i;
        while ai < ar.len() && ar[ai].is_ascii_digit() {
            an = an
                .saturating_mul(10)
                .saturating_add(i64::from(ar[ai] as u8 - b'0'));
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && br[bi].is_ascii_digit() {
            bn = bn
                .saturating_mul(10)
                .saturating_add(i64::from(br[bi] as u8 - b'0'));
            bi += 1;
        }
        if an != bn {
            return an.cmp(&bn);
        }
        if ai != bi {
            return ai.cmp(&bi);
        }
        return ar[i].cmp(&br[i]);
    }
    ar.len().cmp(&br.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_maps_and_lists_use_go_yaml_layout() {
        let v = json!({"b": {"y": [1, 2], "x": "s"}, "a": [{"k": "v", "j": true}, ["q"]], "e": {}, "f": []});
        let want =
            "a:\n- j: true\n  k: v\n- - q\nb:\n  x: s\n  \"y\":\n  - 1\n  - 2\ne: {}\nf: []\n";
        assert_eq!(to_yaml(&v), want);
    }

    #[test]
    fn strings_that_read_back_as_other_types_are_double_quoted() {
        for s in [
            "true", "yes", "on", "123", "0x1F", "1.5", "1e3", "", "null", "~", "1:20", "0777",
        ] {
            assert_eq!(to_yaml(&json!(s)), format!("\"{s}\"\n"), "for {s:?}");
        }
        assert_eq!(to_yaml(&json!("1.2.3")), "1.2.3\n");
        assert_eq!(to_yaml(&json!("v1")), "v1\n");
        assert_eq!(to_yaml(&json!("n")), "\"n\"\n");
    }

    #[test]
    fn indicators_force_single_quotes() {
        assert_eq!(to_yaml(&json!("*")), "'*'\n");
        assert_eq!(to_yaml(&json!("a: b")), "'a: b'\n");
        assert_eq!(to_yaml(&json!("it's #x")), "'it''s #x'\n");
        assert_eq!(to_yaml(&json!(" lead")), "' lead'\n");
        assert_eq!(to_yaml(&json!("a:b")), "a:b\n");
        assert_eq!(to_yaml(&json!("tab\there")), "\"tab\\there\"\n");
    }

    #[test]
    fn multiline_strings_become_literal_blocks() {
        let v = json!({"script": "echo a\necho b\n", "nochomp": "x\ny", "keep": "z\n\n"});
        let want = "keep: |+\n  z\n\nnochomp: |-\n  x\n  y\nscript: |\n  echo a\n  echo b\n";
        assert_eq!(to_yaml(&v), want);
        assert_eq!(to_yaml(&json!(["a\nb"])), "- |-\n  a\n  b\n");
    }

    #[test]
    fn numbers_print_like_json_numbers() {
        assert_eq!(
            to_yaml(&json!({"a": 1.0, "b": 0.5, "c": 1000000})),
            "a: 1\nb: 0.5\nc: 1000000\n"
        );
    }

    #[test]
    fn keys_sort_naturally() {
        let mut keys = vec!["a10", "a2", "b", "_x", "Z", "a"];
        keys.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(keys, vec!["_x", "Z", "a", "a2", "a10", "b"]);
    }
}
