//! Webhook bindings: `kubernetesValidating`, `kubernetesMutating` (admission) and
//! `kubernetesCustomResourceConversion` (CRD conversion), as shell-operator documents them.
//!
//! Parsed and validated here; hookevent registers them with the API server and serves the
//! requests, and the worker runs the hook with the request in its binding context.

use serde::Deserialize;
use serde_json::Value;

use super::schedule::non_empty;
use super::selectors::{LabelSelector, NamespaceSelector};
use super::{ConfigError, from_value_at, join};

/// The API server's default and largest admission timeout, in seconds.
pub const DEFAULT_WEBHOOK_TIMEOUT_SECONDS: u32 = 10;
const MAX_WEBHOOK_TIMEOUT_SECONDS: u32 = 30;

/// Whether an admission binding only answers (validating) or may also patch (mutating).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AdmissionKind {
    Validating,
    Mutating,
}

impl AdmissionKind {
    /// The configuration key of the binding.
    pub fn key(self) -> &'static str {
        match self {
            Self::Validating => "kubernetesValidating",
            Self::Mutating => "kubernetesMutating",
        }
    }
}

/// `failurePolicy`: what the API server does when the webhook cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    Fail,
    Ignore,
}

impl FailurePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fail => "Fail",
            Self::Ignore => "Ignore",
        }
    }
}

