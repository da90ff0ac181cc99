//! `schedule` bindings: run a hook when a crontab fires.

use croner::parser::{CronParser, Seconds, Year};
use serde::Deserialize;
use serde_json::Value;

use super::{ConfigError, from_value_at, join};

/// One `schedule[]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleBinding {
    /// The `binding` value in the binding context; `"schedule"` when unset.
    pub name: String,
    /// 5 fields (minute precision) or 6 fields (leading seconds), validated.
    pub crontab: String,
    /// Log the failure and move on instead of retrying.
    pub allow_failure: bool,
    /// Named queue; `None` means the package's `main` queue.
    pub queue: Option<String>,
    pub include_snapshots_from: Vec<String>,
    pub group: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSchedule {
    name: Option<String>,
    crontab: String,
    #[serde(default)]
    allow_failure: bool,
    queue: Option<String>,
    #[serde(default)]
    include_snapshots_from: Vec<String>,
    group: Option<String>,
}

impl ScheduleBinding {
    pub(crate) fn from_value(value: Value, path: &str) -> Result<Self, ConfigError> {
        let raw: RawSchedule = from_value_at(value, path)?;
        validate_crontab(&raw.crontab)
            .map_err(|r| ConfigError::invalid(join(path, "crontab"), r))?;
        Ok(Self {
            name: non_empty(raw.name).unwrap_or_else(|| "schedule".to_owned()),
            crontab: raw.crontab,
            allow_failure: raw.allow_failure,
            queue: non_empty(raw.queue),
            include_snapshots_from: raw.include_snapshots_from,
            group: non_empty(raw.group),
        })
    }

    /// The queue this binding's runs go to.
    pub fn queue_name(&self) -> &str {
        self.queue.as_deref().unwrap_or("main")
    }
}

/// The parser shell-operator's crontabs need: 5 fields, or 6 with seconds
/// first; no year field. Vixie semantics (day-of-month OR day-of-week).
pub fn crontab_parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Disallowed)
        .build()
}

/// Parses a crontab as shell-operator does: 5 fields, 6 with seconds first, or a macro such as
/// `@hourly`. Used both at config time (so a typo fails Load, not the scheduler) and by the
/// scheduler that fires it, so the two can never disagree.
pub fn parse_crontab(crontab: &str) -> Result<croner::Cron, String> {
    let fields = crontab.split_whitespace().count();
    let macro_form = crontab.trim_start().starts_with('@');
    if !macro_form && !(5..=6).contains(&fields) {
        return Err(format!(
            "{crontab:?} has {fields} fields; expected 5, or 6 with seconds"
        ));
    }
    crontab_parser()
        .parse(crontab)
        .map_err(|e| format!("{crontab:?} is not a valid crontab: {e}"))
}

pub(crate) fn validate_crontab(crontab: &str) -> Result<(), String> {
    parse_crontab(crontab).map(|_| ())
}

pub(crate) fn non_empty(value: Option<String>) -> Option<String> {
    value.filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_five_and_six_fields() {
        assert_eq!(validate_crontab("*/10 * * * *"), Ok(()));
        assert_eq!(validate_crontab("*/10 * * * * *"), Ok(()));
        assert_eq!(validate_crontab("0 9 * * MON-FRI"), Ok(()));
    }

    #[test]
    fn rejects_bad_shapes() {
        assert!(validate_crontab("* * * *").is_err());
        assert!(validate_crontab("* * * * * * *").is_err());
        assert!(validate_crontab("61 * * * *").is_err());
        assert!(validate_crontab("every minute").is_err());
    }
}
