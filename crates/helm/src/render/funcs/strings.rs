//! Sprig's string functions.

use super::args::{Builtin, arg, exact, fail, register_all, str_arg, string};
use crate::render::bytes;
use crate::render::value::{go_quote, strval, to_i64};
use gotmpl::{FuncMap, Result, TemplateError, Value};
use std::sync::Arc;

pub fn register(fm: &mut FuncMap) {
    let funcs: &[(&str, Builtin)] = &[
        ("quote", quote),
        ("squote", squote),
        ("trim", |a| unary("trim", a, |s| s.trim().to_string())),
        // Go's case mapping turns each byte that is not UTF-8 into U+FFFD.
        ("upper", |a| {
            unary("upper", a, |s| bytes::lossy(s).to_uppercase())
        }),
        ("lower", |a| {
            unary("lower", a, |s| bytes::lossy(s).to_lowercase())
        }),
        ("title", |a| unary("title", a, title)),
        ("untitle", |a| unary("untitle", a, untitle)),
        ("nospace", |a| {
            unary("nospace", a, |s| {
                s.chars().filter(|c| !c.is_whitespace()).collect()
            })
        }),
        ("toString", to_string),
        ("trimSuffix", |a| {
            binary("trimSuffix", a, |suf, s| {
                s.strip_suffix(suf).unwrap_or(s).to_string()
            })
        }),
        ("trimPrefix", |a| {
            binary("trimPrefix", a, |pre, s| {
                s.strip_prefix(pre).unwrap_or(s).to_string()
            })
        }),
        ("trimAll", |a| {
            binary("trimAll", a, |cut, s| {
                s.trim_matches(|c| cut.contains(c)).to_string()
            })
        }),
        ("contains", |a| {
            predicate("contains", a, |sub, s| s.contains(sub))
        }),
        ("hasPrefix", |a| {
            predicate("hasPrefix", a, |p, s| s.starts_with(p))
        }),
        ("hasSuffix", |a| {
            predicate("hasSuffix", a, |p, s| s.ends_with(p))
        }),
        ("replace", replace),
        ("indent", |a| indent("indent", a, false)),
        ("nindent", |a| indent("nindent", a, true)),
        ("trunc", trunc),
        ("len", go_len),
        ("substr", substr),
        ("repeat", repeat),
        ("cat", cat),
        ("splitList", split_list),
        ("split", split_map),
        ("splitn", splitn),
        ("join", join),
        ("snakecase", |a| {
            unary("snakecase", a, |s| separate_words(s, '_'))
        }),
        ("kebabcase", |a| {
            unary("kebabcase", a, |s| separate_words(s, '-'))
        }),
        ("camelcase", |a| unary("camelcase", a, camelcase)),
        ("swapcase", |a| unary("swapcase", a, swapcase)),
        ("initials", |a| {
            unary("initials", a, |s| {
                s.split_whitespace()
                    .filter_map(|w| w.chars().next())
                    .collect()
            })
        }),
        ("abbrev", abbrev),
        ("abbrevboth", abbrevboth),
        ("plural", plural),
        ("wrap", |a| {
            exact("wrap", a, 2)?;
            let width = usize::try_from(to_i64(&a[0])).unwrap_or(0);
            Ok(string(wrap(&str_arg("wrap", a, 1)?, width, "\n")))
        }),
        ("wrapWith", |a| {
            exact("wrapWith", a, 3)?;
            let width = usize::try_from(to_i64(&a[0])).unwrap_or(0);
            Ok(string(wrap(
                &str_arg("wrapWith", a, 2)?,
                width,
                &str_arg("wrapWith", a, 1)?,
            )))
        }),
        ("regexQuoteMeta", |a| {
            unary("regexQuoteMeta", a, regex::escape)
        }),
    ];
    register_all(fm, funcs);
}

fn unary(name: &str, args: &[Value], f: impl Fn(&str) -> String) -> Result<Value> {
    exact(name, args, 1)?;
    Ok(string(f(&str_arg(name, args, 0)?)))
}

fn binary(name: &str, args: &[Value], f: impl Fn(&str, &str) -> String) -> Result<Value> {
    exact(name, args, 2)?;
    Ok(string(f(
        &str_arg(name, args, 0)?,
        &str_arg(name, args, 1)?,
    )))
}

fn predicate(name: &str, args: &[Value], f: impl Fn(&str, &str) -> bool) -> Result<Value> {
    exact(name, args, 2)?;
    Ok(Value::Bool(f(
        &str_arg(name, args, 0)?,
        &str_arg(name, args, 1)?,
    )))
}

