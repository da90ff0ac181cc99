//! Go's `fmt.Sprintf`, as the template builtin `printf` runs it, on the executor's values:
//! flags, width, precision, argument indexes and `*`, every verb of the kinds a template
//! holds (bool, int, int64, uint64, float64, string, lists and maps, nil), and Go's error
//! forms (`%!d(string=x)`, `%!d(MISSING)`, `%!(EXTRA int=2)`, `%!(BADWIDTH)`, ...). Lists and
//! maps apply the verb to each element, as Go does (`%d` of a map formats its keys too).
//!
//! Hand-written: no crate formats Rust values by Go's rules. [`sprintf`] answers `None` for
//! what it does not model (`%p`, `%#v`, `#` on floats, Helm's structs and `.Files`), and the
//! caller falls back to `gotmpl`'s printf there.

use super::value::{Kind, V};
use crate::render::funcs::time;
use crate::render::meter::{self, Built};
use crate::render::value::{go_float, go_printable, go_quote};
use std::fmt::Write as _;

/// Go's `tooLarge`: widths and precisions beyond a million are refused.
const TOO_LARGE: i64 = 1_000_000;

/// Why formatting stopped: an argument this formatter does not model, or the render's memory
/// budget.
pub enum Stop {
    Unmodelled,
    Budget,
}

#[derive(Default, Clone, Copy)]
struct Flags {
    sharp: bool,
    zero: bool,
    plus: bool,
    minus: bool,
    space: bool,
    wid: Option<usize>,
    prec: Option<usize>,
}

struct Printer<'a> {
    out: String,
    f: Flags,
    type_name: &'a dyn Fn(&V) -> String,
}

/// `fmt.Sprintf(format, args...)`; `type_name` is the Go type of a value (Sprig's `typeOf`).
pub fn sprintf(format: &str, args: &[V], type_name: &dyn Fn(&V) -> String) -> Result<String, Stop> {
    let mut p = Printer {
        out: String::with_capacity(format.len() + 8 * args.len()),
        f: Flags::default(),
        type_name,
    };
    let b = format.as_bytes();
    let end = b.len();
    let mut arg = 0usize;
    let mut reordered = false;
    let mut i = 0usize;
    while i < end {
        let start = i;
        while i < end && b[i] != b'%' {
            i += 1;
        }
        p.out.push_str(&format[start..i]);
        if i >= end {
            break;
        }
        i += 1;
        p.f = Flags::default();
        while i < end {
            match b[i] {
                b'#' => p.f.sharp = true,
                b'0' => p.f.zero = !p.f.minus,
                b'+' => p.f.plus = true,
                b'-' => {
                    p.f.minus = true;
                    p.f.zero = false;
                }
                b' ' => p.f.space = true,
                _ => break,
            }
            i += 1;
        }
        let mut good_arg = true;
        let mut after_index;
        (arg, i, after_index) =
            arg_number(arg, format, i, args.len(), &mut good_arg, &mut reordered);
        if i < end && b[i] == b'*' {
            i += 1;
            let (w, ok, next) = int_from_arg(args, arg);
            arg = next;
            if ok {
                if w < 0 {
                    p.f.minus = true;
                    p.f.zero = false;
                }
                p.f.wid = Some(w.unsigned_abs() as usize);
            } else {
                p.out.push_str("%!(BADWIDTH)");
            }
            after_index = false;
        } else {
            let (w, ok, next) = parse_num(b, i, end);
            i = next;
            if ok {
                p.f.wid = Some(w);
                if after_index {
                    good_arg = false;
                }
            }
        }
        if i + 1 < end && b[i] == b'.' {
            i += 1;
            if after_index {
                good_arg = false;
            }
            (arg, i, after_index) =
                arg_number(arg, format, i, args.len(), &mut good_arg, &mut reordered);
            if i < end && b[i] == b'*' {
                i += 1;
                let (pr, ok, next) = int_from_arg(args, arg);
                arg = next;
                if ok && pr >= 0 {
                    p.f.prec = Some(pr as usize);
                } else if !ok {
                    p.out.push_str("%!(BADPREC)");
                }
                after_index = false;
            } else {
                let (pr, ok, next) = parse_num(b, i, end);
                i = next;
                p.f.prec = Some(if ok { pr } else { 0 });
            }
        }
        if !after_index {
            (arg, i, _) = arg_number(arg, format, i, args.len(), &mut good_arg, &mut reordered);
        }
        if i >= end {
            p.out.push_str("%!(NOVERB)");
            break;
        }
        let Some(verb) = format[i..].chars().next() else {
            break;
        };
        i += verb.len_utf8();
        if verb == '%' {
            p.out.push('%');
        } else if !good_arg {
            let _ = write!(p.out, "%!{verb}(BADINDEX)");
        } else if arg >= args.len() {
            let _ = write!(p.out, "%!{verb}(MISSING)");
        } else {
            if verb == 'v' {
                if p.f.sharp {
                    return Err(Stop::Unmodelled);
                }
                // `%+v` asks for struct field names, not a sign.
                p.f.plus = false;
            }
            p.arg(&args[arg], verb)?;
            arg += 1;
        }
    }
    if !reordered && arg < args.len() {
        p.f = Flags::default();
        p.out.push_str("%!(EXTRA ");
        for (k, a) in args[arg..].iter().enumerate() {
            if k > 0 {
                p.out.push_str(", ");
            }
            if matches!(a, V::Nil) {
                p.out.push_str("<nil>");
            } else {
                let t = (p.type_name)(a);
                p.out.push_str(&t);
                p.out.push('=');
                p.arg(a, 'v')?;
            }
        }
        p.out.push(')');
    }
    Ok(p.out)
}

