//! `.Files` and `.Capabilities.APIVersions` methods, exposed as hidden functions that
//! `render::methods` rewrites the method calls into. The receiver comes first.

use super::funcs::{Builtin, fail, register_all, string};
use super::value::strval;
use super::{bytes, goyaml};
use base64::Engine as _;
use gotmpl::{FuncMap, Result, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

pub fn register(fm: &mut FuncMap) {
    let funcs: &[(&str, Builtin)] = &[
        ("__filesGet", get),
        ("__filesGetBytes", get),
        ("__filesLines", lines),
        ("__filesGlob", glob),
        ("__filesAsConfig", |a| as_map("AsConfig", a, false)),
        ("__filesAsSecrets", |a| as_map("AsSecrets", a, true)),
        ("__apiVersionsHas", api_versions_has),
    ];
    register_all(fm, funcs);
}

fn files_arg<'a>(name: &str, args: &'a [Value]) -> Result<&'a BTreeMap<Arc<str>, Value>> {
    match args.first() {
        Some(Value::Map(m)) => Ok(m),
        _ => Err(fail(name, "receiver is not .Files")),
    }
}

/// `.Files.Get path`: the content, or "" for a missing file. `GetBytes` is the same here:
/// Helm's returns a `[]byte`, which Sprig's string functions also accept; printed directly,
/// Go would show it as a list of numbers, which no chart wants.
fn get(args: &[Value]) -> Result<Value> {
    let files = files_arg("Files.Get", args)?;
    let path = strval(args.get(1).unwrap_or(&Value::Nil));
    Ok(files
        .get(path.as_str())
        .cloned()
        .unwrap_or_else(|| string("")))
}

fn lines(args: &[Value]) -> Result<Value> {
    let text = strval(&get(args)?);
    if text.is_empty() {
        return Ok(Value::List(Arc::from([])));
    }
    // Helm drops one final newline first, so a file's last line is not followed by "".
    let text = text.strip_suffix('\n').unwrap_or(&text);
    Ok(Value::List(text.split('\n').map(string).collect()))
}

/// `.Files.Glob pattern`: the matching files (`*` stays within a path segment, `**` spans them).
fn glob(args: &[Value]) -> Result<Value> {
    let files = files_arg("Files.Glob", args)?;
    let pattern = strval(args.get(1).unwrap_or(&Value::Nil));
    let pat = glob::Pattern::new(&pattern).map_err(|e| fail("Files.Glob", e))?;
    let opts = glob::MatchOptions {
        require_literal_separator: true,
        ..Default::default()
    };
    let matched: BTreeMap<Arc<str>, Value> = files
        .iter()
        .filter(|(p, _)| pat.matches_with(p, opts))
        .map(|(p, v)| (p.clone(), v.clone()))
        .collect();
    Ok(Value::Map(Arc::new(matched)))
}

/// `AsConfig`/`AsSecrets`: YAML of base name → content (base64 for secrets), as Helm emits.
/// Secrets encode the file's exact bytes; a config map's text goes through Go's JSON encoder
/// in Helm, which writes U+FFFD for each byte that is not UTF-8.
fn as_map(name: &str, args: &[Value], encode: bool) -> Result<Value> {
    let files = files_arg(name, args)?;
    let mut out = serde_json::Map::new();
    for (path, content) in files {
        let base = path.rsplit('/').next().unwrap_or(path).to_string();
        let text = strval(content);
        let v = if encode {
            base64::engine::general_purpose::STANDARD.encode(bytes::to_bytes(&text))
        } else {
            bytes::lossy(&text).into_owned()
        };
        out.insert(base, serde_json::Value::String(v));
    }
    if out.is_empty() {
        return Ok(string(""));
    }
    let yaml = goyaml::to_yaml(&serde_json::Value::Object(out));
    Ok(string(yaml.strip_suffix('\n').unwrap_or(&yaml)))
}

fn api_versions_has(args: &[Value]) -> Result<Value> {
    let wanted = strval(args.get(1).unwrap_or(&Value::Nil));
    let has = match args.first() {
        Some(Value::List(items)) => items.iter().any(|v| strval(v) == wanted),
        _ => false,
    };
    Ok(Value::Bool(has))
}
