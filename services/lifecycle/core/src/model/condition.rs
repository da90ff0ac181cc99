//! Kubernetes-style conditions of a package: typed, with a transition time that moves only
//! when the status does.

use serde::{Deserialize, Serialize};

use crate::model::id::Generation;
use crate::model::time::Timestamp;

/// The conditions of a package.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::EnumIter,
)]
pub enum ConditionType {
    RequirementsMet,
    Downloaded,
    Loaded,
    SettingsValid,
    HooksProcessed,
    ManifestsApplied,
    Ready,
    /// The package's declarative operators (reported by hookevent while it is Running).
    OperatorsReady,
}

impl ConditionType {
    /// The type's name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// The status of a condition.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, strum::IntoStaticStr, strum::EnumIter,
)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    /// The status's name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A condition as a report or the engine sets it.
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

    /// The same condition with `message`.
    pub fn with_message(mut self, message: impl Into<String>) -> ConditionSet {
        self.message = message.into();
        self
    }
}

/// A condition as stored and shown.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: ConditionType,
    pub status: ConditionStatus,
    pub reason: String,
    pub message: String,
    pub observed_generation: i64,
    pub last_transition_time: Timestamp,
}

/// Sets `update` in `conditions`, keeping the transition time when the status did not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    update: &ConditionSet,
    generation: Generation,
    now: Timestamp,
) {
    if let Some(existing) = conditions.iter_mut().find(|c| c.type_ == update.type_) {
        if existing.status != update.status {
            existing.last_transition_time = now;
        }
        existing.status = update.status;
        existing.reason.clone_from(&update.reason);
        existing.message.clone_from(&update.message);
        existing.observed_generation = generation.get();
    } else {
        conditions.push(Condition {
            type_: update.type_,
            status: update.status,
            reason: update.reason.clone(),
            message: update.message.clone(),
            observed_generation: generation.get(),
            last_transition_time: now,
        });
    }
}

/// The condition of `type_` in `conditions`, if set.
pub fn find(conditions: &[Condition], type_: ConditionType) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn condition_transition_time_changes_only_with_status() {
        let ready = |status, reason| ConditionSet::new(ConditionType::Ready, status, reason);
        let t = Timestamp::from_unix;
        let mut c = vec![];
        let g = Generation::new;
        set_condition(&mut c, &ready(ConditionStatus::False, "A"), g(1), t(1));
        set_condition(&mut c, &ready(ConditionStatus::False, "B"), g(2), t(2));
        assert_eq!(c[0].last_transition_time, t(1));
        assert_eq!(c[0].reason, "B");
        assert_eq!(
            (c[0].type_, c[0].status),
            (ConditionType::Ready, ConditionStatus::False)
        );
        set_condition(&mut c, &ready(ConditionStatus::True, "C"), g(2), t(3));
        assert_eq!(c[0].last_transition_time, t(3));
    }

    #[test]
    fn conditions_are_stored_with_their_names() {
        let mut c = vec![];
        let unknown = ConditionSet::new(
            ConditionType::RequirementsMet,
            ConditionStatus::Unknown,
            "NotLoaded",
        );
        set_condition(
            &mut c,
            &unknown,
            Generation::new(3),
            Timestamp::from_unix(0),
        );
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(
            json,
            serde_json::json!([{
                "type": "RequirementsMet",
                "status": "Unknown",
                "reason": "NotLoaded",
                "message": "",
                "observedGeneration": 3,
                "lastTransitionTime": "1970-01-01T00:00:00Z",
            }])
        );
        assert_eq!(serde_json::from_value::<Vec<Condition>>(json).unwrap(), c);
        assert_eq!(ConditionStatus::False.as_str(), "False");
    }
}