/// Go's `argNumber`: an `[n]` index at `i`, if there is one (`found`); a bad one clears
/// `good`, and any sets `reordered` (no `%!(EXTRA ...)` then).
fn arg_number(
    arg: usize,
    format: &str,
    i: usize,
    n_args: usize,
    good: &mut bool,
    reordered: &mut bool,
) -> (usize, usize, bool) {
    let b = format.as_bytes();
    if i >= b.len() || b[i] != b'[' {
        return (arg, i, false);
    }
    *reordered = true;
    let rest = &b[i..];
    if rest.len() < 3 {
        *good = false;
        return (arg, i + 1, false);
    }
    let Some(close) = rest.iter().skip(1).position(|&c| c == b']').map(|k| k + 1) else {
        *good = false;
        return (arg, i + 1, false);
    };
    let (n, ok, next) = parse_num(rest, 1, close);
    if !ok || next != close {
        *good = false;
        return (arg, i + close + 1, false);
    }
    match n.checked_sub(1) {
        Some(index) if index < n_args => (index, i + close + 1, true),
        _ => {
            *good = false;
            (arg, i + close + 1, true)
        }
    }
}

/// Go's `parsenum`: digits at `start`; a number past a million consumes the rest.
fn parse_num(b: &[u8], start: usize, end: usize) -> (usize, bool, usize) {
    let mut n: i64 = 0;
    let mut any = false;
    let mut i = start;
    while i < end && b[i].is_ascii_digit() {
        if n > TOO_LARGE {
            return (0, false, end);
        }
        n = n * 10 + i64::from(b[i] - b'0');
        any = true;
        i += 1;
    }
    (n as usize, any, i)
}

/// Go's `intFromArg`: an integer argument for `*` (any integer kind that fits, within a
/// million either way).
fn int_from_arg(args: &[V], arg: usize) -> (i64, bool, usize) {
    let Some(a) = args.get(arg) else {
        return (0, false, arg);
    };
    let n = match a {
        V::Int(n) | V::Int64(n) => Some(*n),
        V::Uint(u) => i64::try_from(*u).ok(),
        _ => None,
    };
    match n {
        Some(n) if (-TOO_LARGE..=TOO_LARGE).contains(&n) => (n, true, arg + 1),
        _ => (0, false, arg + 1),
    }
}

