//! Defaults, conditionals, failures, type conversion, arithmetic and regular expressions.

use super::args::{Builtin, arg, exact, fail, register_all, str_arg, string};
use crate::render::value::{is_empty, strval, to_f64, to_i64};
use gotmpl::{FuncMap, Result, TemplateError, Value};

pub fn register(fm: &mut FuncMap) {
    let funcs: &[(&str, Builtin)] = &[
        ("default", default),
        ("empty", |a| Ok(Value::Bool(a.first().is_none_or(is_empty)))),
        ("all", |a| Ok(Value::Bool(a.iter().all(|v| !is_empty(v))))),
        ("any", |a| Ok(Value::Bool(a.iter().any(|v| !is_empty(v))))),
        ("typeIsLike", |a| {
            exact("typeIsLike", a, 2)?;
            let want = str_arg("typeIsLike", a, 0)?;
            let got = type_of(arg("typeIsLike", a, 1)?);
            Ok(Value::Bool(got == want || format!("*{got}") == want))
        }),
        ("coalesce", |a| {
            Ok(a.iter()
                .find(|v| !is_empty(v))
                .cloned()
                .unwrap_or(Value::Nil))
        }),
        ("ternary", ternary),
        ("fail", |a| Err(TemplateError::Exec(str_arg("fail", a, 0)?))),
        ("required", required),
        ("int", |a| Ok(Value::Int(to_i64(arg("int", a, 0)?)))),
        ("int64", |a| Ok(Value::Int(to_i64(arg("int64", a, 0)?)))),
        ("atoi", |a| {
            Ok(Value::Int(
                str_arg("atoi", a, 0)?.trim().parse().unwrap_or(0),
            ))
        }),
        ("float64", |a| {
            Ok(Value::Float(to_f64(arg("float64", a, 0)?)))
        }),
        ("toStrings", to_strings),
        ("add", |a| {
            Ok(Value::Int(
                a.iter().map(to_i64).fold(0i64, i64::wrapping_add),
            ))
        }),
        ("add1", |a| {
            Ok(Value::Int(to_i64(arg("add1", a, 0)?).wrapping_add(1)))
        }),
        ("sub", |a| int2("sub", a, |x, y| Some(x.wrapping_sub(y)))),
        ("mul", |a| {
            Ok(Value::Int(
                a.iter().map(to_i64).fold(1i64, i64::wrapping_mul),
            ))
        }),
        ("div", |a| int2("div", a, i64::checked_div)),
        ("mod", |a| int2("mod", a, i64::checked_rem)),
        ("max", |a| {
            Ok(Value::Int(a.iter().map(to_i64).max().unwrap_or(0)))
        }),
        ("min", |a| {
            Ok(Value::Int(a.iter().map(to_i64).min().unwrap_or(0)))
        }),
        ("kindOf", |a| Ok(string(kind_of(arg("kindOf", a, 0)?)))),
        ("kindIs", |a| {
            exact("kindIs", a, 2)?;
            Ok(Value::Bool(str_arg("kindIs", a, 0)? == kind_of(&a[1])))
        }),
        ("typeOf", |a| Ok(string(type_of(arg("typeOf", a, 0)?)))),
        ("typeIs", |a| {
            exact("typeIs", a, 2)?;
            Ok(Value::Bool(str_arg("typeIs", a, 0)? == type_of(&a[1])))
        }),
        ("deepEqual", |a| {
            exact("deepEqual", a, 2)?;
            Ok(Value::Bool(a[0] == a[1]))
        }),
        ("regexMatch", |a| regex_match("regexMatch", a, false)),
        ("mustRegexMatch", |a| regex_match("mustRegexMatch", a, true)),
        ("regexFind", regex_find),
        ("regexFindAll", regex_find_all),
        ("regexReplaceAll", |a| {
            regex_replace("regexReplaceAll", a, true)
        }),
        ("regexReplaceAllLiteral", |a| {
            regex_replace("regexReplaceAllLiteral", a, false)
        }),
        ("regexSplit", regex_split),
    ];
    register_all(fm, funcs);
}

