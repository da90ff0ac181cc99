//! Sprig's date functions. The pack's values have no time type: the functions making a time
//! (`now`, `toDate`, `dateModify`) give Go's RFC 3339 text (`2024-03-05T00:00:00Z`), which the
//! executor keeps as a `time.Time` (`render::exec`'s `Kind::Time`) and hands back to these
//! functions printed as Go prints a time (`2024-03-05 00:00:00 +0000 UTC`); both forms and
//! Unix seconds are read here. `date` formats with Go's reference-time layouts
//! (`2006-01-02T15:04:05Z07:00`), translated here to chrono's format.

use super::args::{Builtin, arg, exact, fail, register_all, str_arg, string};
use crate::render::value::to_i64;
use chrono::{DateTime, FixedOffset, Utc};
use gotmpl::{FuncMap, Result, Value};

pub fn register(fm: &mut FuncMap) {
    let funcs: &[(&str, Builtin)] = &[
        ("now", |_| {
            Ok(string(rfc3339_nano(&Utc::now().fixed_offset())))
        }),
        ("date", |a| format_date("date", a)),
        ("dateInZone", date_in_zone),
        ("htmlDate", |a| {
            exact("htmlDate", a, 1)?;
            format_date("htmlDate", &[string("2006-01-02"), a[0].clone()])
        }),
        // Sprig gives the seconds as text.
        ("unixEpoch", |a| {
            Ok(string(
                parse_time("unixEpoch", arg("unixEpoch", a, 0)?)?
                    .timestamp()
                    .to_string(),
            ))
        }),
        ("toDate", |a| to_date("toDate", a, false)),
        ("mustToDate", |a| to_date("mustToDate", a, true)),
        ("dateModify", |a| date_modify("dateModify", a, false)),
        ("date_modify", |a| date_modify("date_modify", a, false)),
        ("mustDateModify", |a| date_modify("mustDateModify", a, true)),
        ("must_date_modify", |a| {
            date_modify("must_date_modify", a, true)
        }),
        ("date_in_zone", date_in_zone),
        ("htmlDateInZone", |a| {
            exact("htmlDateInZone", a, 2)?;
            date_in_zone(&[string("2006-01-02"), a[0].clone(), a[1].clone()])
        }),
        ("ago", |a| {
            let t = parse_time("ago", arg("ago", a, 0)?)?;
            let secs = (Utc::now().fixed_offset() - t).num_milliseconds();
            Ok(string(go_duration_string(
                (secs as f64 / 1000.0).round() as i64
            )))
        }),
        ("durationRound", duration_round),
        // The executor runs `duration` itself (it needs Go's int64 type, see
        // `render::exec`); this is for callers without it.
        ("duration", |a| {
            Ok(string(duration_text(match arg("duration", a, 0)? {
                Value::String(s) => parse_int64(s),
                Value::Int(n) => *n,
                _ => 0,
            })))
        }),
    ];
    register_all(fm, funcs);
}

/// Go's `strconv.ParseInt(s, 10, 64)` as Sprig's `duration` uses it: 0 when `s` is not a
/// decimal integer, the int64 bound it passes when out of range.
pub fn parse_int64(s: &str) -> i64 {
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return 0;
    }
    match s.parse::<i64>() {
        Ok(n) => n,
        Err(_) if negative => i64::MIN,
        Err(_) => i64::MAX,
    }
}

/// Sprig's `duration`: `seconds` seconds as Go's `Duration.String` writes them (`1h1m1s`,
/// `1m30s`, `0s`), the multiplication by 10^9 wrapping as Go's int64 does.
pub fn duration_text(seconds: i64) -> String {
    let nanos = seconds.wrapping_mul(1_000_000_000);
    let mut u = nanos.unsigned_abs();
    let mut out = String::new();
    if u < 1_000_000_000 {
        // Below a second: ns, µs or ms with a fraction.
        let (unit, prec) = match u {
            0 => return "0s".into(),
            u if u < 1_000 => ("ns", 0),
            u if u < 1_000_000 => ("µs", 3),
            _ => ("ms", 6),
        };
        let frac = frac_text(&mut u, prec);
        out = format!("{u}{frac}{unit}");
    } else {
        let frac = frac_text(&mut u, 9);
        let seconds = u % 60;
        let minutes = u / 60;
        if minutes > 0 {
            let hours = minutes / 60;
            if hours > 0 {
                out.push_str(&format!("{hours}h"));
            }
            out.push_str(&format!("{}m", minutes % 60));
        }
        out.push_str(&format!("{seconds}{frac}s"));
    }
    if nanos < 0 {
        out.insert(0, '-');
    }
    out
}

