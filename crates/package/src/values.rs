//! The values hooks and templates see, rebuilt from layers (later layers win; maps deep-merge):
//!
//! 1. static values from `values.yaml`;
//! 2. settings-schema defaults (the defaults of empty settings);
//! 3. the settings, validated and defaulted by [`validate_settings`];
//! 4. values-schema defaults, which only fill what is still missing;
//! 5. hook patches (RFC 6902), applied strictly: an operation on a path that does not exist fails.
//!
//! The result is validated against the values schema. Values are flat: settings sit at the root,
//! so templates read `.Values.<setting>`. In a deep merge a non-map value (including `null` and
//! lists) replaces what was below it.

use serde_json::{Map, Value};

use crate::load::Package;
use crate::schema::{ValidationError, join_errors};
use crate::settings::validate_settings;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValuesError {
    #[error("settings are invalid: {}", join_errors(.0))]
    Settings(Vec<ValidationError>),
    #[error("values patch operation {operation} on {path:?} failed: {message}")]
    Patch {
        operation: usize,
        path: String,
        message: String,
    },
    #[error("values do not match the values schema: {}", join_errors(.0))]
    Values(Vec<ValidationError>),
}

/// Computes the effective values of `pkg` for `settings` and the accumulated hook `patches`,
/// applying the patches strictly. Use this when a hook returns a new patch (pass the stored,
/// compacted patches followed by the new ones) so a bad patch fails the hook.
pub fn compute_values(
    pkg: &Package,
    settings: &Value,
    patches: &json_patch::Patch,
) -> Result<Value, ValuesError> {
    let mut values = base_values(pkg, settings)?;
    json_patch::patch(&mut values, patches).map_err(|e| ValuesError::Patch {
        operation: e.operation,
        path: e.path.to_string(),
        message: e.kind.to_string(),
    })?;
    validate_values(pkg, &values)?;
    Ok(values)
}

/// Rebuilds the values after a lower layer changed (settings, package version), replaying the
/// stored hook patches leniently: operations whose paths no longer exist are skipped.
pub fn rebuild_values(
    pkg: &Package,
    settings: &Value,
    stored: &json_patch::Patch,
) -> Result<Value, ValuesError> {
    let mut values = base_values(pkg, settings)?;
    let skipped = crate::patches::replay_patches(&mut values, stored);
    if skipped > 0 {
        tracing::debug!(package.name = %pkg.definition.name, skipped, "stored values patches skipped on rebuild");
    }
    validate_values(pkg, &values)?;
    Ok(values)
}

/// Layers 1–4: static values, settings defaults, settings, values defaults. Not validated
/// against the values schema (hook patches may still be needed to satisfy it).
pub fn base_values(pkg: &Package, settings: &Value) -> Result<Value, ValuesError> {
    let settings =
        validate_settings(pkg.settings_schema.as_ref(), settings).map_err(ValuesError::Settings)?;
    let mut values = pkg.static_values.clone();
    if let Some(schema) = &pkg.settings_schema {
        let mut defaults = Value::Object(Map::new());
        schema.apply_defaults(&mut defaults);
        deep_merge(&mut values, defaults);
    }
    deep_merge(&mut values, settings);
    if let Some(schema) = &pkg.values_schema {
        schema.apply_defaults(&mut values);
    }
    Ok(values)
}

fn validate_values(pkg: &Package, values: &Value) -> Result<(), ValuesError> {
    match &pkg.values_schema {
        Some(schema) => schema.validate(values).map_err(ValuesError::Values),
        None => Ok(()),
    }
}

/// Merges `overlay` into `base`: maps merge key by key, anything else replaces.
pub fn deep_merge(base: &mut Value, overlay: Value) {
    match (base, overlay) {
        (Value::Object(base), Value::Object(overlay)) => {
            for (key, value) in overlay {
                match base.get_mut(&key) {
                    Some(existing) => deep_merge(existing, value),
                    None => {
                        base.insert(key, value);
                    }
                }
            }
        }
        (base, overlay) => *base = overlay,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deep_merge_merges_maps_and_replaces_the_rest() {
        let mut base = json!({"a": {"x": 1, "y": [1, 2]}, "b": 1});
        deep_merge(&mut base, json!({"a": {"y": [3], "z": null}, "c": 2}));
        assert_eq!(
            base,
            json!({"a": {"x": 1, "y": [3], "z": null}, "b": 1, "c": 2})
        );
    }
}
