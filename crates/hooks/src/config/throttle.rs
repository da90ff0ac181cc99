//! `settings`: a token bucket that throttles a hook's executions.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::{ConfigError, from_value_at, join, parse_go_duration};

/// `settings: {executionMinInterval, executionBurst}`.
///
/// A token bucket of `execution_burst` tokens refilled one per
/// `execution_min_interval`: at most `burst` runs back to back, then at
/// most one per interval. Best combined with a dedicated queue, since a
/// throttled hook holds its queue while it waits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottleSettings {
    pub execution_min_interval: Duration,
    /// At least 1.
    pub execution_burst: u32,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawThrottle {
    /// A Go duration string (`"3s"`), or integer nanoseconds as module-sdk
    /// serializes `time.Duration`.
    execution_min_interval: Option<Value>,
    execution_burst: Option<u32>,
    /// module-sdk only; accepted and ignored (berth runs schedules once the package is running).
    #[serde(rename = "enableSchedulesOnStartup")]
    _enable_schedules_on_startup: Option<bool>,
}

impl ThrottleSettings {
    pub(crate) fn from_value(value: Value, path: &str) -> Result<Self, ConfigError> {
        let raw: RawThrottle = from_value_at(value, path)?;
        let interval_path = join(path, "executionMinInterval");
        let execution_min_interval = match raw.execution_min_interval {
            None => Duration::ZERO,
            Some(Value::String(s)) => {
                parse_go_duration(&s).map_err(|r| ConfigError::invalid(&interval_path, r))?
            }
            Some(Value::Number(n)) => n.as_u64().map(Duration::from_nanos).ok_or_else(|| {
                ConfigError::invalid(
                    &interval_path,
                    format!("{n} is not a non-negative nanosecond count"),
                )
            })?,
            Some(other) => {
                return Err(ConfigError::invalid(
                    &interval_path,
                    format!("expected a duration, got {other}"),
                ));
            }
        };
        let execution_burst = match raw.execution_burst {
            None | Some(0) => 1,
            Some(n) => n,
        };
        Ok(Self {
            execution_min_interval,
            execution_burst,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_both_duration_forms() {
        let s = ThrottleSettings::from_value(
            json!({"executionMinInterval": "3s", "executionBurst": 2}),
            "settings",
        );
        assert_eq!(
            s,
            Ok(ThrottleSettings {
                execution_min_interval: Duration::from_secs(3),
                execution_burst: 2
            })
        );
        let s = ThrottleSettings::from_value(
            json!({"executionMinInterval": 5_000_000_000u64}),
            "settings",
        );
        assert_eq!(
            s,
            Ok(ThrottleSettings {
                execution_min_interval: Duration::from_secs(5),
                execution_burst: 1
            })
        );
        assert!(
            ThrottleSettings::from_value(json!({"executionMinInterval": "often"}), "settings")
                .is_err()
        );
    }
}