/// Go's `fmtFrac`: the last `prec` digits of `u` as `.ddd` without trailing zeros (nothing
/// when they are all zero); `u` keeps the rest.
fn frac_text(u: &mut u64, prec: u32) -> String {
    let scale = 10u64.pow(prec);
    let frac = *u % scale;
    *u /= scale;
    if frac == 0 {
        return String::new();
    }
    let digits = format!("{frac:0width$}", width = prec as usize);
    format!(".{}", digits.trim_end_matches('0'))
}

/// Go's `time.RFC3339Nano` text of `t` (`Z` for UTC, no trailing zeros in the fraction), the
/// form a time takes in JSON and YAML.
pub fn rfc3339_nano(t: &DateTime<FixedOffset>) -> String {
    let text = t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    // `2024-03-05T00:00:00.500000000Z` → `2024-03-05T00:00:00.5Z`.
    match text.find('.') {
        Some(dot) => {
            let end = dot
                + text[dot..]
                    .find(['Z', '+', '-'])
                    .unwrap_or(text.len() - dot);
            let digits = text[dot + 1..end].trim_end_matches('0');
            let frac = if digits.is_empty() {
                String::new()
            } else {
                format!(".{digits}")
            };
            format!("{}{frac}{}", &text[..dot], &text[end..])
        }
        None => text,
    }
}

/// The name Go gives the zone of a parsed time: `UTC` at offset zero (this process's local
/// zone), else none, which Go prints as the offset (`+0200`).
fn zone_name(offset: &FixedOffset) -> String {
    let secs = offset.local_minus_utc();
    if secs == 0 {
        return "UTC".into();
    }
    let sign = if secs < 0 { '-' } else { '+' };
    let m = secs.unsigned_abs() / 60;
    format!("{sign}{:02}{:02}", m / 60, m % 60)
}

/// Go's `time.Time.String()`: `2006-01-02 15:04:05.999999999 -0700 MST`.
pub fn go_time_string(t: &DateTime<FixedOffset>) -> String {
    let nanos = t.timestamp_subsec_nanos();
    let frac = if nanos == 0 {
        String::new()
    } else {
        format!(".{}", format!("{nanos:09}").trim_end_matches('0'))
    };
    format!(
        "{}{frac} {} {}",
        t.format("%Y-%m-%d %H:%M:%S"),
        t.format("%z"),
        zone_name(t.offset())
    )
}

/// A time from its RFC 3339 text or Go's printing of it.
pub fn read_time(s: &str) -> Option<DateTime<FixedOffset>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t);
    }
    // `2024-03-05 00:00:00 +0000 UTC`: the zone's name is the last word.
    let (stamp, _name) = s.rsplit_once(' ')?;
    DateTime::parse_from_str(stamp, "%Y-%m-%d %H:%M:%S%.f %z").ok()
}

/// Reads a time from an RFC 3339 string, Go's printing of a time, or Unix seconds.
fn parse_time(name: &str, v: &Value) -> Result<DateTime<FixedOffset>> {
    match v {
        Value::String(s) => read_time(s).ok_or_else(|| fail(name, format!("{s:?} is not a time"))),
        Value::Int(_) | Value::Uint(_) | Value::Float(_) => DateTime::from_timestamp(to_i64(v), 0)
            .map(|t| t.fixed_offset())
            .ok_or_else(|| fail(name, "timestamp out of range")),
        other => Err(fail(
            name,
            format!("cannot read a time from {}", other.type_name()),
        )),
    }
}

/// `date layout time`: Sprig's `dateInZone` in the `Local` zone, which is UTC here (see
/// `date_in_zone`), so a time parsed with another offset is shown in UTC, as helm shows it.
fn format_date(name: &str, args: &[Value]) -> Result<Value> {
    exact(name, args, 2)?;
    let layout = str_arg(name, args, 0)?;
    let t = parse_time(name, &args[1])?;
    Ok(string(go_format(
        &t.with_timezone(&Utc).fixed_offset(),
        &layout,
    )))
}

