//! A controller's status as Δ-controller reports it — a `Ready` condition and the last ten errors —
//! with upstream's two gaps closed: a controller that recovers is Ready again (upstream stays
//! `Unknown` until it is rebuilt), and the condition's transition time moves only when its
//! status does (upstream stamps every report).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::limits::ERROR_RING;

/// Errors reported at once before the limiter spaces them out.
const BURST: u32 = 3;
/// The spacing after the burst.
const SPACING: Duration = Duration::from_secs(2);
/// Messages longer than this are cut in the middle.
const MAX_MESSAGE: usize = 245;

/// The `Ready` condition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
pub enum Readiness {
    /// Running, and the last event evaluated without error.
    True,
    /// The controller could not start (an invalid spec, a source that cannot be watched).
    False,
    /// Running, and the last evaluation of some object failed (see `last_errors`).
    Unknown,
}

/// What a controller's status says.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerStatus {
    pub name: String,
    pub ready: Readiness,
    /// `Ready`, `NotReady` or `ReconciliationFailed`, as upstream names them.
    pub reason: &'static str,
    pub message: String,
    /// When `ready` last changed.
    pub since: chrono::DateTime<chrono::Utc>,
    /// The last ten errors, oldest first.
    pub last_errors: Vec<String>,
}

/// Keeps one controller's errors and decides which are worth reporting now.
#[derive(Debug)]
pub struct Reporter {
    name: String,
    ring: VecDeque<String>,
    critical: Option<String>,
    /// The objects whose last evaluation failed.
    failing: std::collections::BTreeSet<String>,
    since: chrono::DateTime<chrono::Utc>,
    reported: u32,
    last_report: Option<Instant>,
}

/// A message cut to at most 245 characters: the first 119, `[...]`, the last 120.
pub fn shorten(message: &str) -> String {
    let chars: Vec<char> = message.chars().collect();
    if chars.len() <= MAX_MESSAGE {
        return message.to_owned();
    }
    let head: String = chars[..119].iter().collect();
    let tail: String = chars[chars.len() - 120..].iter().collect();
    format!("{head}[...]{tail}")
}

impl Reporter {
    pub fn new(name: &str, now: chrono::DateTime<chrono::Utc>) -> Reporter {
        Reporter {
            name: name.to_owned(),
            ring: VecDeque::with_capacity(ERROR_RING),
            critical: None,
            failing: Default::default(),
            since: now,
            reported: 0,
            last_report: None,
        }
    }

    fn readiness(&self) -> Readiness {
        if self.critical.is_some() {
            Readiness::False
        } else if !self.failing.is_empty() {
            Readiness::Unknown
        } else {
            Readiness::True
        }
    }

    fn set(&mut self, change: impl FnOnce(&mut Reporter), now: chrono::DateTime<chrono::Utc>) {
        let before = self.readiness();
        change(self);
        if self.readiness() != before {
            self.since = now;
        }
    }

    fn remember(&mut self, message: String) {
        if self.ring.len() == ERROR_RING {
            self.ring.pop_front();
        }
        self.ring.push_back(message);
    }

    /// The outcome of an event about `object`: its errors (none: it evaluated cleanly). The
    /// controller is Ready while no object's last evaluation failed. Returns the errors worth
    /// reporting now: the first three always, then at most one every two seconds; all of them
    /// land in the ring.
    pub fn event(
        &mut self,
        object: &str,
        errors: &[String],
        at: Instant,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Vec<String> {
        self.set(
            |r| {
                if errors.is_empty() {
                    r.failing.remove(object);
                } else {
                    r.failing.insert(object.to_owned());
                }
            },
            now,
        );
        let mut out = Vec::new();
        for e in errors {
            let message = shorten(e);
            self.remember(message.clone());
            let due = self.reported < BURST
                || self
                    .last_report
                    .is_none_or(|last| at.duration_since(last) >= SPACING);
            if due {
                self.reported = self.reported.saturating_add(1);
                self.last_report = Some(at);
                out.push(message);
            }
        }
        out
    }

    /// The controller could not start: `Ready=False` until it is rebuilt.
    pub fn critical(&mut self, message: &str, now: chrono::DateTime<chrono::Utc>) {
        let message = shorten(message);
        self.remember(message.clone());
        self.set(|r| r.critical = Some(message), now);
    }

    pub fn status(&self) -> ControllerStatus {
        let ready = self.readiness();
        let (reason, message) = match (&self.critical, ready) {
            (Some(m), _) => ("NotReady", format!("the controller failed to start: {m}")),
            (None, Readiness::Unknown) => (
                "ReconciliationFailed",
                format!(
                    "the last event failed: {}",
                    self.ring.back().cloned().unwrap_or_default()
                ),
            ),
            _ => ("Ready", "the controller is up and running".to_owned()),
        };
        ControllerStatus {
            name: self.name.clone(),
            ready,
            reason,
            message,
            since: self.since,
            last_errors: self.ring.iter().cloned().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_in_the_middle() {
        let m: String = (0..300)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let s = shorten(&m);
        assert_eq!(s.chars().count(), 119 + 5 + 120);
        assert!(s.starts_with(&m[..119]));
        assert!(s.ends_with(&m[180..]));
        assert_eq!(shorten("short"), "short");
    }

    #[test]
    fn ready_follows_the_last_event_and_the_ring_keeps_ten() {
        let t0 = chrono::Utc::now();
        let mut r = Reporter::new("c", t0);
        assert_eq!(r.status().ready, Readiness::True);
        let at = Instant::now();
        let errors: Vec<String> = (0..12).map(|i| format!("e{i}")).collect();
        let t1 = t0 + chrono::Duration::seconds(1);
        let reported = r.event("a", &errors, at, t1);
        assert_eq!(reported, ["e0", "e1", "e2"], "three at once, then spaced");
        let s = r.status();
        assert_eq!(
            (s.ready, s.reason),
            (Readiness::Unknown, "ReconciliationFailed")
        );
        assert_eq!(s.last_errors.len(), 10);
        assert_eq!(s.last_errors.first().map(String::as_str), Some("e2"));
        assert_eq!(s.since, t1);
        // Two seconds on, one more gets through.
        let later = at + SPACING;
        assert_eq!(r.event("a", &["e12".into()], later, t1), ["e12"]);
        assert_eq!(
            r.event("a", &["e13".into()], later, t1),
            Vec::<String>::new()
        );
        // A clean event about another object changes nothing; the failed object's does.
        let t2 = t1 + chrono::Duration::seconds(5);
        assert!(r.event("b", &[], later, t2).is_empty());
        assert_eq!(r.status().ready, Readiness::Unknown);
        assert!(r.event("a", &[], later, t2).is_empty());
        let s = r.status();
        assert_eq!((s.ready, s.reason), (Readiness::True, "Ready"));
        assert_eq!(s.since, t2);
        assert_eq!(s.last_errors.last().map(String::as_str), Some("e13"));
        // Another clean event does not move the transition time.
        r.event("b", &[], later, t2 + chrono::Duration::seconds(9));
        assert_eq!(r.status().since, t2);
    }

    #[test]
    fn a_critical_error_holds_ready_false() {
        let t0 = chrono::Utc::now();
        let mut r = Reporter::new("c", t0);
        r.critical("cannot watch example.com/Thing: not found", t0);
        r.event("a", &[], Instant::now(), t0);
        let s = r.status();
        assert_eq!((s.ready, s.reason), (Readiness::False, "NotReady"));
        assert!(s.message.contains("cannot watch"), "{}", s.message);
    }
}
