//! Crontab bindings: parsing and the next fire time.

use berth_names::{Generation, PackageKey};
use chrono::{DateTime, Utc};
use croner::Cron;

/// A schedule binding of one hook of one package.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub package: PackageKey,
    pub generation: Generation,
    pub hook: String,
    pub binding: String,
    pub crontab: String,
    pub allow_failure: bool,
    pub queue: String,
    /// Kubernetes bindings of the hook whose snapshots the context carries.
    pub include_snapshots_from: Vec<String>,
    /// Non-empty: a Group context.
    pub group: String,
    pub cron: Cron,
}

/// Parses a crontab exactly as hook configs are validated at Load.
pub fn parse_crontab(crontab: &str) -> Result<Cron, String> {
    berth_hooks::config::parse_crontab(crontab)
}

impl Schedule {
    /// The first fire time strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron.find_next_occurrence(&after, false).ok()
    }

    /// The queue its HookRun tasks go to.
    pub fn queue_name(&self) -> String {
        if self.queue.is_empty() || self.queue == "main" {
            self.package.to_string()
        } else {
            format!("{}/{}", self.package, self.queue)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn schedule(crontab: &str) -> Schedule {
        Schedule {
            package: PackageKey::from_issued("default.hello".into()),
            generation: Generation::new(1),
            hook: "h".into(),
            binding: "b".into(),
            crontab: crontab.into(),
            allow_failure: false,
            queue: String::new(),
            include_snapshots_from: vec![],
            group: String::new(),
            cron: parse_crontab(crontab).unwrap(),
        }
    }

    #[test]
    fn five_fields_fire_on_minutes() {
        let t = Utc.with_ymd_and_hms(2026, 1, 5, 10, 0, 30).unwrap();
        let next = schedule("*/15 * * * *").next_after(t).unwrap();
        assert_eq!(next, Utc.with_ymd_and_hms(2026, 1, 5, 10, 15, 0).unwrap());
    }

    #[test]
    fn six_fields_have_seconds_first() {
        let t = Utc.with_ymd_and_hms(2026, 1, 5, 10, 0, 1).unwrap();
        let next = schedule("*/10 * * * * *").next_after(t).unwrap();
        assert_eq!(next, Utc.with_ymd_and_hms(2026, 1, 5, 10, 0, 10).unwrap());
    }

    #[test]
    fn weekdays_are_monday_to_friday() {
        // 2026-01-03 is a Saturday: the next 1-5 day is Monday the 5th.
        let t = Utc.with_ymd_and_hms(2026, 1, 3, 12, 0, 0).unwrap();
        let next = schedule("0 9 * * 1-5").next_after(t).unwrap();
        assert_eq!(next, Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap());
    }

    #[test]
    fn bad_crontabs_name_the_problem() {
        assert!(parse_crontab("* * *").unwrap_err().contains("expected 5"));
        assert!(
            parse_crontab("61 * * * *")
                .unwrap_err()
                .contains("61 * * * *")
        );
    }
}
