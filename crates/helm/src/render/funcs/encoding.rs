//! Serialization, encoding, hashing and random functions (`toYaml`, `b64enc`, `sha256sum`, ...).

use super::args::{Builtin, arg, exact, fail, register_all, str_arg, string};
use crate::render::value::{from_json, to_i64, to_json};
use crate::render::{bytes, goyaml};
use base64::Engine as _;
use gotmpl::{FuncMap, Result, Value};
use rand::Rng as _;
use sha2::Digest as _;

pub fn register(fm: &mut FuncMap) {
    let funcs: &[(&str, Builtin)] = &[
        ("toYaml", to_yaml),
        ("toYamlPretty", to_yaml_pretty),
        ("toJson", |a| json_out("toJson", a, false)),
        ("toRawJson", |a| json_out("toRawJson", a, false)),
        ("toPrettyJson", |a| json_out("toPrettyJson", a, true)),
        ("fromYaml", |a| {
            parse_doc("fromYaml", a, parse_template_yaml, false)
        }),
        ("fromYamlArray", |a| {
            parse_doc("fromYamlArray", a, parse_template_yaml, true)
        }),
        ("fromJson", |a| parse_doc("fromJson", a, parse_json, false)),
        ("fromJsonArray", |a| {
            parse_doc("fromJsonArray", a, parse_json, true)
        }),
        ("b64enc", |a| {
            on_bytes("b64enc", a, |b| {
                base64::engine::general_purpose::STANDARD.encode(b)
            })
        }),
        ("b64dec", b64dec),
        ("sha1sum", |a| {
            on_bytes("sha1sum", a, |b| hex::encode(sha1::Sha1::digest(b)))
        }),
        ("sha512sum", |a| {
            on_bytes("sha512sum", a, |b| hex::encode(sha2::Sha512::digest(b)))
        }),
        ("b32enc", |a| {
            on_bytes("b32enc", a, |b| data_encoding::BASE32.encode(b))
        }),
        ("b32dec", b32dec),
        ("sha256sum", |a| {
            on_bytes("sha256sum", a, |b| hex::encode(sha2::Sha256::digest(b)))
        }),
        ("uuidv4", |_| Ok(string(uuid::Uuid::new_v4().to_string()))),
        ("randAlphaNum", |a| random("randAlphaNum", a, ALNUM)),
        ("randAlpha", |a| random("randAlpha", a, &ALNUM[10..])),
        ("randNumeric", |a| random("randNumeric", a, &ALNUM[..10])),
        ("randAscii", |a| random("randAscii", a, PRINTABLE_ASCII)),
        ("randBytes", rand_bytes),
        ("randInt", rand_int),
        ("hello", |_| Ok(string("Hello!"))),
        // A DNS lookup from a template: `helm template` answers "" (it resolves nothing when
        // rendering offline), and berth renders untrusted charts, so it never resolves either.
        ("getHostByName", |a| {
            exact("getHostByName", a, 1)?;
            Ok(string(""))
        }),
    ];
    register_all(fm, funcs);
}

/// A function of the one argument's Go bytes (see `render::bytes`), such as `b64enc`. A
/// string argument is read in place: it may be a whole binary file.
pub(super) fn on_bytes(name: &str, args: &[Value], f: fn(&[u8]) -> String) -> Result<Value> {
    exact(name, args, 1)?;
    Ok(string(match &args[0] {
        Value::String(s) => f(&bytes::to_bytes(s)),
        other => f(&bytes::to_bytes(&crate::render::value::strval(other))),
    }))
}

/// Helm's `toYaml`: go-yaml output without the final newline; errors render as "".
fn to_yaml(args: &[Value]) -> Result<Value> {
    exact("toYaml", args, 1)?;
    let text = goyaml::to_yaml(&to_json(&args[0]));
    Ok(string(text.strip_suffix('\n').unwrap_or(&text)))
}

/// Helm's `toYamlPretty`: go-yaml v3 with a two-space indent (sequences indented under their
/// key, no folding), without the final newline.
fn to_yaml_pretty(args: &[Value]) -> Result<Value> {
    exact("toYamlPretty", args, 1)?;
    let text = goyaml::to_yaml_pretty(&to_json(&args[0]));
    Ok(string(text.strip_suffix('\n').unwrap_or(&text)))
}

/// `toJson`, `toRawJson`, `toPrettyJson`: written as Go's `encoding/json` writes them (map keys
/// sorted, floats in Go's form, `<`, `>`, `&` escaped except in `toRawJson`). Written here
/// rather than with serde_json because Go's float and escaping rules differ from its.
fn json_out(name: &str, args: &[Value], pretty: bool) -> Result<Value> {
    exact(name, args, 1)?;
    let mut out = String::new();
    write_json(&mut out, &args[0], name != "toRawJson", pretty.then_some(0));
    Ok(string(out))
}