impl Printer<'_> {
    /// `printArg`: one top-level argument.
    fn arg(&mut self, a: &V, verb: char) -> Result<(), Stop> {
        if let V::Nil = a {
            return match verb {
                'T' | 'v' => self.pad("<nil>"),
                _ => {
                    let _ = write!(self.out, "%!{verb}(<nil>)");
                    Ok(())
                }
            };
        }
        if verb == 'T' {
            let t = (self.type_name)(a);
            return self.fmt_s(&t);
        }
        if verb == 'p' {
            return Err(Stop::Unmodelled);
        }
        self.value(a, verb)
    }

    /// `printValue`: a value at any depth.
    fn value(&mut self, a: &V, verb: char) -> Result<(), Stop> {
        match a {
            // A nil inside a list or map.
            V::Nil => {
                self.out.push_str("<nil>");
                Ok(())
            }
            V::Bool(b) => match verb {
                't' | 'v' => self.pad(if *b { "true" } else { "false" }),
                _ => self.bad(verb, a),
            },
            V::Int(n) | V::Int64(n) => self.integer(*n as u64, *n < 0, verb, a),
            V::Uint(u) => self.integer(*u, false, verb, a),
            V::Float(f) => self.float(*f, verb, a),
            V::Str(s) => match verb {
                'v' | 's' => self.fmt_s(s),
                'x' | 'X' => self.hex_string(s, verb == 'X'),
                'q' => self.quoted(s),
                _ => self.bad(verb, a),
            },
            V::List(items, _) => {
                self.out.push('[');
                for (k, item) in items.iter().enumerate() {
                    if k > 0 {
                        self.out.push(' ');
                    }
                    self.value(item, verb)?;
                    self.budget(0)?;
                }
                self.out.push(']');
                Ok(())
            }
            V::Map(d) if d.kind() == Kind::Time && matches!(verb, 'v' | 's') => {
                let text = match a.time_text().as_deref().and_then(time::read_time) {
                    Some(t) => time::go_time_string(&t),
                    None => String::new(),
                };
                self.fmt_s(&text)
            }
            // `.Files`: a `map[string][]byte`, each file its bytes (a string for `%s`, `%q`,
            // `%x`).
            V::Map(d) if d.kind() == Kind::Files => {
                self.out.push_str("map[");
                for (k, (key, v)) in d.entries().iter().enumerate() {
                    if k > 0 {
                        self.out.push(' ');
                    }
                    self.value(&V::Str(key.clone()), verb)?;
                    self.out.push(':');
                    let text = match v {
                        V::Str(s) => s.clone(),
                        _ => "".into(),
                    };
                    if matches!(verb, 's' | 'q' | 'x' | 'X') {
                        self.value(&V::Str(text), verb)?;
                    } else {
                        let bytes: Vec<V> = crate::render::bytes::to_bytes(&text)
                            .iter()
                            .map(|b| V::Int(i64::from(*b)))
                            .collect();
                        self.value(&V::List(bytes.into(), super::value::Elem::Any), verb)?;
                    }
                    self.budget(0)?;
                }
                self.out.push(']');
                Ok(())
            }
            V::Map(d) => {
                match d.kind() {
                    Kind::Plain | Kind::Values | Kind::NilMap | Kind::StrMap => {}
                    _ => return Err(Stop::Unmodelled),
                }
                self.out.push_str("map[");
                for (k, (key, v)) in d.entries().iter().enumerate() {
                    if k > 0 {
                        self.out.push(' ');
                    }
                    self.value(&V::Str(key.clone()), verb)?;
                    self.out.push(':');
                    self.value(v, verb)?;
                    self.budget(0)?;
                }
                self.out.push(']');
                Ok(())
            }
            V::Func(_) => Err(Stop::Unmodelled),
        }
    }

    /// `badVerb`: `%!verb(type=value)`, the value printed with `%v` and the flags in force.
    /// Only scalars get here (lists and maps apply the verb to their elements).
    fn bad(&mut self, verb: char, a: &V) -> Result<(), Stop> {
        let _ = write!(self.out, "%!{verb}({}=", a.type_name());
        self.value(a, 'v')?;
        self.out.push(')');
        Ok(())
    }

    fn budget(&self, more: usize) -> Result<(), Stop> {
        if meter::bounded() && !meter::fits(self.out.len().saturating_add(more), Built::String) {
            return Err(Stop::Budget);
        }
        Ok(())
    }

    /// Go's `writePadding`: `n` spaces, or zeros when zero-padding to the left.
    fn padding(&mut self, n: usize) -> Result<(), Stop> {
        if n > 4096 {
            self.budget(n)?;
        }
        let c = if self.f.zero && !self.f.minus {
            '0'
        } else {
            ' '
        };
        self.out.extend(std::iter::repeat_n(c, n));
        Ok(())
    }

    /// Go's `pad`: `s` within the width, counted in runes.
    fn pad(&mut self, s: &str) -> Result<(), Stop> {
        let Some(wid) = self.f.wid else {
            self.out.push_str(s);
            return Ok(());
        };
        let n = s.chars().count();
        let fill = wid.saturating_sub(n);
        if self.f.minus {
            self.out.push_str(s);
            self.padding(fill)
        } else {
            self.padding(fill)?;
            self.out.push_str(s);
            Ok(())
        }
    }

    /// `fmtS`: a string cut to the precision (in runes), padded.
    fn fmt_s(&mut self, s: &str) -> Result<(), Stop> {
        match self.f.prec {
            Some(p) => {
                let cut: String = s.chars().take(p).collect();
                self.pad(&cut)
            }
            None => self.pad(s),
        }
    }

    fn hex_string(&mut self, s: &str, upper: bool) -> Result<(), Stop> {
        if self.f.sharp || self.f.space {
            return Err(Stop::Unmodelled);
        }
        let bytes = crate::render::bytes::to_bytes(s);
        let take = self.f.prec.map_or(bytes.len(), |p| p.min(bytes.len()));
        let mut text = String::with_capacity(take * 2);
        for b in &bytes[..take] {
            let _ = if upper {
                write!(text, "{b:02X}")
            } else {
                write!(text, "{b:02x}")
            };
        }
        self.pad(&text)
    }

    fn quoted(&mut self, s: &str) -> Result<(), Stop> {
        if self.f.sharp && !s.contains('`') && s.chars().all(|c| c == '\t' || go_printable(c)) {
            return self.pad(&format!("`{s}`"));
        }
        if self.f.plus {
            return self.pad(&ascii_quote(s));
        }
        let q = go_quote(s);
        self.pad(&q)
    }

    /// `fmtInteger` and the integer verbs.
    fn integer(&mut self, u: u64, negative: bool, verb: char, a: &V) -> Result<(), Stop> {
        let (base, upper) = match verb {
            'v' | 'd' => (10, false),
            'b' => (2, false),
            'o' | 'O' => (8, false),
            'x' => (16, false),
            'X' => (16, true),
            'c' => {
                let c = u32::try_from(u)
                    .ok()
                    .and_then(char::from_u32)
                    .unwrap_or(char::REPLACEMENT_CHARACTER);
                return self.pad(c.encode_utf8(&mut [0; 4]));
            }
            'q' => {
                let c = u32::try_from(u)
                    .ok()
                    .and_then(char::from_u32)
                    .unwrap_or(char::REPLACEMENT_CHARACTER);
                let q = quote_rune(c, self.f.plus);
                return self.pad(&q);
            }
            'U' => return self.unicode(u),
            _ => return self.bad(verb, a),
        };
        if verb == 'v' && self.f.sharp {
            return Err(Stop::Unmodelled);
        }
        let magnitude = if negative { u.wrapping_neg() } else { u };
        let mut prec = 0usize;
        if let Some(p) = self.f.prec {
            prec = p;
            if p == 0 && magnitude == 0 {
                let zero = std::mem::take(&mut self.f.zero);
                let wid = self.f.wid.unwrap_or(0);
                let r = self.padding(wid);
                self.f.zero = zero;
                return r;
            }
        } else if self.f.zero && !self.f.minus && self.f.wid.is_some() {
            prec = self.f.wid.unwrap_or(0);
            if negative || self.f.plus || self.f.space {
                prec = prec.saturating_sub(1);
            }
        }
        let mut digits = match (base, upper) {
            (10, _) => magnitude.to_string(),
            (2, _) => format!("{magnitude:b}"),
            (8, _) => format!("{magnitude:o}"),
            (_, false) => format!("{magnitude:x}"),
            (_, true) => format!("{magnitude:X}"),
        };
        if digits.len() < prec {
            self.budget(prec)?;
            digits.insert_str(0, &"0".repeat(prec - digits.len()));
        }
        // Go writes right to left: digits, `#`'s prefix, `%O`'s `0o`, the sign.
        let mut prefix = String::new();
        if negative {
            prefix.push('-');
        } else if self.f.plus {
            prefix.push('+');
        } else if self.f.space {
            prefix.push(' ');
        }
        if verb == 'O' {
            prefix.push_str("0o");
        }
        if self.f.sharp {
            match base {
                2 => prefix.push_str("0b"),
                8 if !digits.starts_with('0') => prefix.push('0'),
                16 => prefix.push_str(if upper { "0X" } else { "0x" }),
                _ => {}
            }
        }
        prefix.push_str(&digits);
        let zero = std::mem::take(&mut self.f.zero);
        let r = self.pad(&prefix);
        self.f.zero = zero;
        r
    }

    /// `%U`: `U+0041`, and with `#` the character quoted when printable.
    fn unicode(&mut self, u: u64) -> Result<(), Stop> {
        let prec = self.f.prec.unwrap_or(4).max(4);
        let mut text = format!("U+{u:0prec$X}");
        if self.f.sharp
            && let Some(c) = u32::try_from(u).ok().and_then(char::from_u32)
            && go_printable(c)
        {
            let _ = write!(text, " '{c}'");
        }
        let zero = std::mem::take(&mut self.f.zero);
        let r = self.pad(&text);
        self.f.zero = zero;
        r
    }

    /// `fmtFloat` and the float verbs.
    fn float(&mut self, v: f64, verb: char, a: &V) -> Result<(), Stop> {
        let (verb, default_prec) = match verb {
            'v' => ('g', None),
            'b' | 'g' | 'G' | 'x' | 'X' => (verb, None),
            'f' | 'F' | 'e' | 'E' => (verb, Some(6)),
            _ => return self.bad(verb, a),
        };
        if self.f.sharp {
            return Err(Stop::Unmodelled);
        }
        let prec = self.f.prec.or(default_prec);
        let body = format_float(v, verb, prec);
        let negative = body.starts_with('-');
        let unsigned = body.trim_start_matches(['-', '+']);
        let sign = if negative {
            Some('-')
        } else if self.f.plus {
            Some('+')
        } else if self.f.space {
            Some(' ')
        } else {
            None
        };
        if v.is_nan() || v.is_infinite() {
            let mut text = String::new();
            if v.is_infinite() || self.f.plus || self.f.space {
                text.extend(sign.or(Some('+')));
            }
            text.push_str(unsigned);
            let zero = std::mem::take(&mut self.f.zero);
            let r = self.pad(&text);
            self.f.zero = zero;
            return r;
        }
        let mut text = String::with_capacity(body.len() + 1);
        text.extend(sign);
        text.push_str(unsigned);
        if let (Some(s), true, Some(wid)) = (sign, self.f.zero && !self.f.minus, self.f.wid)
            && wid > text.chars().count()
        {
            self.out.push(s);
            let fill = wid - text.chars().count();
            self.padding(fill)?;
            self.out.push_str(unsigned);
            return Ok(());
        }
        self.pad(&text)
    }
}

