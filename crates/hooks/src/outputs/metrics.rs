//! `METRICS_PATH`: metric operations, one JSON object per line.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// One metric operation. The runner's caller adds the `hook` label.
///
/// Grouped operations (`group` set) replace the whole group: the consumer
/// expires every earlier series of that group before applying them.
#[derive(Debug, Clone, PartialEq)]
pub enum MetricOperation {
    /// Add to a counter.
    Add {
        name: String,
        value: f64,
        labels: BTreeMap<String, String>,
        group: Option<String>,
    },
    /// Set a gauge.
    Set {
        name: String,
        value: f64,
        labels: BTreeMap<String, String>,
        group: Option<String>,
    },
    /// Observe into a histogram; empty `buckets` means the consumer's defaults.
    /// Not allowed inside groups.
    Observe {
        name: String,
        value: f64,
        labels: BTreeMap<String, String>,
        buckets: Vec<f64>,
    },
    /// Drop every series of the group.
    Expire { group: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetric {
    name: Option<String>,
    action: Option<String>,
    value: Option<f64>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    buckets: Vec<f64>,
    group: Option<String>,
    // Shortcut forms: {"name": "x", "add": 1} and {"name": "x", "set": 1}.
    add: Option<f64>,
    set: Option<f64>,
}

/// Parses the whole file; the first invalid line fails it (lines are 1-based in errors).
pub fn parse_metrics(text: &str) -> Result<Vec<MetricOperation>, String> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .enumerate()
        .map(|(i, doc)| {
            let doc = doc.map_err(|e| format!("operation {}: invalid JSON: {e}", i + 1))?;
            metric(doc).map_err(|e| format!("operation {}: {e}", i + 1))
        })
        .collect()
}

fn metric(doc: Value) -> Result<MetricOperation, String> {
    let raw: RawMetric = serde_json::from_value(doc).map_err(|e| e.to_string())?;
    let group = raw.group.filter(|g| !g.is_empty());
    let (action, value) = match (raw.action.as_deref(), raw.add, raw.set) {
        (Some(action), None, None) => (action.to_owned(), raw.value),
        (None, Some(v), None) => ("add".to_owned(), Some(v)),
        (None, None, Some(v)) => ("set".to_owned(), Some(v)),
        (None, None, None) => return Err("one of `action`, `add` or `set` is required".to_owned()),
        _ => return Err("`action`, `add` and `set` are mutually exclusive".to_owned()),
    };
    if action == "expire" {
        let group = group.ok_or("`expire` requires `group`")?;
        return Ok(MetricOperation::Expire { group });
    }
    let name = raw
        .name
        .filter(|n| !n.is_empty())
        .ok_or("`name` is required")?;
    let value = value.ok_or("`value` is required")?;
    if !value.is_finite() {
        return Err(format!("`value` must be finite, got {value}"));
    }
    check_metric_name(&name)?;
    let labels = raw.labels;
    for label in labels.keys() {
        check_label_name(label)?;
    }
    if let Some(b) = raw.buckets.iter().find(|b| !b.is_finite()) {
        return Err(format!("`buckets` must be finite, got {b}"));
    }
    match action.as_str() {
        "add" => Ok(MetricOperation::Add {
            name,
            value,
            labels,
            group,
        }),
        "set" => Ok(MetricOperation::Set {
            name,
            value,
            labels,
            group,
        }),
        "observe" if group.is_some() => Err("`observe` is not supported inside a group".to_owned()),
        "observe" => Ok(MetricOperation::Observe {
            name,
            value,
            labels,
            buckets: raw.buckets,
        }),
        other => Err(format!(
            "unknown action {other:?}; expected add, set, observe or expire"
        )),
    }
}

/// Labels berth sets on every series itself: a hook may not set (or forge) them.
pub const RESERVED_LABELS: [&str; 3] = ["hook", "package", "le"];

/// A Prometheus metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`. Anything else would break the
/// exposition text (or smuggle series into it).
fn check_metric_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        Ok(())
    } else {
        Err(format!(
            "`name` {name:?} is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)"
        ))
    }
}

/// A Prometheus label name (`[a-zA-Z_][a-zA-Z0-9_]*`, not `__`-prefixed), and not one berth
/// sets itself.
fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') || name.starts_with("__")
    {
        return Err(format!(
            "label {name:?} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, no leading __)"
        ));
    }
    if RESERVED_LABELS.contains(&name) {
        return Err(format!("label {name:?} is reserved: berth sets it"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_would_break_or_forge_the_exposition_are_refused() {
        for (line, needle) in [
            (
                r#"{"name":"a{package=\"other\"} 1\nx","set":1}"#,
                "not a Prometheus metric name",
            ),
            (
                r#"{"name":"9lives","set":1}"#,
                "not a Prometheus metric name",
            ),
            (
                r#"{"name":"a","set":1,"labels":{"package":"other"}}"#,
                "reserved",
            ),
            (r#"{"name":"a","set":1,"labels":{"hook":"x"}}"#, "reserved"),
            (
                r#"{"name":"a","set":1,"labels":{"bad-label":"x"}}"#,
                "not a Prometheus label name",
            ),
            (
                r#"{"name":"a","set":1,"labels":{"__name__":"x"}}"#,
                "not a Prometheus label name",
            ),
        ] {
            let err = parse_metrics(line).unwrap_err();
            assert!(err.contains(needle), "{line}: {err}");
        }
        let ok = r#"{"name":"ns:my_metric_total","add":1,"labels":{"_x":"a\"b\nc"}}"#;
        assert!(parse_metrics(ok).is_ok());
    }

    #[test]
    fn all_forms() {
        let text = r#"{"name":"a","action":"add","value":2,"labels":{"x":"y"}}
{"name":"b","set":3}
{"name":"c","action":"observe","value":0.5,"buckets":[0.1,1]}
{"group":"g","action":"expire"}
{"name":"d","add":1,"group":"g"}"#;
        let ops = parse_metrics(text).expect("valid metrics");
        assert_eq!(ops.len(), 5);
        assert_eq!(
            ops[1],
            MetricOperation::Set {
                name: "b".into(),
                value: 3.0,
                labels: BTreeMap::new(),
                group: None
            }
        );
        assert_eq!(ops[3], MetricOperation::Expire { group: "g".into() });
    }

    #[test]
    fn invalid_lines() {
        for (text, needle) in [
            (
                r#"{"name":"a","action":"observe","value":1,"group":"g"}"#,
                "not supported inside a group",
            ),
            (r#"{"name":"a","action":"add"}"#, "`value` is required"),
            (
                r#"{"name":"a","action":"add","value":1,"colour":"red"}"#,
                "unknown field `colour`",
            ),
            (
                "{\"name\":\"a\",\"set\":1}\n{\"action\":\"expire\"}",
                "operation 2",
            ),
        ] {
            let e = parse_metrics(text).unwrap_err();
            assert!(e.contains(needle), "expected {needle:?} in {e}");
        }
    }
}
