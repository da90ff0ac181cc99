//! Settings conversions, the decisions: stored settings carry the settings version they were
//! written for, and settings of an older version are taken to the loaded package's version
//! (`berth_package::Conversions`, Deckhouse's `openapi/conversions/`). The jq expressions
//! themselves run in the service, on its bounded evaluators, before the write that stores
//! their result: here is what a conversion's result means for that write.

use berth_package::Conversions;
use serde_json::Value;

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

/// What a Load does to the stored settings: keeps them (their version resolved), converts
/// them, or fails the package (nothing stored changes).
#[derive(Debug, Clone, PartialEq)]
pub enum AtLoad {
    Keep(u32),
    Converted(Converted),
    Failed(ConversionFailure),
}

/// Why an Update's settings cannot be stored as the loaded package's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanRefusal {
    /// The settings name a version the loaded package does not know.
    #[error("settings_version: {0}")]
    TooNew(ConversionFailure),
    /// The package loaded other conversions between the conversion and the write.
    #[error(
        "the package's settings conversions changed while the settings were converted; send the Update again"
    )]
    ConversionsChanged,
}

/// The settings an Update stores for a loaded package of the same version: converted (before
/// the write, with these very `conversions`), or as given with the version resolved (0 means
/// the package's own). A version the package does not know is refused.
pub fn resolve_for_plan(
    conversions: &Conversions,
    settings: &Value,
    version: u32,
    converted: Option<&(Converted, Conversions)>,
) -> Result<(Value, u32), PlanRefusal> {
    let latest = conversions.latest();
    if version > latest {
        return Err(PlanRefusal::TooNew(ConversionFailure::TooNew {
            from: version,
            latest,
        }));
    }
    if version == 0 || version == latest {
        return Ok((settings.clone(), latest));
    }
    match converted {
        Some((c, used)) if used == conversions => Ok((c.settings.clone(), c.version)),
        _ => Err(PlanRefusal::ConversionsChanged),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_package::Step;

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
    fn a_plan_uses_only_settings_converted_with_the_loaded_conversions() {
        let c = conversions();
        let given = serde_json::json!({"size": 3});
        assert_eq!(
            resolve_for_plan(&c, &given, 0, None).unwrap(),
            (given.clone(), 3),
            "0 is the package's own version"
        );
        let e = resolve_for_plan(&c, &given, 4, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "settings_version: settings version 4 is newer than this package version knows (its settings are version 3)"
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
        assert_eq!(
            resolve_for_plan(&c, &given, 1, Some(&(converted, other))),
            Err(PlanRefusal::ConversionsChanged)
        );
        assert_eq!(
            resolve_for_plan(&c, &given, 1, None),
            Err(PlanRefusal::ConversionsChanged)
        );
    }
}