/// `default d v`: `v` unless it is empty (missing, nil, false, 0, "", empty list/map).
fn default(args: &[Value]) -> Result<Value> {
    let d = arg("default", args, 0)?;
    match args.get(1) {
        Some(v) if !is_empty(v) => Ok(v.clone()),
        _ => Ok(d.clone()),
    }
}

fn ternary(args: &[Value]) -> Result<Value> {
    exact("ternary", args, 3)?;
    Ok(if args[2].is_truthy() {
        args[0].clone()
    } else {
        args[1].clone()
    })
}

/// Helm's `required msg v`: fails with `msg` when `v` is nil or the empty string.
fn required(args: &[Value]) -> Result<Value> {
    exact("required", args, 2)?;
    let msg = strval(&args[0]);
    match &args[1] {
        Value::Nil => Err(TemplateError::Exec(msg)),
        Value::String(s) if s.is_empty() => Err(TemplateError::Exec(msg)),
        v => Ok(v.clone()),
    }
}

fn to_strings(args: &[Value]) -> Result<Value> {
    exact("toStrings", args, 1)?;
    let items: Vec<Value> = match &args[0] {
        // Sprig leaves nil items out.
        Value::List(items) => items
            .iter()
            .filter(|v| !matches!(v, Value::Nil))
            .map(|v| string(strval(v)))
            .collect(),
        Value::Nil => Vec::new(),
        other => vec![string(strval(other))],
    };
    Ok(Value::List(items.into()))
}

fn int2(name: &str, args: &[Value], f: fn(i64, i64) -> Option<i64>) -> Result<Value> {
    exact(name, args, 2)?;
    f(to_i64(&args[0]), to_i64(&args[1]))
        .map(Value::Int)
        .ok_or_else(|| fail(name, "runtime error: integer divide by zero"))
}

/// Go's reflect kind names, as Sprig's `kindOf` reports them for values decoded from YAML.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Nil => "invalid",
        Value::Bool(_) => "bool",
        // Template literals are Go `int`; only `--set` yields int64, and the two share one
        // representation here, so the far more common literal wins.
        Value::Int(_) => "int",
        Value::Uint(_) => "uint64",
        Value::Float(_) => "float64",
        Value::String(_) => "string",
        Value::List(_) => "slice",
        Value::Map(_) => "map",
        Value::Function(_) => "func",
    }
}

fn type_of(v: &Value) -> String {
    match v {
        Value::Nil => "<nil>".into(),
        Value::List(_) => "[]interface {}".into(),
        Value::Map(_) => "map[string]interface {}".into(),
        other => kind_of(other).into(),
    }
}

fn compile(name: &str, pattern: &str) -> Result<regex::Regex> {
    // Bounded compiled size: templates are untrusted input.
    regex::RegexBuilder::new(&re2_to_rust(pattern))
        .size_limit(1 << 20)
        .build()
        .map_err(|e| fail(name, e))
}

