//! Conversions between template values (`gotmpl::Value`) and JSON values, plus the Go-style
//! string formatting that Sprig applies when it turns an arbitrary value into text.

use super::bytes::{self, Piece, lossy};
use super::meter::{self, Built, NODE};
use gotmpl::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Converts JSON (values, Chart.yaml, parsed YAML) into a template value. Integers stay
/// integers; maps become sorted maps, which is also the order Go ranges over them. What it
/// builds is charged to the render's memory budget (`render::meter`); once that is spent,
/// containers are left out.
pub fn from_json(v: &serde_json::Value) -> Value {
    let size = match v {
        serde_json::Value::String(s) => s.len(),
        serde_json::Value::Array(a) => a.len() * NODE,
        serde_json::Value::Object(m) => m.len() * NODE,
        _ => 0,
    };
    if size > 0 && !meter::charge(size, Built::Map) {
        return Value::Nil;
    }
    match v {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                Value::Uint(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(0.0))
            }
        }
        serde_json::Value::String(s) => Value::String(s.as_str().into()),
        serde_json::Value::Array(a) => Value::List(a.iter().map(from_json).collect()),
        serde_json::Value::Object(m) => Value::Map(Arc::new(
            m.iter()
                .map(|(k, v)| (Arc::<str>::from(k.as_str()), from_json(v)))
                .collect(),
        )),
    }
}

/// Converts a template value back into JSON. Functions have no JSON form and become null, as
/// Go's encoder would refuse them; bytes that are not UTF-8 become U+FFFD, as Go's encoder
/// writes them (this feeds `toYaml`, which goes through JSON in Helm too). Everything it
/// builds is charged to the render's memory budget: a map reached through many paths is
/// written once per path, and the budget stops that (containers are then left out).
pub fn to_json(v: &Value) -> serde_json::Value {
    let size = match v {
        Value::String(s) => s.len() + NODE,
        Value::List(a) => a.len() * NODE,
        Value::Map(m) => m.keys().map(|k| k.len() + NODE).sum(),
        _ => 0,
    };
    if size > 0 && !meter::charge(size, Built::Map) {
        return serde_json::Value::Null;
    }
    match v {
        Value::Nil | Value::Function(_) => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => serde_json::Value::from(*i),
        Value::Uint(u) => serde_json::Value::from(*u),
        // Go's encoding/json writes whole floats below 1e21 without a fraction (`5432`, not
        // `5432.0`); values from files are floats in Helm, so this is the common case.
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => {
            serde_json::Value::from(*f as i64)
        }
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .unwrap_or(serde_json::Value::Null),
        Value::String(s) => serde_json::Value::String(lossy(s).into_owned()),
        Value::List(items) => serde_json::Value::Array(items.iter().map(to_json).collect()),
        Value::Map(m) => serde_json::Value::Object(
            m.iter()
                .map(|(k, v)| (lossy(k).into_owned(), to_json(v)))
                .collect(),
        ),
    }
}

/// Builds a map value from owned entries.
pub fn map_value(entries: BTreeMap<Arc<str>, Value>) -> Value {
    Value::Map(Arc::new(entries))
}

/// Sprig's `strval`: strings as-is, nil as empty, everything else in Go's `%v` form.
pub fn strval(v: &Value) -> String {
    match v {
        Value::String(s) => s.to_string(),
        Value::Nil => String::new(),
        other => go_sprint(other),
    }
}

/// Go's `fmt.Sprint` of a value: floats in `%v` form, lists as `[a b]`, maps as
/// `map[k:v]` (keys sorted, as Go prints them), nil inside containers as `<nil>`.
///
/// The text of lists and maps is charged to the render's memory budget (a map reached
/// through many paths prints once per path); once that is spent, the rest is left out.
pub fn go_sprint(v: &Value) -> String {
    match v {
        Value::String(s) => s.to_string(),
        Value::Nil => "<nil>".into(),
        Value::Float(f) => go_float(*f),
        Value::List(items) => {
            let mut out = String::from("[");
            for (i, item) in items.iter().enumerate() {
                if meter::over().is_some() {
                    break;
                }
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(&go_sprint(item));
            }
            out.push(']');
            meter::charge(out.len(), Built::String);
            out
        }
        Value::Map(m) => {
            let mut out = String::from("map[");
            for (i, (k, v)) in m.iter().enumerate() {
                if meter::over().is_some() {
                    break;
                }
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                out.push_str(&go_sprint(v));
            }
            out.push(']');
            meter::charge(out.len(), Built::String);
            out
        }
        other => other.to_string(),
    }
}

