//! Sprig's path functions (`base`, `dir`, `clean`, `ext`, `isAbs` and the `os*` forms), which
//! follow Go's `path` package: slash-separated, lexical, never touching the filesystem. Written
//! by hand because `std::path` normalises differently (e.g. `clean` of `a/../..` is `..`).

use super::args::{Builtin, exact, register_all, str_arg, string};
use gotmpl::{FuncMap, Result, Value};

pub fn register(fm: &mut FuncMap) {
    let funcs: &[(&str, Builtin)] = &[
        ("base", |a| unary("base", a, base)),
        ("dir", |a| unary("dir", a, dir)),
        ("clean", |a| unary("clean", a, clean)),
        ("ext", |a| unary("ext", a, |p| ext(p).to_string())),
        ("isAbs", |a| {
            exact("isAbs", a, 1)?;
            Ok(Value::Bool(str_arg("isAbs", a, 0)?.starts_with('/')))
        }),
        ("osBase", |a| unary("osBase", a, base)),
        ("osDir", |a| unary("osDir", a, dir)),
        ("osClean", |a| unary("osClean", a, clean)),
        ("osExt", |a| unary("osExt", a, |p| ext(p).to_string())),
        ("osIsAbs", |a| {
            exact("osIsAbs", a, 1)?;
            Ok(Value::Bool(str_arg("osIsAbs", a, 0)?.starts_with('/')))
        }),
    ];
    register_all(fm, funcs);
}

fn unary(name: &str, args: &[Value], f: impl Fn(&str) -> String) -> Result<Value> {
    exact(name, args, 1)?;
    Ok(string(f(&str_arg(name, args, 0)?)))
}

/// Go's `path.Clean`: collapse `//`, drop `.`, resolve `..` lexically; "" becomes ".".
pub fn clean(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// Go's `path.Base`: the last element after trimming trailing slashes.
fn base(p: &str) -> String {
    if p.is_empty() {
        return ".".into();
    }
    let trimmed = p.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/".into();
    }
    trimmed.rsplit('/').next().unwrap_or(trimmed).to_string()
}

/// Go's `path.Dir`: everything before the last slash, cleaned.
fn dir(p: &str) -> String {
    let head = match p.rfind('/') {
        Some(i) => &p[..=i],
        None => "",
    };
    clean(head)
}

/// Go's `path.Ext`: the suffix from the last dot in the last element.
fn ext(p: &str) -> &str {
    let last = p.rsplit('/').next().unwrap_or(p);
    last.rfind('.').map(|i| &last[i..]).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_go_path() {
        assert_eq!(clean("a//b/./c/../d/"), "a/b/d");
        assert_eq!(clean("/../a"), "/a");
        assert_eq!(clean("a/../.."), "..");
        assert_eq!(base("/a/b.txt/"), "b.txt");
        assert_eq!(base("///"), "/");
        assert_eq!(dir("a/b/c"), "a/b");
        assert_eq!(dir("file"), ".");
        assert_eq!(ext("x/y.tar.gz"), ".gz");
        assert_eq!(ext("x.d/y"), "");
    }
}