/// Go's regexp is RE2, whose syntax differs from the regex crate's in a few places that chart
/// authors hit: `\w`, `\d`, `\s` and `\b` are ASCII-only, `-` in a class is a literal where it
/// cannot end a range (`[\w-\.]`, `[a-c-e]`), `\Q...\E` quotes, and `[`, `&&`, `--`, `~~`
/// inside a class are plain characters. This rewrites an RE2 pattern into a regex-crate
/// pattern with the same meaning; an invalid pattern stays invalid.
pub(crate) fn re2_to_rust(pattern: &str) -> String {
    const WORD: &str = "0-9A-Za-z_";
    const DIGIT: &str = "0-9";
    const SPACE: &str = r"\t\n\x0C\r ";
    let perl = |c: char| match c {
        'w' | 'W' => Some(WORD),
        'd' | 'D' => Some(DIGIT),
        's' | 'S' => Some(SPACE),
        _ => None,
    };
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut i = 0;
    // Inside a class: whether the last item was a single character that may start a range, and
    // whether the class has any item yet.
    let mut in_class = false;
    let mut class_empty = false;
    let mut prev_single = false;
    let push_lit = |out: &mut String, c: char| {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' && i + 1 < chars.len() {
            let e = chars[i + 1];
            i += 2;
            if e == 'Q' {
                // Literal text up to `\E` (or the end).
                while i < chars.len() {
                    if chars[i] == '\\' && chars.get(i + 1) == Some(&'E') {
                        i += 2;
                        break;
                    }
                    push_lit(&mut out, chars[i]);
                    i += 1;
                }
                continue;
            }
            if let Some(set) = perl(e) {
                let neg = e.is_ascii_uppercase();
                match (in_class, neg) {
                    (true, false) => out.push_str(set),
                    (true, true) => {
                        out.push_str("[^");
                        out.push_str(set);
                        out.push(']');
                    }
                    (false, _) => {
                        out.push('[');
                        if neg {
                            out.push('^');
                        }
                        out.push_str(set);
                        out.push(']');
                    }
                }
                prev_single = false;
                class_empty = false;
                continue;
            }
            if !in_class && (e == 'b' || e == 'B') {
                out.push_str("(?-u:\\");
                out.push(e);
                out.push(')');
                continue;
            }
            out.push('\\');
            out.push(e);
            if matches!(e, 'x' | 'p' | 'P') {
                // `\x41`, `\x{263a}`, `\pL`, `\p{Greek}`: the argument is copied as it is.
                let n = if chars.get(i) == Some(&'{') {
                    chars[i..]
                        .iter()
                        .position(|&c| c == '}')
                        .map_or(0, |p| p + 1)
                } else if e == 'x' {
                    2
                } else {
                    1
                };
                let n = n.min(chars.len() - i);
                out.extend(&chars[i..i + n]);
                i += n;
            }
            prev_single =
                !e.is_ascii_alphabetic() || matches!(e, 'a' | 'f' | 't' | 'n' | 'r' | 'v' | 'x');
            class_empty = false;
            continue;
        }
        if !in_class {
            if c == '{' && !is_repetition(&chars[i..]) {
                // Not `{n}`, `{n,}` or `{n,m}`: RE2 reads a literal brace.
                out.push_str("\\{");
                i += 1;
                continue;
            }
            if c == '[' {
                in_class = true;
                class_empty = true;
                prev_single = false;
                out.push('[');
                i += 1;
                if chars.get(i) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                // A `]` first in a class is a literal.
                if chars.get(i) == Some(&']') {
                    out.push_str("\\]");
                    class_empty = false;
                    prev_single = true;
                    i += 1;
                }
                continue;
            }
            out.push(c);
            i += 1;
            continue;
        }
        // Inside a class.
        match c {
            ']' => {
                in_class = false;
                out.push(']');
                i += 1;
            }
            '[' if chars.get(i + 1) == Some(&':') => {
                // A POSIX class `[:alpha:]`: copied whole.
                let rest: String = chars[i..].iter().collect();
                match rest.find(":]") {
                    Some(end) => {
                        let n = rest[..end + 2].chars().count();
                        out.extend(&chars[i..i + n]);
                        i += n;
                    }
                    None => {
                        out.push_str("\\[");
                        i += 1;
                    }
                }
                prev_single = false;
                class_empty = false;
            }
            '-' => {
                let ends = chars.get(i + 1) == Some(&']');
                if class_empty || ends || !prev_single {
                    out.push_str("\\-");
                    prev_single = true;
                } else {
                    out.push('-');
                    i += 1;
                    // The range's end: one character or escape.
                    if let Some(&n) = chars.get(i) {
                        if n == '\\' && i + 1 < chars.len() {
                            out.push('\\');
                            out.push(chars[i + 1]);
                            i += 1;
                        } else {
                            push_lit(&mut out, n);
                        }
                    }
                    prev_single = false;
                }
                class_empty = false;
                i += 1;
                continue;
            }
            _ => {
                push_lit(&mut out, c);
                prev_single = true;
                class_empty = false;
                i += 1;
            }
        }
    }
    out
}

/// Whether `rest` (starting at `{`) is a counted repetition: `{n}`, `{n,}` or `{n,m}`.
fn is_repetition(rest: &[char]) -> bool {
    let Some(end) = rest.iter().position(|&c| c == '}') else {
        return false;
    };
    let inner: String = rest[1..end].iter().collect();
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    match inner.split_once(',') {
        Some((min, max)) => digits(min) && (max.is_empty() || digits(max)),
        None => digits(&inner),
    }
}