/// One `kubernetesValidating[]` or `kubernetesMutating[]` entry. The Kubernetes-shaped parts
/// (`rules`, selectors, `matchConditions`) are kept as the JSON the API server reads, after
/// their shape was checked here.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionBinding {
    pub kind: AdmissionKind,
    /// The webhook's name in the configuration: a qualified name of at least three segments.
    pub name: String,
    pub include_snapshots_from: Vec<String>,
    pub group: Option<String>,
    /// `labelSelector`, registered as the webhook's `objectSelector`.
    pub object_selector: Option<Value>,
    /// `namespace.labelSelector`, registered as the webhook's `namespaceSelector`.
    pub namespace_selector: Option<Value>,
    /// `rules`, as given (at least one).
    pub rules: Vec<Value>,
    pub failure_policy: FailurePolicy,
    /// `None` or `NoneOnDryRun`.
    pub side_effects: String,
    pub timeout_seconds: u32,
    pub match_conditions: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawAdmission {
    name: Option<String>,
    #[serde(default)]
    include_snapshots_from: Vec<String>,
    group: Option<String>,
    label_selector: Option<Value>,
    namespace: Option<Value>,
    rules: Option<Vec<Value>>,
    failure_policy: Option<String>,
    side_effects: Option<String>,
    timeout_seconds: Option<u32>,
    #[serde(default)]
    match_conditions: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawRule {
    #[serde(default)]
    operations: Vec<String>,
    #[serde(default)]
    api_groups: Vec<String>,
    #[serde(default)]
    api_versions: Vec<String>,
    #[serde(default)]
    resources: Vec<String>,
    scope: Option<String>,
}

impl AdmissionBinding {
    pub(crate) fn from_value(
        kind: AdmissionKind,
        value: Value,
        path: &str,
    ) -> Result<Self, ConfigError> {
        let raw: RawAdmission = from_value_at(value, path)?;
        let name = non_empty(raw.name)
            .ok_or_else(|| ConfigError::invalid(join(path, "name"), "is required"))?;
        check_webhook_name(&name).map_err(|r| ConfigError::invalid(join(path, "name"), r))?;
        let object_selector = raw
            .label_selector
            .map(|v| LabelSelector::from_value(v.clone(), &join(path, "labelSelector")).map(|_| v))
            .transpose()?;
        let namespace_selector = match raw.namespace {
            None => None,
            Some(v) => {
                let at = join(path, "namespace");
                let parsed = NamespaceSelector::from_value(v.clone(), &at)?;
                if parsed.name_selector.is_some() {
                    return Err(ConfigError::invalid(
                        join(&at, "nameSelector"),
                        "admission webhooks select namespaces by labels only (namespace.labelSelector)",
                    ));
                }
                v.get("labelSelector").cloned()
            }
        };
        let rules = raw.rules.unwrap_or_default();
        if rules.is_empty() {
            return Err(ConfigError::invalid(
                join(path, "rules"),
                "at least one rule is required",
            ));
        }
        for (i, rule) in rules.iter().enumerate() {
            let at = join(path, &format!("rules[{i}]"));
            let r: RawRule = from_value_at(rule.clone(), &at)?;
            for (key, list) in [
                ("operations", &r.operations),
                ("apiGroups", &r.api_groups),
                ("apiVersions", &r.api_versions),
                ("resources", &r.resources),
            ] {
                if list.is_empty() {
                    return Err(ConfigError::invalid(join(&at, key), "must not be empty"));
                }
            }
            if let Some(op) = r
                .operations
                .iter()
                .find(|o| !matches!(o.as_str(), "*" | "CREATE" | "UPDATE" | "DELETE" | "CONNECT"))
            {
                return Err(ConfigError::invalid(
                    join(&at, "operations"),
                    format!("{op:?} is not one of CREATE, UPDATE, DELETE, CONNECT, *"),
                ));
            }
            if let Some(scope) = r.scope.as_deref()
                && !matches!(scope, "*" | "Cluster" | "Namespaced")
            {
                return Err(ConfigError::invalid(
                    join(&at, "scope"),
                    format!("{scope:?} is not one of Cluster, Namespaced, *"),
                ));
            }
        }
        let failure_policy = match raw.failure_policy.as_deref() {
            None | Some("") | Some("Fail") => FailurePolicy::Fail,
            Some("Ignore") => FailurePolicy::Ignore,
            Some(other) => {
                return Err(ConfigError::invalid(
                    join(path, "failurePolicy"),
                    format!("{other:?} is not one of Fail, Ignore"),
                ));
            }
        };
        let side_effects = match raw.side_effects.as_deref() {
            None | Some("") => "None".to_owned(),
            Some(s @ ("None" | "NoneOnDryRun")) => s.to_owned(),
            Some(other) => {
                return Err(ConfigError::invalid(
                    join(path, "sideEffects"),
                    format!("{other:?} is not one of None, NoneOnDryRun"),
                ));
            }
        };
        let timeout_seconds = raw
            .timeout_seconds
            .unwrap_or(DEFAULT_WEBHOOK_TIMEOUT_SECONDS);
        if !(1..=MAX_WEBHOOK_TIMEOUT_SECONDS).contains(&timeout_seconds) {
            return Err(ConfigError::invalid(
                join(path, "timeoutSeconds"),
                format!("{timeout_seconds} is not between 1 and {MAX_WEBHOOK_TIMEOUT_SECONDS}"),
            ));
        }
        Ok(Self {
            kind,
            name,
            include_snapshots_from: raw.include_snapshots_from,
            group: non_empty(raw.group),
            object_selector,
            namespace_selector,
            rules,
            failure_policy,
            side_effects,
            timeout_seconds,
            match_conditions: raw.match_conditions,
        })
    }
}

impl AdmissionBinding {
    /// The binding as a hook configuration writes it; [`AdmissionBinding::from_value`] reads
    /// it back unchanged (how the worker hands it to hookevent).
    pub fn to_value(&self) -> Value {
        let mut v = serde_json::json!({
            "name": self.name,
            "rules": self.rules,
            "failurePolicy": self.failure_policy.as_str(),
            "sideEffects": self.side_effects,
            "timeoutSeconds": self.timeout_seconds,
        });
        if !self.include_snapshots_from.is_empty() {
            v["includeSnapshotsFrom"] = serde_json::json!(self.include_snapshots_from);
        }
        if let Some(group) = &self.group {
            v["group"] = Value::from(group.as_str());
        }
        if let Some(sel) = &self.object_selector {
            v["labelSelector"] = sel.clone();
        }
        if let Some(sel) = &self.namespace_selector {
            v["namespace"] = serde_json::json!({"labelSelector": sel});
        }
        if !self.match_conditions.is_empty() {
            v["matchConditions"] = Value::from(self.match_conditions.clone());
        }
        v
    }

    /// Parses what [`AdmissionBinding::to_value`] wrote (or a hook's configuration entry).
    pub fn parse(kind: AdmissionKind, value: Value) -> Result<Self, ConfigError> {
        Self::from_value(kind, value, kind.key())
    }
}

impl ConversionBinding {
    /// The binding as a hook configuration writes it.
    pub fn to_value(&self) -> Value {
        let mut v = serde_json::json!({
            "name": self.name,
            "crdName": self.crd_name,
            "conversions": self.conversions.iter().map(|c| serde_json::json!({
                "fromVersion": c.from_version, "toVersion": c.to_version,
            })).collect::<Vec<_>>(),
        });
        if !self.include_snapshots_from.is_empty() {
            v["includeSnapshotsFrom"] = serde_json::json!(self.include_snapshots_from);
        }
        if let Some(group) = &self.group {
            v["group"] = Value::from(group.as_str());
        }
        v
    }

    /// Parses what [`ConversionBinding::to_value`] wrote.
    pub fn parse(value: Value) -> Result<Self, ConfigError> {
        Self::from_value(value, "kubernetesCustomResourceConversion")
    }
}

/// The API server's rule for webhook names: a DNS subdomain of at least three segments.
fn check_webhook_name(name: &str) -> Result<(), String> {
    let segments: Vec<&str> = name.split('.').collect();
    let label_ok = |s: &&str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    if name.len() > 253 || segments.len() < 3 || !segments.iter().all(label_ok) {
        return Err(format!(
            "{name:?} is not a webhook name: a lowercase DNS name of at least three segments, such as policy.example.com"
        ));
    }
    Ok(())
}

/// One `kubernetesCustomResourceConversion[]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ConversionBinding {
    pub name: String,
    pub include_snapshots_from: Vec<String>,
    pub group: Option<String>,
    /// The CRD whose conversion this hook serves (`<plural>.<group>`).
    pub crd_name: String,
    pub conversions: Vec<ConversionRule>,
}