/// `quote` skips nil arguments and `%q`-quotes the rest, joined by spaces.
fn quote(args: &[Value]) -> Result<Value> {
    let parts: Vec<String> = args
        .iter()
        .filter(|v| !matches!(v, Value::Nil))
        .map(|v| go_quote(&strval(v)))
        .collect();
    Ok(string(parts.join(" ")))
}

/// `squote` wraps in single quotes with no escaping at all.
fn squote(args: &[Value]) -> Result<Value> {
    let parts: Vec<String> = args
        .iter()
        .filter(|v| !matches!(v, Value::Nil))
        .map(|v| format!("'{}'", strval(v)))
        .collect();
    Ok(string(parts.join(" ")))
}

fn replace(args: &[Value]) -> Result<Value> {
    exact("replace", args, 3)?;
    let (old, new, s) = (
        str_arg("replace", args, 0)?,
        str_arg("replace", args, 1)?,
        str_arg("replace", args, 2)?,
    );
    Ok(string(s.replace(&old, &new)))
}

fn indent(name: &str, args: &[Value], leading_newline: bool) -> Result<Value> {
    exact(name, args, 2)?;
    let n = usize::try_from(to_i64(arg(name, args, 0)?)).unwrap_or(0);
    let pad = " ".repeat(n);
    let s = str_arg(name, args, 1)?;
    let body = format!("{pad}{}", s.replace('\n', &format!("\n{pad}")));
    Ok(string(if leading_newline {
        format!("\n{body}")
    } else {
        body
    }))
}

/// `trunc n s`: the first n bytes, or with negative n the last -n. Sprig slices bytes, so a
/// cut inside a character leaves bytes that are not UTF-8 (carried, see `render::bytes`), and
/// printing them fails the render as in Helm.
fn trunc(args: &[Value]) -> Result<Value> {
    exact("trunc", args, 2)?;
    let n = to_i64(arg("trunc", args, 0)?);
    let s = str_arg("trunc", args, 1)?;
    let b = bytes::to_bytes(&s);
    let len = b.len() as i64;
    Ok(string(if n < 0 && len + n > 0 {
        bytes::from_bytes(&b[(len + n) as usize..])
    } else if n >= 0 && len > n {
        bytes::from_bytes(&b[..n as usize])
    } else {
        s
    }))
}

/// Go's `len` builtin, which replaces `gotmpl`'s (a function map entry wins over a builtin of
/// the same name): a string's length is its byte count, also for a string carrying bytes that
/// are not UTF-8 (see `render::bytes`), whose Rust length differs.
fn go_len(args: &[Value]) -> Result<Value> {
    exact("len", args, 1)?;
    let n = match &args[0] {
        Value::String(s) => Some(bytes::len(s)),
        other => other.len(),
    };
    match n {
        Some(n) => Ok(Value::Int(i64::try_from(n).unwrap_or(i64::MAX))),
        None => Err(TemplateError::Exec(format!(
            "len: cannot take length of {}",
            args[0]
        ))),
    }
}

fn substr(args: &[Value]) -> Result<Value> {
    exact("substr", args, 3)?;
    let start = to_i64(arg("substr", args, 0)?);
    let end = to_i64(arg("substr", args, 1)?);
    let s = str_arg("substr", args, 2)?;
    // Byte offsets, as in Sprig (see `trunc`).
    let b = bytes::to_bytes(&s);
    let len = b.len() as i64;
    let start = if start < 0 { 0 } else { start.min(len) };
    let end = if end < 0 || end > len { len } else { end };
    if start >= end {
        return Ok(string(""));
    }
    Ok(string(bytes::from_bytes(&b[start as usize..end as usize])))
}

fn repeat(args: &[Value]) -> Result<Value> {
    exact("repeat", args, 2)?;
    let n = to_i64(arg("repeat", args, 0)?);
    let s = str_arg("repeat", args, 1)?;
    // Bound the output so a template cannot ask for gigabytes.
    const MAX_OUTPUT: usize = 1 << 20;
    let n = usize::try_from(n).unwrap_or(0);
    if s.len().saturating_mul(n) > MAX_OUTPUT {
        return Err(fail(
            "repeat",
            format!("result would exceed {MAX_OUTPUT} bytes"),
        ));
    }
    Ok(string(s.repeat(n)))
}

fn cat(args: &[Value]) -> Result<Value> {
    let parts: Vec<String> = args
        .iter()
        .filter(|v| !matches!(v, Value::Nil))
        .map(strval)
        .collect();
    Ok(string(parts.join(" ")))
}

fn split_list(args: &[Value]) -> Result<Value> {
    exact("splitList", args, 2)?;
    let sep = str_arg("splitList", args, 0)?;
    let s = str_arg("splitList", args, 1)?;
    Ok(Value::List(
        go_split(&s, &sep).into_iter().map(string).collect(),
    ))
}

