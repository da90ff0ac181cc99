//! The Update decision: what a validated Update changes, given the row it replaces. Pure domain
//! (no gRPC, no SQL): the service parses the request into an [`UpdateSpec`] (in `convert`) and
//! the store runs [`plan`] inside its write transaction.

use serde_json::Value;

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
        }
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
    // An Update identical to what is wanted already is a no-op (unless forced): it writes
    // nothing and answers the current generation, and no hook runs again.
    if let Some(existing) = previous
        && !spec.force
        && same_package(existing)
        && existing.settings == spec.settings
    {
        return Err(NotPlanned::Unchanged(existing.generation));
    }
    // Settings of a loaded package are checked now, so bad input changes nothing. A new
    // version may bring a new schema: then they are checked when it loads. So may a
    // constraint, resolved again at every Update.
    if let Some(existing) = previous
        && existing.version == spec.version
        && !flows::is_constraint(&spec.version)
        && existing.package == spec.package
        && !existing.removing
    {
        check_settings(existing.settings_schema.as_ref(), &spec.settings)
            .map_err(NotPlanned::Refused)?;
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
        outbox,
        restart,
    })
}

/// Whether an Update gets a worker's validation before it is accepted: it changes the settings
/// of a loaded package and keeps its version (a new version is validated when it loads).
pub fn validates_deeply(spec: &UpdateSpec, existing: &PackageRow) -> bool {
    !existing.removing
        && existing.settings_schema.is_some()
        && existing.repository == spec.repository
        && existing.package == spec.package
        && existing.version == spec.version
        && !flows::is_constraint(&spec.version)
        && existing.settings != spec.settings
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