/// A conversion the hook can make. Versions are `group/version`, or a bare `version` of the
/// CRD's own group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConversionRule {
    pub from_version: String,
    pub to_version: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConversion {
    name: Option<String>,
    #[serde(default)]
    include_snapshots_from: Vec<String>,
    group: Option<String>,
    crd_name: Option<String>,
    conversions: Option<Vec<RawConversionRule>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConversionRule {
    from_version: Option<String>,
    to_version: Option<String>,
}

impl ConversionBinding {
    pub(crate) fn from_value(value: Value, path: &str) -> Result<Self, ConfigError> {
        let raw: RawConversion = from_value_at(value, path)?;
        let name = non_empty(raw.name)
            .ok_or_else(|| ConfigError::invalid(join(path, "name"), "is required"))?;
        let crd_name = non_empty(raw.crd_name)
            .ok_or_else(|| ConfigError::invalid(join(path, "crdName"), "is required"))?;
        if crd_name.split('.').count() < 3 {
            return Err(ConfigError::invalid(
                join(path, "crdName"),
                format!("{crd_name:?} is not a CRD name (<plural>.<group>)"),
            ));
        }
        let raw_rules = raw.conversions.unwrap_or_default();
        if raw_rules.is_empty() {
            return Err(ConfigError::invalid(
                join(path, "conversions"),
                "at least one conversion is required",
            ));
        }
        let mut conversions = Vec::with_capacity(raw_rules.len());
        for (i, r) in raw_rules.into_iter().enumerate() {
            let at = join(path, &format!("conversions[{i}]"));
            let from_version = non_empty(r.from_version)
                .ok_or_else(|| ConfigError::invalid(join(&at, "fromVersion"), "is required"))?;
            let to_version = non_empty(r.to_version)
                .ok_or_else(|| ConfigError::invalid(join(&at, "toVersion"), "is required"))?;
            conversions.push(ConversionRule {
                from_version,
                to_version,
            });
        }
        Ok(Self {
            name,
            include_snapshots_from: raw.include_snapshots_from,
            group: non_empty(raw.group),
            crd_name,
            conversions,
        })
    }

    /// The CRD's API group (`crdName` after its first segment).
    pub fn crd_group(&self) -> &str {
        self.crd_name.split_once('.').map_or("", |(_, group)| group)
    }
}

impl ConversionRule {
    /// Whether this rule converts `from` to `to` (both `group/version`), reading a bare
    /// version in the rule as one of `group`.
    pub fn converts(&self, group: &str, from: &str, to: &str) -> bool {
        let full = |v: &str| {
            if v.contains('/') {
                v.to_owned()
            } else {
                format!("{group}/{v}")
            }
        };
        full(&self.from_version) == from && full(&self.to_version) == to
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn validating(v: Value) -> Result<AdmissionBinding, ConfigError> {
        AdmissionBinding::from_value(AdmissionKind::Validating, v, "kubernetesValidating[0]")
    }

    #[test]
    fn admission_defaults_follow_shell_operator() {
        let b = validating(json!({
            "name": "policy.example.com",
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "labelSelector": {"matchLabels": {"a": "b"}},
            "namespace": {"labelSelector": {"matchLabels": {"team": "x"}}}
        }))
        .expect("valid");
        assert_eq!(b.failure_policy, FailurePolicy::Fail);
        assert_eq!(b.side_effects, "None");
        assert_eq!(b.timeout_seconds, 10);
        assert_eq!(b.object_selector, Some(json!({"matchLabels": {"a": "b"}})));
        assert_eq!(
            b.namespace_selector,
            Some(json!({"matchLabels": {"team": "x"}}))
        );
    }

    #[test]
    fn bindings_travel_as_their_configuration() {
        let b = validating(json!({
            "name": "policy.example.com", "group": "g", "includeSnapshotsFrom": ["x"],
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "labelSelector": {"matchLabels": {"a": "b"}}, "failurePolicy": "Ignore", "timeoutSeconds": 3,
            "namespace": {"labelSelector": {"matchLabels": {"team": "x"}}},
            "matchConditions": [{"name": "n", "expression": "true"}]
        }))
        .expect("valid");
        assert_eq!(
            AdmissionBinding::parse(AdmissionKind::Validating, b.to_value()),
            Ok(b)
        );
        let c = ConversionBinding::parse(json!({"name": "c", "crdName": "xs.example.com",
            "conversions": [{"fromVersion": "v1", "toVersion": "v2"}]}))
        .expect("valid");
        assert_eq!(ConversionBinding::parse(c.to_value()), Ok(c));
    }

    #[test]
    fn admission_errors_name_the_key() {
        let rule = json!({"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]});
        let cases = [
            (json!({"rules": [rule]}), "kubernetesValidating[0].name"),
            (
                json!({"name": "short.name", "rules": [rule]}),
                "kubernetesValidating[0].name",
            ),
            (json!({"name": "a.b.c"}), "kubernetesValidating[0].rules"),
            (
                json!({"name": "a.b.c", "rules": [{"operations": ["MOVE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}),
                "kubernetesValidating[0].rules[0].operations",
            ),
            (
                json!({"name": "a.b.c", "rules": [rule], "failurePolicy": "Maybe"}),
                "kubernetesValidating[0].failurePolicy",
            ),
            (
                json!({"name": "a.b.c", "rules": [rule], "timeoutSeconds": 31}),
                "kubernetesValidating[0].timeoutSeconds",
            ),
            (
                json!({"name": "a.b.c", "rules": [rule], "clientConfig": {}}),
                "kubernetesValidating[0]",
            ),
        ];
        for (value, path) in cases {
            let e = validating(value.clone()).expect_err(&value.to_string());
            assert!(e.to_string().contains(&format!("`{path}`")), "{value}: {e}");
        }
    }

    #[test]
    fn conversion_rules_read_bare_versions_in_the_crd_group() {
        let b = ConversionBinding::from_value(
            json!({"name": "conv", "crdName": "crontabs.stable.example.com",
                   "conversions": [{"fromVersion": "v1alpha1", "toVersion": "stable.example.com/v1alpha2"}]}),
            "kubernetesCustomResourceConversion[0]",
        )
        .expect("valid");
        assert_eq!(b.crd_group(), "stable.example.com");
        assert!(b.conversions[0].converts(
            b.crd_group(),
            "stable.example.com/v1alpha1",
            "stable.example.com/v1alpha2"
        ));
        assert!(!b.conversions[0].converts(
            b.crd_group(),
            "stable.example.com/v1alpha2",
            "stable.example.com/v1alpha1"
        ));
        let e = ConversionBinding::from_value(json!({"name": "c", "crdName": "a.b.c"}), "k[0]")
            .unwrap_err();
        assert!(e.to_string().contains("k[0].conversions"), "{e}");
    }
}
