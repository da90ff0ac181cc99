//! Sprig's date functions. Template values have no time type, so times travel as RFC 3339
//! strings (what `now` returns) or Unix seconds; `date` formats with Go's reference-time
//! layouts (`2006-01-02T15:04:05Z07:00`), translated here to chrono's format.

use super::args::{Builtin, arg, exact, fail, register_all, str_arg, string};
use crate::render::value::to_i64;
use chrono::{DateTime, FixedOffset, Utc};
use gotmpl::{FuncMap, Result, Value};

pub fn register(fm: &mut FuncMap) {
    let funcs: &[(&str, Builtin)] = &[
        ("now", |_| {
            Ok(string(
                Utc::now().to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            ))
        }),
        ("date", |a| format_date("date", a)),
        ("dateInZone", date_in_zone),
        ("htmlDate", |a| {
            exact("htmlDate", a, 1)?;
            format_date("htmlDate", &[string("2006-01-02"), a[0].clone()])
        }),
        ("unixEpoch", |a| {
            Ok(Value::Int(
                parse_time("unixEpoch", arg("unixEpoch", a, 0)?)?.timestamp(),
            ))
        }),
        ("toDate", to_date),
        ("mustToDate", to_date),
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
        ("duration", |a| {
            Ok(string(format!("{}s", to_i64(arg("duration", a, 0)?))))
        }),
    ];
    register_all(fm, funcs);
}

/// Reads a time from an RFC 3339 string or Unix seconds.
fn parse_time(name: &str, v: &Value) -> Result<DateTime<FixedOffset>> {
    match v {
        Value::String(s) => DateTime::parse_from_rfc3339(s)
            .map_err(|e| fail(name, format!("{s:?} is not an RFC 3339 time: {e}"))),
        Value::Int(_) | Value::Uint(_) | Value::Float(_) => DateTime::from_timestamp(to_i64(v), 0)
            .map(|t| t.fixed_offset())
            .ok_or_else(|| fail(name, "timestamp out of range")),
        other => Err(fail(
            name,
            format!("cannot read a time from {}", other.type_name()),
        )),
    }
}

/// `date layout time`.
fn format_date(name: &str, args: &[Value]) -> Result<Value> {
    exact(name, args, 2)?;
    let layout = str_arg(name, args, 0)?;
    let t = parse_time(name, &args[1])?;
    Ok(string(t.format(&go_layout_to_chrono(&layout)).to_string()))
}

/// `dateInZone layout time zone`: only `UTC` and fixed offsets like `+02:00` are known (no
/// time-zone database is bundled).
fn date_in_zone(args: &[Value]) -> Result<Value> {
    exact("dateInZone", args, 3)?;
    let zone = str_arg("dateInZone", args, 2)?;
    let t = parse_time("dateInZone", &args[1])?;
    let offset = match zone.as_str() {
        "UTC" | "" | "Z" => FixedOffset::east_opt(0),
        z => DateTime::parse_from_rfc3339(&format!("2000-01-01T00:00:00{z}"))
            .ok()
            .map(|d| *d.offset()),
    }
    .ok_or_else(|| fail("dateInZone", format!("unknown time zone {zone:?}")))?;
    let layout = go_layout_to_chrono(&str_arg("dateInZone", args, 0)?);
    Ok(string(t.with_timezone(&offset).format(&layout).to_string()))
}

/// `toDate layout text`: parses with a Go layout, returning RFC 3339.
fn to_date(args: &[Value]) -> Result<Value> {
    exact("toDate", args, 2)?;
    let layout = go_layout_to_chrono(&str_arg("toDate", args, 0)?);
    let text = str_arg("toDate", args, 1)?;
    let parsed = DateTime::parse_from_str(&text, &layout)
        .map(|t| t.to_rfc3339())
        .or_else(|_| {
            chrono::NaiveDateTime::parse_from_str(&text, &layout).map(|t| t.and_utc().to_rfc3339())
        })
        .or_else(|_| {
            chrono::NaiveDate::parse_from_str(&text, &layout).map(|d| {
                d.and_hms_opt(0, 0, 0)
                    .map(|t| t.and_utc().to_rfc3339())
                    .unwrap_or_default()
            })
        })
        .map_err(|e| fail("toDate", format!("{text:?}: {e}")))?;
    Ok(string(parsed))
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
        return Ok(string(t.to_rfc3339()));
    };
    let shifted = t + chrono::Duration::milliseconds((secs * 1000.0) as i64);
    Ok(string(shifted.to_rfc3339()))
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
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("-1h30m"), Some(-5400.0));
        assert_eq!(parse_go_duration("1.5s"), Some(1.5));
        assert_eq!(parse_go_duration("3d"), None);
    }
}
