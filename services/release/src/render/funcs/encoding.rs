//! Serialization, encoding, hashing and random functions (`toYaml`, `b64enc`, `sha256sum`, ...).

use super::args::{Builtin, arg, exact, fail, register_all, str_arg, string};
use crate::render::goyaml;
use crate::render::value::{from_json, to_i64, to_json};
use base64::Engine as _;
use gotmpl::{FuncMap, Result, Value};
use rand::Rng as _;
use sha2::Digest as _;

pub fn register(fm: &mut FuncMap) {
    let funcs: &[(&str, Builtin)] = &[
        ("toYaml", to_yaml),
        ("toJson", |a| json_out("toJson", a, false)),
        ("toRawJson", |a| json_out("toRawJson", a, false)),
        ("toPrettyJson", |a| json_out("toPrettyJson", a, true)),
        ("fromYaml", |a| parse_doc("fromYaml", a, parse_yaml, false)),
        ("fromYamlArray", |a| {
            parse_doc("fromYamlArray", a, parse_yaml, true)
        }),
        ("fromJson", |a| parse_doc("fromJson", a, parse_json, false)),
        ("fromJsonArray", |a| {
            parse_doc("fromJsonArray", a, parse_json, true)
        }),
        ("b64enc", |a| {
            exact("b64enc", a, 1)?;
            Ok(string(
                base64::engine::general_purpose::STANDARD.encode(str_arg("b64enc", a, 0)?),
            ))
        }),
        ("b64dec", b64dec),
        ("sha1sum", |a| {
            exact("sha1sum", a, 1)?;
            Ok(string(hex::encode(sha1::Sha1::digest(str_arg(
                "sha1sum", a, 0,
            )?))))
        }),
        ("sha512sum", |a| {
            exact("sha512sum", a, 1)?;
            Ok(string(hex::encode(sha2::Sha512::digest(str_arg(
                "sha512sum",
                a,
                0,
            )?))))
        }),
        ("b32enc", |a| {
            exact("b32enc", a, 1)?;
            Ok(string(
                data_encoding::BASE32.encode(str_arg("b32enc", a, 0)?.as_bytes()),
            ))
        }),
        ("b32dec", b32dec),
        ("sha256sum", |a| {
            exact("sha256sum", a, 1)?;
            Ok(string(hex::encode(sha2::Sha256::digest(str_arg(
                "sha256sum",
                a,
                0,
            )?))))
        }),
        ("uuidv4", |_| Ok(string(uuid::Uuid::new_v4().to_string()))),
        ("randAlphaNum", |a| random("randAlphaNum", a, ALNUM)),
        ("randAlpha", |a| random("randAlpha", a, &ALNUM[10..])),
        ("randNumeric", |a| random("randNumeric", a, &ALNUM[..10])),
    ];
    register_all(fm, funcs);
}

/// Helm's `toYaml`: go-yaml output without the final newline; errors render as "".
fn to_yaml(args: &[Value]) -> Result<Value> {
    exact("toYaml", args, 1)?;
    let text = goyaml::to_yaml(&to_json(&args[0]));
    Ok(string(text.strip_suffix('\n').unwrap_or(&text)))
}

/// Go's `json.Marshal` escapes `<`, `>` and `&` (and the JS line separators) inside strings;
/// those characters can only appear inside JSON strings, so a textual replace is exact.
fn json_out(name: &str, args: &[Value], pretty: bool) -> Result<Value> {
    exact(name, args, 1)?;
    let json = to_json(&args[0]);
    let text = if pretty {
        serde_json::to_string_pretty(&json)
    } else {
        serde_json::to_string(&json)
    }
    .map_err(|e| fail(name, e))?;
    if name == "toRawJson" {
        return Ok(string(text));
    }
    let escaped = text
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029");
    Ok(string(escaped))
}

/// Parses YAML into JSON, using the same parser as values files.
pub fn parse_yaml(text: &str) -> std::result::Result<serde_json::Value, String> {
    if text.trim().is_empty() {
        return Ok(serde_json::Value::Null);
    }
    // Helm (and Kubernetes) read YAML with go-yaml's YAML 1.1 rules: `0644` is octal (420),
    // `yes`/`off` are booleans.
    let mut options = serde_saphyr::Options::default();
    options.legacy_octal_numbers = true;
    // Comments are never read back; not capturing them saves allocation per document.
    options.emit_comments = false;
    serde_saphyr::from_str_with_options::<serde_json::Value>(text, options)
        .map_err(|e| e.to_string())
}

fn parse_json(text: &str) -> std::result::Result<serde_json::Value, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
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
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => e.to_string(),
        },
    ))
}

const ALNUM: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

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
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
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
    fn from_yaml_reports_errors_in_the_map() {
        let bad = parse_doc("fromYaml", &[string("a: [")], parse_yaml, false).unwrap_or(Value::Nil);
        assert!(bad.field("Error").is_some(), "got {bad}");
        let good =
            parse_doc("fromYaml", &[string("a: 1")], parse_yaml, false).unwrap_or(Value::Nil);
        assert_eq!(good.to_string(), "map[a:1]");
    }
}
