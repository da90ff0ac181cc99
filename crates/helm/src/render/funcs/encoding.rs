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
        // Sprig's: any JSON value, and an error that fails the render.
        ("mustFromJson", |a| {
            exact("mustFromJson", a, 1)?;
            let text = str_arg("mustFromJson", a, 0)?;
            let v = parse_json(&text).map_err(|e| fail("mustFromJson", e))?;
            Ok(from_json(&crate::render::values::as_go_numbers(v)))
        }),
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
        // A map reached through many paths is written once per path: the render's memory
        // budget bounds the text (the render fails once it is spent).
        Value::List(_) | Value::Map(_)
            if !crate::render::meter::fits(out.len(), crate::render::meter::Built::String) => {}
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
    let raw = bytes::to_bytes(text);
    if let Some(e) = go_json_syntax_error(&raw) {
        return Err(e);
    }
    serde_json::from_str(&bytes::lossy(text)).map_err(|e| e.to_string())
}

/// Go's `encoding/json` syntax error for `data` (its scanner's first complaint, in its
/// words: `invalid character '}' after object key`, `unexpected end of JSON input`), or
/// `None` when the text is JSON. Hand-written: the texts are Go's, and charts print them
/// (`fromJson` puts the error under `Error`).
pub fn go_json_syntax_error(data: &[u8]) -> Option<String> {
    #[derive(Clone, Copy, PartialEq)]
    enum St {
        BeginValue,
        BeginValueOrEmpty,
        BeginStringOrEmpty,
        BeginString,
        EndValue,
        EndTop,
        InString,
        InStringEsc,
        InStringEscU(u8),
        Neg,
        One,
        Zero,
        Dot,
        Dot0,
        E,
        ESign,
        E0,
        Lit(&'static [u8], &'static str, usize),
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Ctx {
        Key,
        Value,
        Array,
    }
    fn quote_char(c: u8) -> String {
        match c {
            b'\'' => "'\\''".into(),
            b'"' => "'\"'".into(),
            c => {
                let q = crate::render::value::go_quote(&char::from(c).to_string());
                format!("'{}'", &q[1..q.len() - 1])
            }
        }
    }
    let space = |c: u8| matches!(c, b' ' | b'\t' | b'\r' | b'\n');
    let mut st = St::BeginValue;
    let mut stack: Vec<Ctx> = Vec::new();
    let mut end_top = false;
    let err = |c: u8, ctx: &str| Some(format!("invalid character {} {ctx}", quote_char(c)));
    // One step; `None` is no error.
    let step = |st: &mut St, stack: &mut Vec<Ctx>, end_top: &mut bool, c: u8| -> Option<String> {
        loop {
            match *st {
                St::BeginValueOrEmpty | St::BeginValue => {
                    if space(c) {
                        return None;
                    }
                    if *st == St::BeginValueOrEmpty && c == b']' {
                        *st = St::EndValue;
                        continue;
                    }
                    *st = match c {
                        b'{' => {
                            stack.push(Ctx::Key);
                            St::BeginStringOrEmpty
                        }
                        b'[' => {
                            stack.push(Ctx::Array);
                            St::BeginValueOrEmpty
                        }
                        b'"' => St::InString,
                        b'-' => St::Neg,
                        b'0' => St::Zero,
                        b'1'..=b'9' => St::One,
                        b't' => St::Lit(b"rue", "true", 0),
                        b'f' => St::Lit(b"alse", "false", 0),
                        b'n' => St::Lit(b"ull", "null", 0),
                        _ => return err(c, "looking for beginning of value"),
                    };
                    return None;
                }
                St::BeginStringOrEmpty => {
                    if space(c) {
                        return None;
                    }
                    if c == b'}' {
                        stack.pop();
                        // An empty object ends as a value.
                        stack.push(Ctx::Value);
                        *st = St::EndValue;
                        continue;
                    }
                    *st = St::BeginString;
                }
                St::BeginString => {
                    if space(c) {
                        return None;
                    }
                    if c == b'"' {
                        *st = St::InString;
                        return None;
                    }
                    return err(c, "looking for beginning of object key string");
                }
                St::EndValue => {
                    let Some(&top) = stack.last() else {
                        *st = St::EndTop;
                        *end_top = true;
                        continue;
                    };
                    if space(c) {
                        return None;
                    }
                    match top {
                        Ctx::Key if c == b':' => {
                            stack.pop();
                            stack.push(Ctx::Value);
                            *st = St::BeginValue;
                            return None;
                        }
                        Ctx::Key => return err(c, "after object key"),
                        Ctx::Value if c == b',' => {
                            stack.pop();
                            stack.push(Ctx::Key);
                            *st = St::BeginString;
                            return None;
                        }
                        Ctx::Value if c == b'}' => {
                            stack.pop();
                            if stack.is_empty() {
                                *st = St::EndTop;
                                *end_top = true;
                            }
                            return None;
                        }
                        Ctx::Value => return err(c, "after object key:value pair"),
                        Ctx::Array if c == b',' => {
                            *st = St::BeginValue;
                            return None;
                        }
                        Ctx::Array if c == b']' => {
                            stack.pop();
                            if stack.is_empty() {
                                *st = St::EndTop;
                                *end_top = true;
                            }
                            return None;
                        }
                        Ctx::Array => return err(c, "after array element"),
                    }
                }
                St::EndTop => {
                    if space(c) {
                        return None;
                    }
                    return err(c, "after top-level value");
                }
                St::InString => {
                    match c {
                        b'"' => *st = St::EndValue,
                        b'\\' => *st = St::InStringEsc,
                        c if c < 0x20 => return err(c, "in string literal"),
                        _ => {}
                    }
                    return None;
                }
                St::InStringEsc => {
                    *st = match c {
                        b'b' | b'f' | b'n' | b'r' | b't' | b'\\' | b'/' | b'"' => St::InString,
                        b'u' => St::InStringEscU(0),
                        _ => return err(c, "in string escape code"),
                    };
                    return None;
                }
                St::InStringEscU(n) => {
                    if !c.is_ascii_hexdigit() {
                        return err(c, "in \\u hexadecimal character escape");
                    }
                    *st = if n == 3 {
                        St::InString
                    } else {
                        St::InStringEscU(n + 1)
                    };
                    return None;
                }
                St::Neg => {
                    *st = match c {
                        b'0' => St::Zero,
                        b'1'..=b'9' => St::One,
                        _ => return err(c, "in numeric literal"),
                    };
                    return None;
                }
                St::One if c.is_ascii_digit() => return None,
                St::One | St::Zero => {
                    *st = match c {
                        b'.' => St::Dot,
                        b'e' | b'E' => St::E,
                        _ => {
                            *st = St::EndValue;
                            continue;
                        }
                    };
                    return None;
                }
                St::Dot => {
                    if c.is_ascii_digit() {
                        *st = St::Dot0;
                        return None;
                    }
                    return err(c, "after decimal point in numeric literal");
                }
                St::Dot0 => {
                    match c {
                        b'0'..=b'9' => {}
                        b'e' | b'E' => *st = St::E,
                        _ => {
                            *st = St::EndValue;
                            continue;
                        }
                    }
                    return None;
                }
                St::E => {
                    if c == b'+' || c == b'-' {
                        *st = St::ESign;
                        return None;
                    }
                    *st = St::ESign;
                }
                St::ESign => {
                    if c.is_ascii_digit() {
                        *st = St::E0;
                        return None;
                    }
                    return err(c, "in exponent of numeric literal");
                }
                St::E0 => {
                    if c.is_ascii_digit() {
                        return None;
                    }
                    *st = St::EndValue;
                }
                St::Lit(rest, name, i) => {
                    if c != rest[i] {
                        let want = char::from(rest[i]);
                        return Some(format!(
                            "invalid character {} in literal {name} (expecting '{want}')",
                            quote_char(c)
                        ));
                    }
                    *st = if i + 1 == rest.len() {
                        St::EndValue
                    } else {
                        St::Lit(rest, name, i + 1)
                    };
                    return None;
                }
            }
        }
    };
    for &c in data {
        if let Some(e) = step(&mut st, &mut stack, &mut end_top, c) {
            return Some(e);
        }
        if stack.len() > 10_000 {
            return Some("exceeded max depth".into());
        }
    }
    if end_top {
        return None;
    }
    if let Some(e) = step(&mut st, &mut stack, &mut end_top, b' ') {
        return Some(e);
    }
    (!end_top).then(|| "unexpected end of JSON input".to_string())
}

/// Go's `json: cannot unmarshal KIND into Go value of type T` for a value of the wrong kind.
fn cannot_unmarshal(v: &serde_json::Value, into: &str) -> String {
    let kind = match v {
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Null => "null",
    };
    format!("json: cannot unmarshal {kind} into Go value of type {into}")
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
    // sigs.k8s.io/yaml converts YAML to JSON and decodes that, so a YAML document of the
    // wrong kind gets Go's JSON error in its words.
    let yaml = name.contains("Yaml");
    let wrong_kind = |v: &serde_json::Value, into: &str| {
        let e = cannot_unmarshal(v, into);
        if yaml {
            format!("error unmarshaling JSON: while decoding JSON: {e}")
        } else {
            e
        }
    };
    let parsed = match parse(&text) {
        Ok(serde_json::Value::Null) if array => serde_json::Value::Array(vec![]),
        Ok(serde_json::Value::Null) => serde_json::Value::Object(Default::default()),
        Ok(v @ serde_json::Value::Array(_)) if array => v,
        Ok(v @ serde_json::Value::Object(_)) if !array => v,
        Ok(other) if array => serde_json::json!([wrong_kind(&other, "[]interface {}")]),
        Ok(other) => {
            serde_json::json!({"Error": wrong_kind(&other, "map[string]interface {}")})
        }
        Err(e) if array => serde_json::json!([e]),
        Err(e) => serde_json::json!({ "Error": e }),
    };
    // Helm decodes through Go's JSON decoder (`fromYaml` by way of sigs.k8s.io/yaml), so every
    // number is a float64: `5368709120` prints as `5.36870912e+09`.
    Ok(from_json(&crate::render::values::as_go_numbers(parsed)))
}

fn b64dec(args: &[Value]) -> Result<Value> {
    exact("b64dec", args, 1)?;
    let text = str_arg("b64dec", args, 0)?;
    // Sprig returns the error text as the result instead of failing.
    Ok(string(match go_base64_decode(&bytes::to_bytes(&text)) {
        Ok(decoded) => bytes::from_bytes(&decoded),
        Err(at) => format!("illegal base64 data at input byte {at}"),
    }))
}

/// Go's `base64.StdEncoding.DecodeString`: padded, newlines ignored, the unused low bits of
/// the last symbol not checked (the `base64` crate refuses those); a failure is the offset
/// Go's `CorruptInputError` names. Hand-written because the offsets and the leniency are
/// Go's.
fn go_base64_decode(src: &[u8]) -> std::result::Result<Vec<u8>, usize> {
    fn symbol(c: u8) -> Option<u8> {
        match c {
            b'A'..=b'Z' => Some(c - b'A'),
            b'a'..=b'z' => Some(c - b'a' + 26),
            b'0'..=b'9' => Some(c - b'0' + 52),
            b'+' => Some(62),
            b'/' => Some(63),
            _ => None,
        }
    }
    let newline = |c: u8| c == b'\n' || c == b'\r';
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut si = 0;
    loop {
        let mut quantum = [0u8; 4];
        let mut len = 4;
        let mut trailing = None;
        let mut j = 0;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                return Err(si - j);
            }
            let c = src[si];
            si += 1;
            if let Some(v) = symbol(c) {
                quantum[j] = v;
                j += 1;
                continue;
            }
            if newline(c) {
                continue;
            }
            if c != b'=' || j < 2 {
                return Err(si - 1);
            }
            if j == 2 {
                while si < src.len() && newline(src[si]) {
                    si += 1;
                }
                if si == src.len() {
                    return Err(src.len());
                }
                if src[si] != b'=' {
                    return Err(si - 1);
                }
                si += 1;
            }
            while si < src.len() && newline(src[si]) {
                si += 1;
            }
            if si < src.len() {
                trailing = Some(si);
            }
            len = j;
            break;
        }
        let v = (u32::from(quantum[0]) << 18)
            | (u32::from(quantum[1]) << 12)
            | (u32::from(quantum[2]) << 6)
            | u32::from(quantum[3]);
        let decoded = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
        out.extend_from_slice(&decoded[..len - 1]);
        if let Some(at) = trailing {
            return Err(at);
        }
        if len < 4 {
            return Ok(out);
        }
    }
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
            // Go names the offset it stopped at, as data-encoding does.
            Err(e) => format!("illegal base32 data at input byte {}", e.position),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's JSON errors, as `fromJson` and `fromJsonArray` printed them in helm v4.2.3.
    #[test]
    fn json_errors_read_as_go_writes_them() {
        for (text, want) in [
            ("", "map[Error:unexpected end of JSON input]"),
            ("{", "map[Error:unexpected end of JSON input]"),
            (
                "{\"a\"}",
                "map[Error:invalid character '}' after object key]",
            ),
            (
                "{\"a\":1,}",
                "map[Error:invalid character '}' looking for beginning of object key string]",
            ),
            (
                "[1,]",
                "map[Error:invalid character ']' looking for beginning of value]",
            ),
            (
                "tru",
                "map[Error:invalid character ' ' in literal true (expecting 'e')]",
            ),
            (
                "[1]",
                "map[Error:json: cannot unmarshal array into Go value of type map[string]interface {}]",
            ),
            (
                "1 2",
                "map[Error:invalid character '2' after top-level value]",
            ),
            (
                "{\"a\":1} x",
                "map[Error:invalid character 'x' after top-level value]",
            ),
            ("\"abc", "map[Error:unexpected end of JSON input]"),
            ("-", "map[Error:invalid character ' ' in numeric literal]"),
            (
                "01",
                "map[Error:invalid character '1' after top-level value]",
            ),
            (
                "x",
                "map[Error:invalid character 'x' looking for beginning of value]",
            ),
            ("{\"a\": [1, {\"b\": null}]}", "map[a:[1 map[b:<nil>]]]"),
        ] {
            let out = parse_doc("fromJson", &[string(text)], parse_json, false)
                .map(|v| crate::render::value::go_sprint(&v));
            assert_eq!(out.unwrap_or_default(), want, "{text}");
        }
        let out = parse_doc("fromJsonArray", &[string("{}")], parse_json, true)
            .map(|v| crate::render::value::go_sprint(&v));
        assert_eq!(
            out.unwrap_or_default(),
            "[json: cannot unmarshal object into Go value of type []interface {}]"
        );
    }

    /// Go's decoding and its error offsets, as `b64dec` printed them in helm v4.2.3.
    #[test]
    fn base64_decodes_as_go_does() {
        for (text, want) in [
            ("abc", "illegal base64 data at input byte 0"),
            ("ab=c", "illegal base64 data at input byte 2"),
            ("aGVsbG8", "illegal base64 data at input byte 4"),
            ("a", "illegal base64 data at input byte 0"),
            ("YQ==YQ==", "illegal base64 data at input byte 4"),
            ("aGVsbG8=", "hello"),
            ("w6k=", "é"),
        ] {
            let out = b64dec(&[string(text)]).map(|v| strval(&v));
            assert_eq!(out.unwrap_or_default(), want, "{text}");
        }
        for (text, want) in [
            ("NBSWY3D", "illegal base32 data at input byte 0"),
            ("nbswy3dp", "illegal base32 data at input byte 0"),
            ("NBSWY3DP!", "illegal base32 data at input byte 8"),
        ] {
            let out = b32dec(&[string(text)]).map(|v| strval(&v));
            assert_eq!(out.unwrap_or_default(), want, "{text}");
        }
    }
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
