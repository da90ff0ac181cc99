//! The hook configuration (`configVersion: v1`) that a hook prints for
//! `--config` (shell hooks) or inside `hook config` (batch hooks).
//!
//! Parsing is strict: unknown keys are rejected at every level, crontabs and
//! selectors are validated here, so a broken hook fails package Load with a
//! message that names the key instead of misbehaving later at run time.
//! Errors carry a path such as `kubernetes[1].fieldSelector.matchExpressions[0].operator`.

mod batch;
mod duration;
mod kubernetes;
mod lifecycle;
mod schedule;
mod selectors;
mod throttle;
mod webhook;

pub use batch::{BatchConfig, BatchHookEntry};
pub use duration::parse_go_duration;
pub use kubernetes::{KubernetesBinding, WatchEventType};
pub use lifecycle::LifecycleBinding;
pub use schedule::{ScheduleBinding, crontab_parser, parse_crontab};
pub use selectors::{
    FieldRequirement, FieldSelector, FieldSelectorOperator, LabelRequirement, LabelSelector,
    LabelSelectorOperator, NameSelector, NamespaceSelector,
};
pub use throttle::ThrottleSettings;
pub use webhook::{
    AdmissionBinding, AdmissionKind, ConversionBinding, ConversionRule,
    DEFAULT_WEBHOOK_TIMEOUT_SECONDS, FailurePolicy,
};

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Why a hook configuration was rejected. `path` points at the offending key
/// (`""` for the document itself).
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    /// The text is neither JSON nor YAML.
    #[error("config is neither valid JSON ({json}) nor valid YAML ({yaml})")]
    Syntax { json: String, yaml: String },
    /// A key is missing, unknown, of the wrong type, or has a bad value.
    #[error("config key `{path}`: {reason}")]
    Invalid { path: String, reason: String },
}

impl ConfigError {
    pub(crate) fn invalid(path: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::Invalid {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

/// A parsed and validated `configVersion: v1` hook configuration.
///
/// Lifecycle bindings carry their order number: hooks bound to the same
/// binding run in ascending order, ties broken by hook name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct HookConfig {
    pub on_startup: Option<f64>,
    /// Global hooks only (addon-operator): before/after converging all packages.
    pub before_all: Option<f64>,
    pub after_all: Option<f64>,
    pub before_helm: Option<f64>,
    pub after_helm: Option<f64>,
    pub before_delete_helm: Option<f64>,
    pub after_delete_helm: Option<f64>,
    pub schedule: Vec<ScheduleBinding>,
    pub kubernetes: Vec<KubernetesBinding>,
    /// `kubernetesValidating` then `kubernetesMutating`, in file order.
    pub admission: Vec<AdmissionBinding>,
    pub conversion: Vec<ConversionBinding>,
    pub settings: Option<ThrottleSettings>,
}

/// The top level as written by the hook. Nested bindings stay raw here so
/// each element can be parsed on its own and errors can name its index.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    config_version: Option<String>,
    on_startup: Option<Value>,
    before_all: Option<Value>,
    after_all: Option<Value>,
    before_helm: Option<Value>,
    after_helm: Option<Value>,
    before_delete_helm: Option<Value>,
    after_delete_helm: Option<Value>,
    #[serde(default)]
    schedule: Option<Vec<Value>>,
    #[serde(default)]
    kubernetes: Option<Vec<Value>>,
    settings: Option<Value>,
    kubernetes_validating: Option<Vec<Value>>,
    kubernetes_mutating: Option<Vec<Value>>,
    kubernetes_custom_resource_conversion: Option<Vec<Value>>,
}

impl HookConfig {
    /// Parses the text a hook printed: JSON first, then YAML.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        Self::from_value(parse_json_or_yaml(text)?)
    }

