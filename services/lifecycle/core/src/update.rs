//! The Update decision: what a validated Update changes, given the package it replaces.

use berth_package::Conversions;
use serde_json::Value;

use crate::conversion::{self, Converted, PlanRefusal};
use crate::flows::{self, NewSpec};
use crate::model::id::{Generation, PackageId};
use crate::model::package::{Package, Phase};
use crate::model::time::Timestamp;
use crate::model::version::VersionRequest;
use crate::task::Work;

/// Largest accepted settings document, serialised.
pub const MAX_SETTINGS_BYTES: usize = 1 << 20;
/// Longest version accepted in an Update (OCI tags are at most 128 characters).
pub const MAX_VERSION_LEN: usize = 128;
/// Longest repository accepted in an Update (a path or URL).
pub const MAX_REPOSITORY_LEN: usize = 4096;

/// An Update request, validated field by field at the edge.
#[derive(Clone, Debug)]
pub struct UpdateSpec {
    pub id: PackageId,
    pub repository: String,
    pub package: String,
    pub version: VersionRequest,
    pub settings: Value,
    /// The settings version `settings` are written for (0: the package version's own).
    pub settings_version: u32,
    /// The Update sent no settings: the stored ones are kept (with their settings version,
    /// converted when a new version loads). `settings` is then `{}`, what a new package gets.
    pub keep_settings: bool,
    /// The settings converted to the loaded package's settings version, with the conversions
    /// used (before the write); `None` when no conversion applies.
    pub converted: Option<(Converted, Conversions)>,
    /// Plan the tasks even when nothing changed.
    pub force: bool,
}

impl UpdateSpec {
    /// The settings as they would be stored: converted, when a conversion applies.
    pub fn effective_settings(&self) -> &Value {
        self.converted
            .as_ref()
            .map_or(&self.settings, |(c, _)| &c.settings)
    }

    /// Whether `row` is this very package version, loaded: then the Update is a settings
    /// change, checked (and converted) against what is loaded now.
    pub fn same_loaded_version(&self, row: &Package) -> bool {
        row.version == self.version
            && !self.version.is_constraint()
            && row.package == self.package
            && !row.removing
    }
}

/// Why settings cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// They break the loaded package's schema: one entry per failing field (`settings.a: …`).
    #[error("{}", .errors.join("; "))]
    Refused { errors: Vec<String> },
    /// The loaded package's stored schema does not compile (lifecycle's own data is at fault).
    #[error("stored settings schema: {reason}")]
    StoredSchema { reason: String },
}

/// Why an Update's settings were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateRefused {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Conversion(#[from] PlanRefusal),
}

/// Why an Update writes nothing: its settings were refused, or it asked for what is wanted
/// already (the current generation).
#[derive(Debug)]
pub enum NotPlanned {
    Refused(UpdateRefused),
    Unchanged(Generation),
}

/// What an Update writes: the package as it will be, and its work.
#[derive(Debug)]
pub struct Planned {
    pub row: Package,
    pub work: Vec<Work>,
}

/// `spec` replacing `previous` (None for a new package, which gets `principal`) as
/// `generation`: the package as it will be stored, and its tasks. Decided in the write, on the
/// package being replaced, so the decision and the write see the same state.
pub fn plan(
    spec: &UpdateSpec,
    previous: Option<&Package>,
    generation: Generation,
    principal: u32,
    now: Timestamp,
) -> Result<Planned, NotPlanned> {
    let refused = |e: UpdateRefused| NotPlanned::Refused(e);
    // For a loaded package of the same version, the settings are taken to its settings
    // version (converted before the write, or 0 resolved); a new version converts them
    // when it loads.
    let resolved = match previous {
        Some(existing) if !spec.keep_settings && spec.same_loaded_version(existing) => {
            match &existing.conversions {
                Some(conversions) => Some(
                    conversion::resolve_for_plan(
                        conversions,
                        &spec.settings,
                        spec.settings_version,
                        spec.converted.as_ref(),
                    )
                    .map_err(|e| refused(e.into()))?,
                ),
                None => None,
            }
        }
        _ => None,
    };
    let (settings, settings_version) = match (resolved, previous) {
        (Some(resolved), _) => resolved,
        // Kept ones stay at their own settings version: a new version's Load converts them.
        (None, Some(existing)) => {
            let (settings, version) = resulting_settings(spec, existing);
            (settings.clone(), version)
        }
        (None, None) => (spec.settings.clone(), spec.settings_version),
    };
    // An Update identical to what is wanted already is a no-op (unless forced): it writes
    // nothing and answers the current generation, and no hook runs again.
    if let Some(existing) = previous
        && !spec.force
        && same_package(spec, existing)
        && existing.settings == settings
        && same_settings_version(existing, settings_version)
    {
        return Err(NotPlanned::Unchanged(existing.generation));
    }
    // Settings of a loaded package are checked now, so bad input changes nothing. A new
    // version may bring a new schema: then they are checked when it loads. So may a
    // constraint, resolved again at every Update.
    if let Some(existing) = previous
        && spec.same_loaded_version(existing)
    {
        check_settings(existing.settings_schema.as_ref(), &settings)
            .map_err(|e| refused(e.into()))?;
    }
    let key = spec.id.key();
    let new = NewSpec {
        repository: &spec.repository,
        package: &spec.package,
        version: &spec.version,
        force: spec.force,
    };
    let (restart, work) = flows::update(previous, &key, generation, &new);
    let mut row = match previous {
        Some(p) => p.clone(),
        None => Package::new(spec.id.clone(), spec.version.clone(), generation, principal),
    };
    row.phase = match previous {
        Some(p) if !restart => p.phase,
        _ => Phase::Pending,
    };
    row.repository.clone_from(&spec.repository);
    row.package.clone_from(&spec.package);
    row.version = spec.version.clone();
    row.generation = generation;
    row.settings = settings;
    row.settings_version = settings_version;
    row.removing = false;
    row.last_error.clear();
    if restart {
        flows::unload(&mut row, now);
    }
    Ok(Planned { row, work })
}

