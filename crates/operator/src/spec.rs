//! Δ-controller's `Operator` (`dcontroller.io/v1alpha1`), read exactly as upstream reads it and
//! checked whole: every error names the controller and the field.

use std::time::Duration;

use berth_hooks::config::LabelSelector;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::expr::CompileError;
use crate::limits::{MAX_CONTROLLERS, MAX_SOURCES};
use crate::pipeline::Pipeline;

/// The API version of an Operator document.
pub const API_VERSION: &str = "dcontroller.io/v1alpha1";
/// The group of an operator's views is `<operator>.view.dcontroller.io`.
pub const VIEW_GROUP_SUFFIX: &str = "view.dcontroller.io";
/// The version of every view.
pub const VIEW_VERSION: &str = "v1alpha1";

/// What is wrong with a spec: each problem with its place (`controllers[1].sources[0].kind`
/// or `controller "x": pipeline[2].@project...`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("operator {operator:?}: {}", problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct SpecError {
    pub operator: String,
    pub problems: Vec<CompileError>,
}

/// One operator: its controllers, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Operator {
    pub name: String,
    pub controllers: Vec<Controller>,
    /// The Operator document as read (a bare spec wrapped into one), for the seams that carry
    /// it to the service that runs it.
    pub document: Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Controller {
    pub name: String,
    pub sources: Vec<Source>,
    pub pipeline: Pipeline,
    pub target: Target,
}

/// Which resource: a group (`None`: this operator's views; `Some("")`: the core group), an
/// optional version and a kind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Resource {
    pub group: Option<String>,
    pub version: Option<String>,
    pub kind: String,
}

impl Resource {
    /// The API group, with a view's resolved to its operator's view group.
    pub fn group_of(&self, operator: &str) -> String {
        match &self.group {
            Some(g) => g.clone(),
            None => view_group(operator),
        }
    }

    /// Whether this names a view (of any operator).
    pub fn is_view(&self, operator: &str) -> bool {
        self.group_of(operator).ends_with(VIEW_GROUP_SUFFIX)
    }
}

