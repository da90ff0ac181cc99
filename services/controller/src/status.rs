//! A resource's status from what lifecycle says of its package: pure, so the kstatus rules are
//! unit-tested here (seed 004; `kubectl wait --for=condition=Ready`, Flux's and Argo CD's
//! health checks read these fields).
//!
//! - `observedGeneration` is the resource's `metadata.generation` whose spec lifecycle last
//!   accepted (or refused for good): kstatus calls the resource InProgress while it lags.
//! - `Ready` is True only when the package is Running at the generation lifecycle gave this
//!   spec; `Reconciling=True` while it converges (or is being removed); `Stalled=True` when it
//!   cannot get there without a change of the spec (phase Failed, refused settings, another
//!   front door's package, a blocked Remove). Absent abnormal conditions are written False.
//! - berth's own conditions (RequirementsMet, Downloaded, Loaded, SettingsValid,
//!   HooksProcessed, ManifestsApplied) are copied; their `observedGeneration` is the
//!   resource's only when lifecycle observed them at the accepted generation.

use berth_proto::v1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::resources::PackageStatus;

pub const READY: &str = "Ready";
pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";
pub const SUSPENDED: &str = "Suspended";

/// The longest condition message the schema allows.
const MAX_MESSAGE: usize = 32 * 1024;

/// What the controller decided about the resource in this reconcile.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Lifecycle accepted the resource's spec (at `generation`) as the package's generation
    /// `package_generation`.
    Accepted {
        generation: i64,
        package_generation: i64,
    },
    /// The spec at `generation` cannot be acted on until it changes.
    Refused {
        generation: i64,
        reason: Reason,
        message: String,
    },
    /// `spec.suspend` (at `generation`): nothing of the spec is sent; what lifecycle has stays.
    /// The `Suspended` condition observes `generation` (`kubectl wait --for=condition=Suspended`
    /// sees it); `observedGeneration` stays at the spec last sent.
    Suspended { generation: i64 },
    /// A Module with `enabled: false` (at `generation`): removed, or being removed.
    Disabled { generation: i64 },
    /// The resource is being deleted: the package is being removed, or its Remove was
    /// refused (`blocked`).
    Deleting { blocked: Option<String> },
}

/// Why a spec is refused, as the `Stalled` condition's reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Lifecycle refused the spec (settings, repository, version: InvalidArgument).
    InvalidSpec,
    /// The package belongs to the gRPC API (or another resource).
    OwnedElsewhere,
    /// The spec names nothing to install (a Module without repository).
    Incomplete,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::InvalidSpec => "InvalidSpec",
            Reason::OwnedElsewhere => "OwnedElsewhere",
            Reason::Incomplete => "Incomplete",
        }
    }
}

