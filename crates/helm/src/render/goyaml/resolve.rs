//! go-yaml v2's YAML 1.1 resolver (which plain strings would read back as another type) and
//! its mapping-key order.

use std::cmp::Ordering;

/// True when go-yaml v2's resolver would read the plain text back as something other than a
/// string (bool, null, int, float, YAML 1.1 sexagesimal), which forces double quotes.
pub(super) fn resolves_to_non_string(s: &str) -> bool {
    const WORDS: &[&str] = &[
        "", "~", "null", "Null", "NULL", "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
        "true", "True", "TRUE", "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
        ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf",
        "-.Inf", "-.INF", "<<",
    ];
    if WORDS.contains(&s) {
        return true;
    }
    let Some(first) = s.chars().next() else {
        return true;
    };
    if !matches!(first, '+' | '-' | '.' | '0'..='9') {
        return false;
    }
    looks_like_int(s) || looks_like_float(s) || looks_like_base60(s) || looks_like_timestamp(s)
}

/// go-yaml v2 reads plain text as a timestamp when it starts with a four-digit year and a `-`
/// and parses whole in one of its layouts: `YYYY-M-D`, `YYYY-M-DTh:m:s[.frac]ZONE` (`T` or
/// `t`; ZONE `Z` or `+hh:mm`) or `YYYY-M-D h:m:s[.frac]`, with Go's `time.Parse` range checks.
fn looks_like_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    // Reads 1 or 2 digits (exactly `width` when it is 2 and `fixed`) at `*i`.
    let num = |i: &mut usize, fixed: bool| -> Option<u32> {
        let start = *i;
        while *i < b.len() && *i - start < 2 && b[*i].is_ascii_digit() {
            *i += 1;
        }
        if *i == start || (fixed && *i - start != 2) {
            return None;
        }
        s[start..*i].parse().ok()
    };
    let expect = |i: &mut usize, c: u8| -> Option<()> { (b.get(*i) == Some(&c)).then(|| *i += 1) };
    let parse = || -> Option<()> {
        if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
            return None;
        }
        let year: u32 = s[..4].parse().ok()?;
        let mut i = 5;
        let month = num(&mut i, false)?;
        expect(&mut i, b'-')?;
        let day = num(&mut i, false)?;
        let leap =
            year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400));
        let days = match month {
            1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
            4 | 6 | 9 | 11 => 30,
            2 if leap => 29,
            2 => 28,
            _ => return None,
        };
        if day == 0 || day > days {
            return None;
        }
        if i == b.len() {
            return Some(());
        }
        let zoned = match b[i] {
            b'T' | b't' => true,
            b' ' => false,
            _ => return None,
        };
        i += 1;
        let hour = num(&mut i, false)?;
        expect(&mut i, b':')?;
        let minute = num(&mut i, false)?;
        expect(&mut i, b':')?;
        let second = num(&mut i, false)?;
        if hour >= 24 || minute >= 60 || second >= 60 {
            return None;
        }
        if i + 1 < b.len() && matches!(b[i], b'.' | b',') && b[i + 1].is_ascii_digit() {
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
        }
        if zoned {
            if b.get(i) == Some(&b'Z') {
                i += 1;
            } else {
                if !matches!(b.get(i), Some(b'+' | b'-')) {
                    return None;
                }
                i += 1;
                let hh = num(&mut i, true)?;
                expect(&mut i, b':')?;
                let mm = num(&mut i, true)?;
                if hh > 24 || mm > 60 {
                    return None;
                }
            }
        }
        (i == b.len()).then_some(())
    };
    parse().is_some()
}

fn looks_like_int(s: &str) -> bool {
    let plain: String = s.chars().filter(|c| *c != '_').collect();
    let body = plain.strip_prefix(['+', '-']).unwrap_or(&plain);
    if body.is_empty() {
        return false;
    }
    if let Some(bin) = body.strip_prefix("0b") {
        return !bin.is_empty() && bin.chars().all(|c| c == '0' || c == '1');
    }
    if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        return !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit());
    }
    if let Some(oct) = body.strip_prefix("0o") {
        return !oct.is_empty() && oct.chars().all(|c| ('0'..='7').contains(&c));
    }
    if body.len() > 1 && body.starts_with('0') {
        return body.chars().all(|c| ('0'..='7').contains(&c));
    }
    body.chars().all(|c| c.is_ascii_digit())
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`, go-yaml's float pattern.
fn looks_like_float(s: &str) -> bool {
    let plain: String = s.chars().filter(|c| *c != '_').collect();
    let body = plain.strip_prefix(['+', '-']).unwrap_or(&plain);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some(("", frac)) => !frac.is_empty() && frac.chars().all(|c| c.is_ascii_digit()),
        Some((int, frac)) => {
            int.chars().all(|c| c.is_ascii_digit()) && frac.chars().all(|c| c.is_ascii_digit())
        }
        None => !mantissa.is_empty() && mantissa.chars().all(|c| c.is_ascii_digit()),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
        !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit())
    });
    mantissa_ok && exponent_ok
}

/// YAML 1.1 sexagesimal numbers like `1:20` or `190:20:30.15`.
fn looks_like_base60(s: &str) -> bool {
    let body = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (head, rest) = match body.split_once(':') {
        Some(p) => p,
        None => return false,
    };
    if head.is_empty()
        || !head.starts_with(|c: char| c.is_ascii_digit())
        || !head.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return false;
    }
    let (groups, frac) = match rest.split_once('.') {
        Some((g, f)) => (g, Some(f)),
        None => (rest, None),
    };
    let groups_ok = groups.split(':').all(|g| {
        !g.is_empty()
            && g.len() <= 2
            && g.chars().all(|c| c.is_ascii_digit())
            && (g.len() == 1 || g.starts_with(|c: char| ('0'..='5').contains(&c)))
    });
    groups_ok && frac.is_none_or(|f| f.chars().all(|c| c.is_ascii_digit() || c == '_'))
}

/// go-yaml v2's key order: letters compare by code point, a non-letter sorts before a letter,
/// and runs of digits compare by numeric value (so `a2` < `a10`).
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let ar: Vec<char> = a.chars().collect();
    let br: Vec<char> = b.chars().collect();
    let mut i = 0;
    while i < ar.len() && i < br.len() {
        if ar[i] == br[i] {
            i += 1;
            continue;
        }
        let (al, bl) = (ar[i].is_alphabetic(), br[i].is_alphabetic());
        if al && bl {
            return ar[i].cmp(&br[i]);
        }
        if al || bl {
            return if bl {
                Ordering::Less
            } else {
                Ordering::Greater
            };
        }
        let (mut an, mut bn) = (0i64, 0i64);
        if ar[i] == '0' || br[i] == '0' {
            let mut j = i;
            while j > 0 && ar[j - 1].is_ascii_digit() {
                j -= 1;
                if ar[j] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let mut ai = i;
        while ai < ar.len() && ar[ai].is_ascii_digit() {
            an = an
                .saturating_mul(10)
                .saturating_add(i64::from(ar[ai] as u8 - b'0'));
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && br[bi].is_ascii_digit() {
            bn = bn
                .saturating_mul(10)
                .saturating_add(i64::from(br[bi] as u8 - b'0'));
            bi += 1;
        }
        if an != bn {
            return an.cmp(&bn);
        }
        if ai != bi {
            return ai.cmp(&bi);
        }
        return ar[i].cmp(&br[i]);
    }
    ar.len().cmp(&br.len())
}