/// `<operator>.view.dcontroller.io`.
pub fn view_group(operator: &str) -> String {
    format!("{operator}.{VIEW_GROUP_SUFFIX}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, strum::EnumString, strum::IntoStaticStr)]
pub enum SourceType {
    #[default]
    Watcher,
    OneShot,
    Periodic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, strum::EnumString, strum::IntoStaticStr)]
pub enum TargetType {
    #[default]
    Updater,
    Patcher,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub resource: Resource,
    pub kind: SourceType,
    pub namespace: Option<String>,
    pub label_selector: Option<LabelSelector>,
    pub predicate: Option<Predicate>,
    /// A Periodic source's period (default 5 minutes).
    pub period: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub resource: Resource,
    pub kind: TargetType,
}

/// Which updates of a watched object reach the pipeline (adds and deletes always do).
#[derive(Debug, Clone, PartialEq)]
pub enum Predicate {
    GenerationChanged,
    ResourceVersionChanged,
    LabelChanged,
    AnnotationChanged,
    And(Vec<Predicate>),
    Or(Vec<Predicate>),
    Not(Box<Predicate>),
}

impl Predicate {
    /// Whether an update from `old` to `new` passes.
    pub fn passes(&self, old: &Value, new: &Value) -> bool {
        let differs = |pointer: &str| old.pointer(pointer) != new.pointer(pointer);
        match self {
            Predicate::GenerationChanged => differs("/metadata/generation"),
            Predicate::ResourceVersionChanged => differs("/metadata/resourceVersion"),
            Predicate::LabelChanged => differs("/metadata/labels"),
            Predicate::AnnotationChanged => differs("/metadata/annotations"),
            Predicate::And(all) => all.iter().all(|p| p.passes(old, new)),
            Predicate::Or(any) => any.iter().any(|p| p.passes(old, new)),
            Predicate::Not(p) => !p.passes(old, new),
        }
    }

    fn parse(v: &Value, at: &str) -> Result<Predicate, CompileError> {
        let fail = |reason: String| CompileError {
            at: at.to_owned(),
            reason,
        };
        match v {
            Value::String(s) => match s.as_str() {
                "GenerationChanged" => Ok(Predicate::GenerationChanged),
                "ResourceVersionChanged" => Ok(Predicate::ResourceVersionChanged),
                "LabelChanged" | "LabelsChanged" => Ok(Predicate::LabelChanged),
                "AnnotationChanged" | "AnnotationsChanged" => Ok(Predicate::AnnotationChanged),
                other => Err(fail(format!(
                    "unknown predicate {other:?} (one of GenerationChanged, \
                     ResourceVersionChanged, LabelChanged, AnnotationChanged, and, or, not)"
                ))),
            },
            Value::Object(map) if map.len() == 1 => {
                let (k, inner) = map.iter().next().expect("one key");
                let here = format!("{at}.{k}");
                let list = |inner: &Value| -> Result<Vec<Predicate>, CompileError> {
                    let Value::Array(items) = inner else {
                        return Err(CompileError {
                            at: here.clone(),
                            reason: "takes a list of predicates".into(),
                        });
                    };
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, p)| Predicate::parse(p, &format!("{here}[{i}]")))
                        .collect()
                };
                match k.to_ascii_lowercase().as_str() {
                    "and" => Ok(Predicate::And(list(inner)?)),
                    "or" => Ok(Predicate::Or(list(inner)?)),
                    "not" => Ok(Predicate::Not(Box::new(Predicate::parse(inner, &here)?))),
                    _ => Err(fail(format!(
                        "unknown predicate combinator {k:?} (and, or, not)"
                    ))),
                }
            }
            _ => Err(fail("a predicate is a name or {and|or|not: ...}".into())),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOperator {
    #[serde(rename = "apiVersion")]
    api_version: String,
    kind: String,
    metadata: RawMetadata,
    spec: RawSpec,
    #[serde(default)]
    #[allow(dead_code)]
    status: Option<Value>,
}

#[derive(Deserialize)]
struct RawMetadata {
    name: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpec {
    controllers: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawController {
    name: String,
    sources: Vec<Value>,
    #[serde(default)]
    pipeline: Value,
    target: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSource {
    #[serde(default)]
    api_group: Option<String>,
    #[serde(default)]
    version: Option<String>,
    kind: String,
    #[serde(default, rename = "type")]
    kind_type: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    label_selector: Option<Value>,
    #[serde(default)]
    predicate: Option<Value>,
    #[serde(default)]
    parameters: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTarget {
    #[serde(default)]
    api_group: Option<String>,
    #[serde(default)]
    version: Option<String>,
    kind: String,
    #[serde(default, rename = "type")]
    kind_type: Option<String>,
}

fn problem(at: impl Into<String>, reason: impl Into<String>) -> CompileError {
    CompileError {
        at: at.into(),
        reason: reason.into(),
    }
}

fn from_value<T: serde::de::DeserializeOwned>(v: &Value, at: &str) -> Result<T, CompileError> {
    serde_json::from_value(v.clone()).map_err(|e| problem(at, e.to_string()))
}

impl Operator {
    /// Reads one Operator document.
    pub fn from_value(doc: &Value) -> Result<Operator, SpecError> {
        let name = doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let fail = |problems| SpecError {
            operator: name.clone(),
            problems,
        };
        let raw: RawOperator = from_value(doc, "operator").map_err(|p| fail(vec![p]))?;
        let mut problems = Vec::new();
        if raw.api_version != API_VERSION {
            problems.push(problem(
                "apiVersion",
                format!("is {:?}, not {API_VERSION}", raw.api_version),
            ));
        }
        if raw.kind != "Operator" {
            problems.push(problem("kind", format!("is {:?}, not Operator", raw.kind)));
        }
        if !berth_names::is_dns_label(&raw.metadata.name) {
            problems.push(problem(
                "metadata.name",
                format!(
                    "{:?} is not a DNS label (it names the view group <name>.{VIEW_GROUP_SUFFIX})",
                    raw.metadata.name
                ),
            ));
        }
        let controllers = &raw.spec.controllers;
        if controllers.is_empty() || controllers.len() > MAX_CONTROLLERS {
            problems.push(problem(
                "spec.controllers",
                format!(
                    "has {} controllers; an operator has 1 to {MAX_CONTROLLERS}",
                    controllers.len()
                ),
            ));
        }
        let mut out = Vec::with_capacity(controllers.len());
        for (i, c) in controllers.iter().enumerate() {
            let label = c
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .map_or_else(
                    || format!("spec.controllers[{i}]"),
                    |n| format!("controller {n:?}"),
                );
            match Controller::parse(c) {
                Ok(c) => {
                    if out.iter().any(|o: &Controller| o.name == c.name) {
                        problems.push(problem(label, "a second controller of that name"));
                    } else {
                        out.push(c);
                    }
                }
                Err(mut ps) => {
                    for p in &mut ps {
                        p.at = format!("{label}: {}", p.at);
                    }
                    problems.extend(ps);
                }
            }
        }
        if !problems.is_empty() {
            return Err(fail(problems));
        }
        Ok(Operator {
            name: raw.metadata.name,
            controllers: out,
            document: doc.clone(),
        })
    }
}

impl Controller {
    fn parse(v: &Value) -> Result<Controller, Vec<CompileError>> {
        let raw: RawController = from_value(v, "controller").map_err(|p| vec![p])?;
        let mut problems = Vec::new();
        if raw.name.is_empty() {
            problems.push(problem("name", "is empty"));
        }
        if raw.sources.is_empty() || raw.sources.len() > MAX_SOURCES {
            problems.push(problem(
                "sources",
                format!(
                    "has {} sources; a controller has 1 to {MAX_SOURCES}",
                    raw.sources.len()
                ),
            ));
        }
        let mut sources = Vec::new();
        for (i, s) in raw.sources.iter().enumerate() {
            match Source::parse(s, &format!("sources[{i}]")) {
                Ok(s) => sources.push(s),
                Err(p) => problems.push(p),
            }
        }
        let target = match Target::parse(&raw.target) {
            Ok(t) => Some(t),
            Err(p) => {
                problems.push(p);
                None
            }
        };
        let inputs = sources
            .iter()
            .filter(|s| s.kind != SourceType::Periodic)
            .count();
        let mut kinds: Vec<&str> = sources
            .iter()
            .filter(|s| s.kind != SourceType::Periodic)
            .map(|s| s.resource.kind.as_str())
            .collect();
        kinds.sort_unstable();
        if kinds.windows(2).any(|w| w[0] == w[1]) {
            problems.push(problem(
                "sources",
                "two sources of one kind: a joined row holds one object per kind",
            ));
        }
        let pipeline = match Pipeline::compile(&raw.pipeline, inputs, "pipeline") {
            Ok(p) => Some(p),
            Err(p) => {
                problems.push(p);
                None
            }
        };
        match (pipeline, target) {
            (Some(pipeline), Some(target)) if problems.is_empty() => Ok(Controller {
                name: raw.name,
                sources,
                pipeline,
                target,
            }),
            _ => Err(problems),
        }
    }

    /// The sources whose objects flow into the pipeline (all but Periodic ones), in order.
    pub fn inputs(&self) -> impl Iterator<Item = &Source> {
        self.sources
            .iter()
            .filter(|s| s.kind != SourceType::Periodic)
    }
}

impl Source {
    fn parse(v: &Value, at: &str) -> Result<Source, CompileError> {
        let raw: RawSource = from_value(v, at)?;
        if raw.kind.is_empty() {
            return Err(problem(format!("{at}.kind"), "is empty"));
        }
        let kind = match raw.kind_type.as_deref() {
            None | Some("") => SourceType::Watcher,
            Some(t) => t.parse().map_err(|_| {
                problem(
                    format!("{at}.type"),
                    format!("{t:?} is not one of Watcher, OneShot, Periodic"),
                )
            })?,
        };
        let label_selector = raw
            .label_selector
            .map(|sel| {
                LabelSelector::parse(sel, &format!("{at}.labelSelector"))
                    .map_err(|e| problem(format!("{at}.labelSelector"), e.to_string()))
            })
            .transpose()?;
        let predicate = raw
            .predicate
            .as_ref()
            .map(|p| Predicate::parse(p, &format!("{at}.predicate")))
            .transpose()?;
        let mut period = Duration::from_secs(300);
        if let Some(p) = raw
            .parameters
            .as_ref()
            .and_then(|params| params.get("period"))
        {
            let text = p.as_str().unwrap_or_default();
            period = parse_duration(text)
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    problem(
                        format!("{at}.parameters.period"),
                        format!("{p} is not a positive duration such as \"30s\" or \"5m\""),
                    )
                })?;
        }
        if kind != SourceType::Watcher && (raw.namespace.is_some() || label_selector.is_some()) {
            return Err(problem(
                at,
                "namespace and labelSelector apply to Watcher sources only",
            ));
        }
        Ok(Source {
            resource: Resource {
                group: raw.api_group,
                version: raw.version.filter(|v| !v.is_empty()),
                kind: raw.kind,
            },
            kind,
            namespace: raw.namespace.filter(|n| !n.is_empty()),
            label_selector,
            predicate,
            period,
        })
    }
}

impl Target {
    fn parse(v: &Value) -> Result<Target, CompileError> {
        let raw: RawTarget = from_value(v, "target")?;
        if raw.kind.is_empty() {
            return Err(problem("target.kind", "is empty"));
        }
        let kind = match raw.kind_type.as_deref() {
            None | Some("") => TargetType::Updater,
            Some(t) => t.parse().map_err(|_| {
                problem(
                    "target.type",
                    format!("{t:?} is not one of Updater, Patcher"),
                )
            })?,
        };
        Ok(Target {
            resource: Resource {
                group: raw.api_group,
                version: raw.version.filter(|v| !v.is_empty()),
                kind: raw.kind,
            },
            kind,
        })
    }
}

/// A Go duration (`300ms`, `30s`, `5m`, `1h30m`).
pub fn parse_duration(text: &str) -> Option<Duration> {
    if text.is_empty() {
        return None;
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        let number: f64 = number.parse().ok()?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        total += number * scale;
        rest = tail;
    }
    Duration::try_from_secs_f64(total).ok()
}

/// Reads every Operator of a YAML stream (documents of other kinds are refused). A document
/// that is a bare operator spec (`controllers:` at the top, as upstream's `NewFromFile` reads)
/// becomes an Operator named `bare_name`.
pub fn read_operators(text: &str, file: &str, bare_name: &str) -> Result<Vec<Operator>, String> {
    if text.len() > crate::limits::MAX_SPEC_BYTES {
        return Err(format!(
            "{file}: {} bytes; an operator spec has at most {}",
            text.len(),
            crate::limits::MAX_SPEC_BYTES
        ));
    }
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| format!("{file}: not YAML: {e}"))?;
    let mut out = Vec::new();
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let bare = doc.get("controllers").is_some() && doc.get("kind").is_none();
        let doc = if bare {
            serde_json::json!({"apiVersion": API_VERSION, "kind": "Operator",
                "metadata": {"name": bare_name}, "spec": doc})
        } else {
            doc
        };
        out.push(Operator::from_value(&doc).map_err(|e| format!("{file}: {e}"))?);
    }
    if out.is_empty() {
        return Err(format!("{file}: holds no Operator"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn op(controllers: Value) -> Value {
        json!({"apiVersion": API_VERSION, "kind": "Operator", "metadata": {"name": "op"},
               "spec": {"controllers": controllers}})
    }

    #[test]
    fn a_valid_operator_reads() {
        let o = Operator::from_value(&op(json!([{
            "name": "c", "sources": [{"apiGroup": "", "kind": "Pod",
                "labelSelector": {"matchLabels": {"a": "b"}},
                "predicate": {"and": ["ResourceVersionChanged", {"or": ["AnnotationChanged", "LabelsChanged"]}]}},
                {"kind": "Tick", "type": "Periodic", "parameters": {"period": "30s"}}],
            "pipeline": {"@project": {"metadata": "$.metadata"}},
            "target": {"kind": "PodView"}}])))
        .expect("valid");
        let c = &o.controllers[0];
        assert_eq!(c.inputs().count(), 1);
        assert_eq!(c.sources[1].period, Duration::from_secs(30));
        assert_eq!(c.target.kind, TargetType::Updater);
        assert!(c.target.resource.is_view("op"));
        assert_eq!(c.sources[0].resource.group_of("op"), "");
    }

    #[test]
    fn every_problem_is_named_with_its_controller_and_field() {
        let e = Operator::from_value(&op(json!([
            {"name": "a", "sources": [{"kind": "Pod", "type": "Sometimes"}], "target": {"kind": "X"}},
            {"name": "b", "sources": [{"kind": "A"}, {"kind": "B"}],
             "pipeline": [{"@project": {}}], "target": {"kind": "X", "type": "Writer"}},
            {"name": "c", "sources": [{"kind": "A"}], "pipeline": {"@select": {"@nope": 1}},
             "target": {"kind": "X"}},
            {"name": "d", "sources": [{"kind": "A", "colour": "red"}], "target": {"kind": "X"}},
        ])))
        .expect_err("invalid");
        let text = e.to_string();
        assert!(text.contains("controller \"a\": sources[0].type"), "{text}");
        assert!(text.contains("controller \"b\": target.type"), "{text}");
        assert!(
            text.contains("controller \"b\": pipeline: a controller with 2 sources needs @join"),
            "{text}"
        );
        assert!(
            text.contains("controller \"c\": pipeline.@select.@nope: unknown operator"),
            "{text}"
        );
        assert!(
            text.contains("controller \"d\": sources[0]: unknown field `colour`"),
            "{text}"
        );
        assert_eq!(e.problems.len(), 5, "{text}");
    }

    #[test]
    fn durations_read_as_go_writes_them() {
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("5"), None);
        assert_eq!(parse_duration("5d"), None);
    }
}
