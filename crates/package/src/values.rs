//! The values hooks and templates see, rebuilt from layers (later layers win; maps deep-merge):
//!
//! 1. static values from `values.yaml`;
//! 2. settings-schema defaults (the defaults of empty settings);
//! 3. the settings, validated and defaulted by [`validate_settings`];
//! 4. values-schema defaults, which only fill what is still missing;
//! 5. hook patches (RFC 6902), applied strictly: an operation on a path that does not exist fails.
//!
//! Layers 1–4 make the package's *own* values. How hooks and templates see them depends on the
//! package's [`ValuesLayout`]:
//!
//! - flat (berth's own format): the own values are the whole document, `.Values.<setting>`;
//! - nested (addon-operator modules): `{"<camelName>": own, "global": <global values>}`, so
//!   templates read `.Values.<camelName>.<key>` and `.Values.global.<key>`, and hooks patch
//!   `/<camelName>/...`. The global values belong to the `global` package: a module's hook that
//!   patches `/global/...` is refused (in addon-operator only global hooks change them);
//! - the Global package itself: `{"global": own}`; its hooks patch `/global/...`.
//!
//! Layer 5 (hook patches) applies to that document; the values schema validates the own
//! values (the section, when nested). In a deep merge a non-map value (including `null` and
//! lists) replaces what was below it.

use serde_json::{Map, Value};

use crate::definition::{GLOBAL_NAME, PackageType, ValuesLayout};
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
    #[error(
        "values patch operation {operation} on {path:?} is outside this package's values: {expected}"
    )]
    Scope {
        operation: usize,
        path: String,
        expected: String,
    },
}

/// Computes the effective values of `pkg` for `settings` and the accumulated hook `patches`,
/// applying the patches strictly. Use this when a hook returns a new patch (pass the stored,
/// compacted patches followed by the new ones) so a bad patch fails the hook.
///
/// `global` is the global values (the `global` package's own values); only a nested package
/// sees them.
pub fn compute_values(
    pkg: &Package,
    settings: &Value,
    global: &Value,
    patches: &json_patch::Patch,
) -> Result<Value, ValuesError> {
    let mut values = assemble(pkg, base_values(pkg, settings)?, global);
    json_patch::patch(&mut values, patches).map_err(|e| patch_error(pkg, &e))?;
    validate_values(pkg, &values)?;
    Ok(values)
}

/// The error of a patch that did not apply. A flat package whose hook patches under
/// `/<camelName>/` was written for addon-operator's nested layout; say so.
pub fn patch_error(pkg: &Package, e: &json_patch::PatchError) -> ValuesError {
    let path = e.path.to_string();
    let mut message = e.kind.to_string();
    if values_section(pkg).is_none() {
        let key = pkg.definition.values_key();
        let section = format!("/{key}");
        if path == section || path.starts_with(&format!("{section}/")) {
            message = format!(
                "{message} (the values of {} are flat, so there is no {section}; addon-operator hooks patch the module's section: set `values: nested` in package.yaml)",
                pkg.definition.name
            );
        }
    }
    ValuesError::Patch {
        operation: e.operation,
        path,
        message,
    }
}

