//! Object selectors of a `kubernetes` binding: by name, labels, fields and namespace.
//!
//! They are validated here and can be rendered as the query strings the
//! Kubernetes API accepts (`labelSelector=`, `fieldSelector=`), which is
//! where shell-operator applies them (server-side filtering).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::{ConfigError, from_value_at, join};

/// `nameSelector: {matchNames: [...]}`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NameSelector {
    #[serde(default)]
    pub match_names: Vec<String>,
}

/// A Kubernetes label selector (`matchLabels` ANDed with `matchExpressions`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<LabelRequirement>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LabelRequirement {
    pub key: String,
    pub operator: LabelSelectorOperator,
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelSelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// `fieldSelector: {matchExpressions: [{field, operator, value}]}`; the
/// requirements are ANDed. The API server supports only equality here.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FieldSelector {
    pub match_expressions: Vec<FieldRequirement>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FieldRequirement {
    pub field: String,
    pub operator: FieldSelectorOperator,
    pub value: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldSelectorOperator {
    Equals,
    NotEquals,
}

/// `namespace: {nameSelector, labelSelector}`: which namespaces to watch.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NamespaceSelector {
    pub name_selector: Option<NameSelector>,
    pub label_selector: Option<LabelSelector>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawLabelSelector {
    #[serde(default)]
    match_labels: BTreeMap<String, String>,
    #[serde(default)]
    match_expressions: Vec<RawLabelRequirement>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLabelRequirement {
    key: String,
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawFieldSelector {
    #[serde(default)]
    match_expressions: Vec<RawFieldRequirement>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFieldRequirement {
    field: String,
    operator: String,
    #[serde(default)]
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawNamespaceSelector {
    name_selector: Option<NameSelector>,
    label_selector: Option<Value>,
}

impl LabelSelector {
    pub(crate) fn from_value(value: Value, path: &str) -> Result<Self, ConfigError> {
        let raw: RawLabelSelector = from_value_at(value, path)?;
        let mut match_expressions = Vec::with_capacity(raw.match_expressions.len());
        for (i, req) in raw.match_expressions.into_iter().enumerate() {
            let at = join(path, &format!("matchExpressions[{i}]"));
            match_expressions.push(LabelRequirement::from_raw(req, &at)?);
        }
        Ok(Self {
            match_labels: raw.match_labels,
            match_expressions,
        })
    }

    /// Reads a `{matchLabels, matchExpressions}` selector; `path` names it in errors.
    pub fn parse(value: Value, path: &str) -> Result<Self, ConfigError> {
        Self::from_value(value, path)
    }

    /// Whether an object with these labels is selected (every requirement holds; label values
    /// that are not strings match nothing).
    pub fn matches(&self, labels: &serde_json::Map<String, Value>) -> bool {
        let label = |k: &str| labels.get(k).and_then(Value::as_str);
        self.match_labels
            .iter()
            .all(|(k, v)| label(k) == Some(v.as_str()))
            && self.match_expressions.iter().all(|r| {
                let have = label(&r.key);
                match r.operator {
                    LabelSelectorOperator::In => {
                        have.is_some_and(|h| r.values.iter().any(|v| v == h))
                    }
                    LabelSelectorOperator::NotIn => {
                        have.is_none_or(|h| !r.values.iter().any(|v| v == h))
                    }
                    LabelSelectorOperator::Exists => have.is_some(),
                    LabelSelectorOperator::DoesNotExist => have.is_none(),
                }
            })
    }

    /// Renders the selector in the API server's query syntax,
    /// e.g. `app=web,tier in (a,b),!legacy`.
    pub fn to_query(&self) -> String {
        let labels = self.match_labels.iter().map(|(k, v)| format!("{k}={v}"));
        let exprs = self.match_expressions.iter().map(|r| match r.operator {
            LabelSelectorOperator::In => format!("{} in ({})", r.key, r.values.join(",")),
            LabelSelectorOperator::NotIn => format!("{} notin ({})", r.key, r.values.join(",")),
            LabelSelectorOperator::Exists => r.key.clone(),
            LabelSelectorOperator::DoesNotExist => format!("!{}", r.key),
        });
        labels.chain(exprs).collect::<Vec<_>>().join(",")
    }
}

impl LabelRequirement {
    fn from_raw(raw: RawLabelRequirement, path: &str) -> Result<Self, ConfigError> {
        let operator = match raw.operator.as_str() {
            "In" => LabelSelectorOperator::In,
            "NotIn" => LabelSelectorOperator::NotIn,
            "Exists" => LabelSelectorOperator::Exists,
            "DoesNotExist" => LabelSelectorOperator::DoesNotExist,
            other => {
                return Err(ConfigError::invalid(
                    join(path, "operator"),
                    format!("{other:?} is not one of In, NotIn, Exists, DoesNotExist"),
                ));
            }
        };
        let needs_values = matches!(
            operator,
            LabelSelectorOperator::In | LabelSelectorOperator::NotIn
        );
        if needs_values && raw.values.is_empty() {
            return Err(ConfigError::invalid(
                join(path, "values"),
                "must not be empty for In and NotIn",
            ));
        }
        if !needs_values && !raw.values.is_empty() {
            return Err(ConfigError::invalid(
                join(path, "values"),
                "must be empty for Exists and DoesNotExist",
            ));
        }
        if raw.key.is_empty() {
            return Err(ConfigError::invalid(join(path, "key"), "must not be empty"));
        }
        Ok(Self {
            key: raw.key,
            operator,
            values: raw.values,
        })
    }
}

impl FieldSelector {
    pub(crate) fn from_value(value: Value, path: &str) -> Result<Self, ConfigError> {
        let raw: RawFieldSelector = from_value_at(value, path)?;
        let mut match_expressions = Vec::with_capacity(raw.match_expressions.len());
        for (i, req) in raw.match_expressions.into_iter().enumerate() {
            let at = join(path, &format!("matchExpressions[{i}]"));
            let operator = match req.operator.as_str() {
                "Equals" | "=" | "==" => FieldSelectorOperator::Equals,
                "NotEquals" | "!=" => FieldSelectorOperator::NotEquals,
                other => {
                    return Err(ConfigError::invalid(
                        join(&at, "operator"),
                        format!("{other:?} is not one of Equals, =, ==, NotEquals, !="),
                    ));
                }
            };
            if req.field.is_empty() {
                return Err(ConfigError::invalid(
                    join(&at, "field"),
                    "must not be empty",
                ));
            }
            match_expressions.push(FieldRequirement {
                field: req.field,
                operator,
                value: req.value,
            });
        }
        Ok(Self { match_expressions })
    }

    /// Renders the selector in the API server's syntax, e.g. `status.phase!=Running,metadata.name=x`.
    pub fn to_query(&self) -> String {
        let parts = self.match_expressions.iter().map(|r| match r.operator {
            FieldSelectorOperator::Equals => format!("{}={}", r.field, r.value),
            FieldSelectorOperator::NotEquals => format!("{}!={}", r.field, r.value),
        });
        parts.collect::<Vec<_>>().join(",")
    }
}

impl NamespaceSelector {
    pub(crate) fn from_value(value: Value, path: &str) -> Result<Self, ConfigError> {
        let raw: RawNamespaceSelector = from_value_at(value, path)?;
        let label_selector = raw
            .label_selector
            .map(|v| LabelSelector::from_value(v, &join(path, "labelSelector")))
            .transpose()?;
        Ok(Self {
            name_selector: raw.name_selector,
            label_selector,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selector_query() {
        let sel = LabelSelector::from_value(
            json!({"matchLabels": {"app": "web"}, "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["a", "b"]},
                {"key": "legacy", "operator": "DoesNotExist"}]}),
            "labelSelector",
        )
        .expect("valid selector");
        assert_eq!(sel.to_query(), "app=web,tier in (a,b),!legacy");
    }

    #[test]
    fn label_selector_matches_like_the_api_server() {
        let sel = LabelSelector::parse(
            json!({"matchLabels": {"app": "web"}, "matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["db"]},
                {"key": "legacy", "operator": "DoesNotExist"}]}),
            "labelSelector",
        )
        .expect("valid selector");
        let labels = |v: Value| v.as_object().cloned().expect("map");
        assert!(sel.matches(&labels(json!({"app": "web"}))));
        assert!(sel.matches(&labels(json!({"app": "web", "tier": "fe"}))));
        assert!(!sel.matches(&labels(json!({"app": "web", "tier": "db"}))));
        assert!(!sel.matches(&labels(json!({"app": "web", "legacy": "1"}))));
        assert!(!sel.matches(&labels(json!({"app": "api"}))));
    }

    #[test]
    fn field_selector_operators() {
        let sel = FieldSelector::from_value(
            json!({"matchExpressions": [
                {"field": "metadata.name", "operator": "==", "value": "x"},
                {"field": "status.phase", "operator": "NotEquals", "value": "Running"}]}),
            "fieldSelector",
        )
        .expect("valid selector");
        assert_eq!(sel.to_query(), "metadata.name=x,status.phase!=Running");
        let bad = FieldSelector::from_value(
            json!({"matchExpressions": [{"field": "a", "operator": "In", "value": "x"}]}),
            "fieldSelector",
        );
        let e = bad.unwrap_err().to_string();
        assert!(
            e.contains("fieldSelector.matchExpressions[0].operator"),
            "{e}"
        );
    }
}