/// Whether `existing` is the package `spec` names, at the same version, not being removed.
fn same_package(spec: &UpdateSpec, existing: &Package) -> bool {
    !existing.removing
        && existing.repository == spec.repository
        && existing.package == spec.package
        && existing.version == spec.version
}

/// Whether an Update gets a worker's validation before it is accepted: it changes the settings
/// of a loaded package and keeps its version (a new version is validated when it loads).
pub fn validates_deeply(spec: &UpdateSpec, existing: &Package) -> bool {
    !spec.keep_settings
        && existing.settings_schema.is_some()
        && existing.repository == spec.repository
        && spec.same_loaded_version(existing)
        && existing.settings != *spec.effective_settings()
}

/// Whether an Update moves a loaded package to other files (another version, package or
/// repository): then the settings it will have are checked against that version's schema
/// before it is accepted (see the service's version check).
pub fn changes_loaded_version(spec: &UpdateSpec, existing: &Package) -> bool {
    !existing.removing
        && existing.settings_schema.is_some()
        && !(spec.same_loaded_version(existing) && existing.repository == spec.repository)
}

/// The settings an Update leaves the package with, and their settings version (0: the
/// version's own), before any conversion.
pub fn resulting_settings<'a>(spec: &'a UpdateSpec, existing: &'a Package) -> (&'a Value, u32) {
    if spec.keep_settings {
        (&existing.settings, existing.settings_version)
    } else {
        (&spec.settings, spec.settings_version)
    }
}

/// Whether settings of `version` are of the stored settings' version: equal, or 0 (the
/// package version's own) while the stored ones are of the loaded version's own.
fn same_settings_version(existing: &Package, version: u32) -> bool {
    existing.settings_version == version
        || (version == 0
            && existing
                .conversions
                .as_ref()
                .is_some_and(|c| c.latest() == existing.settings_version))
}

