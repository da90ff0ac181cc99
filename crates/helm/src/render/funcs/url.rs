//! Sprig's `urlParse` and `urlJoin`, which expose Go's `net/url` parsing and printing.
//!
//! Written by hand: the `url` crate implements the WHATWG URL standard, which normalises
//! (lower-cases hosts, adds `/` paths, resolves dots) and refuses relative references, while
//! Go's parser splits RFC 3986 components as written. The rules below follow Go's behaviour.

use super::args::{exact, fail, str_arg, string};
use crate::render::bytes;
use crate::render::value::map_value;
use gotmpl::{FuncMap, Result, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

pub fn register(fm: &mut FuncMap) {
    fm.insert("urlParse".into(), Arc::new(url_parse));
    fm.insert("urlJoin".into(), Arc::new(url_join));
}

/// The parts of a URL as Go's `url.URL` holds them (decoded where Go decodes).
#[derive(Debug, Default, PartialEq)]
struct Url {
    scheme: String,
    opaque: String,
    user: Option<(String, Option<String>)>,
    host: String,
    path: String,
    /// The path as written, when it differs from the default encoding of `path`.
    raw_path: String,
    force_query: bool,
    raw_query: String,
    fragment: String,
    omit_host: bool,
}

/// `urlParse s`: scheme, host, hostname, path, query, opaque, fragment and userinfo.
fn url_parse(args: &[Value]) -> Result<Value> {
    exact("urlParse", args, 1)?;
    let s = str_arg("urlParse", args, 0)?;
    let u = parse(&s).map_err(|e| fail("urlParse", format!("unable to parse url: {e}")))?;
    let mut m = BTreeMap::new();
    let hostname = hostname(&u.host).to_string();
    let userinfo = u.user.as_ref().map(user_string).unwrap_or_default();
    for (k, v) in [
        ("scheme", u.scheme),
        ("host", u.host),
        ("hostname", hostname),
        ("path", u.path),
        ("query", u.raw_query),
        ("opaque", u.opaque),
        ("fragment", u.fragment),
        ("userinfo", userinfo),
    ] {
        m.insert(Arc::<str>::from(k), string(v));
    }
    Ok(map_value(m))
}

/// `urlJoin dict`: the URL Go prints for those parts (missing or non-string parts are empty).
fn url_join(args: &[Value]) -> Result<Value> {
    exact("urlJoin", args, 1)?;
    let part = |k: &str| match args[0].field(k) {
        Some(Value::String(s)) => s.to_string(),
        _ => String::new(),
    };
    let userinfo = part("userinfo");
    let user = if userinfo.is_empty() {
        None
    } else {
        parse(&format!("proto://{userinfo}@host"))
            .map_err(|e| fail("urlJoin", format!("unable to parse userinfo in dict: {e}")))?
            .user
    };
    let u = Url {
        scheme: part("scheme"),
        opaque: part("opaque"),
        user,
        host: part("host"),
        path: part("path"),
        raw_query: part("query"),
        fragment: part("fragment"),
        ..Url::default()
    };
    Ok(string(to_string(&u)))
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Path,
    Host,
    Zone,
    UserPassword,
    Fragment,
}

fn parse(raw: &str) -> std::result::Result<Url, String> {
    let (rest, frag) = raw
        .split_once('#')
        .map_or((raw, None), |(a, b)| (a, Some(b)));
    let mut u = parse_without_fragment(rest)?;
    if let Some(f) = frag {
        u.fragment = unescape(f, Mode::Fragment)?;
    }
    Ok(u)
}

fn parse_without_fragment(raw: &str) -> std::result::Result<Url, String> {
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".into());
    }
    let mut u = Url::default();
    if raw == "*" {
        u.path = "*".into();
        return Ok(u);
    }
    let (scheme, mut rest) = split_scheme(raw)?;
    u.scheme = scheme.to_ascii_lowercase();
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        u.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some((r, q)) = rest.split_once('?') {
        rest = r;
        u.raw_query = q.to_string();
    }
    if !rest.starts_with('/') {
        if !u.scheme.is_empty() {
            // A rootless path after a scheme is opaque (RFC 3986).
            u.opaque = rest.to_string();
            return Ok(u);
        }
        let segment = rest.split('/').next().unwrap_or_default();
        if segment.contains(':') {
            return Err("first path segment in URL cannot contain colon".into());
        }
    }
    if (!u.scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
        let after = &rest[2..];
        let (authority, path) = match after.find('/') {
            Some(i) => (&after[..i], &after[i..]),
            None => (after, ""),
        };
        let (user, host) = parse_authority(authority)?;
        u.user = user;
        u.host = host;
        rest = path;
    } else if !u.scheme.is_empty() && rest.starts_with('/') {
        u.omit_host = true;
    }
    u.path = unescape(rest, Mode::Path)?;
    if escape(&u.path, Mode::Path) != rest {
        u.raw_path = rest.to_string();
    }
    Ok(u)
}

