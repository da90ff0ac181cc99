//! `rbac:` of `package.yaml`: the Kubernetes rights a Module (or the Global package) declares
//! it needs. Its ServiceAccount is bound to a ClusterRole made of these rules; a Module without
//! the section is bound to `cluster-admin`, as addon-operator runs modules
//! (`docs/decisions/package-identity.md`). An Application may not declare any: its rights
//! are everything in its own namespace, and nothing else.
//!
//! The rules have Kubernetes' PolicyRule shape (`apiGroups`, `resources`, `verbs`,
//! `resourceNames`, `nonResourceURLs`) and are checked as the API server checks a ClusterRole's,
//! so a package the API server would refuse is refused at Load, naming the field.

use serde_json::{Map, Value};

use crate::definition::DefinitionError;

/// Most rules one package may declare.
pub const MAX_RULES: usize = 256;
/// Most entries in one list of a rule.
pub const MAX_RULE_ENTRIES: usize = 256;
/// Longest entry of a rule's lists (a DNS subdomain's bound; URLs and names fit in it).
pub const MAX_ENTRY_LEN: usize = 253;

/// The declared rights: `rbac.rules`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rbac {
    pub rules: Vec<PolicyRule>,
}

/// One Kubernetes PolicyRule (`rbac.authorization.k8s.io/v1`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyRule {
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

const RULE_FIELDS: [&str; 5] = [
    "apiGroups",
    "resources",
    "verbs",
    "resourceNames",
    "nonResourceURLs",
];

impl Rbac {
    /// Parses the `rbac` value (already known to be present).
    pub(crate) fn parse(value: &Value) -> Result<Rbac, DefinitionError> {
        let map = value
            .as_object()
            .ok_or_else(|| DefinitionError::new("rbac", "must be a mapping with `rules`"))?;
        if let Some(key) = map.keys().find(|k| k.as_str() != "rules") {
            return Err(DefinitionError::new(
                format!("rbac.{key}"),
                "unknown field (rbac has only `rules`)",
            ));
        }
        let rules = match map.get("rules") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                if items.len() > MAX_RULES {
                    return Err(DefinitionError::new(
                        "rbac.rules",
                        format!("{} rules exceed the limit of {MAX_RULES}", items.len()),
                    ));
                }
                items
                    .iter()
                    .enumerate()
                    .map(|(i, rule)| PolicyRule::parse(rule, &format!("rbac.rules[{i}]")))
                    .collect::<Result<_, _>>()?
            }
            Some(_) => {
                return Err(DefinitionError::new(
                    "rbac.rules",
                    "must be a list of PolicyRules",
                ));
            }
        };
        Ok(Rbac { rules })
    }
}

impl PolicyRule {
    fn parse(value: &Value, field: &str) -> Result<PolicyRule, DefinitionError> {
        let map = value.as_object().ok_or_else(|| {
            DefinitionError::new(
                field,
                "must be a mapping (apiGroups, resources, verbs, resourceNames, nonResourceURLs)",
            )
        })?;
        if let Some(key) = map.keys().find(|k| !RULE_FIELDS.contains(&k.as_str())) {
            return Err(DefinitionError::new(
                format!("{field}.{key}"),
                format!(
                    "unknown field (a PolicyRule has {})",
                    RULE_FIELDS.join(", ")
                ),
            ));
        }
        let rule = PolicyRule {
            api_groups: strings(map, field, "apiGroups")?,
            resources: strings(map, field, "resources")?,
            verbs: strings(map, field, "verbs")?,
            resource_names: strings(map, field, "resourceNames")?,
            non_resource_urls: strings(map, field, "nonResourceURLs")?,
        };
        rule.check(field)?;
        Ok(rule)
    }

    /// The API server's own checks of a ClusterRole's rule (`ValidatePolicyRule`).
    fn check(&self, field: &str) -> Result<(), DefinitionError> {
        if self.verbs.is_empty() {
            return Err(DefinitionError::new(
                format!("{field}.verbs"),
                "is required: at least one verb (`*` for all)",
            ));
        }
        if !self.non_resource_urls.is_empty() {
            if !self.api_groups.is_empty() || !self.resources.is_empty() {
                return Err(DefinitionError::new(
                    format!("{field}.nonResourceURLs"),
                    "a rule gives either resources or non-resource URLs, not both",
                ));
            }
            return Ok(());
        }
        if self.api_groups.is_empty() {
            return Err(DefinitionError::new(
                format!("{field}.apiGroups"),
                "is required for resource rules (\"\" is the core group, `*` every group)",
            ));
        }
        if self.resources.is_empty() {
            return Err(DefinitionError::new(
                format!("{field}.resources"),
                "is required: at least one resource (`*` for all), or nonResourceURLs instead",
            ));
        }
        Ok(())
    }
}