/// The status to write: computed from the verdict, the package as lifecycle last showed it
/// (`None`: there is none), and the status written before (whose transition times are kept
/// while a condition's status stays).
pub fn compute(
    verdict: &Verdict,
    package: Option<&v1::Package>,
    previous: Option<&PackageStatus>,
    now: &Time,
) -> PackageStatus {
    let mut status = PackageStatus {
        observed_generation: previous.and_then(|p| p.observed_generation),
        package_generation: previous.and_then(|p| p.package_generation),
        ..PackageStatus::default()
    };
    if let Some(p) = package {
        status.phase.clone_from(&p.phase);
        status.package.clone_from(&p.package);
        status.version.clone_from(&p.version);
        status.resolved_version.clone_from(&p.resolved_version);
        status.settings_version = Some(i64::from(p.settings_version));
        status.suspended = p.suspended;
        status.message.clone_from(&p.last_error);
    }
    // (ready, reconciling, stalled): each a status, reason and message.
    let (ready, reconciling, stalled) = match verdict {
        Verdict::Accepted {
            generation,
            package_generation,
        } => {
            status.observed_generation = Some(*generation);
            status.package_generation = Some(*package_generation);
            converging(package, *package_generation)
        }
        Verdict::Refused {
            generation,
            reason,
            message,
        } => {
            status.observed_generation = Some(*generation);
            status.message.clone_from(message);
            if package.is_none() {
                status.phase = "Failed".into();
            }
            let m = message.clone();
            (
                no(reason.as_str(), &m),
                no("Refused", ""),
                yes(reason.as_str(), &m),
            )
        }
        Verdict::Suspended { .. } => {
            status.suspended = true;
            // What lifecycle has stays; spec changes wait (observedGeneration stays behind).
            let ready = match package {
                Some(p) if running(p, status.package_generation) => yes("Running", ""),
                Some(p) => no(or(&p.phase, "Pending"), "suspended before it was ready"),
                None => no("Suspended", "suspended before it was installed"),
            };
            (ready, no("Suspended", ""), no("Suspended", ""))
        }
        Verdict::Disabled { generation } => {
            status.observed_generation = Some(*generation);
            match package {
                None => {
                    status.phase = "Disabled".into();
                    (
                        yes("Disabled", "the module is disabled and not installed"),
                        no("Disabled", ""),
                        no("Disabled", ""),
                    )
                }
                Some(p) => {
                    let m = format!("disabled: {} the package", removing_text(p));
                    (no("Removing", &m), yes("Removing", &m), no("Removing", ""))
                }
            }
        }
        Verdict::Deleting { blocked } => match blocked {
            Some(why) => {
                status.message.clone_from(why);
                (
                    no("RemoveBlocked", why),
                    no("RemoveBlocked", ""),
                    yes("RemoveBlocked", why),
                )
            }
            None => {
                let m = "the resource is being deleted: removing the package";
                (no("Removing", m), yes("Removing", m), no("Removing", ""))
            }
        },
    };
    let mut conditions: Vec<Condition> = vec![];
    let observed = status.observed_generation;
    let mut push = |type_: &str, c: Triple| {
        conditions.push(condition(type_, c, observed, previous, now));
    };
    push(READY, ready);
    push(RECONCILING, reconciling);
    push(STALLED, stalled);
    if let Verdict::Suspended { generation } = verdict {
        let mut c = condition(
            SUSPENDED,
            yes(
                "Suspended",
                "no new generations and no drift repair until resumed",
            ),
            Some(*generation),
            previous,
            now,
        );
        c.observed_generation = Some(*generation);
        conditions.push(c);
    }
    if let Some(p) = package {
        for c in &p.conditions {
            if c.r#type == READY {
                // berth's own Ready (the release's) is folded into the kstatus one above.
                continue;
            }
            let at_accepted = status.package_generation == Some(c.observed_generation);
            let status_text = or(&c.status, "Unknown").to_owned();
            // Lifecycle's time; without one, the time written before while the status stays.
            let kept = previous
                .and_then(|p| p.conditions.iter().find(|o| o.type_ == c.r#type))
                .filter(|o| o.status == status_text)
                .map(|o| o.last_transition_time.clone());
            conditions.push(Condition {
                type_: c.r#type.clone(),
                status: status_text,
                reason: reason_text(&c.reason),
                message: bounded(&c.message),
                observed_generation: if at_accepted { observed } else { None },
                last_transition_time: c
                    .last_transition_time
                    .as_ref()
                    // To the second, as the API server stores it.
                    .and_then(|t| chrono::DateTime::from_timestamp(t.seconds, 0))
                    .and_then(|t| t.to_rfc3339().parse().ok())
                    .map(Time)
                    .or(kept)
                    .unwrap_or_else(|| now.clone()),
            });
        }
    }
    let ready_now = conditions
        .first()
        .is_some_and(|c| c.type_ == READY && c.status == "True");
    status.ready_version = match (ready_now, package) {
        (true, Some(p)) => shown_version(p).to_owned(),
        _ => previous
            .map(|p| p.ready_version.clone())
            .unwrap_or_default(),
    };
    status.conditions = conditions;
    status.message = bounded(&status.message);
    status
}

/// A condition's status, reason and message.
type Triple = (&'static str, String, String);

fn yes(reason: &str, message: &str) -> Triple {
    ("True", reason.to_owned(), message.to_owned())
}

fn no(reason: &str, message: &str) -> Triple {
    ("False", reason.to_owned(), message.to_owned())
}

fn or<'a>(s: &'a str, default: &'a str) -> &'a str {
    if s.is_empty() { default } else { s }
}

fn running(p: &v1::Package, package_generation: Option<i64>) -> bool {
    p.phase == "Running"
        && package_generation.is_none_or(|g| p.generation == g && p.observed_generation == g)
}

fn removing_text(p: &v1::Package) -> &'static str {
    if p.phase == "Removing" {
        "removing"
    } else {
        "about to remove"
    }
}

/// Ready, Reconciling and Stalled of a package lifecycle accepted as `generation`.
fn converging(package: Option<&v1::Package>, generation: i64) -> (Triple, Triple, Triple) {
    let Some(p) = package.filter(|p| p.generation >= generation) else {
        let m = format!("waiting for lifecycle to show generation {generation}");
        return (no("Pending", &m), yes("Pending", &m), no("Pending", ""));
    };
    if p.generation > generation {
        // A newer generation (a re-created package): the next reconcile accepts the spec again.
        let m = format!("the package is at generation {}", p.generation);
        return (no("Pending", &m), yes("Pending", &m), no("Pending", ""));
    }
    match p.phase.as_str() {
        "Running" if p.observed_generation == generation => (
            yes(
                "Running",
                &format!("{} {} is running", p.package, shown_version(p)),
            ),
            no("Running", ""),
            no("Running", ""),
        ),
        "Failed" => {
            let m = or(&p.last_error, "the generation failed").to_owned();
            (no("Failed", &m), no("Failed", ""), yes("Failed", &m))
        }
        phase => {
            let phase = or(phase, "Pending");
            let m = waiting_message(p);
            (no(phase, &m), yes(phase, &m), no(phase, ""))
        }
    }
}

fn shown_version(p: &v1::Package) -> &str {
    or(&p.resolved_version, &p.version)
}

/// Why a converging package is not Running yet: the first of its conditions that is not
/// True at this generation (RequirementsMet names what it waits for), else its last error
/// (a task being retried), else its phase.
fn waiting_message(p: &v1::Package) -> String {
    let pending = p.conditions.iter().find(|c| {
        c.observed_generation == p.generation
            && c.status == "False"
            && c.r#type != READY
            && !c.message.is_empty()
    });
    if let Some(c) = pending {
        return format!("{}: {}", c.r#type, c.message);
    }
    if !p.last_error.is_empty() {
        return format!("retrying: {}", p.last_error);
    }
    format!("phase {}", or(&p.phase, "Pending"))
}

/// A condition reason the schema accepts (`^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`).
pub(crate) fn reason_text(reason: &str) -> String {
    let mut out: String = reason
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ',' | ':'))
        .take(1024)
        .collect();
    while out.ends_with([',', ':']) {
        out.pop();
    }
    if !out.starts_with(|c: char| c.is_ascii_alphabetic()) {
        out.insert_str(0, "Reason");
    }
    out.truncate(1024);
    out
}