/// `scheme:rest`, or no scheme when the text before the first `:` is not one.
fn split_scheme(raw: &str) -> std::result::Result<(&str, &str), String> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme".into()),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

#[allow(clippy::type_complexity)]
fn parse_authority(
    authority: &str,
) -> std::result::Result<(Option<(String, Option<String>)>, String), String> {
    let Some(i) = authority.rfind('@') else {
        return Ok((None, parse_host(authority)?));
    };
    let host = parse_host(&authority[i + 1..])?;
    let userinfo = &authority[..i];
    if !userinfo.bytes().all(valid_userinfo_byte) {
        return Err("net/url: invalid userinfo".into());
    }
    let user = match userinfo.split_once(':') {
        None => (unescape(userinfo, Mode::UserPassword)?, None),
        Some((name, pass)) => (
            unescape(name, Mode::UserPassword)?,
            Some(unescape(pass, Mode::UserPassword)?),
        ),
    };
    Ok((Some(user), host))
}

/// RFC 3986's sub-delims, which both Go's userinfo check and its host escaping let through.
fn is_sub_delim(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
    )
}

fn valid_userinfo_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || is_sub_delim(b)
        || matches!(b, b'-' | b'.' | b'_' | b':' | b'~' | b'%' | b'@')
}

fn parse_host(host: &str) -> std::result::Result<String, String> {
    if host.starts_with('[') {
        let Some(end) = host.rfind(']') else {
            return Err("missing ']' in host".into());
        };
        let port = &host[end + 1..];
        if !valid_optional_port(port) {
            return Err(format!("invalid port {port:?} after host"));
        }
        // An IPv6 zone (`%25eth0`) is unescaped on its own.
        let inner = &host[..=end];
        return match inner.find("%25") {
            Some(z) => Ok(format!(
                "{}{}{}",
                unescape(&inner[..z], Mode::Host)?,
                unescape(&inner[z..], Mode::Zone)?,
                unescape(port, Mode::Host)?
            )),
            None => unescape(host, Mode::Host),
        };
    }
    if let Some(i) = host.rfind(':') {
        let port = &host[i..];
        if !valid_optional_port(port) {
            return Err(format!("invalid port {port:?} after host"));
        }
    }
    unescape(host, Mode::Host)
}

fn valid_optional_port(port: &str) -> bool {
    match port.strip_prefix(':') {
        None => port.is_empty(),
        Some(digits) => digits.bytes().all(|b| b.is_ascii_digit()),
    }
}

/// `Hostname()`: the host without its port and IPv6 brackets.
fn hostname(host: &str) -> &str {
    let mut h = host;
    if let Some(i) = h.rfind(':')
        && valid_optional_port(&h[i..])
    {
        h = &h[..i];
    }
    if h.len() >= 2 && h.starts_with('[') && h.ends_with(']') {
        h = &h[1..h.len() - 1];
    }
    h
}

fn user_string((name, pass): &(String, Option<String>)) -> String {
    let mut s = escape(name, Mode::UserPassword);
    if let Some(p) = pass {
        s.push(':');
        s.push_str(&escape(p, Mode::UserPassword));
    }
    s
}

/// Go's `URL.String()`.
fn to_string(u: &Url) -> String {
    let mut out = String::new();
    if !u.scheme.is_empty() {
        out.push_str(&u.scheme);
        out.push(':');
    }
    if !u.opaque.is_empty() {
        out.push_str(&u.opaque);
    } else {
        let has_authority = !u.scheme.is_empty() || !u.host.is_empty() || u.user.is_some();
        let omitted = u.omit_host && u.host.is_empty() && u.user.is_none();
        if has_authority && !omitted {
            if !u.host.is_empty() || !u.path.is_empty() || u.user.is_some() {
                out.push_str("//");
            }
            if let Some(user) = &u.user {
                out.push_str(&user_string(user));
                out.push('@');
            }
            out.push_str(&escape(&u.host, Mode::Host));
        }
        let path = if !u.raw_path.is_empty() {
            u.raw_path.clone()
        } else if u.path == "*" {
            "*".to_string()
        } else {
            escape(&u.path, Mode::Path)
        };
        if !path.is_empty() && !path.starts_with('/') && !u.host.is_empty() {
            out.push('/');
        }
        if out.is_empty() && path.split('/').next().is_some_and(|s| s.contains(':')) {
            // A colon in the first segment would read as a scheme.
            out.push_str("./");
        }
        out.push_str(&path);
    }
    if u.force_query || !u.raw_query.is_empty() {
        out.push('?');
        out.push_str(&u.raw_query);
    }
    if !u.fragment.is_empty() {
        out.push('#');
        out.push_str(&escape(&u.fragment, Mode::Fragment));
    }
    out
}

