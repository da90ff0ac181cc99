//! The Update decision: what a validated Update changes, given the row it replaces. Pure domain
//! (no gRPC, no SQL): the service parses the request into an [`UpdateSpec`] (in `convert`) and
//! the store runs [`plan`] inside its write transaction.

use serde_json::Value;

use berth_package::Conversions;

use crate::conversion::{self, Converted};
use crate::error::LifecycleError;
use crate::flows::{self, NewSpec};
use crate::model::{Generation, PackageId, PackageKey, Phase};
use crate::store::{DesiredSpec, PackageRow, Planned};

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
    pub version: String,
    pub settings: Value,
    /// The settings version `settings` are written for (0: the package version's own).
    pub settings_version: u32,
    /// The settings converted to the loaded package's settings version, with the conversions
    /// used (`conversion::for_update`, before the write transaction); `None` when no
    /// conversion applies.
    pub converted: Option<(Converted, Conversions)>,
    /// Plan the tasks even when nothing changed.
    pub force: bool,
}

impl UpdateSpec {
    /// What the store records as wanted.
    pub fn desired(&self) -> DesiredSpec {
        DesiredSpec {
            id: self.id.clone(),
            repository: self.repository.clone(),
            package: self.package.clone(),
            version: self.version.clone(),
            settings: self.settings.clone(),
            settings_version: self.settings_version,
        }
    }

    /// The settings as they would be stored: converted, when a conversion applies.
    pub fn effective_settings(&self) -> &Value {
        self.converted
            .as_ref()
            .map_or(&self.settings, |(c, _)| &c.settings)
    }

    /// Whether `row` is this very package version, loaded: then the Update is a settings
    /// change, checked (and converted) against what is loaded now.
    pub fn same_loaded_version(&self, row: &PackageRow) -> bool {
        row.version == self.version
            && !flows::is_constraint(&self.version)
            && row.package == self.package
            && !row.removing
    }
}

/// Why an Update wrote nothing: its settings were refused, or it asked for what is wanted
/// already (the current generation).
#[derive(Debug)]
pub enum NotPlanned {
    Refused(LifecycleError),
    Unchanged(Generation),
}

/// The new phase and the tasks of `spec` replacing `previous` (None for a new package) as
/// `generation`, and whether the package starts over. Runs inside the store's write transaction, on the row being replaced, so the
/// decision and the write see the same state.
pub fn plan(
    spec: &UpdateSpec,
    previous: Option<&PackageRow>,
    key: &PackageKey,
    generation: Generation,
) -> Result<Planned, NotPlanned> {
    let same_package = |p: &PackageRow| {
        !p.removing
            && p.repository == spec.repository
            && p.package == spec.package
            && p.version == spec.version
    };
    // For a loaded package of the same version, the settings are taken to its settings
    // version (converted before the transaction, or 0 resolved); a new version converts them
    // when it loads.
    let resolved = match previous {
        Some(existing) if spec.same_loaded_version(existing) => match &existing.conversions {
            Some(conversions) => Some(
                conversion::resolve_for_plan(
                    conversions,
                    &spec.settings,
                    spec.settings_version,
                    spec.converted.as_ref(),
                )
                .map_err(NotPlanned::Refused)?,
            ),
            None => None,
        },
        _ => None,
    };
    let (settings, settings_version) = match &resolved {
        Some((settings, version)) => (settings, *version),
        None => (&spec.settings, spec.settings_version),
    };
    // An Update identical to what is wanted already is a no-op (unless forced): it writes
    // nothing and answers the current generation, and no hook runs again.
    if let Some(existing) = previous
        && !spec.force
        && same_package(existing)
        && existing.settings == *settings
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
        check_settings(existing.settings_schema.as_ref(), settings).map_err(NotPlanned::Refused)?;
    }
    let new = NewSpec {
        repository: &spec.repository,
        package: &spec.package,
        version: &spec.version,
    };
    let (restart, outbox) = flows::update(previous, key, generation, &new);
    let phase = match previous {
        Some(p) if !restart => p.phase,
        _ => Phase::Pending,
    };
    Ok(Planned {
        phase,
        settings: resolved,
        outbox,
        restart,
    })
}

/// Whether an Update gets a worker's validation before it is accepted: it changes the settings
/// of a loaded package and keeps its version (a new version is validated when it loads).
pub fn validates_deeply(spec: &UpdateSpec, existing: &PackageRow) -> bool {
    existing.settings_schema.is_some()
        && existing.repository == spec.repository
        && spec.same_loaded_version(existing)
        && existing.settings != *spec.effective_settings()
}

/// Whether settings of `version` are of the stored settings' version: equal, or 0 (the
/// package version's own) while the stored ones are of the loaded version's own.
fn same_settings_version(existing: &PackageRow, version: u32) -> bool {
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
) -> Result<bool, LifecycleError> {
    let Some(schema) = schema else {
        return Ok(false);
    };
    let compiled = match schema {
        Some(doc) => Some(
            berth_package::Schema::from_openapi(doc)
                .map_err(|e| LifecycleError::Internal(format!("stored settings schema: {e}")))?,
        ),
        None => None,
    };
    berth_package::validate_settings(compiled.as_ref(), settings)
        .map(|_| true)
        .map_err(|errors| {
            let text: Vec<String> = errors
                .iter()
                .map(|e| format!("settings{}: {}", e.path, e.message))
                .collect();
            LifecycleError::InvalidArgument(text.join("; "))
        })
}
