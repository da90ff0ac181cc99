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

/// `.Files.Glob pattern`: the matching files, as Helm matches them (gobwas/glob with `/` as
/// the separator, see [`glob_regex`]); a pattern that does not compile matches every file, as
/// Helm falls back to `**`.
fn glob(args: &[Value]) -> Result<Value> {
    let files = files_arg("Files.Glob", args)?;
    let pattern = strval(args.get(1).unwrap_or(&Value::Nil));
    let re = glob_regex(&pattern);
    let matched: BTreeMap<Arc<str>, Value> = files
        .iter()
        .filter(|(p, _)| re.as_ref().is_none_or(|re| re.is_match(p)))
        .map(|(p, v)| (p.clone(), v.clone()))
        .collect();
    Ok(Value::Map(Arc::new(matched)))
}

/// gobwas/glob's pattern language with `/` as the separator, as a regular expression: `*`
/// is any run of characters but `/`, `**` any run at all (also inside a path component:
/// `rules/**.yaml`), `?` one character but `/`, `[ab]`/`[a-z]` a class (`[!...]` negated;
/// `^` is an ordinary character), `{a,b}` alternatives (nested, each a pattern; an unclosed
/// group ends with the pattern) and `\` escapes the next character. `None` for a pattern
/// gobwas refuses (an unclosed class, a trailing `\`). Hand-written: no crate matches
/// gobwas' dialect (the `glob` crate has neither `**` inside a component nor `{a,b}`).
fn glob_regex(pattern: &str) -> Option<regex::Regex> {
    let mut out = String::from("^(?s:");
    let mut chars = pattern.chars().peekable();
    let mut groups = 0usize;
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                out.push_str(".*");
            }
            '*' => out.push_str("[^/]*"),
            '?' => out.push_str("[^/]"),
            '\\' => out.push_str(&regex::escape(&chars.next()?.to_string())),
            '[' => {
                let mut class = String::from("[");
                if chars.peek() == Some(&'!') {
                    chars.next();
                    class.push('^');
                }
                let mut empty = true;
                loop {
                    match chars.next()? {
                        ']' if !empty => break,
                        '-' if !empty && chars.peek().is_some_and(|n| *n != ']') => class.push('-'),
                        '\\' => class.push_str(&regex::escape(&chars.next()?.to_string())),
                        other => class.push_str(&regex::escape(&other.to_string())),
                    }
                    empty = false;
                }
                class.push(']');
                out.push_str(&class);
            }
            '{' => {
                groups += 1;
                out.push_str("(?:");
            }
            ',' if groups > 0 => out.push('|'),
            '}' if groups > 0 => {
                groups -= 1;
                out.push(')');
            }
            other => out.push_str(&regex::escape(&other.to_string())),
        }
    }
    out.push_str(&")".repeat(groups));
    out.push_str(")$");
    regex::RegexBuilder::new(&out)
        .size_limit(1 << 20)
        .build()
        .ok()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// issue 32.4: what `helm template` (v4.2.3) lists for `range $k, $v := .Files.Glob P` on
    /// a chart holding these files.
    #[test]
    fn glob_matches_as_helm_does() {
        let files: BTreeMap<Arc<str>, Value> = [
            "files/rules/a.yaml",
            "files/rules/sub/b.yaml",
            "files/a.txt",
            "files/b.txt",
            "files/c.txt",
            "files/ab.txt",
            "other/x.txt",
            "files/rules/c.yml",
        ]
        .into_iter()
        .map(|p| (Arc::from(p), string("x")))
        .collect();
        let all = "files/a.txt files/ab.txt files/b.txt files/c.txt files/rules/a.yaml files/rules/c.yml files/rules/sub/b.yaml other/x.txt";
        let helm = [
            (
                "files/rules/**.yaml",
                "files/rules/a.yaml files/rules/sub/b.yaml",
            ),
            ("files/{a,b}.txt", "files/a.txt files/b.txt"),
            (
                "files/*.txt",
                "files/a.txt files/ab.txt files/b.txt files/c.txt",
            ),
            ("**", all),
            ("files/?.txt", "files/a.txt files/b.txt files/c.txt"),
            ("files/[ab].txt", "files/a.txt files/b.txt"),
            ("files/[!a].txt", "files/b.txt files/c.txt"),
            ("files/[", all),
            ("files/{a", ""),
            ("{files,other}/**", all),
            ("files/{a,{b,c}}.txt", "files/a.txt files/b.txt files/c.txt"),
            ("files/\\a.txt", "files/a.txt"),
            ("*", ""),
            (
                "files/**/*.yaml",
                "files/rules/a.yaml files/rules/sub/b.yaml",
            ),
            ("**/b.yaml", "files/rules/sub/b.yaml"),
            ("files/[a-b].txt", "files/a.txt files/b.txt"),
            ("files/a*", "files/a.txt files/ab.txt"),
            ("", ""),
            (
                "files/rules/**",
                "files/rules/a.yaml files/rules/c.yml files/rules/sub/b.yaml",
            ),
            (
                "files/**.y*ml",
                "files/rules/a.yaml files/rules/c.yml files/rules/sub/b.yaml",
            ),
            ("files/[^a].txt", "files/a.txt"),
            ("files/{,a}b.txt", "files/ab.txt files/b.txt"),
            ("files/}", ""),
            ("files/a,b", ""),
        ];
        for (pattern, want) in helm {
            let got = match glob(&[Value::Map(Arc::new(files.clone())), string(pattern)]) {
                Ok(Value::Map(m)) => m.keys().map(|k| k.to_string()).collect::<Vec<_>>(),
                other => panic!("{pattern}: {other:?}"),
            };
            assert_eq!(got.join(" "), want, "{pattern}");
        }
    }
}