fn write_json(out: &mut String, v: &Value, escape_html: bool, indent: Option<usize>) {
    let newline = |out: &mut String, level: usize| {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', 2 * level));
    };
    match v {
        Value::Nil | Value::Function(_) => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => out.push_str(&i.to_string()),
        Value::Uint(u) => out.push_str(&u.to_string()),
        Value::Float(f) => out.push_str(&go_json_float(*f)),
        Value::String(s) => write_json_string(out, s, escape_html),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if let Some(level) = indent {
                    newline(out, level + 1);
                }
                write_json(out, item, escape_html, indent.map(|l| l + 1));
            }
            if let (Some(level), false) = (indent, items.is_empty()) {
                newline(out, level);
            }
            out.push(']');
        }
        Value::Map(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if let Some(level) = indent {
                    newline(out, level + 1);
                }
                write_json_string(out, k, escape_html);
                out.push(':');
                if indent.is_some() {
                    out.push(' ');
                }
                write_json(out, item, escape_html, indent.map(|l| l + 1));
            }
            if let (Some(level), false) = (indent, m.is_empty()) {
                newline(out, level);
            }
            out.push('}');
        }
    }
}

/// Go's float encoding: plain decimal from 1e-6 to 1e21, else an exponent (`1e+21`, `1e-7`).
/// NaN and infinities cannot be JSON; Go fails, Sprig then prints an empty string, and
/// `null` is the closest value here.
fn go_json_float(f: f64) -> String {
    if !f.is_finite() {
        return "null".into();
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{f:e}");
        return match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        };
    }
    format!("{f}")
}

/// A JSON string as Go writes it; a byte that is not UTF-8 becomes the escape `\ufffd`.
fn write_json_string(out: &mut String, s: &str, escape_html: bool) {
    out.push('"');
    bytes::for_each_piece(s, |piece| match piece {
        bytes::Piece::Text(text) => write_json_chars(out, text, escape_html),
        bytes::Piece::Byte(_) => out.push_str("\\ufffd"),
    });
    out.push('"');
}

fn write_json_chars(out: &mut String, s: &str, escape_html: bool) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' if escape_html => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
}

/// Parses the first YAML document of `text` into JSON as Helm does (`sigs.k8s.io/yaml`:
/// go-yaml v2's YAML 1.1 rules — `0644` is octal, `yes`/`off` are booleans, also as keys —
/// then JSON's string keys).
pub fn parse_yaml(text: &str) -> std::result::Result<serde_json::Value, String> {
    goyaml::load::from_str(text)
}

/// `fromYaml`'s reading, with the words `sigs.k8s.io/yaml` wraps its errors in. go-yaml
/// refuses input that is not UTF-8, and so does this.
fn parse_template_yaml(text: &str) -> std::result::Result<serde_json::Value, String> {
    goyaml::load::utf8(text)
        .and_then(|text| parse_yaml(&text))
        .map_err(|e| format!("error converting YAML to JSON: {e}"))
}

/// Go's JSON decoder reads each byte that is not UTF-8 as U+FFFD.
fn parse_json(text: &str) -> std::result::Result<serde_json::Value, String> {
    serde_json::from_str(&bytes::lossy(text)).map_err(|e| e.to_string())
}

/// Helm's `fromYaml`/`fromJson` never fail the render: a parse error comes back as a map
/// with an `Error` key (or a one-element list for the `Array` forms).
fn parse_doc(
    name: &str,
    args: &[Value],
    parse: fn(&str) -> std::result::Result<serde_json::Value, String>,
    array: bool,
) -> Result<Value> {
    exact(name, args, 1)?;
    let text = str_arg(name, args, 0)?;
    let parsed = match parse(&text) {
        Ok(serde_json::Value::Null) if array => serde_json::Value::Array(vec![]),
        Ok(serde_json::Value::Null) => serde_json::Value::Object(Default::default()),
        Ok(v @ serde_json::Value::Array(_)) if array => v,
        Ok(v @ serde_json::Value::Object(_)) if !array => v,
        Ok(other) if array => serde_json::json!([other.to_string()]),
        Ok(_) => serde_json::json!({"Error": format!("{name}: expected a map")}),
        Err(e) if array => serde_json::json!([e]),
        Err(e) => serde_json::json!({ "Error": e }),
    };
    Ok(from_json(&parsed))
}