    /// Validates an already decoded document.
    ///
    /// A missing `configVersion` is read as v1: the v1 keys that old
    /// (v0) configs share with v1 mean the same, and the v0-only keys
    /// (`onKubernetesEvent`) are rejected as unknown.
    pub fn from_value(value: Value) -> Result<Self, ConfigError> {
        if !value.is_object() {
            return Err(ConfigError::invalid(
                "",
                "config must be a mapping of binding names",
            ));
        }
        let raw: RawConfig = from_value_at(value, "")?;
        match raw.config_version.as_deref() {
            None | Some("v1") => {}
            Some(other) => {
                return Err(ConfigError::invalid(
                    "configVersion",
                    format!("unsupported version {other:?}, only \"v1\" is supported"),
                ));
            }
        }
        let schedule = raw
            .schedule
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, v)| ScheduleBinding::from_value(v, &format!("schedule[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let kubernetes = raw
            .kubernetes
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, v)| KubernetesBinding::from_value(v, &format!("kubernetes[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut admission = vec![];
        for (kind, list) in [
            (AdmissionKind::Validating, raw.kubernetes_validating),
            (AdmissionKind::Mutating, raw.kubernetes_mutating),
        ] {
            for (i, v) in list.unwrap_or_default().into_iter().enumerate() {
                let path = format!("{}[{i}]", kind.key());
                admission.push(AdmissionBinding::from_value(kind, v, &path)?);
            }
        }
        let conversion = raw
            .kubernetes_custom_resource_conversion
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                ConversionBinding::from_value(
                    v,
                    &format!("kubernetesCustomResourceConversion[{i}]"),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let config = HookConfig {
            on_startup: order(raw.on_startup, "onStartup")?,
            before_all: order(raw.before_all, "beforeAll")?,
            after_all: order(raw.after_all, "afterAll")?,
            before_helm: order(raw.before_helm, "beforeHelm")?,
            after_helm: order(raw.after_helm, "afterHelm")?,
            before_delete_helm: order(raw.before_delete_helm, "beforeDeleteHelm")?,
            after_delete_helm: order(raw.after_delete_helm, "afterDeleteHelm")?,
            schedule,
            kubernetes,
            admission,
            conversion,
            settings: raw
                .settings
                .map(|v| ThrottleSettings::from_value(v, "settings"))
                .transpose()?,
        };
        config.check_snapshot_references()?;
        Ok(config)
    }

    /// The order number of a lifecycle binding, if the hook has it.
    pub fn order(&self, binding: LifecycleBinding) -> Option<f64> {
        match binding {
            LifecycleBinding::OnStartup => self.on_startup,
            LifecycleBinding::BeforeAll => self.before_all,
            LifecycleBinding::AfterAll => self.after_all,
            LifecycleBinding::BeforeHelm => self.before_helm,
            LifecycleBinding::AfterHelm => self.after_helm,
            LifecycleBinding::BeforeDeleteHelm => self.before_delete_helm,
            LifecycleBinding::AfterDeleteHelm => self.after_delete_helm,
        }
    }

    /// `includeSnapshotsFrom` must name kubernetes bindings of the same
    /// hook; a typo would otherwise silently yield an empty snapshot.
    fn check_snapshot_references(&self) -> Result<(), ConfigError> {
        let known: Vec<&str> = self.kubernetes.iter().map(|k| k.name.as_str()).collect();
        let schedule = self
            .schedule
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("schedule[{i}]"), &s.include_snapshots_from));
        let kube = self
            .kubernetes
            .iter()
            .enumerate()
            .map(|(i, k)| (format!("kubernetes[{i}]"), &k.include_snapshots_from));
        let admission = self
            .admission
            .iter()
            .enumerate()
            .map(|(i, a)| (format!("{}[{i}]", a.kind.key()), &a.include_snapshots_from));
        let conversion = self.conversion.iter().enumerate().map(|(i, c)| {
            (
                format!("kubernetesCustomResourceConversion[{i}]"),
                &c.include_snapshots_from,
            )
        });
        for (path, names) in schedule.chain(kube).chain(admission).chain(conversion) {
            if let Some(missing) = names.iter().find(|n| !known.contains(&n.as_str())) {
                return Err(ConfigError::invalid(
                    format!("{path}.includeSnapshotsFrom"),
                    format!("{missing:?} is not the name of a kubernetes binding of this hook"),
                ));
            }
        }
        Ok(())
    }
}

/// Decodes hook output: strict JSON first (the common case and cheaper),
/// then YAML. Both errors are reported when neither fits.
pub(crate) fn parse_json_or_yaml(text: &str) -> Result<Value, ConfigError> {
    if text.trim().is_empty() {
        return Err(ConfigError::invalid("", "config is empty"));
    }
    let json = match serde_json::from_str::<Value>(text) {
        Ok(value) => return Ok(value),
        Err(e) => e.to_string(),
    };
    serde_saphyr::from_str::<Value>(text).map_err(|e| ConfigError::Syntax {
        json,
        yaml: e.to_string(),
    })
}

/// Deserializes one node, turning serde's message into an error at `path`.
pub(crate) fn from_value_at<T: DeserializeOwned>(
    value: Value,
    path: &str,
) -> Result<T, ConfigError> {
    serde_json::from_value(value).map_err(|e| ConfigError::invalid(path, e.to_string()))
}

/// Joins a parent path and a key the way errors print them.
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// Order numbers are numbers; shell-operator also accepts numeric strings.
fn order(value: Option<Value>, key: &str) -> Result<Option<f64>, ConfigError> {
    let Some(value) = value else { return Ok(None) };
    let number = match &value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match number {
        Some(n) if n.is_finite() => Ok(Some(n)),
        _ => Err(ConfigError::invalid(
            key,
            format!("expected an order number, got {value}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_accepts_numbers_and_numeric_strings() {
        let c = HookConfig::parse(r#"{"configVersion":"v1","beforeHelm":10,"afterHelm":"5.5"}"#);
        let c = c.expect("valid config");
        assert_eq!(c.before_helm, Some(10.0));
        assert_eq!(c.after_helm, Some(5.5));
    }

    #[test]
    fn rejects_v0() {
        let e = HookConfig::parse("configVersion: v0\nonStartup: 1\n").unwrap_err();
        assert!(e.to_string().contains("configVersion"), "{e}");
    }

    #[test]
    fn reads_webhook_bindings() {
        let text = r#"{"configVersion":"v1",
          "kubernetesValidating":[{"name":"a.example.com","rules":[{"operations":["CREATE"],"apiGroups":[""],"apiVersions":["v1"],"resources":["configmaps"]}]}],
          "kubernetesMutating":[{"name":"b.example.com","rules":[{"operations":["*"],"apiGroups":[""],"apiVersions":["v1"],"resources":["configmaps"]}]}],
          "kubernetesCustomResourceConversion":[{"name":"c","crdName":"xs.example.com","conversions":[{"fromVersion":"v1","toVersion":"v2"}]}]}"#;
        let c = HookConfig::parse(text).expect("valid config");
        let kinds: Vec<_> = c
            .admission
            .iter()
            .map(|a| (a.kind, a.name.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                (AdmissionKind::Validating, "a.example.com"),
                (AdmissionKind::Mutating, "b.example.com")
            ]
        );
        assert_eq!(c.conversion[0].crd_name, "xs.example.com");
        let e = HookConfig::parse(r#"{"kubernetesValidating":[{"name":"a.b.c","rules":[{"operations":["CREATE"],"apiGroups":[""],"apiVersions":["v1"],"resources":["pods"]}],"includeSnapshotsFrom":["x"]}]}"#).unwrap_err();
        assert!(
            e.to_string()
                .contains("kubernetesValidating[0].includeSnapshotsFrom"),
            "{e}"
        );
    }

    #[test]
    fn snapshot_reference_must_exist() {
        let text = r#"{"configVersion":"v1","schedule":[{"crontab":"* * * * *","includeSnapshotsFrom":["pods"]}]}"#;
        let e = HookConfig::parse(text).unwrap_err();
        assert!(
            e.to_string().contains("schedule[0].includeSnapshotsFrom"),
            "{e}"
        );
    }
}
