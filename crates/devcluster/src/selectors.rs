//! Label and field selectors in their query-string form (`labelSelector=`, `fieldSelector=`).
//!
//! Written by hand because no maintained crate parses the apiserver's selector grammar on
//! the server side (kube-rs only builds selectors). Grammar, as the apiserver accepts it:
//! comma-separated requirements, each `key`, `!key`, `key=v`, `key==v`, `key!=v`,
//! `key in (a,b)` or `key notin (a,b)`. `!=` and `notin` also match objects without the key.

use serde_json::{Value, json};

use crate::status::ApiError;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Exists,
    NotExists,
    In(Vec<String>),
    NotIn(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    pub fn parse(input: &str) -> Result<LabelSelector, ApiError> {
        let mut requirements = Vec::new();
        for part in split_top_level(input) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            requirements.push(parse_requirement(part).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "unable to parse requirement: {part:?} in labelSelector {input:?}"
                ))
            })?);
        }
        Ok(LabelSelector { requirements })
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        self.requirements.iter().all(|r| {
            let value = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            match (&r.op, value) {
                (Op::Exists, v) => v.is_some(),
                (Op::NotExists, v) => v.is_none(),
                (Op::In(values), Some(v)) => values.iter().any(|x| x == v),
                (Op::In(_), None) => false,
                (Op::NotIn(values), Some(v)) => !values.iter().any(|x| x == v),
                (Op::NotIn(_), None) => true,
            }
        })
    }
}

/// Splits on commas that are not inside `( )`.
fn split_top_level(input: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&input[start..]);
    parts
}

fn parse_requirement(part: &str) -> Option<Requirement> {
    if let Some(key) = part.strip_prefix('!') {
        return valid_key(key.trim()).map(|key| Requirement {
            key,
            op: Op::NotExists,
        });
    }
    if let Some((key, value)) = part.split_once("!=") {
        return equality(key, value, false);
    }
    if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return equality(key, value, true);
    }
    for (word, positive) in [(" notin ", false), (" in ", true)] {
        if let Some((key, set)) = part.split_once(word) {
            let key = valid_key(key.trim())?;
            let values = parse_set(set.trim())?;
            let op = if positive {
                Op::In(values)
            } else {
                Op::NotIn(values)
            };
            return Some(Requirement { key, op });
        }
    }
    valid_key(part).map(|key| Requirement {
        key,
        op: Op::Exists,
    })
}

fn equality(key: &str, value: &str, positive: bool) -> Option<Requirement> {
    let key = valid_key(key.trim())?;
    let value = value.trim();
    if !valid_value(value) {
        return None;
    }
    let values = vec![value.to_string()];
    let op = if positive {
        Op::In(values)
    } else {
        Op::NotIn(values)
    };
    Some(Requirement { key, op })
}

fn parse_set(set: &str) -> Option<Vec<String>> {
    let inner = set.strip_prefix('(')?.strip_suffix(')')?;
    let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
    values.iter().all(|v| valid_value(v)).then_some(values)
}

/// Label keys: an optional DNS prefix and `/`, then a name of alphanumerics, `-`, `_`, `.`.
fn valid_key(key: &str) -> Option<String> {
    let name = key.rsplit_once('/').map_or(key, |(_, n)| n);
    let ok = !name.is_empty()
        && name.len() <= 63
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    ok.then(|| key.to_string())
}

fn valid_value(value: &str) -> bool {
    value.len() <= 63
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

/// A parsed field selector: `path=value`, `path==value` or `path!=value` terms.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<(String, String, bool)>,
}

/// Fields every kind supports, plus a few per-kind ones that kubectl and controllers use.
fn field_supported(kind: &str, field: &str) -> bool {
    matches!(field, "metadata.name" | "metadata.namespace")
        || match kind {
            "Pod" => matches!(
                field,
                "spec.nodeName"
                    | "spec.restartPolicy"
                    | "spec.schedulerName"
                    | "spec.serviceAccountName"
                    | "status.phase"
                    | "status.podIP"
            ),
            "Event" => {
                field.starts_with("involvedObject.")
                    || matches!(field, "reason" | "reportingComponent" | "source" | "type")
            }
            "Secret" => field == "type",
            "Namespace" => field == "status.phase",
            "Job" => field == "status.successful",
            _ => false,
        }
}

impl FieldSelector {
    pub fn parse(input: &str, kind: &str) -> Result<FieldSelector, ApiError> {
        let mut terms = Vec::new();
        for part in input.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, value, positive) = if let Some((f, v)) = part.split_once("!=") {
                (f, v, false)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, v, true)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: {part:?}; can't understand {part:?}"
                )));
            };
            let field = field.trim();
            if !field_supported(kind, field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push((field.to_string(), value.trim().to_string(), positive));
        }
        Ok(FieldSelector { terms })
    }

    pub fn matches(&self, object: &Value) -> bool {
        self.terms.iter().all(|(field, value, positive)| {
            let pointer = format!("/{}", field.replace('.', "/"));
            let actual = match object.pointer(&pointer) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *value) == *positive
        })
    }
}

/// A structured LabelSelector against an object's labels (by way of the query syntax).
pub fn structured_matches(selector: &Value, object: &Value) -> bool {
    let mut parts: Vec<String> = selector["matchLabels"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    for e in selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let key = e["key"].as_str().unwrap_or_default();
        let values = e["values"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default();
        parts.push(match e["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => return false,
        });
    }
    let mut labelled = object.clone();
    if !labelled.is_object() {
        labelled = json!({});
    }
    // A Namespace always carries its name as a label in kube-apiserver.
    if labelled["kind"] == "Namespace"
        && let Some(name) = labelled["metadata"]["name"].as_str().map(str::to_owned)
    {
        labelled["metadata"]["labels"]["kubernetes.io/metadata.name"] = Value::from(name);
    }
    LabelSelector::parse(&parts.join(",")).is_ok_and(|s| s.matches(&labelled))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({ "metadata": { "name": "a", "namespace": "ns", "labels": labels } })
    }

    #[test]
    fn all_label_operators() {
        let o = obj(json!({ "app": "web", "tier": "front" }));
        let yes = [
            "app=web",
            "app==web",
            "app",
            "!missing",
            "app in (web,api)",
            "tier notin (back)",
            "missing!=x",
            "app=web,tier=front",
            "",
        ];
        let no = [
            "app=api",
            "!app",
            "missing",
            "app notin (web)",
            "app in (api)",
            "app!=web",
            "app=web,tier=back",
        ];
        for s in yes {
            assert!(
                LabelSelector::parse(s).expect(s).matches(&o),
                "{s} should match"
            );
        }
        for s in no {
            assert!(
                !LabelSelector::parse(s).expect(s).matches(&o),
                "{s} should not match"
            );
        }
    }

    #[test]
    fn malformed_label_selectors_are_bad_requests() {
        for s in ["app in web", "a=b=c", "x in (a b)"] {
            let err = LabelSelector::parse(s).expect_err(s);
            assert_eq!(err.code, 400, "{s}");
        }
    }

    #[test]
    fn field_selectors_on_name_and_namespace() {
        let o = obj(json!({}));
        assert!(
            FieldSelector::parse("metadata.name=a", "ConfigMap")
                .expect("parse")
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.namespace!=ns", "ConfigMap")
                .expect("parse")
                .matches(&o)
        );
        assert_eq!(
            FieldSelector::parse("spec.foo=1", "ConfigMap")
                .expect_err("unsupported")
                .code,
            400
        );
    }
}