/// `split` returns a map `_0`, `_1`, ... of the parts.
fn split_map(args: &[Value]) -> Result<Value> {
    exact("split", args, 2)?;
    let sep = str_arg("split", args, 0)?;
    let s = str_arg("split", args, 1)?;
    let entries = go_split(&s, &sep)
        .into_iter()
        .enumerate()
        .map(|(i, p)| (Arc::<str>::from(format!("_{i}")), string(p)))
        .collect();
    Ok(Value::Map(Arc::new(entries)))
}

/// Go's `strings.Split`: an empty separator splits into characters.
fn go_split(s: &str, sep: &str) -> Vec<String> {
    if sep.is_empty() {
        return s.chars().map(String::from).collect();
    }
    s.split(sep).map(String::from).collect()
}

fn join(args: &[Value]) -> Result<Value> {
    exact("join", args, 2)?;
    let sep = str_arg("join", args, 0)?;
    let parts: Vec<String> = match arg("join", args, 1)? {
        // Sprig leaves nil items out.
        Value::List(items) => items
            .iter()
            .filter(|v| !matches!(v, Value::Nil))
            .map(strval)
            .collect(),
        Value::Nil => Vec::new(),
        other => vec![strval(other)],
    };
    Ok(string(parts.join(&sep)))
}

/// `toString`: Go's `%v` of a nil is `<nil>`.
fn to_string(args: &[Value]) -> Result<Value> {
    exact("toString", args, 1)?;
    Ok(match &args[0] {
        Value::Nil => string("<nil>"),
        other => string(strval(other)),
    })
}

/// Go's deprecated `strings.Title`: upper-cases the first letter of each word, where letters,
/// digits and `_` continue a word.
fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_sep = true;
    for c in s.chars() {
        if prev_sep {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        prev_sep = !(c.is_alphanumeric() || c == '_');
    }
    out
}

fn untitle(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_space = true;
    for c in s.chars() {
        if prev_space {
            out.extend(c.to_lowercase());
        } else {
            out.push(c);
        }
        prev_space = c.is_whitespace();
    }
    out
}

/// snake_case / kebab-case as xstrings does: a word starts at an upper-case letter that follows
/// a lower-case letter or digit, or that ends an upper-case run (`HTTPServer` → `http_server`);
/// other non-alphanumerics separate words.
fn separate_words(s: &str, sep: char) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len() + 4);
    for (i, &c) in chars.iter().enumerate() {
        let prev = i.checked_sub(1).map(|j| chars[j]);
        let next = chars.get(i + 1).copied();
        if c.is_uppercase() {
            let after_lower = prev.is_some_and(|p| p.is_lowercase() || p.is_ascii_digit());
            let ends_run =
                prev.is_some_and(char::is_uppercase) && next.is_some_and(char::is_lowercase);
            if (after_lower || ends_run) && !out.ends_with(sep) {
                out.push(sep);
            }
            out.extend(c.to_lowercase());
        } else if c.is_alphanumeric() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with(sep) {
            out.push(sep);
        }
    }
    out
}

fn swapcase(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            if c.is_uppercase() {
                c.to_lowercase().collect::<Vec<_>>()
            } else {
                c.to_uppercase().collect::<Vec<_>>()
            }
        })
        .collect()
}

/// `abbrev width s`: truncates with `...` when longer than `width` bytes (width < 4 leaves
/// `s`); like `trunc`, it may cut inside a character.
fn abbrev(args: &[Value]) -> Result<Value> {
    exact("abbrev", args, 2)?;
    let width = usize::try_from(to_i64(&args[0])).unwrap_or(0);
    let s = str_arg("abbrev", args, 1)?;
    if width < 4 {
        return Ok(string(s));
    }
    Ok(string(abbreviate(&bytes::to_bytes(&s), 0, width)))
}

/// `abbrevboth left width s`: abbreviates both ends, keeping text from offset `left` (Apache
/// Commons' `abbreviate(str, offset, maxWidth)`, which Sprig calls). Counts bytes as Go does.
fn abbrevboth(args: &[Value]) -> Result<Value> {
    exact("abbrevboth", args, 3)?;
    let (left, right) = (to_i64(&args[0]), to_i64(&args[1]));
    let s = str_arg("abbrevboth", args, 2)?;
    if right < 4 || (left > 0 && right < 7) {
        return Ok(string(s));
    }
    Ok(string(abbreviate(
        &bytes::to_bytes(&s),
        usize::try_from(left).unwrap_or(0),
        usize::try_from(right).unwrap_or(0),
    )))
}

