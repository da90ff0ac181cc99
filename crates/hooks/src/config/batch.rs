//! The `hook config` answer of a batch hook (a module-sdk binary) and its
//! mapping onto the v1 schema.
//!
//! module-sdk serializes its own `HookConfig` shape, which differs from v1
//! in a few places; the mapping below is what Deckhouse does:
//! - every `schedule` and `kubernetes` binding gets `group: "main"`, so
//!   their binding contexts are Group contexts that carry snapshots;
//! - `executeHookOnEvent` is a bool (`false` = snapshot only);
//! - `keepFullObjectsInMemory` defaults to `false`, and is forced `true`
//!   when there is no `jqFilter` (there would be nothing else to keep);
//! - the hook-level `allowFailure` applies to bindings that set none;
//! - `metadata{name, path}` names the hook, `logLevel` is ignored.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{ConfigError, HookConfig, from_value_at};

/// One hook of a batch: its SDK metadata and its v1 config.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchHookEntry {
    /// `metadata.name`, if the SDK reported one.
    pub name: Option<String>,
    pub config: HookConfig,
}

/// The parsed `hook config` answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BatchConfig {
    /// Run with `hook run <index>`, index = position here.
    pub hooks: Vec<BatchHookEntry>,
    /// Run with `hook ready`.
    pub readiness: Option<BatchHookEntry>,
    /// Whether `hook check` validates settings.
    pub has_settings_check: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBatch {
    version: String,
    #[serde(default)]
    hooks: Vec<Value>,
    readiness: Option<Value>,
    #[serde(default)]
    has_settings_check: bool,
}

impl BatchConfig {
    /// Parses the JSON printed by `hook config`: `{"version":"v1","hooks":[…],…}`
    /// or the legacy plain array of hook configs.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            ConfigError::invalid("", format!("`hook config` did not print JSON: {e}"))
        })?;
        let raw = match value {
            Value::Array(hooks) => RawBatch {
                version: "v1".to_owned(),
                hooks,
                readiness: None,
                has_settings_check: false,
            },
            other => from_value_at(other, "")?,
        };
        if raw.version != "v1" {
            return Err(ConfigError::invalid(
                "version",
                format!("unsupported version {:?}, expected \"v1\"", raw.version),
            ));
        }
        let hooks = raw
            .hooks
            .into_iter()
            .enumerate()
            .map(|(i, v)| BatchHookEntry::from_sdk(v, &format!("hooks[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let readiness = raw
            .readiness
            .map(|v| BatchHookEntry::from_sdk(v, "readiness"))
            .transpose()?;
        Ok(Self {
            hooks,
            readiness,
            has_settings_check: raw.has_settings_check,
        })
    }
}

impl BatchHookEntry {
    fn from_sdk(value: Value, path: &str) -> Result<Self, ConfigError> {
        let Value::Object(mut obj) = value else {
            return Err(ConfigError::invalid(path, "expected a hook config object"));
        };
        let name = obj
            .remove("metadata")
            .and_then(|m| m.get("name").and_then(Value::as_str).map(str::to_owned))
            .filter(|n| !n.is_empty());
        obj.remove("logLevel");
        let hook_allow_failure = obj
            .remove("allowFailure")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        obj.entry("configVersion")
            .or_insert_with(|| Value::from("v1"));
        map_bindings(&mut obj, "schedule", |b| sdk_binding(b, hook_allow_failure));
        map_bindings(&mut obj, "kubernetes", |b| {
            sdk_binding(b, hook_allow_failure);
            sdk_kubernetes(b);
        });
        let config = HookConfig::from_value(Value::Object(obj)).map_err(|e| prefix(e, path))?;
        Ok(Self { name, config })
    }
}

fn map_bindings(
    obj: &mut Map<String, Value>,
    key: &str,
    mut f: impl FnMut(&mut Map<String, Value>),
) {
    if let Some(Value::Array(items)) = obj.get_mut(key) {
        items
            .iter_mut()
            .filter_map(Value::as_object_mut)
            .for_each(&mut f);
    }
}

fn sdk_binding(binding: &mut Map<String, Value>, hook_allow_failure: bool) {
    binding.insert("group".to_owned(), Value::from("main"));
    if hook_allow_failure {
        binding.entry("allowFailure").or_insert(Value::Bool(true));
    }
}

fn sdk_kubernetes(binding: &mut Map<String, Value>) {
    if let Some(Value::Bool(execute)) = binding.get("executeHookOnEvent") {
        let events = if *execute {
            vec!["Added", "Modified", "Deleted"]
        } else {
            vec![]
        };
        binding.insert("executeHookOnEvent".to_owned(), Value::from(events));
    }
    let has_filter = binding
        .get("jqFilter")
        .and_then(Value::as_str)
        .is_some_and(|f| !f.is_empty());
    if !has_filter {
        binding.insert("keepFullObjectsInMemory".to_owned(), Value::Bool(true));
    } else {
        binding
            .entry("keepFullObjectsInMemory")
            .or_insert(Value::Bool(false));
    }
}

fn prefix(error: ConfigError, path: &str) -> ConfigError {
    match error {
        ConfigError::Invalid {
            path: inner,
            reason,
        } => ConfigError::Invalid {
            path: if inner.is_empty() {
                path.to_owned()
            } else {
                format!("{path}.{inner}")
            },
            reason,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_sdk_config_onto_v1() {
        let text = r#"{"version":"v1","has_settings_check":true,"hooks":[
            {"configVersion":"v1","metadata":{"name":"certs","path":"hooks/certs"},"onStartup":1,"allowFailure":true,
             "schedule":[{"name":"every","crontab":"*/5 * * * *"}],
             "kubernetes":[{"name":"secrets","kind":"Secret","executeHookOnEvent":false,"jqFilter":".metadata.name"},
                           {"name":"pods","kind":"Pod"}]}]}"#;
        let batch = BatchConfig::parse(text).expect("valid batch config");
        assert!(batch.has_settings_check);
        let hook = &batch.hooks[0];
        assert_eq!(hook.name.as_deref(), Some("certs"));
        assert_eq!(hook.config.on_startup, Some(1.0));
        assert_eq!(hook.config.schedule[0].group.as_deref(), Some("main"));
        assert!(hook.config.schedule[0].allow_failure);
        let secrets = &hook.config.kubernetes[0];
        assert!(secrets.execute_hook_on_event.is_empty());
        assert!(!secrets.keep_full_objects_in_memory);
        assert!(hook.config.kubernetes[1].keep_full_objects_in_memory);
    }

    #[test]
    fn accepts_legacy_array_and_names_bad_hook() {
        let batch =
            BatchConfig::parse(r#"[{"configVersion":"v1","afterHelm":5}]"#).expect("legacy array");
        assert_eq!(batch.hooks[0].config.after_helm, Some(5.0));
        let e = BatchConfig::parse(r#"{"version":"v1","hooks":[{"kubernetes":[{"name":"x"}]}]}"#)
            .unwrap_err();
        assert!(e.to_string().contains("hooks[0].kubernetes[0].kind"), "{e}");
    }
}