/// `regexMatch`: Sprig ignores a pattern that does not compile (no match); `mustRegexMatch`
/// (`strict`) fails.
fn regex_match(name: &str, args: &[Value], strict: bool) -> Result<Value> {
    exact(name, args, 2)?;
    let re = match compile(name, &str_arg(name, args, 0)?) {
        Ok(re) => re,
        Err(e) if strict => return Err(e),
        Err(_) => return Ok(Value::Bool(false)),
    };
    Ok(Value::Bool(re.is_match(&str_arg(name, args, 1)?)))
}

fn regex_find(args: &[Value]) -> Result<Value> {
    exact("regexFind", args, 2)?;
    let re = compile("regexFind", &str_arg("regexFind", args, 0)?)?;
    let s = str_arg("regexFind", args, 1)?;
    Ok(string(re.find(&s).map(|m| m.as_str()).unwrap_or("")))
}

fn regex_find_all(args: &[Value]) -> Result<Value> {
    exact("regexFindAll", args, 3)?;
    let re = compile("regexFindAll", &str_arg("regexFindAll", args, 0)?)?;
    let s = str_arg("regexFindAll", args, 1)?;
    let n = to_i64(&args[2]);
    let limit = if n < 0 { usize::MAX } else { n as usize };
    Ok(Value::List(
        re.find_iter(&s)
            .take(limit)
            .map(|m| string(m.as_str()))
            .collect(),
    ))
}

/// `regexReplaceAll regex s repl`; `$1`-style references expand as in Go's `Expand`.
fn regex_replace(name: &str, args: &[Value], expand: bool) -> Result<Value> {
    exact(name, args, 3)?;
    let re = compile(name, &str_arg(name, args, 0)?)?;
    let s = str_arg(name, args, 1)?;
    let repl = str_arg(name, args, 2)?;
    let out = re
        .replace_all(
            &s,
            Budgeted {
                repl: &repl,
                expand,
            },
        )
        .into_owned();
    if let Some(spent) = crate::render::meter::over() {
        return Err(fail(name, spent));
    }
    Ok(string(out))
}

/// A replacement that stops adding text once the render's memory budget cannot hold it (each
/// match may bring the whole replacement, `$1` expanded, so the result can be far larger than
/// the input): the budget stays spent and the render fails.
struct Budgeted<'r> {
    repl: &'r str,
    expand: bool,
}

impl regex::Replacer for Budgeted<'_> {
    fn replace_append(&mut self, caps: &regex::Captures<'_>, dst: &mut String) {
        use crate::render::meter::{Built, fits};
        if !fits(dst.len().saturating_add(self.repl.len()), Built::String) {
            return;
        }
        let before = dst.len();
        if self.expand {
            caps.expand(self.repl, dst);
        } else {
            dst.push_str(self.repl);
        }
        if !fits(dst.len(), Built::String) {
            dst.truncate(before);
        }
    }
}

fn regex_split(args: &[Value]) -> Result<Value> {
    exact("regexSplit", args, 3)?;
    let re = compile("regexSplit", &str_arg("regexSplit", args, 0)?)?;
    let s = str_arg("regexSplit", args, 1)?;
    let n = to_i64(&args[2]);
    let parts: Vec<Value> = if n < 0 {
        re.split(&s).map(string).collect()
    } else {
        re.splitn(&s, n as usize).map(string).collect()
    };
    Ok(Value::List(parts.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_replaces_only_empty_values() {
        let pick = |v: Value| {
            default(&[string("d"), v])
                .map(|v| strval(&v))
                .unwrap_or_default()
        };
        assert_eq!(pick(Value::Nil), "d");
        assert_eq!(pick(string("")), "d");
        assert_eq!(pick(Value::Int(0)), "d");
        assert_eq!(pick(Value::Bool(false)), "d");
        assert_eq!(pick(Value::Int(5)), "5");
        assert_eq!(pick(string("x")), "x");
        assert_eq!(
            default(&[string("d")])
                .map(|v| strval(&v))
                .unwrap_or_default(),
            "d"
        );
    }

    #[test]
    fn required_fails_with_the_message() {
        let err = required(&[string("image.tag is required"), Value::Nil]);
        assert!(matches!(err, Err(TemplateError::Exec(m)) if m == "image.tag is required"));
        assert!(required(&[string("m"), Value::Int(0)]).is_ok());
    }
}