/// Rebuilds the values after a lower layer changed (settings, package version), replaying the
/// stored hook patches leniently: operations whose paths no longer exist are skipped.
pub fn rebuild_values(
    pkg: &Package,
    settings: &Value,
    global: &Value,
    stored: &json_patch::Patch,
) -> Result<Value, ValuesError> {
    let mut values = assemble(pkg, base_values(pkg, settings)?, global);
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

/// Validates the package's own values in `values` (the whole document when flat, its section
/// when nested) against the values schema.
pub fn validate_values(pkg: &Package, values: &Value) -> Result<(), ValuesError> {
    match &pkg.values_schema {
        Some(schema) => schema
            .validate(own_values(pkg, values).unwrap_or(&Value::Null))
            .map_err(ValuesError::Values),
        None => Ok(()),
    }
}

/// The key of the package's own section in nested values (`global` for the Global package);
/// `None` when its values are flat.
pub fn values_section(pkg: &Package) -> Option<String> {
    match (pkg.definition.package_type, pkg.layout) {
        (PackageType::Global, _) => Some(GLOBAL_NAME.to_owned()),
        (_, ValuesLayout::Nested) => Some(pkg.definition.values_key()),
        (_, ValuesLayout::Flat) => None,
    }
}

/// Lays the package's own values out as its hooks and templates see them, beside `global`.
pub fn assemble(pkg: &Package, own: Value, global: &Value) -> Value {
    match values_section(pkg) {
        None => own,
        Some(key) if pkg.definition.package_type == PackageType::Global => {
            Value::Object(Map::from_iter([(key, own)]))
        }
        Some(key) => Value::Object(Map::from_iter([
            (GLOBAL_NAME.to_owned(), global.clone()),
            (key, own),
        ])),
    }
}

/// The package's own values inside the document [`assemble`] made.
pub fn own_values<'a>(pkg: &Package, values: &'a Value) -> Option<&'a Value> {
    match values_section(pkg) {
        None => Some(values),
        Some(key) => values.get(key),
    }
}

/// Checks that every operation of a hook's patch stays inside the package's own values: under
/// `/<camelName>/` for a nested package, `/global/` for the Global package; anything for a
/// flat one. A patch that reaches elsewhere (a module's hook writing `/global/...`, or the
/// whole section) is refused whole, naming the operation.
pub fn check_patch_scope(pkg: &Package, patch: &json_patch::Patch) -> Result<(), ValuesError> {
    let Some(key) = values_section(pkg) else {
        return Ok(());
    };
    let prefix = format!("/{key}/");
    for (operation, op) in patch.0.iter().enumerate() {
        let from = match op {
            json_patch::PatchOperation::Move(m) => Some(m.from.as_str()),
            json_patch::PatchOperation::Copy(c) => Some(c.from.as_str()),
            _ => None,
        };
        for path in std::iter::once(op.path().as_str()).chain(from) {
            if !path.starts_with(&prefix) {
                return Err(ValuesError::Scope {
                    operation,
                    path: path.to_owned(),
                    expected: scope_text(pkg, &key),
                });
            }
        }
    }
    Ok(())
}

fn scope_text(pkg: &Package, key: &str) -> String {
    if pkg.definition.package_type == PackageType::Global {
        "global hooks patch paths under /global/".to_owned()
    } else {
        format!(
            "the hooks of {} (nested values) patch paths under /{key}/; the global values belong to global hooks",
            pkg.definition.name
        )
    }
}

/// The config values (`CONFIG_VALUES_PATH`) a hook sees: the settings, under the package's
/// section when nested, beside the global settings (`global_settings`).
pub fn config_values(pkg: &Package, settings: &Value, global_settings: &Value) -> Value {
    assemble(pkg, settings_or_empty(settings), global_settings)
}

/// The settings, `{}` when there are none yet (addon-operator's config values of a module are
/// `{}` until set, and a hook's first `add /<camelName>/a` needs that section).
fn settings_or_empty(settings: &Value) -> Value {
    match settings {
        Value::Null => Value::Object(Map::new()),
        other => other.clone(),
    }
}

/// Applies a hook's config values patch (`CONFIG_VALUES_JSON_PATCH_PATH`) to the settings:
/// scoped as values patches are, strict, and validated against the settings schema. Returns the
/// new settings.
pub fn patch_settings(
    pkg: &Package,
    settings: &Value,
    patch: &json_patch::Patch,
) -> Result<Value, ValuesError> {
    check_patch_scope(pkg, patch)?;
    let mut doc = assemble(pkg, settings_or_empty(settings), &Value::Object(Map::new()));
    json_patch::patch(&mut doc, patch).map_err(|e| patch_error(pkg, &e))?;
    let patched = match values_section(pkg) {
        None => doc,
        Some(key) => doc.get(&key).cloned().unwrap_or(Value::Null),
    };
    validate_settings(pkg.settings_schema.as_ref(), &patched).map_err(ValuesError::Settings)?;
    Ok(patched)
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