/// `t` formatted with a Go layout, zones as Go writes them (`Z07:00` is `Z` at UTC, `MST` the
/// zone's name).
fn go_format(t: &DateTime<FixedOffset>, layout: &str) -> String {
    let secs = t.offset().local_minus_utc();
    let (sign, m) = (if secs < 0 { '-' } else { '+' }, secs.unsigned_abs() / 60);
    let (h, m) = (m / 60, m % 60);
    let utc = secs == 0;
    let zones = [
        (
            "Z07:00",
            if utc {
                "Z".to_string()
            } else {
                format!("{sign}{h:02}:{m:02}")
            },
        ),
        (
            "Z0700",
            if utc {
                "Z".to_string()
            } else {
                format!("{sign}{h:02}{m:02}")
            },
        ),
        ("-07:00", format!("{sign}{h:02}:{m:02}")),
        ("-0700", format!("{sign}{h:02}{m:02}")),
        ("MST", zone_name(t.offset())),
    ];
    // Each zone token becomes literal text; the rest goes through chrono.
    let mut out = String::new();
    let mut rest = layout;
    while !rest.is_empty() {
        let next = zones
            .iter()
            .filter_map(|(tok, text)| rest.find(tok).map(|at| (at, *tok, text)))
            .min_by_key(|(at, tok, _)| (*at, usize::MAX - tok.len()));
        match next {
            Some((at, tok, text)) => {
                out.push_str(&t.format(&go_layout_to_chrono(&rest[..at])).to_string());
                out.push_str(text);
                rest = &rest[at + tok.len()..];
            }
            None => {
                out.push_str(&t.format(&go_layout_to_chrono(rest)).to_string());
                rest = "";
            }
        }
    }
    out
}

/// `dateInZone layout time zone`: Go's `time.LoadLocation` knows `UTC`, `Local` (UTC here) and
/// IANA names; Sprig reads any other name as UTC. No time-zone database is bundled, so an IANA
/// name (`Europe/Paris`) is refused, naming why.
fn date_in_zone(args: &[Value]) -> Result<Value> {
    exact("dateInZone", args, 3)?;
    let zone = str_arg("dateInZone", args, 2)?;
    let t = parse_time("dateInZone", &args[1])?;
    if zone.contains('/') {
        return Err(fail(
            "dateInZone",
            format!("time zone {zone:?}: berth bundles no time-zone database"),
        ));
    }
    let utc = FixedOffset::east_opt(0).ok_or_else(|| fail("dateInZone", "no UTC offset"))?;
    let layout = str_arg("dateInZone", args, 0)?;
    Ok(string(go_format(&t.with_timezone(&utc), &layout)))
}

/// `toDate layout text`: parses with a Go layout, giving Go's RFC 3339 text; text that does
/// not parse is Go's zero time for `toDate` and an error for `mustToDate` (`strict`).
fn to_date(name: &str, args: &[Value], strict: bool) -> Result<Value> {
    exact(name, args, 2)?;
    let layout = go_layout_to_chrono(&str_arg(name, args, 0)?);
    let text = str_arg(name, args, 1)?;
    let utc = |t: chrono::NaiveDateTime| t.and_utc().fixed_offset();
    let parsed = DateTime::parse_from_str(&text, &layout)
        .or_else(|_| chrono::NaiveDateTime::parse_from_str(&text, &layout).map(utc))
        .or_else(|_| {
            chrono::NaiveDate::parse_from_str(&text, &layout)
                .map(|d| utc(d.and_time(chrono::NaiveTime::MIN)))
        });
    match parsed {
        Ok(t) => Ok(string(rfc3339_nano(&t))),
        Err(e) if strict => Err(fail(name, format!("parsing time {text:?}: {e}"))),
        Err(_) => Ok(string("0001-01-01T00:00:00Z")),
    }
}

/// `dateModify "-1h30m" time`: a duration that does not parse leaves the time as it is, as
/// Sprig's does; `mustDateModify` (`strict`) fails instead.
fn date_modify(name: &str, args: &[Value], strict: bool) -> Result<Value> {
    exact(name, args, 2)?;
    let spec = str_arg(name, args, 0)?;
    let t = parse_time(name, &args[1])?;
    let Some(secs) = parse_go_duration(&spec) else {
        if strict {
            return Err(fail(name, format!("time: invalid duration {spec:?}")));
        }
        return Ok(string(rfc3339_nano(&t)));
    };
    let shifted = t + chrono::Duration::nanoseconds((secs * 1e9).round() as i64);
    Ok(string(rfc3339_nano(&shifted)))
}

/// Go's `time.Duration.String()` for whole seconds: `0s`, `59s`, `1m0s`, `25h3m4s`.
fn go_duration_string(secs: i64) -> String {
    if secs == 0 {
        return "0s".into();
    }
    let sign = if secs < 0 { "-" } else { "" };
    let s = secs.unsigned_abs();
    let (h, m, s) = (s / 3600, s % 3600 / 60, s % 60);
    if h > 0 {
        format!("{sign}{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{sign}{m}m{s}s")
    } else {
        format!("{sign}{s}s")
    }
}

