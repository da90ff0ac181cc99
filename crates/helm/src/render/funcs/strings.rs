//! Sprig's string functions.

use super::args::{Builtin, arg, exact, fail, register_all, str_arg, string};
use super::gocase;
use crate::render::bytes;
use crate::render::meter::{Built, reserve};
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
            unary("upper", a, |s| gocase::upper(&bytes::lossy(s)))
        }),
        ("lower", |a| {
            unary("lower", a, |s| gocase::lower(&bytes::lossy(s)))
        }),
        ("title", |a| unary("title", a, gocase::title)),
        ("untitle", |a| unary("untitle", a, gocase::untitle)),
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
            unary("snakecase", a, |s| gocase::separate_words(s, '_'))
        }),
        ("kebabcase", |a| {
            unary("kebabcase", a, |s| gocase::separate_words(s, '-'))
        }),
        ("camelcase", |a| unary("camelcase", a, gocase::pascalcase)),
        ("swapcase", |a| unary("swapcase", a, gocase::swapcase)),
        ("initials", |a| {
            unary("initials", a, |s| gocase::initials(&bytes::to_bytes(s)))
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
            let (text, with) = (str_arg("wrapWith", a, 2)?, str_arg("wrapWith", a, 1)?);
            // A break may come after every word.
            let most = text.len().saturating_mul(with.len().saturating_add(1));
            reserve("wrapWith", most, Built::String)?;
            Ok(string(wrap(&text, width, &with)))
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
    // Each match brings `new` (with an empty `old`, between every two characters).
    let matches = if old.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(old.as_str()).count()
    };
    reserve(
        "replace",
        s.len().saturating_add(matches.saturating_mul(new.len())),
        Built::String,
    )?;
    Ok(string(s.replace(&old, &new)))
}

fn indent(name: &str, args: &[Value], leading_newline: bool) -> Result<Value> {
    exact(name, args, 2)?;
    let n = usize::try_from(to_i64(arg(name, args, 0)?)).unwrap_or(0);
    let s = str_arg(name, args, 1)?;
    let lines = s.matches('\n').count() + 1;
    reserve(
        name,
        s.len()
            .saturating_add(lines.saturating_mul(n.saturating_add(1))),
        Built::String,
    )?;
    let pad = " ".repeat(n);
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
    // Sprig's `s[:end]` when start < 0, `s[start:]` when end is out of range, else
    // `s[start:end]`, with Go's panic for slice bounds out of range (helm fails the render).
    let (start, end) = if start < 0 {
        if end < 0 || end > len {
            let with = if end > len {
                format!(" with length {len}")
            } else {
                String::new()
            };
            return Err(fail(
                "substr",
                format!("runtime error: slice bounds out of range [:{end}]{with}"),
            ));
        }
        (0, end)
    } else if end < 0 || end > len {
        (start, len)
    } else {
        (start, end)
    };
    if start > end {
        return Err(fail(
            "substr",
            format!("runtime error: slice bounds out of range [{start}:{end}]"),
        ));
    }
    Ok(string(bytes::from_bytes(&b[start as usize..end as usize])))
}

fn repeat(args: &[Value]) -> Result<Value> {
    exact("repeat", args, 2)?;
    let n = to_i64(arg("repeat", args, 0)?);
    let s = str_arg("repeat", args, 1)?;
    let n = usize::try_from(n).unwrap_or(0);
    // The render's memory budget bounds the result (see `render::meter`).
    reserve("repeat", s.len().saturating_mul(n), Built::String)?;
    Ok(string(s.repeat(n)))
}

fn cat(args: &[Value]) -> Result<Value> {
    reserve("cat", printed(args.iter()), Built::String)?;
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
    // A list may hold the same long string many times.
    if let Value::List(items) = arg("join", args, 1)? {
        let seps = items.len().saturating_mul(sep.len());
        reserve(
            "join",
            printed(items.iter()).saturating_add(seps),
            Built::String,
        )?;
    }
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
/// The most bytes printing `values` makes (see [`crate::render::value::printed_len`]), when the
/// render's memory budget is bounded (measuring is not free).
fn printed<'v>(values: impl Iterator<Item = &'v Value>) -> usize {
    if !crate::render::meter::bounded() {
        return 0;
    }
    values
        .map(|v| crate::render::value::printed_len(v).saturating_add(1))
        .fold(0, usize::saturating_add)
}

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
        assert_eq!(
            gocase::title("hello world-foo bar_baz"),
            "Hello World-Foo Bar_baz"
        );
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
        assert_eq!(gocase::swapcase("aB c"), "Ab C");
    }

    #[test]
    fn case_conversions() {
        assert_eq!(gocase::separate_words("FirstName", '_'), "first_name");
        assert_eq!(gocase::separate_words("HTTPServer", '-'), "http-server");
        assert_eq!(gocase::pascalcase("http_server"), "HttpServer");
    }
}