/// `strconv.QuoteToASCII`.
fn ascii_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        if c.is_ascii() {
            let q = go_quote(c.encode_utf8(&mut [0; 4]));
            out.push_str(&q[1..q.len() - 1]);
        } else if u32::from(c) < 0x1_0000 {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            let _ = write!(out, "\\U{:08x}", u32::from(c));
        }
    }
    out.push('"');
    out
}

/// `strconv.QuoteRune` (`QuoteRuneToASCII` with `ascii`).
fn quote_rune(c: char, ascii: bool) -> String {
    let inner = match c {
        '\'' => "\\'".to_string(),
        '"' => "\"".to_string(),
        c if ascii && !c.is_ascii() => {
            if u32::from(c) < 0x1_0000 {
                format!("\\u{:04x}", u32::from(c))
            } else {
                format!("\\U{:08x}", u32::from(c))
            }
        }
        c => {
            let q = go_quote(c.encode_utf8(&mut [0; 4]));
            q[1..q.len() - 1].to_string()
        }
    };
    format!("'{inner}'")
}

/// `strconv.FormatFloat(v, verb, prec, 64)`, `prec` `None` for the shortest digits.
fn format_float(v: f64, verb: char, prec: Option<usize>) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    let neg = v.is_sign_negative();
    let a = v.abs();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    match verb {
        'f' | 'F' => {
            let p = prec.unwrap_or(0);
            let _ = write!(out, "{a:.p$}");
        }
        'e' | 'E' => {
            let (digits, dp) = decimal(a, prec.map(|p| p + 1));
            out.push_str(&fmt_e(&digits, dp, prec.unwrap_or(digits.len() - 1), verb));
        }
        'g' | 'G' => {
            let e = if verb == 'g' { 'e' } else { 'E' };
            match prec {
                None => {
                    if verb == 'g' && v != 0.0 {
                        // Shortest %g is %v's text.
                        return go_float(v);
                    }
                    let (digits, dp) = decimal(a, None);
                    let exp = dp - 1;
                    if !(-4..6).contains(&exp) {
                        out.push_str(&fmt_e(&digits, dp, digits.len() - 1, e));
                    } else {
                        let decimals = (digits.len() as i32 - dp).max(0) as usize;
                        out.push_str(&fmt_f(&digits, dp, decimals));
                    }
                }
                Some(p) => {
                    let p = p.max(1);
                    let (digits, dp) = decimal(a, Some(p));
                    let nd = digits.len();
                    let mut eprec = p;
                    if eprec > nd && nd as i32 >= dp {
                        eprec = nd;
                    }
                    let exp = dp - 1;
                    if exp < -4 || exp >= eprec as i32 {
                        out.push_str(&fmt_e(&digits, dp, p.min(nd) - 1, e));
                    } else {
                        let p = if p as i32 > dp { nd } else { p };
                        out.push_str(&fmt_f(&digits, dp, (p as i32 - dp).max(0) as usize));
                    }
                }
            }
        }
        'x' | 'X' => out.push_str(&fmt_x(a, prec, verb == 'X')),
        _ => {
            // 'b': decimal mantissa and binary exponent.
            let bits = a.to_bits();
            let biased = ((bits >> 52) & 0x7FF) as i64;
            let mut mant = bits & ((1 << 52) - 1);
            let exp = if biased == 0 {
                1 - 1023 - 52
            } else {
                mant |= 1 << 52;
                biased - 1023 - 52
            };
            let _ = write!(out, "{mant}p{}{exp}", if exp >= 0 { "+" } else { "" });
        }
    }
    out
}

