//! Settings conversions (Deckhouse's `openapi/conversions/`, read by `berth_package::Conversions`),
//! run: settings of an older version are taken to the loaded package's version step by step,
//! each step's jq expressions in order, on the bounded jq evaluators (`berth-jq`: a
//! conversion that recurses without end, loops or allocates without bound stops at a limit in
//! an evaluator process, never in this service). What a result means for a write is the
//! engine's (`berth_lifecycle_core::conversion`).
//!
//! Where they run: when a package version loads (the worker's Loaded report carries the
//! conversions; the service converts before it writes), when an Update names an older
//! version for a package whose version is loaded already, and in ValidateSettings. jq may take
//! seconds, so it runs before the write, outside the engine's lock. A failed conversion
//! changes nothing stored.

use berth_jq::Jq;
use berth_lifecycle_core::update::{MAX_SETTINGS_BYTES, UpdateSpec};
use berth_lifecycle_core::{Package, PackageKey};
use berth_package::Conversions;
use serde_json::Value;

pub use berth_lifecycle_core::conversion::{AtLoad, ConversionFailure, Converted};

/// Settings a request sent that cannot be converted to the loaded package's version.
#[derive(Debug, thiserror::Error)]
#[error("settings: {failure}{}", package.as_ref().map(|k| format!(" (package {k})")).unwrap_or_default())]
pub struct Unconvertible {
    pub failure: ConversionFailure,
    /// The package, when the Update names it (ValidateSettings' callers know which).
    pub package: Option<PackageKey>,
}

/// Takes `settings` of version `from` (0: the package's own version) to `conversions`'
/// latest version, running each step's expressions in order on the previous one's result.
pub async fn convert(
    jq: &Jq,
    conversions: &Conversions,
    settings: &Value,
    from: u32,
) -> Result<Converted, ConversionFailure> {
    let latest = conversions.latest();
    if from == 0 || from == latest {
        return Ok(Converted {
            settings: settings.clone(),
            version: latest,
            ran: false,
        });
    }
    if from > latest {
        return Err(ConversionFailure::TooNew { from, latest });
    }
    let chain = conversions
        .chain(from)
        .map_err(|_| ConversionFailure::TooNew { from, latest })?;
    let mut current = settings.clone();
    for step in chain {
        for (index, expression) in step.expressions.iter().enumerate() {
            let fail = |error: String| ConversionFailure::Step {
                from,
                file: step.file(),
                to: step.version,
                index,
                error,
            };
            let filter = jq
                .check(expression)
                .await
                .map_err(|e| fail(e.to_string()))?;
            let out = jq
                .run(&filter, &current)
                .await
                .map_err(|e| fail(e.to_string()))?;
            if !out.is_object() {
                return Err(fail(format!(
                    "the result must be an object (the settings), got {}",
                    kind(&out)
                )));
            }
            let size = out.to_string().len();
            if size > MAX_SETTINGS_BYTES {
                return Err(fail(format!(
                    "the result is {size} bytes, over the settings limit of {MAX_SETTINGS_BYTES}"
                )));
            }
            current = out;
        }
    }
    Ok(Converted {
        settings: current,
        version: latest,
        ran: true,
    })
}

fn kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Number(_) => "a number".into(),
        Value::String(_) => "a string".into(),
        Value::Array(items) => format!("an array of {}", items.len()),
        Value::Object(_) => "an object".into(),
    }
}

/// ValidateSettings: `settings` of version `version` taken to the loaded package's version.
/// `None` when the package is not loaded (nothing to convert with: the check waits for the
/// load). A failure is the caller's bad input.
pub async fn for_validation(
    jq: &Jq,
    row: Option<&Package>,
    settings: &Value,
    version: u32,
) -> Result<Option<Converted>, Unconvertible> {
    let Some(conversions) = row.and_then(|r| r.conversions.as_ref()) else {
        return Ok(None);
    };
    convert(jq, conversions, settings, version)
        .await
        .map(Some)
        .map_err(|failure| Unconvertible {
            failure,
            package: None,
        })
}

/// An Update naming an older settings version for a package whose version is loaded: its
/// settings converted now (before the write, as jq runs outside it), with the conversions
/// used, so the plan can tell they are still the loaded ones. `None` when no conversion
/// applies (a new version converts when it loads).
pub async fn for_update(
    jq: &Jq,
    row: Option<&Package>,
    spec: &UpdateSpec,
) -> Result<Option<(Converted, Conversions)>, Unconvertible> {
    let Some((row, conversions)) = row
        .filter(|r| spec.same_loaded_version(r))
        .and_then(|r| Some((r, r.conversions.as_ref()?)))
    else {
        return Ok(None);
    };
    let version = spec.settings_version;
    if version == 0 || version >= conversions.latest() {
        // Nothing to convert; a version too new is refused by the plan, on the row it replaces.
        return Ok(None);
    }
    let converted = convert(jq, conversions, &spec.settings, version)
        .await
        .map_err(|failure| Unconvertible {
            failure,
            package: Some(row.key.clone()),
        })?;
    Ok(Some((converted, conversions.clone())))
}

/// The stored `settings` of version `stored_version`, for a package version loading with
/// `conversions`.
pub async fn at_load(
    jq: &Jq,
    conversions: &Conversions,
    settings: &Value,
    stored_version: u32,
) -> AtLoad {
    match convert(jq, conversions, settings, stored_version).await {
        Ok(c) if c.ran => AtLoad::Converted(c),
        Ok(c) => AtLoad::Keep(c.version),
        Err(e) => AtLoad::Failed(e),
    }
}
