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
        ("dateModify", date_modify),
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

/// `dateModify "-1h30m" time`.
fn date_modify(args: &[Value]) -> Result<Value> {
    exact("dateModify", args, 2)?;
    let spec = str_arg("dateModify", args, 0)?;
    let t = parse_time("dateModify", &args[1])?;
    let secs = parse_go_duration(&spec)
        .ok_or_else(|| fail("dateModify", format!("bad duration {spec:?}")))?;
    let shifted = t + chrono::Duration::milliseconds((secs * 1000.0) as i64);
    Ok(string(shifted.to_rfc3339()))
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
