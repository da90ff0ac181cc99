//! `--set` expressions as Helm's `strvals` reads them: `a.b=c,d[0]=e,list={x,y}`, with `\`
//! escaping `,` `.` `=` `[`, and values typed the Helm way (`true`/`false`, `null`, decimal
//! integers without a leading zero; everything else a string). Written by hand because no
//! crate parses this Helm-specific syntax.

use serde_json::{Map, Value};

/// Most list index `--set` accepts, as in Helm (guards against `a[999999999]=x`).
const MAX_INDEX: usize = 65_536;

/// Applies one `--set` argument (possibly several comma-separated assignments) to `values`.
pub fn parse_set(expr: &str, values: &mut Value) -> Result<(), String> {
    for assignment in split_unescaped(expr, ',', true) {
        if assignment.is_empty() {
            continue;
        }
        let (key, val) = split_key(&assignment)?;
        let path = parse_path(&key)?;
        let value = if let Some(inner) = val.strip_prefix('{').and_then(|v| v.strip_suffix('}')) {
            Value::Array(
                split_unescaped(inner, ',', false)
                    .iter()
                    .filter(|s| !s.is_empty())
                    .map(|s| typed(&unescape(s)))
                    .collect(),
            )
        } else {
            typed(&unescape(&val))
        };
        assign(values, &path, value)?;
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Key(String),
    Index(usize),
}

/// Splits on `sep` outside backslash escapes (and, when `braces`, outside `{...}`), keeping
/// the escapes for later stages.
fn split_unescaped(s: &str, sep: char, braces: bool) -> Vec<String> {
    let mut parts = Vec::new();
    let mut cur = String::new();
    let mut depth = 0usize;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            '{' if braces => {
                depth += 1;
                cur.push(c);
            }
            '}' if braces => {
                depth = depth.saturating_sub(1);
                cur.push(c);
            }
            c if c == sep && depth == 0 => parts.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    parts.push(cur);
    parts
}

fn split_key(assignment: &str) -> Result<(String, String), String> {
    let mut escaped = false;
    for (i, c) in assignment.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '=' if !escaped => {
                return Ok((assignment[..i].to_string(), assignment[i + 1..].to_string()));
            }
            _ => escaped = false,
        }
    }
    Err(format!("key {assignment:?} has no value"))
}

fn parse_path(key: &str) -> Result<Vec<Segment>, String> {
    let mut path = Vec::new();
    for part in split_unescaped(key, '.', false) {
        // `name[1][2]`: a key then indices; a bare `[0]` continues the previous segment.
        let (name, mut rest) = match find_unescaped(&part, '[') {
            Some(i) => (part[..i].to_string(), &part[i..]),
            None => (part.clone(), ""),
        };
        if !name.is_empty() {
            path.push(Segment::Key(unescape(&name)));
        } else if rest.is_empty() {
            return Err(format!("empty key segment in {key:?}"));
        }
        while let Some(body) = rest.strip_prefix('[') {
            let end = body
                .find(']')
                .ok_or_else(|| format!("unclosed '[' in {key:?}"))?;
            let idx: usize = body[..end]
                .parse()
                .map_err(|_| format!("list index {:?} in {key:?} is not a number", &body[..end]))?;
            if idx > MAX_INDEX {
                return Err(format!("list index {idx} exceeds the limit of {MAX_INDEX}"));
            }
            path.push(Segment::Index(idx));
            rest = &body[end + 1..];
        }
        if !rest.is_empty() {
            return Err(format!("unexpected {rest:?} after an index in {key:?}"));
        }
    }
    if path.is_empty() {
        return Err("empty key".into());
    }
    Ok(path)
}

fn find_unescaped(s: &str, target: char) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            c if c == target && !escaped => return Some(i),
            _ => escaped = false,
        }
    }
    None
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Helm's typing of `--set` values.
fn typed(s: &str) -> Value {
    if s.eq_ignore_ascii_case("true") {
        Value::Bool(true)
    } else if s.eq_ignore_ascii_case("false") {
        Value::Bool(false)
    } else if s.eq_ignore_ascii_case("null") {
        Value::Null
    } else if s == "0" {
        Value::from(0)
    } else if !s.starts_with('0')
        && let Ok(i) = s.parse::<i64>()
    {
        Value::from(i)
    } else {
        Value::String(s.to_string())
    }
}

fn assign(target: &mut Value, path: &[Segment], value: Value) -> Result<(), String> {
    let Some((first, rest)) = path.split_first() else {
        *target = value;
        return Ok(());
    };
    match first {
        Segment::Key(k) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let Value::Object(map) = target else {
                return Err("internal: expected a map".into());
            };
            let slot = map.entry(k.clone()).or_insert(Value::Null);
            assign(slot, rest, value)
        }
        Segment::Index(i) => {
            if !target.is_array() {
                *target = Value::Array(Vec::new());
            }
            let Value::Array(list) = target else {
                return Err("internal: expected a list".into());
            };
            while list.len() <= *i {
                list.push(Value::Null);
            }
            assign(&mut list[*i], rest, value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(exprs: &[&str]) -> Value {
        let mut v = json!({});
        for e in exprs {
            parse_set(e, &mut v).expect("valid --set");
        }
        v
    }

    #[test]
    fn nested_keys_types_and_lists() {
        assert_eq!(
            set(&[
                "a.b=1,c=true",
                "d=007,e=null,f={x,2}",
                "g[1].h=s",
                "i\\.j=k"
            ]),
            json!({"a": {"b": 1}, "c": true, "d": "007", "e": null,
                   "f": ["x", 2], "g": [null, {"h": "s"}], "i.j": "k"})
        );
    }

    #[test]
    fn later_assignments_win_and_bad_keys_are_refused() {
        assert_eq!(set(&["a=1", "a=2"]), json!({"a": 2}));
        let mut v = json!({});
        assert!(parse_set("novalue", &mut v).is_err());
        assert!(parse_set("a[x]=1", &mut v).is_err());
        assert!(parse_set("a[99999999]=1", &mut v).is_err());
    }
}