fn b64dec(args: &[Value]) -> Result<Value> {
    exact("b64dec", args, 1)?;
    let text = str_arg("b64dec", args, 0)?;
    // Sprig returns the error text as the result instead of failing.
    Ok(string(
        match base64::engine::general_purpose::STANDARD.decode(text.as_bytes()) {
            Ok(decoded) => bytes::from_bytes(&decoded),
            Err(e) => e.to_string(),
        },
    ))
}

const ALNUM: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

/// Sprig's `randAscii` alphabet: the printable ASCII characters, space to `~`.
const PRINTABLE_ASCII: &[u8] = b" !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~";

/// `randBytes n`: n random bytes, base64-encoded (as Sprig returns them).
fn rand_bytes(args: &[Value]) -> Result<Value> {
    exact("randBytes", args, 1)?;
    const MAX_LEN: i64 = 4096;
    let n = to_i64(arg("randBytes", args, 0)?);
    if !(0..=MAX_LEN).contains(&n) {
        return Err(fail(
            "randBytes",
            format!("length {n} is outside 0..={MAX_LEN}"),
        ));
    }
    let mut rng = rand::rng();
    let bytes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
    Ok(string(
        base64::engine::general_purpose::STANDARD.encode(bytes),
    ))
}

/// `randInt min max`: a random integer in `[min, max)`; like Go's `rand.Intn`, an empty range
/// is an error.
fn rand_int(args: &[Value]) -> Result<Value> {
    exact("randInt", args, 2)?;
    let (min, max) = (
        to_i64(arg("randInt", args, 0)?),
        to_i64(arg("randInt", args, 1)?),
    );
    if max <= min {
        return Err(fail("randInt", "invalid argument to Intn"));
    }
    Ok(Value::Int(rand::rng().random_range(min..max)))
}

fn random(name: &str, args: &[Value], alphabet: &[u8]) -> Result<Value> {
    exact(name, args, 1)?;
    // Bounded so a template cannot request an enormous string.
    const MAX_LEN: i64 = 4096;
    let n = to_i64(arg(name, args, 0)?);
    if !(0..=MAX_LEN).contains(&n) {
        return Err(fail(name, format!("length {n} is outside 0..={MAX_LEN}")));
    }
    let mut rng = rand::rng();
    let s: String = (0..n)
        .map(|_| char::from(alphabet[rng.random_range(0..alphabet.len())]))
        .collect();
    Ok(string(s))
}

/// Sprig's `b32dec`: like `b64dec`, a decoding failure renders the error text.
fn b32dec(args: &[Value]) -> Result<Value> {
    exact("b32dec", args, 1)?;
    let input = str_arg("b32dec", args, 0)?;
    Ok(string(
        match data_encoding::BASE32.decode(input.as_bytes()) {
            Ok(decoded) => bytes::from_bytes(&decoded),
            Err(e) => e.to_string(),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::value::strval;

    #[test]
    fn to_json_escapes_html_like_go() {
        let v = from_json(&serde_json::json!({"b": "<a&b>", "a": 1}));
        let out = json_out("toJson", &[v], false)
            .map(|v| strval(&v))
            .unwrap_or_default();
        assert_eq!(out, r#"{"a":1,"b":"\u003ca\u0026b\u003e"}"#);
    }

    #[test]
    fn json_numbers_and_layout_follow_go() {
        let v = from_json(
            &serde_json::json!({"big": 1.8446744073709552e19, "tiny": 1e-7,
            "huge": 1e21, "whole": 8080.0, "l": [], "m": {"x": [1, 2]}}),
        );
        let out = json_out("toJson", std::slice::from_ref(&v), false)
            .map(|v| strval(&v))
            .unwrap_or_default();
        assert_eq!(
            out,
            r#"{"big":18446744073709552000,"huge":1e+21,"l":[],"m":{"x":[1,2]},"tiny":1e-7,"whole":8080}"#
        );
        let pretty = json_out("toPrettyJson", &[v], true)
            .map(|v| strval(&v))
            .unwrap_or_default();
        assert!(
            pretty.starts_with("{\n  \"big\": 18446744073709552000,\n  \"huge\""),
            "{pretty}"
        );
        assert!(
            pretty.contains("\"l\": [],\n  \"m\": {\n    \"x\": [\n      1,\n      2\n    ]\n  },")
        );
    }

    #[test]
    fn from_yaml_reports_errors_in_the_map() {
        let bad = parse_doc("fromYaml", &[string("a: [")], parse_yaml, false).unwrap_or(Value::Nil);
        assert!(bad.field("Error").is_some(), "got {bad}");
        let good =
            parse_doc("fromYaml", &[string("a: 1")], parse_yaml, false).unwrap_or(Value::Nil);
        assert_eq!(good.to_string(), "map[a:1]");
    }
}