/// Sprig's `durationRound`: a duration (Go's text form) or the time since a time, as its most
/// significant unit (`2h10m` → `2h`, `49h` → `2d`, 30 days and more → months, 365 → years);
/// the sign is dropped, and anything else (a number, text that does not parse) is `0s`.
fn duration_round(args: &[Value]) -> Result<Value> {
    exact("durationRound", args, 1)?;
    let secs: f64 = match &args[0] {
        Value::String(s) => match parse_go_duration(s) {
            Some(d) => d,
            None => match DateTime::parse_from_rfc3339(s) {
                Ok(t) => (Utc::now().fixed_offset() - t).num_milliseconds() as f64 / 1000.0,
                Err(_) => 0.0,
            },
        },
        _ => 0.0,
    };
    let u = secs.abs();
    const MINUTE: f64 = 60.0;
    const HOUR: f64 = 60.0 * MINUTE;
    const DAY: f64 = 24.0 * HOUR;
    const MONTH: f64 = 30.0 * DAY;
    const YEAR: f64 = 365.0 * DAY;
    let text = if u > YEAR {
        format!("{}y", (u / YEAR) as u64)
    } else if u > MONTH {
        format!("{}mo", (u / MONTH) as u64)
    } else if u > DAY {
        format!("{}d", (u / DAY) as u64)
    } else if u > HOUR {
        format!("{}h", (u / HOUR) as u64)
    } else if u > MINUTE {
        format!("{}m", (u / MINUTE) as u64)
    } else if u > 1.0 {
        format!("{}s", u as u64)
    } else {
        "0s".into()
    };
    Ok(string(text))
}

/// Go's `time.ParseDuration` for `h`, `m`, `s`, `ms` units; returns seconds.
fn parse_go_duration(spec: &str) -> Option<f64> {
    let (sign, mut rest) = match spec.strip_prefix('-') {
        Some(r) => (-1.0, r),
        None => (1.0, spec.strip_prefix('+').unwrap_or(spec)),
    };
    let mut total = 0.0;
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        let n: f64 = rest[..num_len].parse().ok()?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return None,
        };
        total += n * factor;
        rest = &rest[unit_len..];
    }
    Some(sign * total)
}

/// Translates a Go reference-time layout into a chrono format string.
pub fn go_layout_to_chrono(layout: &str) -> String {
    // Longest tokens first so `2006` wins over `2`, `January` over `Jan`, and so on.
    const TOKENS: &[(&str, &str)] = &[
        ("January", "%B"),
        ("Monday", "%A"),
        ("Z07:00", "%:z"),
        ("-07:00", "%:z"),
        ("-0700", "%z"),
        (".000000000", "%.9f"),
        (".000000", "%.6f"),
        (".000", "%.3f"),
        (".999999999", "%.f"),
        ("2006", "%Y"),
        ("Jan", "%b"),
        ("Mon", "%a"),
        ("MST", "%Z"),
        ("_2", "%e"),
        ("01", "%m"),
        ("02", "%d"),
        ("03", "%I"),
        ("04", "%M"),
        ("05", "%S"),
        ("06", "%y"),
        ("15", "%H"),
        ("PM", "%p"),
        ("pm", "%P"),
        ("1", "%-m"),
        ("2", "%-d"),
        ("3", "%-I"),
        ("4", "%-M"),
        ("5", "%-S"),
    ];
    let mut out = String::with_capacity(layout.len() * 2);
    let mut rest = layout;
    'outer: while !rest.is_empty() {
        for (go, chrono_fmt) in TOKENS {
            if let Some(r) = rest.strip_prefix(go) {
                out.push_str(chrono_fmt);
                rest = r;
                continue 'outer;
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            if c == '%' {
                out.push_str("%%");
            } else {
                out.push(c);
            }
        }
        rest = chars.as_str();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::value::strval;

    #[test]
    fn date_formats_with_go_layouts() {
        let t = string("2024-03-05T07:08:09Z");
        let out = format_date("date", &[string("2006-01-02 15:04:05 Jan Mon"), t.clone()]);
        assert_eq!(
            out.map(|v| strval(&v)).unwrap_or_default(),
            "2024-03-05 07:08:09 Mar Tue"
        );
        let unix = format_date("date", &[string("2006-01-02"), Value::Int(0)]);
        assert_eq!(unix.map(|v| strval(&v)).unwrap_or_default(), "1970-01-01");
        // helm shows a time parsed with an offset in its Local zone, UTC on a host without TZ.
        let east = string("2020-02-29T12:30:00+02:00");
        let out = format_date("date", &[string("15:04 Z07:00 MST"), east]);
        assert_eq!(out.map(|v| strval(&v)).unwrap_or_default(), "10:30 Z UTC");
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("-1h30m"), Some(-5400.0));
        assert_eq!(parse_go_duration("1.5s"), Some(1.5));
        assert_eq!(parse_go_duration("3d"), None);
    }
}
