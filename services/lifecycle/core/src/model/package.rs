//! [`Package`]: one package instance's whole state, as lifecycle keeps it.

use serde_json::Value;

use crate::model::condition::{self, Condition, ConditionStatus, ConditionType};
use crate::model::id::{Generation, PackageId, PackageKey};
use crate::model::owner::Owner;
use crate::model::time::Timestamp;
use crate::model::version::VersionRequest;
use crate::scheduler::{Blocked, LoadedSpec, Node, Reason};

/// Where a package is in its life.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString, strum::EnumIter,
)]
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
    /// The phase's name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A hook as Dump shows it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookState {
    pub name: String,
    pub bindings: Vec<String>,
    #[serde(default)]
    pub runs: i64,
    #[serde(default, alias = "last_run")]
    pub last_run: Option<Timestamp>,
    #[serde(default, alias = "last_error")]
    pub last_error: String,
}

/// One package: the spec the last Update (or Remove) asked for, under its generation, and
/// everything workers reported and the engine decided about it since.
#[derive(Clone, Debug, PartialEq)]
pub struct Package {
    pub id: PackageId,
    pub key: PackageKey,
    pub repository: String,
    pub package: String,
    pub version: VersionRequest,
    pub generation: Generation,
    /// The generation the package last reached Running at.
    pub observed_generation: Generation,
    pub settings: Value,
    /// The settings version `settings` are written for; 0: the version of the package version
    /// they were given for, until it loads (see `conversion`).
    pub settings_version: u32,
    pub phase: Phase,
    pub conditions: Vec<Condition>,
    pub values: Value,
    pub values_patch: Vec<Value>,
    /// `None` until loaded; `Some(None)` when loaded without a settings schema.
    pub settings_schema: Option<Option<Value>>,
    pub schema_version: Option<String>,
    /// The loaded package's settings conversions; `None` until loaded (as the schema).
    pub conversions: Option<berth_package::Conversions>,
    pub hooks: Vec<HookState>,
    pub last_error: String,
    pub removing: bool,
    /// The scheduler enabled this load of the package (the tasks after Load were enqueued).
    pub enabled: bool,
    /// This enable's Startup (Synchronization, then the onStartup hooks) succeeded; until then
    /// every generation goes through Start, so onStartup is never skipped (see
    /// `flows::update`). Cleared when the scheduler enables the package or it starts over.
    pub started: bool,
    /// What the scheduler needs of the loaded package; `None` until this version is loaded.
    pub loaded: Option<LoadedSpec>,
    /// The loaded package's hook config answers, as the store keeps them; `None` until
    /// loaded, or when not kept.
    pub hook_configs: Option<String>,
    /// The loaded package's `rbac:` as the store keeps it; `None` until loaded.
    pub rbac: Option<String>,
    /// The global package only: its Run (beforeAll) succeeded and its AfterAll task is not
    /// enqueued yet (see `engine::after_all`).
    pub after_all_due: bool,
    /// The key's principal number (≥ 1; docs/decisions/principals.md): given when the key is
    /// first stored, kept until Cleanup deletes it. Workers run the key's hooks under an OS
    /// identity derived from it.
    pub principal: u32,
    /// The front door that made the package, the only one that may change or remove it.
    pub owner: Owner,
    /// Suspended (`berth suspend`, a resource's `spec.suspend`): no new generation is
    /// accepted and release does not repair its objects' drift until it is resumed.
    pub suspended: bool,
}

impl Package {
    /// A package that was never stored, with the principal number the store gave its key:
    /// nothing loaded, reported or decided yet.
    pub fn new(
        id: PackageId,
        version: VersionRequest,
        generation: Generation,
        principal: u32,
    ) -> Package {
        Package {
            key: id.key(),
            id,
            repository: String::new(),
            package: String::new(),
            version,
            generation,
            observed_generation: Generation::new(0),
            settings: Value::Object(Default::default()),
            settings_version: 0,
            phase: Phase::Pending,
            conditions: vec![],
            values: Value::Object(Default::default()),
            values_patch: vec![],
            settings_schema: None,
            schema_version: None,
            conversions: None,
            hooks: vec![],
            last_error: String::new(),
            removing: false,
            enabled: false,
            started: false,
            loaded: None,
            hook_configs: None,
            rbac: None,
            after_all_due: false,
            principal,
            owner: Owner::Api,
            suspended: false,
        }
    }

    /// Whether this is the `global` package (whose values every nested package sees).
    pub fn is_global(&self) -> bool {
        self.id.is_global()
    }

    /// The package as the scheduler sees it.
    pub fn node(&self) -> Node {
        Node {
            id: self.id.clone(),
            generation: self.generation,
            phase: self.phase,
            removing: self.removing,
            enabled: self.enabled,
            loaded: self.loaded.clone(),
            blocked: self.blocked(),
            observed_generation: self.observed_generation,
            after_all_due: self.after_all_due,
        }
    }

    /// Why the scheduler last said this generation waits (its `RequirementsMet=False`).
    pub fn blocked(&self) -> Option<Blocked> {
        let c = condition::find(&self.conditions, ConditionType::RequirementsMet)?;
        if c.status != ConditionStatus::False || c.observed_generation != self.generation.get() {
            return None;
        }
        Some(Blocked {
            reason: Reason::parse(&c.reason)?,
            message: c.message.clone(),
        })
    }

    /// The package's values under `global` (the global package's are every nested package's).
    pub fn global_values(&self) -> Option<&Value> {
        self.values.get(crate::model::id::GLOBAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::condition::{ConditionSet, set_condition};
    use crate::model::id::Kind;

    #[test]
    fn a_package_waits_for_the_reason_its_condition_names_at_its_generation() {
        let id = PackageId::new(Kind::App, "web", "").unwrap();
        let mut p = Package::new(id, VersionRequest::parse("1.0.0"), Generation::new(2), 1);
        let unmet = ConditionSet::new(
            ConditionType::RequirementsMet,
            ConditionStatus::False,
            "Dependency",
        )
        .with_message("requires db");
        set_condition(
            &mut p.conditions,
            &unmet,
            Generation::new(1),
            Timestamp::from_unix(0),
        );
        assert_eq!(p.blocked(), None, "an older generation's verdict");
        set_condition(
            &mut p.conditions,
            &unmet,
            Generation::new(2),
            Timestamp::from_unix(0),
        );
        assert_eq!(
            p.blocked(),
            Some(Blocked {
                reason: Reason::Dependency,
                message: "requires db".into()
            })
        );
        assert_eq!(Phase::Running.as_str(), "Running");
        assert_eq!("Failed".parse::<Phase>(), Ok(Phase::Failed));
    }
}
