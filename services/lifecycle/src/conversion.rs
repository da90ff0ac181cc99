//! Settings conversions (Deckhouse's `openapi/conversions/`, read by `berth_package::Conversions`):
//! stored settings carry the settings version they were written for; settings of an older
//! version are taken to the loaded package's version step by step, each step's jq expressions
//! in order, on the bounded jq evaluators (`berth-jq`: a conversion that recurses without end,
//! loops or allocates without bound stops at a limit in an evaluator process, never in this
//! service).
//!
//! Where they run: when a package version loads (the worker's Loaded report carries the
//! conversions; `service::report` converts before it writes), when an Update names an older
//! version for a package whose version is loaded already (`service::update`), and in
//! ValidateSettings. A failed conversion changes nothing stored.

use berth_jq::Jq;
use berth_package::{Conversions, Step};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::LifecycleError;
use crate::store::PackageRow;
use crate::update::MAX_SETTINGS_BYTES;

/// Why settings could not be converted; the message names the step's file and expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConversionFailure {
    #[error(
        "settings version {from} is newer than this package version knows (its settings are version {latest})"
    )]
    TooNew { from: u32, latest: u32 },
    #[error(
        "converting settings from version {from}: {file} (to version {to}), conversions[{index}]: {error}"
    )]
    Step {
        from: u32,
        file: String,
        to: u32,
        index: usize,
        error: String,
    },
}

/// Settings taken to the package's settings version.
#[derive(Debug, Clone, PartialEq)]
pub struct Converted {
    pub settings: Value,
    /// The package's settings version (`x-config-version`).
    pub version: u32,
    /// A conversion ran (the settings were of an older version).
    pub ran: bool,
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
    row: Option<&PackageRow>,
    settings: &Value,
    version: u32,
) -> Result<Option<Converted>, LifecycleError> {
    let Some(conversions) = row.and_then(|r| r.conversions.as_ref()) else {
        return Ok(None);
    };
    convert(jq, conversions, settings, version)
        .await
        .map(Some)
        .map_err(|e| LifecycleError::InvalidArgument(format!("settings: {e}")))
}

/// An Update naming an older settings version for a package whose version is loaded: its
/// settings converted now (before the write transaction, as jq runs outside it), with the
/// conversions used, so the plan can tell they are still the loaded ones. `None` when no
/// conversion applies (a new version converts when it loads).
pub async fn for_update(
    jq: &Jq,
    row: Option<&PackageRow>,
    same_version: impl Fn(&PackageRow) -> bool,
    settings: &Value,
    version: u32,
) -> Result<Option<(Converted, Conversions)>, LifecycleError> {
    let Some((row, conversions)) = row
        .filter(|r| same_version(r))
        .and_then(|r| Some((r, r.conversions.as_ref()?)))
    else {
        return Ok(None);
    };
    if version == 0 || version >= conversions.latest() {
        // Nothing to convert; a version too new is refused by the plan, on the row it replaces.
        return Ok(None);
    }
    let converted = convert(jq, conversions, settings, version)
        .await
        .map_err(|e| {
            LifecycleError::InvalidArgument(format!("settings: {e} (package {})", row.key))
        })?;
    Ok(Some((converted, conversions.clone())))
}

/// The settings an Update stores for a loaded package of the same version: converted (by
/// [`for_update`], with these very `conversions`), or as given with the version resolved
/// (0 means the package's own). A version the package does not know is refused.
pub fn resolve_for_plan(
    conversions: &Conversions,
    settings: &Value,
    version: u32,
    converted: Option<&(Converted, Conversions)>,
) -> Result<(Value, u32), LifecycleError> {
    let latest = conversions.latest();
    if version > latest {
        return Err(LifecycleError::InvalidArgument(format!(
            "settings_version: {}",
            ConversionFailure::TooNew {
                from: version,
                latest
            }
        )));
    }
    if version == 0 || version == latest {
        return Ok((settings.clone(), latest));
    }
    match converted {
        Some((c, used)) if used == conversions => Ok((c.settings.clone(), c.version)),
        // The package loaded other conversions between the conversion and the write.
        _ => Err(LifecycleError::Aborted(
            "the package's settings conversions changed while the settings were converted; send the Update again".into(),
        )),
    }
}

/// What a Load does to the stored settings: keeps them (their version resolved), converts
/// them, or fails the package (nothing stored changes).
#[derive(Debug, Clone)]
pub enum AtLoad {
    Keep(u32),
    Converted(Converted),
    Failed(ConversionFailure),
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

/// Conversions as the store keeps them (JSON).
#[derive(Serialize, Deserialize)]
struct Stored {
    latest: u32,
    steps: Vec<StoredStep>,
}

#[derive(Serialize, Deserialize)]
struct StoredStep {
    version: u32,
    expressions: Vec<String>,
}

pub fn to_json(c: &Conversions) -> String {
    let stored = Stored {
        latest: c.latest(),
        steps: c
            .steps()
            .map(|s| StoredStep {
                version: s.version,
                expressions: s.expressions.clone(),
            })
            .collect(),
    };
    serde_json::to_string(&stored).unwrap_or_default()
}

pub fn from_json(text: &str) -> Result<Conversions, String> {
    let stored: Stored = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Conversions::from_steps(
        stored.latest,
        stored.steps.into_iter().map(|s| Step {
            version: s.version,
            expressions: s.expressions,
        }),
    )
    .map_err(|(file, e)| format!("{file}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversions() -> Conversions {
        Conversions::from_steps(
            3,
            [
                Step {
                    version: 2,
                    expressions: vec![".replicas = .size | del(.size)".into()],
                },
                Step {
                    version: 3,
                    expressions: vec![".scale = {replicas}".into(), "del(.replicas)".into()],
                },
            ],
        )
        .unwrap()
    }

    #[test]
    fn conversions_round_trip_through_the_store() {
        let c = conversions();
        assert_eq!(from_json(&to_json(&c)).unwrap(), c);
        let e = from_json(r#"{"latest": 3, "steps": []}"#).unwrap_err();
        assert!(e.contains("v2.yaml"), "{e}");
    }

    #[test]
    fn a_plan_uses_only_settings_converted_with_the_loaded_conversions() {
        let c = conversions();
        let given = serde_json::json!({"size": 3});
        assert_eq!(
            resolve_for_plan(&c, &given, 0, None).unwrap(),
            (given.clone(), 3),
            "0 is the package's own version"
        );
        let e = resolve_for_plan(&c, &given, 4, None).unwrap_err();
        assert!(
            e.to_string()
                .contains("settings version 4 is newer than this package version knows"),
            "{e}"
        );
        let converted = Converted {
            settings: serde_json::json!({"scale": {"replicas": 3}}),
            version: 3,
            ran: true,
        };
        let (settings, version) =
            resolve_for_plan(&c, &given, 1, Some(&(converted.clone(), c.clone()))).unwrap();
        assert_eq!((settings, version), (converted.settings.clone(), 3));
        let other = Conversions::from_steps(1, []).unwrap();
        assert!(matches!(
            resolve_for_plan(&c, &given, 1, Some(&(converted, other))),
            Err(LifecycleError::Aborted(_))
        ));
        assert!(matches!(
            resolve_for_plan(&c, &given, 1, None),
            Err(LifecycleError::Aborted(_))
        ));
    }
}
