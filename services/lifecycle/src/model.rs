//! The lifecycle domain: package identity, phases and conditions. Knows neither tonic nor SQL.

use serde::{Deserialize, Serialize};

/// The system namespace modules run in.
pub const SYSTEM_NAMESPACE: &str = "berth-system";

/// Apps are namespaced and many-instanced; modules are cluster-level singletons.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    App,
    Module,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::App => "App",
            Kind::Module => "Module",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        match s {
            "App" => Some(Kind::App),
            "Module" => Some(Kind::Module),
            _ => None,
        }
    }
}

pub use berth_names::{Generation, PackageKey};

/// The identity of a package instance. Its key is `<namespace>.<name>` for apps and `<name>` for
/// modules; the key names the package's queues and its Helm release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackageId {
    pub kind: Kind,
    pub name: String,
    pub namespace: String,
}

impl PackageId {
    /// Validates a requested identity. Names follow Kubernetes DNS-1123 label rules because they
    /// become release, queue and object names.
    pub fn new(kind: Kind, name: &str, namespace: &str) -> Result<PackageId, String> {
        check_label("name", name)?;
        let namespace = match kind {
            Kind::Module => SYSTEM_NAMESPACE.to_owned(),
            Kind::App if namespace.is_empty() => "default".to_owned(),
            Kind::App => {
                check_label("namespace", namespace)?;
                namespace.to_owned()
            }
        };
        Ok(PackageId {
            kind,
            name: name.to_owned(),
            namespace,
        })
    }

    pub fn key(&self) -> PackageKey {
        PackageKey::from_issued(match self.kind {
            Kind::App => format!("{}.{}", self.namespace, self.name),
            Kind::Module => self.name.clone(),
        })
    }
}

/// Checks a DNS-1123 label: 1–63 lowercase alphanumerics or '-', starting and ending alphanumeric.
pub fn check_label(field: &str, value: &str) -> Result<(), String> {
    if berth_names::is_dns_label(value) {
        Ok(())
    } else {
        Err(format!(
            "{field} {value:?} must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"
        ))
    }
}

/// Where a package is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Downloading,
    Loaded,
    Running,
    Removing,
    /// The generation failed permanently; nothing more runs until the next Update.
    Failed,
}

impl Phase {
    pub const ALL: [Phase; 6] = [
        Phase::Pending,
        Phase::Downloading,
        Phase::Loaded,
        Phase::Running,
        Phase::Removing,
        Phase::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Downloading => "Downloading",
            Phase::Loaded => "Loaded",
            Phase::Running => "Running",
            Phase::Removing => "Removing",
            Phase::Failed => "Failed",
        }
    }

    pub fn parse(s: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// The conditions of a package.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionType {
    RequirementsMet,
    Downloaded,
    Loaded,
    SettingsValid,
    HooksProcessed,
    ManifestsApplied,
    Ready,
}

impl ConditionType {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::RequirementsMet => "RequirementsMet",
            ConditionType::Downloaded => "Downloaded",
            ConditionType::Loaded => "Loaded",
            ConditionType::SettingsValid => "SettingsValid",
            ConditionType::HooksProcessed => "HooksProcessed",
            ConditionType::ManifestsApplied => "ManifestsApplied",
            ConditionType::Ready => "Ready",
        }
    }
}

/// The status of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }
}

/// A condition as a report sets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionSet {
    pub type_: ConditionType,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
}

impl ConditionSet {
    pub fn new(type_: ConditionType, status: ConditionStatus, reason: &str) -> ConditionSet {
        ConditionSet {
            type_,
            status,
            reason: reason.to_owned(),
            message: String::new(),
        }
    }
}

/// A Kubernetes-style condition, as stored and shown (type and status as text).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
    pub observed_generation: i64,
    /// RFC 3339.
    pub last_transition_time: String,
}

/// Sets `update` in `conditions`, keeping the transition time when the status did not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    update: &ConditionSet,
    generation: Generation,
    now: &str,
) {
    let (type_, status) = (update.type_.as_str(), update.status.as_str());
    let (reason, message) = (update.reason.as_str(), update.message.as_str());
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == type_) {
        if existing.status != status {
            existing.last_transition_time = now.to_owned();
        }
        existing.status = status.to_owned();
        existing.reason = reason.to_owned();
        existing.message = message.to_owned();
        existing.observed_generation = generation.get();
    } else {
        conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            observed_generation: generation.get(),
            last_transition_time: now.to_owned(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_kind() {
        let app = PackageId::new(Kind::App, "hello", "").unwrap();
        assert_eq!(app.key().as_str(), "default.hello");
        let module = PackageId::new(Kind::Module, "hello", "ignored").unwrap();
        assert_eq!(module.key().as_str(), "hello");
        assert_eq!(module.namespace, SYSTEM_NAMESPACE);
    }

    #[test]
    fn bad_names_are_named_in_the_error() {
        let err = PackageId::new(Kind::App, "Hello_World", "").unwrap_err();
        assert!(err.contains("name \"Hello_World\""), "{err}");
        assert!(
            PackageId::new(Kind::App, "ok", "-bad")
                .unwrap_err()
                .contains("namespace")
        );
    }

    #[test]
    fn condition_transition_time_changes_only_with_status() {
        let ready = |status, reason| ConditionSet::new(ConditionType::Ready, status, reason);
        let mut c = vec![];
        set_condition(
            &mut c,
            &ready(ConditionStatus::False, "A"),
            Generation::new(1),
            "t1",
        );
        set_condition(
            &mut c,
            &ready(ConditionStatus::False, "B"),
            Generation::new(2),
            "t2",
        );
        assert_eq!(c[0].last_transition_time, "t1");
        assert_eq!(c[0].reason, "B");
        assert_eq!(
            (c[0].type_.as_str(), c[0].status.as_str()),
            ("Ready", "False")
        );
        set_condition(
            &mut c,
            &ready(ConditionStatus::True, "C"),
            Generation::new(2),
            "t3",
        );
        assert_eq!(c[0].last_transition_time, "t3");
    }
}