/// At least as many bytes as Go's printing of `v` (`%v`) makes: what a function that prints
/// its arguments asks of the memory budget before it prints. Lists and maps shared by several
/// paths are measured once (and counted once per path), so measuring stays linear in the
/// value's size however large its printing is.
pub fn printed_len(v: &Value) -> usize {
    fn walk(v: &Value, seen: &mut std::collections::HashMap<usize, usize>) -> usize {
        let key = match v {
            Value::List(l) => l.as_ptr() as usize,
            Value::Map(m) => Arc::as_ptr(m) as usize,
            Value::String(s) => return s.len(),
            _ => return 32,
        };
        if let Some(n) = seen.get(&key) {
            return *n;
        }
        let n = match v {
            Value::List(l) => l
                .iter()
                .map(|x| walk(x, seen).saturating_add(1))
                .fold(2usize, usize::saturating_add),
            Value::Map(m) => m
                .iter()
                .map(|(k, x)| walk(x, seen).saturating_add(k.len() + 2))
                .fold(5usize, usize::saturating_add),
            _ => 0,
        };
        seen.insert(key, n);
        n
    }
    walk(v, &mut std::collections::HashMap::new())
}

/// Go's `%v` for a float64: shortest representation, exponent form for very large or small.
pub fn go_float(f: f64) -> String {
    go_g(f, f)
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 32)`: the shortest text that reads back as the same
/// float32 (how `sigs.k8s.io/yaml` writes float map keys and floats read into strings).
pub fn go_float32(f: f64) -> String {
    go_g(f as f32, f)
}

/// `%g` with the shortest digits of `digits` (an f32 or f64; `f` is the same number).
fn go_g<T: std::fmt::Display + std::fmt::LowerExp>(digits: T, f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    // Go's %v is %g with the shortest digits, which switches to an exponent below 1e-4 and
    // from 1e6 up (so `{{ .Values.n }}` of 1000000 read from a values file prints `1e+06`).
    let abs = f.abs();
    if abs != 0.0 && !(1e-4..1e6).contains(&abs) {
        let s = format!("{digits:e}");
        // Rust writes `1e21`/`1e-5`; Go writes `1e+21`/`1e-05`.
        if let Some((m, e)) = s.split_once('e') {
            let (sign, digits) = match e.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', e),
            };
            return format!("{m}e{sign}{digits:0>2}");
        }
        return s;
    }
    format!("{digits}")
}

/// Sprig's `empty`: the zero value of its type (nil, false, 0, "", empty list or map).
pub fn is_empty(v: &Value) -> bool {
    !v.is_truthy() && !matches!(v, Value::Function(_))
}

/// Go's `%q`: a double-quoted string with Go escape sequences; a byte that is not UTF-8 is
/// written `\xNN`, so the result is always printable text.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    bytes::for_each_piece(s, |piece| match piece {
        Piece::Text(text) => text.chars().for_each(|c| push_quoted_char(&mut out, c)),
        Piece::Byte(b) => out.push_str(&format!("\\x{b:02x}")),
    });
    out.push('"');
    out
}

fn push_quoted_char(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{C}' => out.push_str("\\f"),
        '\u{B}' => out.push_str("\\v"),
        c if c < ' ' || c == '\u{7F}' => out.push_str(&format!("\\x{:02x}", u32::from(c))),
        c if !go_printable(c) && u32::from(c) < 0x1_0000 => {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        }
        c if !go_printable(c) => out.push_str(&format!("\\U{:08x}", u32::from(c))),
        c => out.push(c),
    }
}

/// An approximation of Go's `strconv.IsPrint` without Unicode category tables: control
/// characters, spaces other than U+0020, the common format characters and private-use
/// characters are not printable.
pub fn go_printable(c: char) -> bool {
    let n = u32::from(c);
    !(c.is_control()
        || (c.is_whitespace() && c != ' ')
        || n == 0xAD
        || (0x200B..=0x200F).contains(&n)
        || (0x202A..=0x202E).contains(&n)
        || (0x2060..=0x2064).contains(&n)
        || n == 0xFEFF
        || (0xE000..=0xF8FF).contains(&n)
        || n >= 0xF_0000)
}

/// Reads an integer the way Sprig's `toInt64` (via `cast`) does: numbers truncate, strings
/// are Go integer literals (`strconv.ParseInt(s, 0, 64)`: `0x1F`, `0o17`, `017`, `0b101`,
/// `1_000`; a trailing `.0...` is dropped first; no spaces), booleans are 0/1, anything
/// else is 0.
pub fn to_i64(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        Value::Uint(u) => i64::try_from(*u).unwrap_or(i64::MAX),
        Value::Float(f) => *f as i64,
        Value::Bool(b) => i64::from(*b),
        Value::String(s) => go_parse_int(trim_zero_decimal(s)).unwrap_or(0),
        _ => 0,
    }
}

/// cast's `trimZeroDecimal`: `12.00` → `12` (`12.5` and `12.` stay).
fn trim_zero_decimal(s: &str) -> &str {
    let mut found_zero = false;
    for (i, b) in s.bytes().enumerate().rev() {
        match b {
            b'.' if found_zero => return &s[..i],
            b'.' => return s,
            b'0' => found_zero = true,
            _ => return s,
        }
    }
    s
}

/// Go's `underscoreOK`: underscores only between digits, or between a base prefix and a
/// digit.
fn underscores_ok(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s).as_bytes();
    // '^' start, '0' digit or prefix, '_' underscore, '!' anything else.
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if s.len() >= 2 && s[0] == b'0' && matches!(s[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = s[1].eq_ignore_ascii_case(&b'x');
    }
    for &c in &s[i..] {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else if saw == b'_' {
            return false;
        } else {
            saw = b'!';
        }
    }
    saw != b'_'
}

/// Go's `strconv.ParseInt(s, 0, 64)`.
pub fn go_parse_int(s: &str) -> Option<i64> {
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let b = body.as_bytes();
    let (radix, digits) = match b {
        [b'0', p, _, ..] if p.eq_ignore_ascii_case(&b'x') => (16, &body[2..]),
        [b'0', p, _, ..] if p.eq_ignore_ascii_case(&b'o') => (8, &body[2..]),
        [b'0', p, _, ..] if p.eq_ignore_ascii_case(&b'b') => (2, &body[2..]),
        [b'0', _, ..] => (8, &body[1..]),
        _ => (10, body),
    };
    if body.contains('_') && !underscores_ok(s) {
        return None;
    }
    let digits = digits.replace('_', "");
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let magnitude = u64::from_str_radix(&digits, radix).ok()?;
    if negative {
        (magnitude <= i64::MAX as u64 + 1).then(|| (magnitude as i64).wrapping_neg())
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// Like [`to_i64`] but to a float (Sprig's `toFloat64`: `strconv.ParseFloat`, no spaces;
/// `_` may separate digits).
pub fn to_f64(v: &Value) -> f64 {
    match v {
        Value::Int(i) => *i as f64,
        Value::Uint(u) => *u as f64,
        Value::Float(f) => *f,
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::String(s) => go_parse_float(s).unwrap_or(0.0),
        _ => 0.0,
    }
}

/// Go's `strconv.ParseFloat(s, 64)` for decimal text (hexadecimal floats, which need a `p`
/// exponent, are not read: 0).
fn go_parse_float(s: &str) -> Option<f64> {
    if s.contains('_') && !underscores_ok(s) {
        return None;
    }
    let clean = s.replace('_', "");
    let unsigned = clean.trim_start_matches(['+', '-']).to_ascii_lowercase();
    if unsigned.starts_with("0x") {
        return None;
    }
    clean.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_quote_escapes_like_go() {
        assert_eq!(go_quote("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
        // As Go's strconv.Quote: \x only below U+0020 and for DEL and bytes that are not
        // UTF-8; other unprintable characters as \u or \U.
        assert_eq!(
            go_quote("\u{1}\u{7F}\u{85}\u{A0}é"),
            r#""\x01\x7f\u0085\u00a0é""#
        );
        assert_eq!(go_quote("\u{10FF7F}"), r#""\U0010ff7f""#);
        let bytes = super::bytes::from_bytes(b"a\xFF\xE2\x82\xC3\xA9");
        assert_eq!(go_quote(&bytes), r#""a\xff\xe2\x82é""#);
    }

    /// cast's readings of strings, as helm v4.2.3 prints `int64`, `int` and `float64` of them.
    #[test]
    fn numeric_strings_read_as_go_reads_them() {
        let s = |t: &str| Value::String(t.into());
        for (text, want) in [
            ("017", 15),
            ("1_000", 1000),
            ("12.0", 12),
            ("0b101", 5),
            (" 12", 0),
            ("0x10", 16),
            ("+5", 5),
            ("12.5", 0),
        ] {
            assert_eq!(to_i64(&s(text)), want, "{text}");
        }
        assert_eq!(to_f64(&s("0x10")), 0.0);
        assert_eq!(to_f64(&s("1_0.5")), 10.5);
        assert_eq!(to_f64(&s("1e3")), 1000.0);
    }

    #[test]
    fn go_float_matches_percent_v() {
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(3.0), "3");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(1234567.0), "1.234567e+06");
        assert_eq!(go_float(999999.0), "999999");
        assert_eq!(go_float(1e-5), "1e-05");
        assert_eq!(go_float32(1000.0), "1000");
        assert_eq!(go_float32(0.1), "0.1");
        assert_eq!(go_float32(123456789.0), "1.2345679e+08");
        assert_eq!(go_float32(-1.0), "-1");
    }
}