/// Validates settings against a loaded schema. `Ok(false)` when there is no loaded schema to
/// check against yet.
pub fn check_settings(
    schema: Option<&Option<Value>>,
    settings: &Value,
) -> Result<bool, SettingsError> {
    let Some(schema) = schema else {
        return Ok(false);
    };
    let compiled = match schema {
        Some(doc) => Some(berth_package::Schema::from_openapi(doc).map_err(|e| {
            SettingsError::StoredSchema {
                reason: e.to_string(),
            }
        })?),
        None => None,
    };
    berth_package::validate_settings(compiled.as_ref(), settings)
        .map(|_| true)
        .map_err(|errors| SettingsError::Refused {
            errors: errors
                .iter()
                .map(|e| format!("settings{}: {}", e.path, e.message))
                .collect(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::condition::{ConditionStatus, ConditionType, find};
    use crate::model::id::Kind;
    use serde_json::json;

    fn spec(version: &str, settings: Value) -> UpdateSpec {
        UpdateSpec {
            id: PackageId::new(Kind::App, "web", "").unwrap(),
            repository: "/repo".into(),
            package: "web".into(),
            version: VersionRequest::parse(version),
            settings,
            settings_version: 0,
            keep_settings: false,
            converted: None,
            force: false,
        }
    }

    fn t() -> Timestamp {
        Timestamp::from_unix(0)
    }

    /// A loaded, enabled, Running package of `spec`'s version with a schema.
    fn loaded(spec: &UpdateSpec) -> Package {
        let mut p = plan(spec, None, Generation::new(1), 1, t()).unwrap().row;
        p.settings_schema = Some(Some(json!({
            "type": "object",
            "properties": {"replicas": {"type": "integer", "maximum": 5}},
        })));
        p.phase = Phase::Running;
        p.enabled = true;
        p
    }

    #[test]
    fn a_new_package_is_pending_and_not_loaded() {
        let s = spec("1.0.0", json!({"replicas": 1}));
        let Planned { row, work } = plan(&s, None, Generation::new(1), 1, t()).unwrap();
        assert_eq!((row.phase, row.generation.get()), (Phase::Pending, 1));
        assert_eq!(row.settings, json!({"replicas": 1}));
        let c = find(&row.conditions, ConditionType::RequirementsMet).unwrap();
        assert_eq!(
            (c.status, c.reason.as_str()),
            (ConditionStatus::Unknown, "NotLoaded")
        );
        assert_eq!(work.len(), 1);
    }

    #[test]
    fn the_same_spec_again_is_unchanged_unless_forced() {
        let s = spec("1.0.0", json!({"replicas": 1}));
        let current = loaded(&s);
        assert!(matches!(
            plan(&s, Some(&current), Generation::new(2), 1, t()),
            Err(NotPlanned::Unchanged(g)) if g == Generation::new(1)
        ));
        let forced = UpdateSpec { force: true, ..s };
        let Planned { row, .. } =
            plan(&forced, Some(&current), Generation::new(2), 1, t()).unwrap();
        assert_eq!(
            (row.phase, row.enabled),
            (Phase::Pending, false),
            "forced: starts over, its requirements checked again (#31.10)"
        );
    }

    #[test]
    fn settings_of_the_loaded_version_are_checked_against_its_schema() {
        let current = loaded(&spec("1.0.0", json!({"replicas": 1})));
        let bad = spec("1.0.0", json!({"replicas": 7}));
        let Err(NotPlanned::Refused(UpdateRefused::Settings(SettingsError::Refused { errors }))) =
            plan(&bad, Some(&current), Generation::new(2), 1, t())
        else {
            panic!("refused")
        };
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("settings") && errors[0].contains("replicas"),
            "{errors:?}"
        );
        // A new version brings its own schema: checked when it loads.
        let upgrade = spec("2.0.0", json!({"replicas": 7}));
        let Planned { row, .. } =
            plan(&upgrade, Some(&current), Generation::new(2), 1, t()).unwrap();
        assert!(!row.enabled && row.settings_schema.is_none(), "starts over");
    }

    /// Issue 31.1: an Update without settings keeps the stored ones (and their settings
    /// version, for the new version's Load to convert), for a version change too; a reset or
    /// explicit settings replace them; a version-only Update of the same version is a no-op.
    #[test]
    fn an_update_without_settings_keeps_the_stored_ones() {
        let mut current = loaded(&spec("1.0.0", json!({"replicas": 3})));
        current.settings_version = 1;
        let keep = |version: &str| UpdateSpec {
            keep_settings: true,
            ..spec(version, json!({}))
        };
        let Planned { row, .. } =
            plan(&keep("2.0.0"), Some(&current), Generation::new(2), 1, t()).unwrap();
        assert_eq!(
            (row.settings, row.settings_version, row.version.as_str()),
            (json!({"replicas": 3}), 1, "2.0.0")
        );
        assert!(
            changes_loaded_version(&keep("2.0.0"), &current),
            "checked against 2.0.0 first"
        );
        assert_eq!(
            resulting_settings(&keep("2.0.0"), &current),
            (&json!({"replicas": 3}), 1)
        );
        assert!(matches!(
            plan(&keep("1.0.0"), Some(&current), Generation::new(2), 1, t()),
            Err(NotPlanned::Unchanged(g)) if g == Generation::new(1)
        ));
        assert!(!validates_deeply(&keep("1.0.0"), &current));
        assert!(!changes_loaded_version(&keep("1.0.0"), &current));
        let reset = spec("1.0.0", json!({}));
        let Planned { row, .. } = plan(&reset, Some(&current), Generation::new(2), 1, t()).unwrap();
        assert_eq!((row.settings, row.settings_version), (json!({}), 0));
        let fresh = plan(&keep("1.0.0"), None, Generation::new(1), 1, t()).unwrap();
        assert_eq!(
            fresh.row.settings,
            json!({}),
            "a new package has none to keep"
        );
    }
}
