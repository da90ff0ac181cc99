//! Constants as Go reads them: quoted strings with Go's escapes (`strconv.Unquote`), raw
//! strings, character constants and number literals in every base Go accepts (`0x`, `0o`,
//! `0b`, a leading `0` for octal, `_` between digits, hex floats). Errors carry Go's texts.

use super::ast::Number;
use crate::render::bytes;

/// `strconv.ErrSyntax`'s text.
const INVALID: &str = "invalid syntax";

/// The value of a `"..."` or `` `...` `` literal (quotes included).
pub fn unquote(text: &str) -> Result<String, String> {
    if let Some(raw) = text.strip_prefix('`').and_then(|t| t.strip_suffix('`')) {
        // As in Go source, carriage returns are dropped from raw strings.
        return Ok(raw.replace('\r', ""));
    }
    let inner = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .ok_or(INVALID)?;
    if !inner.contains('\\') {
        return Ok(inner.to_string());
    }
    let mut out: Vec<u8> = Vec::with_capacity(inner.len());
    let mut rest = inner;
    while !rest.is_empty() {
        let (c, tail) = unquote_char(rest, '"')?;
        match c {
            Unquoted::Char(c) => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            Unquoted::Byte(b) => out.push(b),
        }
        rest = tail;
    }
    Ok(bytes::from_bytes(&out))
}

/// The value of a `'c'` character constant.
pub fn char_constant(text: &str) -> Result<i64, String> {
    let inner = text.strip_prefix('\'').ok_or(INVALID)?;
    let (c, tail) = unquote_char(inner, '\'')?;
    if tail != "'" {
        return Err(format!("malformed character constant: {text}"));
    }
    Ok(match c {
        Unquoted::Char(c) => i64::from(u32::from(c)),
        Unquoted::Byte(b) => i64::from(b),
    })
}

enum Unquoted {
    Char(char),
    /// `\xNN` or `\NNN`: a byte, which in a string need not be UTF-8.
    Byte(u8),
}

/// The first character of `s` (inside `quote`s) with its escape resolved, and the rest.
fn unquote_char(s: &str, quote: char) -> Result<(Unquoted, &str), String> {
    let mut chars = s.chars();
    let c = chars.next().ok_or(INVALID)?;
    if c == quote {
        return Err(INVALID.into());
    }
    if c != '\\' {
        return Ok((Unquoted::Char(c), chars.as_str()));
    }
    let e = chars.next().ok_or(INVALID)?;
    let rest = chars.as_str();
    let simple = match e {
        'a' => Some('\u{7}'),
        'b' => Some('\u{8}'),
        'f' => Some('\u{c}'),
        'n' => Some('\n'),
        'r' => Some('\r'),
        't' => Some('\t'),
        'v' => Some('\u{b}'),
        '\\' => Some('\\'),
        '\'' | '"' if e == quote => Some(e),
        _ => None,
    };
    if let Some(c) = simple {
        return Ok((Unquoted::Char(c), rest));
    }
    let (digits, radix) = match e {
        'x' => (2, 16),
        'u' => (4, 16),
        'U' => (8, 16),
        '0'..='7' => (2, 8),
        _ => return Err(INVALID.into()),
    };
    let hex = rest.get(..digits).ok_or(INVALID)?;
    if !hex.chars().all(|c| c.is_digit(radix)) {
        return Err(INVALID.into());
    }
    let tail = &rest[digits..];
    match e {
        'x' => Ok((
            Unquoted::Byte(u8::from_str_radix(hex, 16).map_err(|_| INVALID)?),
            tail,
        )),
        '0'..='7' => {
            let v = u32::from(e as u8 - b'0') * 64
                + u32::from_str_radix(hex, 8).map_err(|_| INVALID)?;
            let b = u8::try_from(v).map_err(|_| INVALID)?;
            Ok((Unquoted::Byte(b), tail))
        }
        _ => {
            let v = u32::from_str_radix(hex, 16).map_err(|_| INVALID)?;
            let c = char::from_u32(v).ok_or(INVALID)?;
            Ok((Unquoted::Char(c), tail))
        }
    }
}

/// A number literal's value where Go's executor accepts any type: an int when the text is
/// an integer, a float when it has a fraction or exponent.
pub fn number(text: &str) -> Result<Number, String> {
    if text.ends_with('i') {
        return Err(format!("complex constant {text} is not supported"));
    }
    if let Some(i) = parse_int(text) {
        return Ok(Number::Int(i));
    }
    if let Some(u) = parse_uint(text) {
        return Ok(Number::Uint(u));
    }
    match parse_float(text) {
        Some(_) if !text.contains(['.', 'e', 'E', 'p', 'P']) => {
            Err(format!("integer overflow: {}", super::go_quote(text)))
        }
        Some(f) => Ok(Number::Float(f)),
        None => Err(format!("illegal number syntax: {}", super::go_quote(text))),
    }
}

/// Splits a sign off.
fn sign(text: &str) -> (bool, &str) {
    match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    }
}

/// The radix and digits of an unsigned integer literal (`0x..`, `0o..`, `0b..`, `0..`).
fn radix(text: &str) -> (u32, &str, bool) {
    let b = text.as_bytes();
    if b.len() >= 2 && b[0] == b'0' {
        match b[1] {
            b'x' | b'X' => return (16, &text[2..], true),
            b'o' | b'O' => return (8, &text[2..], true),
            b'b' | b'B' => return (2, &text[2..], true),
            _ => return (8, &text[1..], true),
        }
    }
    (10, text, false)
}

/// Underscores only between digits (or right after a base prefix).
fn underscores_ok(digits: &str, prefixed: bool) -> bool {
    !digits.contains("__") && !digits.ends_with('_') && (prefixed || !digits.starts_with('_'))
}

fn parse_uint(text: &str) -> Option<u64> {
    let (base, digits, prefixed) = radix(text);
    if digits.is_empty() || !underscores_ok(digits, prefixed) {
        return None;
    }
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    if clean.is_empty() || !clean.chars().all(|c| c.is_digit(base)) {
        return None;
    }
    u64::from_str_radix(&clean, base).ok()
}

fn parse_int(text: &str) -> Option<i64> {
    let (negative, unsigned) = sign(text);
    let u = parse_uint(unsigned)?;
    if negative {
        0i64.checked_sub_unsigned(u)
    } else {
        i64::try_from(u).ok()
    }
}

fn parse_float(text: &str) -> Option<f64> {
    let (negative, unsigned) = sign(text);
    let b = unsigned.as_bytes();
    let hex = b.len() > 2 && b[0] == b'0' && matches!(b[1], b'x' | b'X');
    let body = if hex { &unsigned[2..] } else { unsigned };
    if !underscores_ok(body, hex) {
        return None;
    }
    let clean: String = body.chars().filter(|&c| c != '_').collect();
    let v = if hex {
        hex_float(&clean)?
    } else {
        if !clean
            .bytes()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
            || !clean.bytes().any(|c| c.is_ascii_digit())
        {
            return None;
        }
        clean.parse::<f64>().ok()?
    };
    Some(if negative { -v } else { v })
}

/// `1.8p1` (after `0x`): hex mantissa, binary exponent (required, as in Go).
fn hex_float(s: &str) -> Option<f64> {
    let (mantissa, exp) = s.split_once(['p', 'P'])?;
    let exp: i32 = exp.parse().ok()?;
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut v = 0f64;
    for c in int.chars() {
        v = v * 16.0 + f64::from(c.to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for c in frac.chars() {
        v += f64::from(c.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    Some(v * 2f64.powi(exp))
}
