//! [`Timestamp`]: when a condition changed or a hook last ran.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time to the second, as conditions and hook runs record it. It becomes text
/// (RFC 3339, `2026-12-01T10:00:00Z`) only where it is stored or shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<Utc>);

/// Text that is not an RFC 3339 time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not an RFC 3339 time: {reason}")]
pub struct InvalidTimestamp {
    pub text: String,
    pub reason: String,
}

impl Timestamp {
    /// Now, to the second (the clock is read here and at no other place in the domain).
    pub fn now() -> Timestamp {
        Timestamp::from_unix(Utc::now().timestamp())
    }

    /// `seconds` after the Unix epoch (clamped to what the calendar holds).
    pub fn from_unix(seconds: i64) -> Timestamp {
        Timestamp(DateTime::from_timestamp(seconds, 0).unwrap_or_default())
    }

    /// Seconds since the Unix epoch.
    pub fn unix_seconds(self) -> i64 {
        self.0.timestamp()
    }

    /// Parses RFC 3339 text (any offset), to the second.
    pub fn parse(text: &str) -> Result<Timestamp, InvalidTimestamp> {
        DateTime::parse_from_rfc3339(text)
            .map(|t| Timestamp::from_unix(t.timestamp()))
            .map_err(|e| InvalidTimestamp {
                text: text.to_owned(),
                reason: e.to_string(),
            })
    }
}

impl std::fmt::Display for Timestamp {
    /// RFC 3339 in UTC, to the second: `2026-12-01T10:00:00Z`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Secs, true))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_to_the_second_only_as_text() {
        let t = Timestamp::parse("2026-12-01T11:00:00.75+01:00").unwrap();
        assert_eq!(t.to_string(), "2026-12-01T10:00:00Z");
        assert_eq!(t, Timestamp::from_unix(t.unix_seconds()));
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(json, "\"2026-12-01T10:00:00Z\"");
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), t);
        let err = Timestamp::parse("t").unwrap_err();
        assert!(
            err.to_string().starts_with("\"t\" is not an RFC 3339 time"),
            "{err}"
        );
    }
}