/// `field` of a rule: a list of strings, bounded; absent is empty.
fn strings(
    map: &Map<String, Value>,
    rule: &str,
    field: &str,
) -> Result<Vec<String>, DefinitionError> {
    let here = format!("{rule}.{field}");
    let items = match map.get(field) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(DefinitionError::new(here, "must be a list of strings")),
    };
    if items.len() > MAX_RULE_ENTRIES {
        return Err(DefinitionError::new(
            here,
            format!(
                "{} entries exceed the limit of {MAX_RULE_ENTRIES}",
                items.len()
            ),
        ));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item {
            Value::String(s) if s.len() <= MAX_ENTRY_LEN && !s.chars().any(char::is_control) => {
                Ok(s.clone())
            }
            Value::String(_) => Err(DefinitionError::new(
                format!("{here}[{i}]"),
                format!("longer than {MAX_ENTRY_LEN} characters, or holds control characters"),
            )),
            other => Err(DefinitionError::new(
                format!("{here}[{i}]"),
                format!("must be a string, got {other}"),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_rules_as_kubernetes_writes_them() {
        let rbac = Rbac::parse(&json!({"rules": [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"],
             "resourceNames": ["one"]},
            {"nonResourceURLs": ["/healthz"], "verbs": ["get"]},
        ]}))
        .expect("parses");
        assert_eq!(rbac.rules.len(), 2);
        assert_eq!(rbac.rules[0].api_groups, vec![""]);
        assert_eq!(rbac.rules[0].resource_names, vec!["one"]);
        assert_eq!(rbac.rules[1].non_resource_urls, vec!["/healthz"]);
        // No rules at all: a package that needs no rights.
        assert_eq!(Rbac::parse(&json!({"rules": []})).unwrap(), Rbac::default());
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            (json!([]), "rbac"),
            (json!({"rule": []}), "rbac.rule"),
            (json!({"rules": {}}), "rbac.rules"),
            (json!({"rules": ["x"]}), "rbac.rules[0]"),
            (
                json!({"rules": [{"apiGroups": [""], "resources": ["pods"]}]}),
                "rbac.rules[0].verbs",
            ),
            (
                json!({"rules": [{"resources": ["pods"], "verbs": ["get"]}]}),
                "rbac.rules[0].apiGroups",
            ),
            (
                json!({"rules": [{"apiGroups": [""], "verbs": ["get"]}]}),
                "rbac.rules[0].resources",
            ),
            (
                json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "nonResourceURLs": ["/x"]}]}),
                "rbac.rules[0].nonResourceURLs",
            ),
            (
                json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourcesNames": ["a"]}]}),
                "rbac.rules[0].resourcesNames",
            ),
            (
                json!({"rules": [{}, {"apiGroups": [""], "resources": ["pods"], "verbs": "get"}]}),
                "rbac.rules[0].verbs",
            ),
            (
                json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": [1]}]}),
                "rbac.rules[0].verbs[0]",
            ),
            (
                json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": "get"}]}),
                "rbac.rules[0].verbs",
            ),
        ];
        for (doc, field) in cases {
            let err = Rbac::parse(&doc).expect_err(field);
            assert_eq!(err.field, field, "{err}");
        }
    }

    #[test]
    fn rules_are_bounded() {
        let many: Vec<Value> = (0..=MAX_RULES)
            .map(|_| json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}))
            .collect();
        let err = Rbac::parse(&json!({ "rules": many })).unwrap_err();
        assert_eq!(err.field, "rbac.rules");
        let long = "x".repeat(MAX_ENTRY_LEN + 1);
        let err = Rbac::parse(
            &json!({"rules": [{"apiGroups": [""], "resources": [long], "verbs": ["get"]}]}),
        )
        .unwrap_err();
        assert_eq!(err.field, "rbac.rules[0].resources[0]");
    }
}