pub(crate) fn bounded(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

fn condition(
    type_: &str,
    (status, reason, message): Triple,
    observed: Option<i64>,
    previous: Option<&PackageStatus>,
    now: &Time,
) -> Condition {
    let before = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == type_));
    let last_transition_time = match before {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now.clone(),
    };
    Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason_text(&reason),
        message: bounded(&message),
        observed_generation: observed,
        last_transition_time,
    }
}

/// Whether `status` says the resource is Ready (kstatus Current) at `generation`.
pub fn is_ready(status: &PackageStatus, generation: Option<i64>) -> bool {
    status.observed_generation == generation
        && status
            .conditions
            .iter()
            .any(|c| c.type_ == READY && c.status == "True")
}

/// The condition `type_` of `status`, if any.
pub fn find<'a>(status: &'a PackageStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Whether two statuses differ in what is written (transition times of unchanged conditions
/// are kept, so an unchanged status compares equal).
pub fn same(a: &PackageStatus, b: &PackageStatus) -> bool {
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Time {
        Time("2026-01-01T00:00:00Z".parse().unwrap())
    }

    fn package(phase: &str, generation: i64, observed: i64) -> v1::Package {
        v1::Package {
            key: "default.web".into(),
            package: "hello".into(),
            version: "1.0.0".into(),
            resolved_version: "1.0.0".into(),
            phase: phase.into(),
            generation,
            observed_generation: observed,
            ..Default::default()
        }
    }

    fn cond<'a>(s: &'a PackageStatus, t: &str) -> (&'a str, &'a str) {
        let c = find(s, t).unwrap_or_else(|| panic!("no {t} in {s:?}"));
        (c.status.as_str(), c.reason.as_str())
    }

    /// kstatus's reading of a status (seed 004's generic rule, without deletion): the
    /// generation check, then Reconciling/Stalled in list order, then Ready.
    fn kstatus(s: &PackageStatus, generation: i64) -> &'static str {
        if s.observed_generation.is_some_and(|o| o != generation) {
            return "InProgress";
        }
        for c in &s.conditions {
            if c.status == "True" && c.type_ == RECONCILING {
                return "InProgress";
            }
            if c.status == "True" && c.type_ == STALLED {
                return "Failed";
            }
        }
        match find(s, READY).map(|c| c.status.as_str()) {
            Some("True") | None => "Current",
            Some(_) => "InProgress",
        }
    }

    #[test]
    fn ready_only_when_running_at_the_accepted_generation() {
        let accepted = Verdict::Accepted {
            generation: 3,
            package_generation: 7,
        };
        // Lifecycle has not shown generation 7 yet.
        let s = compute(&accepted, Some(&package("Running", 6, 6)), None, &now());
        assert_eq!(cond(&s, READY), ("False", "Pending"));
        assert_eq!(cond(&s, RECONCILING), ("True", "Pending"));
        assert_eq!(kstatus(&s, 3), "InProgress");
        let s = compute(&accepted, Some(&package("Loaded", 7, 6)), None, &now());
        assert_eq!(cond(&s, RECONCILING), ("True", "Loaded"));
        assert_eq!(kstatus(&s, 3), "InProgress");
        let s = compute(&accepted, Some(&package("Running", 7, 7)), Some(&s), &now());
        assert_eq!(cond(&s, READY), ("True", "Running"));
        assert_eq!(cond(&s, STALLED), ("False", "Running"));
        assert_eq!(
            (s.observed_generation, s.package_generation),
            (Some(3), Some(7))
        );
        assert_eq!(kstatus(&s, 3), "Current");
        // A spec edited since (generation 4) is not Current until accepted.
        assert_eq!(kstatus(&s, 4), "InProgress");
        assert!(is_ready(&s, Some(3)) && !is_ready(&s, Some(4)));
        assert_eq!(s.ready_version, "1.0.0", "the version last Ready");
    }

    #[test]
    fn failures_and_refusals_stall() {
        let mut failed = package("Failed", 2, 1);
        failed.last_error = "package.yaml: unknown field".into();
        let accepted = Verdict::Accepted {
            generation: 1,
            package_generation: 2,
        };
        let s = compute(&accepted, Some(&failed), None, &now());
        assert_eq!(cond(&s, STALLED), ("True", "Failed"));
        assert_eq!(kstatus(&s, 1), "Failed");
        assert_eq!(find(&s, STALLED).unwrap().message, failed.last_error);
        let refused = Verdict::Refused {
            generation: 2,
            reason: Reason::InvalidSpec,
            message: "settings.replicas: \"many\" is not of type \"integer\"".into(),
        };
        let s = compute(&refused, None, None, &now());
        assert_eq!(cond(&s, STALLED), ("True", "InvalidSpec"));
        assert_eq!(
            (s.phase.as_str(), s.observed_generation),
            ("Failed", Some(2))
        );
        assert_eq!(kstatus(&s, 2), "Failed");
        let blocked = Verdict::Deleting {
            blocked: Some("hello is a mandatory dependency of web".into()),
        };
        let s = compute(&blocked, Some(&package("Running", 2, 2)), None, &now());
        assert_eq!(cond(&s, STALLED), ("True", "RemoveBlocked"));
    }

    #[test]
    fn conditions_keep_their_transition_times_and_reasons_fit_the_schema() {
        let accepted = Verdict::Accepted {
            generation: 1,
            package_generation: 1,
        };
        let mut p = package("Pending", 1, 0);
        p.conditions.push(v1::Condition {
            r#type: "RequirementsMet".into(),
            status: "False".into(),
            reason: "Dependency".into(),
            message: "requires db".into(),
            observed_generation: 1,
            last_transition_time: None,
        });
        let first = compute(&accepted, Some(&p), None, &now());
        assert_eq!(
            find(&first, RECONCILING).unwrap().message,
            "RequirementsMet: requires db"
        );
        assert_eq!(
            find(&first, "RequirementsMet").unwrap().observed_generation,
            Some(1)
        );
        let later = Time("2026-01-01T00:05:00Z".parse().unwrap());
        let again = compute(&accepted, Some(&p), Some(&first), &later);
        assert!(same(&first, &again), "an unchanged status is not rewritten");
        assert_eq!(reason_text("Not loaded:"), "Notloaded");
        assert_eq!(reason_text("1x"), "Reason1x");
    }

    #[test]
    fn disabled_and_suspended_modules() {
        let s = compute(&Verdict::Disabled { generation: 2 }, None, None, &now());
        assert_eq!(
            (cond(&s, READY), s.phase.as_str()),
            (("True", "Disabled"), "Disabled")
        );
        assert_eq!(kstatus(&s, 2), "Current");
        let s = compute(
            &Verdict::Disabled { generation: 2 },
            Some(&package("Removing", 3, 1)),
            None,
            &now(),
        );
        assert_eq!(kstatus(&s, 2), "InProgress");
        let previous = PackageStatus {
            observed_generation: Some(1),
            package_generation: Some(1),
            ..Default::default()
        };
        let s = compute(
            &Verdict::Suspended { generation: 2 },
            Some(&package("Running", 1, 1)),
            Some(&previous),
            &now(),
        );
        assert_eq!(cond(&s, SUSPENDED), ("True", "Suspended"));
        assert_eq!(cond(&s, READY), ("True", "Running"));
        assert_eq!(
            s.observed_generation,
            Some(1),
            "the suspended spec is not observed"
        );
    }
}
