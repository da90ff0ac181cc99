//! Go `time.Duration` strings (`"3s"`, `"1m30s"`, `"1.5h"`, `"500ms"`).
//!
//! Hook configs written for shell-operator carry durations in Go's syntax
//! (`settings.executionMinInterval`, `kubernetes[].resynchronizationPeriod`).
//! `humantime` and friends accept a different grammar (spaces, long unit
//! names, no `µs`), so this small parser follows Go's `time.ParseDuration`
//! rules instead: a sequence of decimal numbers, each with a unit.

use std::time::Duration;

/// Units Go accepts, longest first so `ms` wins over `m`.
const UNITS: &[(&str, f64)] = &[
    ("ns", 1e-9),
    ("us", 1e-6),
    ("µs", 1e-6),
    ("μs", 1e-6),
    ("ms", 1e-3),
    ("s", 1.0),
    ("m", 60.0),
    ("h", 3600.0),
];

/// Parses a Go duration string. Negative durations are rejected because
/// no hook setting means anything with them.
pub fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err("empty duration".to_owned());
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    let mut seconds = 0.0_f64;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len]
            .parse()
            .map_err(|_| format!("invalid duration {text:?}: expected a number"))?;
        rest = &rest[number_len..];
        let (unit, factor) = UNITS
            .iter()
            .filter(|(unit, _)| rest.starts_with(unit))
            .max_by_key(|(unit, _)| unit.len())
            .ok_or_else(|| format!("invalid duration {text:?}: missing or unknown unit"))?;
        rest = &rest[unit.len()..];
        seconds += number * factor;
    }
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_forms() {
        assert_eq!(parse_go_duration("3s"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_malformed() {
        assert!(parse_go_duration("").is_err());
        assert!(parse_go_duration("10").is_err());
        assert!(parse_go_duration("5 minutes").is_err());
        assert!(parse_go_duration("-3s").is_err());
    }
}