/// The Go bytes `s` abbreviated; a cut inside a character leaves carried bytes (see `trunc`).
fn abbreviate(s: &[u8], offset: usize, width: usize) -> String {
    let text = bytes::from_bytes;
    if s.is_empty() || s.len() <= width {
        return text(s);
    }
    let mut offset = offset.min(s.len());
    if s.len() - offset < width - 3 {
        offset = s.len() - (width - 3);
    }
    if offset <= 4 {
        return format!("{}...", text(&s[..width - 3]));
    }
    if offset + width - 3 < s.len() {
        return format!("...{}", abbreviate(&s[offset..], 0, width - 3));
    }
    format!("...{}", text(&s[s.len() - (width - 3)..]))
}

/// `plural one many count`.
fn plural(args: &[Value]) -> Result<Value> {
    exact("plural", args, 3)?;
    let n = to_i64(&args[2]);
    str_arg("plural", args, if n == 1 { 0 } else { 1 }).map(string)
}

/// Word wrap at `width` columns, breaking only at spaces (long words stay whole).
fn wrap(s: &str, width: usize, newline: &str) -> String {
    let width = width.max(1);
    let mut out = String::with_capacity(s.len());
    for (i, line) in s.split('\n').enumerate() {
        if i > 0 {
            out.push_str(newline);
        }
        let mut col = 0;
        for (j, word) in line.split(' ').filter(|w| !w.is_empty()).enumerate() {
            let len = word.chars().count();
            if j > 0 && col + 1 + len > width {
                out.push_str(newline);
                col = 0;
            } else if j > 0 {
                out.push(' ');
                col += 1;
            }
            out.push_str(word);
            col += len;
        }
    }
    out
}

/// CamelCase from `snake_case` / `kebab-case` / spaced words.
fn camelcase(s: &str) -> String {
    s.split(['_', '-', ' '])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut cs = w.chars();
            cs.next()
                .map(|f| f.to_uppercase().chain(cs).collect::<String>())
                .unwrap_or_default()
        })
        .collect()
}

/// `splitn sep n s`: at most `n` pieces as a `_0`, `_1`, ... map, like `split`.
fn splitn(args: &[Value]) -> Result<Value> {
    exact("splitn", args, 3)?;
    let sep = str_arg("splitn", args, 0)?;
    let n = to_i64(&args[1]);
    let s = str_arg("splitn", args, 2)?;
    // Go's strings.SplitN: n == 0 yields nothing, n < 0 means no limit.
    let parts: Vec<String> = match n {
        0 => Vec::new(),
        n if n < 0 => go_split(&s, &sep),
        n if sep.is_empty() => {
            let limit = usize::try_from(n).unwrap_or(usize::MAX);
            let chars: Vec<char> = s.chars().collect();
            let mut out: Vec<String> = chars
                .iter()
                .take(limit.saturating_sub(1))
                .map(|c| c.to_string())
                .collect();
            let rest: String = chars.iter().skip(limit.saturating_sub(1)).collect();
            if !rest.is_empty() {
                out.push(rest);
            }
            out
        }
        n => s
            .splitn(usize::try_from(n).unwrap_or(usize::MAX), sep.as_str())
            .map(String::from)
            .collect(),
    };
    let entries = parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| (Arc::<str>::from(format!("_{i}")), string(p)))
        .collect();
    Ok(Value::Map(Arc::new(entries)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn title_matches_go_strings_title() {
        assert_eq!(title("hello world-foo bar_baz"), "Hello World-Foo Bar_baz");
    }

    #[test]
    fn trunc_handles_negative_counts() {
        let r = trunc(&[Value::Int(-3), string("abcdef")]).unwrap_or(Value::Nil);
        assert_eq!(strval(&r), "def");
        let r = trunc(&[Value::Int(63), string("short")]).unwrap_or(Value::Nil);
        assert_eq!(strval(&r), "short");
    }

    #[test]
    fn abbrev_wrap_and_plural() {
        let a = abbrev(&[Value::Int(5), string("hello world")]).map(|v| strval(&v));
        assert_eq!(a.unwrap_or_default(), "he...");
        assert_eq!(
            wrap("the quick brown fox", 10, "\n"),
            "the quick\nbrown fox"
        );
        let p = plural(&[
            string("one anchovy"),
            string("many anchovies"),
            Value::Int(2),
        ]);
        assert_eq!(p.map(|v| strval(&v)).unwrap_or_default(), "many anchovies");
        assert_eq!(swapcase("aB c"), "Ab C");
    }

    #[test]
    fn case_conversions() {
        assert_eq!(separate_words("FirstName", '_'), "first_name");
        assert_eq!(separate_words("HTTPServer", '-'), "http-server");
        assert_eq!(camelcase("http_server"), "HttpServer");
    }
}