/// The decimal digits of `a` (no trailing zeros, at least one digit) and the position of
/// the decimal point (`a` = 0.d1d2... × 10^dp), to `sig` significant digits or the shortest.
fn decimal(a: f64, sig: Option<usize>) -> (String, i32) {
    let text = match sig {
        Some(n) => format!("{a:.prec$e}", prec = n.saturating_sub(1)),
        None => format!("{a:e}"),
    };
    let (mant, exp) = text.split_once('e').unwrap_or((&text, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut digits: String = mant.chars().filter(char::is_ascii_digit).collect();
    while digits.len() > 1 && digits.ends_with('0') {
        digits.pop();
    }
    if digits == "0" {
        return (digits, 1);
    }
    (digits, exp + 1)
}

/// `fmtE`: `d.ddd` to `prec` decimals, then the exponent with at least two digits.
fn fmt_e(digits: &str, dp: i32, prec: usize, e: char) -> String {
    let b = digits.as_bytes();
    let mut out = String::new();
    out.push(char::from(b[0]));
    if prec > 0 {
        out.push('.');
        for k in 1..=prec {
            out.push(b.get(k).map_or('0', |&c| char::from(c)));
        }
    }
    let exp = if digits == "0" { 0 } else { dp - 1 };
    let _ = write!(
        out,
        "{e}{}{:02}",
        if exp < 0 { '-' } else { '+' },
        exp.unsigned_abs()
    );
    out
}

/// `fmtF`: the integer part, then `prec` decimals.
fn fmt_f(digits: &str, dp: i32, prec: usize) -> String {
    let b = digits.as_bytes();
    let zero = digits == "0";
    let at = |k: i32| -> char {
        if zero || k < 0 {
            return '0';
        }
        b.get(k as usize).map_or('0', |&c| char::from(c))
    };
    let mut out = String::new();
    if dp > 0 && !zero {
        for k in 0..dp {
            out.push(at(k));
        }
    } else {
        out.push('0');
    }
    if prec > 0 {
        out.push('.');
        for k in 1..=prec as i32 {
            out.push(at(dp + k - 1));
        }
    }
    out
}

/// `%x` of a float: `0x1.8p+00`.
fn fmt_x(a: f64, prec: Option<usize>, upper: bool) -> String {
    let bits = a.to_bits();
    let biased = ((bits >> 52) & 0x7FF) as i64;
    let mut mant = bits & ((1 << 52) - 1);
    let mut exp = if biased == 0 { 1 - 1023 } else { biased - 1023 };
    if biased != 0 {
        mant |= 1 << 52;
    }
    if mant == 0 {
        exp = 0;
    }
    mant <<= 60 - 52;
    while mant != 0 && mant & (1 << 60) == 0 {
        mant <<= 1;
        exp -= 1;
    }
    if let Some(p) = prec.filter(|&p| p < 15) {
        let shift = p as u32 * 4;
        let extra = (mant << shift) & ((1 << 60) - 1);
        mant >>= 60 - shift;
        if extra | (mant & 1) > 1 << 59 {
            mant += 1;
        }
        mant <<= 60 - shift;
        if mant & (1 << 61) != 0 {
            mant >>= 1;
            exp += 1;
        }
    }
    let hex = if upper {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    let mut out = String::from(if upper { "0X" } else { "0x" });
    out.push(char::from(b'0' + ((mant >> 60) & 1) as u8));
    mant <<= 4;
    match prec {
        None if mant != 0 => {
            out.push('.');
            while mant != 0 {
                out.push(char::from(hex[((mant >> 60) & 15) as usize]));
                mant <<= 4;
            }
        }
        Some(p) if p > 0 => {
            out.push('.');
            for _ in 0..p {
                out.push(char::from(hex[((mant >> 60) & 15) as usize]));
                mant <<= 4;
            }
        }
        _ => {}
    }
    out.push(if upper { 'P' } else { 'p' });
    out.push(if exp < 0 { '-' } else { '+' });
    let _ = write!(out, "{:02}", exp.unsigned_abs());
    out
}

#[cfg(test)]
// 3.14159 is a number the tests printed with helm, not an approximation of pi.
#[allow(clippy::approx_constant)]
mod tests {
    use super::*;

    fn go(format: &str, args: &[V]) -> String {
        let names = |v: &V| v.type_name().to_string();
        match sprintf(format, args, &names) {
            Ok(s) => s,
            Err(_) => "<unmodelled>".into(),
        }
    }

    /// Every expected value is what `helm template` (v4.2.3, Go 1.26) printed.
    #[test]
    fn verbs_and_their_errors_as_go_prints_them() {
        let s = |t: &str| V::str(t);
        assert_eq!(go("%5d|", &[s("x")]), "%!d(string=    x)|");
        assert_eq!(
            go("%05s|%-5s|%5.1s|", &[s("ab"), s("ab"), s("ab")]),
            "000ab|ab   |    a|"
        );
        let five = V::Int(5);
        assert_eq!(
            go(
                "%+v|%+d|% d|%x|%X|%o|%O|%b|%c|%q|%U|%#U|%#x|%#o",
                &[
                    five.clone(),
                    five.clone(),
                    five.clone(),
                    V::Int(255),
                    V::Int(255),
                    V::Int(8),
                    V::Int(8),
                    five,
                    V::Int(65),
                    V::Int(65),
                    V::Int(65),
                    V::Int(65),
                    V::Int(255),
                    V::Int(8)
                ]
            ),
            "5|+5| 5|ff|FF|10|0o10|101|A|'A'|U+0041|U+0041 'A'|0xff|010"
        );
        let list = V::List(
            vec![
                V::Float(1.0),
                s("two"),
                V::Float(3.5),
                V::Bool(true),
                V::Nil,
            ]
            .into(),
            super::super::value::Elem::Any,
        );
        assert_eq!(
            go("%d|%5d", &[list.clone(), list]),
            "[%!d(float64=1) %!d(string=two) %!d(float64=3.5) %!d(bool=true) <nil>]|\
             [%!d(float64=    1) %!d(string=  two) %!d(float64=  3.5) %!d(bool= true) <nil>]"
        );
        assert_eq!(go("%d|%t", &[V::Nil, V::Nil]), "%!d(<nil>)|%!t(<nil>)");
        let f = V::Float(1.5);
        assert_eq!(
            go(
                "%d|%e|%g|%.2f|%8.3f|%-8.2e|%G|%E",
                &[
                    f.clone(),
                    f.clone(),
                    f.clone(),
                    f.clone(),
                    f.clone(),
                    f,
                    V::Float(1e21),
                    V::Float(1e-7)
                ]
            ),
            "%!d(float64=1.5)|1.500000e+00|1.5|1.50|   1.500|1.50e+00|1E+21|1.000000E-07"
        );
        assert_eq!(
            go(
                "%.3g|%.2g|%.3g|%.0f|%.0f|%.1f|%.2f|%5.1g|%g",
                &[
                    V::Float(1.5),
                    V::Float(100.0),
                    V::Float(100.0),
                    V::Float(2.5),
                    V::Float(0.5),
                    V::Float(0.25),
                    V::Float(0.125),
                    V::Float(3.14159),
                    V::Float(123456789.0)
                ]
            ),
            "1.5|1e+02|100|2|0|0.2|0.12|    3|1.23456789e+08"
        );
        assert_eq!(go("%d %d", &[V::Int(1)]), "1 %!d(MISSING)");
        assert_eq!(
            go("%d", &[V::Int(1), V::Int(2), s("x"), V::Nil]),
            "1%!(EXTRA int=2, string=x, <nil>)"
        );
        assert_eq!(go("%[2]d %[1]s", &[s("a"), V::Int(5)]), "5 a");
        assert_eq!(go("%[3]d %d", &[V::Int(1), V::Int(2)]), "%!d(BADINDEX) 1");
        assert_eq!(
            go(
                "%*d|%-*d|%.*f",
                &[
                    V::Int(5),
                    V::Int(1),
                    V::Int(5),
                    V::Int(1),
                    V::Int(2),
                    V::Float(1.2345)
                ]
            ),
            "    1|1    |1.23"
        );
        assert_eq!(go("%*d", &[s("x"), V::Int(1)]), "%!(BADWIDTH)1");
        assert_eq!(go("%!", &[]), "%!!(MISSING)");
        assert_eq!(go("%", &[]), "%!(NOVERB)");
        assert_eq!(go("%z %v", &[V::Int(1), V::Int(2)]), "%!z(int=1) 2");
        assert_eq!(
            go(
                "%06.2f|%+.1e|%+g|% g|%-6d|%06d|%-06d|%+06d",
                &[
                    V::Float(3.14159),
                    V::Float(1234.5),
                    V::Float(1.0),
                    V::Float(1.0),
                    V::Int(42),
                    V::Int(-42),
                    V::Int(42),
                    V::Int(42)
                ]
            ),
            "003.14|+1.2e+03|+1| 1|42    |-00042|42    |+00042"
        );
        assert_eq!(
            go(
                "%.0d|%5.0d|%.3d|%.3x|%8.3d",
                &[V::Int(0), V::Int(0), V::Int(7), V::Int(7), V::Int(-7)]
            ),
            "|     |007|007|    -007"
        );
        assert_eq!(
            go("%q|%+q|%#q|%#q", &[s("é\n"), s("é"), s("ab"), s("a`b")]),
            "\"é\\n\"|\"\\u00e9\"|`ab`|\"a`b\""
        );
        assert_eq!(
            go(
                "%c|%c|%q|%U",
                &[V::Int(128512), V::Int(-1), V::Int(128512), V::Int(-1)]
            ),
            "😀|\u{FFFD}|'😀'|U+FFFFFFFFFFFFFFFF"
        );
        assert_eq!(
            go(
                "%v|%v|%v|%.3v|%10v|%-10v|",
                &[
                    V::Float(1e6),
                    V::Float(1e-5),
                    V::Float(123456.0),
                    V::Float(3.14159),
                    V::Float(1.5),
                    s("ab")
                ]
            ),
            "1e+06|1e-05|123456|3.14|       1.5|ab        |"
        );
    }

    #[test]
    fn float_and_integer_layouts_as_go_prints_them() {
        let f = V::Float;
        assert_eq!(
            go(
                "%.2g|%.3g|%x|%x|%x|%X|%#O|%-#8x|%#08x|%b|%b",
                &[
                    f(100.0),
                    f(100.0),
                    f(1.0),
                    f(2.0),
                    f(1.5),
                    f(0.1),
                    V::Int(8),
                    V::Int(255),
                    V::Int(255),
                    f(1.0),
                    f(0.0)
                ]
            ),
            "1e+02|100|0x1p+00|0x1p+01|0x1.8p+00|0X1.999999999999AP-04|0o010|0xff    |\
             0x000000ff|4503599627370496p-52|0p-1074"
        );
        assert_eq!(
            go(
                "%5.2v|%+v|% v|%v|%e|%.3x",
                &[f(1.0), f(1.5), f(1.5), f(-0.0), f(0.0), f(1.5)]
            ),
            "    1|1.5| 1.5|-0|0.000000e+00|0x1.800p+00"
        );
        assert_eq!(
            go(
                "%08.3f|%+08.3f|%-8.3f|%8s|%-8q|%08q|%x",
                &[
                    f(-3.14159),
                    f(3.14159),
                    f(3.14159),
                    V::str("é"),
                    V::str("é"),
                    V::str("a"),
                    V::Int(-255)
                ]
            ),
            "-003.142|+003.142|3.142   |       é|\"é\"     |00000\"a\"|-ff"
        );
    }
}