/// Go's `shouldEscape`.
fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if matches!(mode, Mode::Host | Mode::Zone)
        && (is_sub_delim(c) || matches!(c, b':' | b'[' | b']' | b'<' | b'>' | b'"'))
    {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => return false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => {
            return match mode {
                Mode::Path => c == b'?',
                Mode::UserPassword => matches!(c, b'@' | b'/' | b'?' | b':'),
                Mode::Fragment => false,
                Mode::Host | Mode::Zone => true,
            };
        }
        _ => {}
    }
    if mode == Mode::Fragment && matches!(c, b'!' | b'(' | b')' | b'*') {
        return false;
    }
    true
}

fn escape(s: &str, mode: Mode) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in bytes::to_bytes(s).iter() {
        if should_escape(b, mode) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

/// Go's `unescape`: `%XX` decoded; in a host only non-ASCII may be escaped (except in zones).
fn unescape(s: &str, mode: Mode) -> std::result::Result<String, String> {
    let b = bytes::to_bytes(s);
    let b = b.as_ref();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = b
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()));
                let Some(hex) = hex else {
                    let bad: String = bytes::from_bytes(&b[i..]).chars().take(3).collect();
                    return Err(format!("invalid URL escape {bad:?}"));
                };
                let v = u8::from_str_radix(hex, 16).map_err(|e| e.to_string())?;
                if mode == Mode::Host && v < 0x80 && &b[i..i + 3] != b"%25" {
                    return Err(format!("invalid URL escape \"%{hex}\""));
                }
                out.push(v);
                i += 3;
            }
            c => {
                if matches!(mode, Mode::Host | Mode::Zone) && c < 0x80 && should_escape(c, mode) {
                    return Err(format!(
                        "invalid character {:?} in host name",
                        char::from(c)
                    ));
                }
                out.push(c);
                i += 1;
            }
        }
    }
    // Go keeps the decoded bytes as they are, UTF-8 or not.
    Ok(bytes::from_bytes(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_like_go_net_url() {
        let u = parse("https://user:p%40ss@Example.com:8443/a%20b/c?x=1&y=2#Frag%20x")
            .unwrap_or_default();
        assert_eq!(u.scheme, "https");
        assert_eq!(u.host, "Example.com:8443");
        assert_eq!(hostname(&u.host), "Example.com");
        assert_eq!(u.path, "/a b/c");
        assert_eq!(u.raw_query, "x=1&y=2");
        assert_eq!(u.fragment, "Frag x");
        assert_eq!(
            u.user.as_ref().map(user_string).as_deref(),
            Some("user:p%40ss")
        );
        assert_eq!(
            parse("mailto:a@b.c").map(|u| u.opaque).ok().as_deref(),
            Some("a@b.c")
        );
        assert!(parse("a:b/c").is_ok_and(|u| u.scheme == "a"));
        assert!(parse("1a:b").is_err());
        assert!(parse("http://h:x/").is_err());
    }

    #[test]
    fn prints_like_go_net_url() {
        let u = Url {
            scheme: "https".into(),
            host: "example.com:443".into(),
            path: "/a b/c".into(),
            raw_query: "x=1".into(),
            fragment: "f g".into(),
            user: Some(("u".into(), Some("p@w".into()))),
            ..Url::default()
        };
        assert_eq!(
            to_string(&u),
            "https://u:p%40w@example.com:443/a%20b/c?x=1#f%20g"
        );
        let rel = Url {
            path: "a:b/c".into(),
            ..Url::default()
        };
        assert_eq!(to_string(&rel), "./a:b/c");
        let host_only = Url {
            host: "h".into(),
            path: "rel".into(),
            ..Url::default()
        };
        assert_eq!(to_string(&host_only), "//h/rel");
    }
}
