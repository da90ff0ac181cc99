//! A controller's pipeline: an optional `@join` over its sources, then `@select`, `@project`,
//! `@unwind` (`@demux`) and `@gather` (`@mux`) stages in order.

use serde_json::Value;

use crate::expr::{CompileError, Env, EvalError, Expr, Scope, Subject};
use crate::jsonpath::JsonPath;
use crate::value::{key_of, type_name};

/// One stage after the join.
#[derive(Debug, Clone, PartialEq)]
pub enum Stage {
    Select(Expr),
    Project(Expr),
    Unwind {
        at: String,
        path: JsonPath,
    },
    Gather {
        at: String,
        key: Expr,
        value: JsonPath,
    },
}

/// A compiled pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    pub join: Option<Expr>,
    pub stages: Vec<Stage>,
}

/// A document in the pipeline: a source object or a joined row (borrowed) until a stage
/// reshapes it, then one document.
#[derive(Debug, Clone)]
pub enum Item<'a> {
    Source(&'a Value),
    Row(&'a [(&'a str, &'a Value)]),
    Doc(Value),
}

impl Item<'_> {
    fn subject(&self) -> Subject<'_> {
        match self {
            Item::Source(doc) => Subject::Doc(doc),
            Item::Row(row) => Subject::Row(row),
            Item::Doc(doc) => Subject::Doc(doc),
        }
    }

    /// The item as one document.
    pub fn into_doc(self) -> Value {
        match self {
            Item::Source(doc) => doc.clone(),
            Item::Row(row) => Subject::Row(row).to_value(),
            Item::Doc(doc) => doc,
        }
    }
}

fn compile_err(at: &str, reason: impl Into<String>) -> CompileError {
    CompileError {
        at: at.to_owned(),
        reason: reason.into(),
    }
}

impl Pipeline {
    /// Compiles a pipeline: one operation (`{"@project": ...}`) or a list of them. `inputs` is
    /// how many sources flow into it: more than one needs a `@join` first.
    pub fn compile(v: &Value, inputs: usize, at: &str) -> Result<Pipeline, CompileError> {
        let ops: Vec<(String, &Value)> = match v {
            Value::Array(list) => list
                .iter()
                .enumerate()
                .map(|(i, op)| (format!("{at}[{i}]"), op))
                .collect(),
            Value::Object(_) => vec![(at.to_owned(), v)],
            Value::Null => Vec::new(),
            other => {
                return Err(compile_err(
                    at,
                    format!(
                        "a pipeline is an operation or a list of them, not a {}",
                        type_name(other)
                    ),
                ));
            }
        };
        let mut join = None;
        let mut stages = Vec::with_capacity(ops.len());
        for (i, (here, op)) in ops.into_iter().enumerate() {
            let Value::Object(map) = op else {
                return Err(compile_err(
                    &here,
                    "a pipeline operation is a map with one @-key",
                ));
            };
            let mut keys = map.iter();
            let (Some((name, arg)), None) = (keys.next(), keys.next()) else {
                return Err(compile_err(
                    &here,
                    format!(
                        "a pipeline operation has exactly one key, not {}",
                        map.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            };
            let at = format!("{here}.{name}");
            match name.as_str() {
                "@join" if i == 0 => join = Some(Expr::compile(arg, &at)?),
                "@join" => return Err(compile_err(&at, "@join must be the first operation")),
                "@select" => stages.push(Stage::Select(Expr::compile(arg, &at)?)),
                "@project" => stages.push(Stage::Project(Expr::compile(arg, &at)?)),
                "@unwind" | "@demux" => {
                    let path = literal_path(arg, &at, name)?;
                    stages.push(Stage::Unwind { at, path });
                }
                "@gather" | "@mux" => {
                    let Value::Array(args) = arg else {
                        return Err(compile_err(&at, format!("{name} takes [key, JSONPath]")));
                    };
                    let [key, value] = args.as_slice() else {
                        return Err(compile_err(
                            &at,
                            format!("{name} takes 2 arguments, not {}", args.len()),
                        ));
                    };
                    let key = Expr::compile(key, &format!("{at}[0]"))?;
                    let value = literal_path(value, &format!("{at}[1]"), name)?;
                    stages.push(Stage::Gather { at, key, value });
                }
                other => {
                    return Err(compile_err(
                        &at,
                        format!(
                            "unknown pipeline operation {other} (one of @join, @select, \
                             @project, @unwind, @demux, @gather, @mux)"
                        ),
                    ));
                }
            }
        }
        if inputs > 1 && join.is_none() {
            return Err(compile_err(
                at,
                format!("a controller with {inputs} sources needs @join as its first operation"),
            ));
        }
        Ok(Pipeline { join, stages })
    }

    /// Where the first `@gather` is: stages before it work one document at a time.
    pub fn gather_at(&self) -> Option<usize> {
        self.stages
            .iter()
            .position(|s| matches!(s, Stage::Gather { .. }))
    }

    /// Whether a joined row passes the `@join` condition.
    pub fn joins(&self, row: &[(&str, &Value)], env: &Env) -> Result<bool, EvalError> {
        let Some(join) = &self.join else {
            return Ok(true);
        };
        let s = Scope {
            subject: Subject::Row(row),
            local: None,
            env,
        };
        let v = join.eval_cow(&s)?;
        match &*v {
            Value::Bool(b) => Ok(*b),
            other => Err(EvalError {
                at: "@join".into(),
                reason: format!("the condition gave a {}, not a boolean", type_name(other)),
            }),
        }
    }

    /// Runs `stages[from..to]`, which hold no `@gather`, on one item.
    pub fn run_linear<'a>(
        &self,
        range: std::ops::Range<usize>,
        item: Item<'a>,
        env: &Env,
    ) -> Result<Vec<Value>, EvalError> {
        let mut items = vec![item];
        for stage in &self.stages[range] {
            let mut next = Vec::with_capacity(items.len());
            for item in items {
                apply_linear(stage, item, env, &mut next)?;
            }
            items = next;
            if items.is_empty() {
                break;
            }
        }
        Ok(items.into_iter().map(Item::into_doc).collect())
    }

    /// Runs `stages[from..]` on a batch of documents, `@gather`s included.
    pub fn run_batch(
        &self,
        from: usize,
        docs: Vec<Value>,
        env: &Env,
    ) -> Result<Vec<Value>, EvalError> {
        let mut docs = docs;
        for stage in &self.stages[from..] {
            if let Stage::Gather { at, key, value } = stage {
                let mut groups: Groups = Groups::default();
                for (i, doc) in docs.into_iter().enumerate() {
                    groups.add(key, value, at, vec![i], doc, env)?;
                }
                docs = groups.outputs(value, at)?;
                continue;
            }
            let mut next = Vec::with_capacity(docs.len());
            for doc in docs {
                apply_linear(stage, Item::Doc(doc), env, &mut next)?;
            }
            docs = next.into_iter().map(Item::into_doc).collect();
        }
        Ok(docs)
    }
}

fn literal_path(arg: &Value, at: &str, op: &str) -> Result<JsonPath, CompileError> {
    match arg {
        Value::String(s) if s.starts_with('$') && !s.starts_with("$$") => {
            JsonPath::parse(s).map_err(|e| compile_err(at, format!("JSONPath {s:?}: {}", e.reason)))
        }
        _ => Err(compile_err(at, format!("{op} takes a JSONPath (`$.a.b`)"))),
    }
}

fn apply_linear<'a>(
    stage: &Stage,
    item: Item<'a>,
    env: &Env,
    out: &mut Vec<Item<'a>>,
) -> Result<(), EvalError> {
    match stage {
        Stage::Select(e) => {
            let keep = {
                let s = Scope {
                    subject: item.subject(),
                    local: None,
                    env,
                };
                let v = e.eval_cow(&s)?;
                match &*v {
                    Value::Bool(b) => *b,
                    other => {
                        return Err(EvalError {
                            at: "@select".into(),
                            reason: format!(
                                "the condition gave a {}, not a boolean",
                                type_name(other)
                            ),
                        });
                    }
                }
            };
            if keep {
                out.push(item);
            }
        }
        Stage::Project(e) => {
            let s = Scope {
                subject: item.subject(),
                local: None,
                env,
            };
            let v = e.eval(&s)?;
            out.push(Item::Doc(project_result(v)?));
        }
        Stage::Unwind { at, path } => {
            let doc = item.into_doc();
            let name = match doc.pointer("/metadata/name") {
                Some(Value::String(name)) if !name.is_empty() => name.clone(),
                _ => {
                    return Err(EvalError {
                        at: at.clone(),
                        reason: "@unwind needs the object's metadata.name".into(),
                    });
                }
            };
            let list = match path.get(&doc) {
                None | Some(Value::Null) => return Ok(()),
                Some(Value::Array(list)) => list.clone(),
                Some(other) => {
                    return Err(EvalError {
                        at: at.clone(),
                        reason: format!("{path} is a {}, not a list", type_name(other)),
                    });
                }
            };
            let per_copy = crate::expr::weight(&doc);
            env.charge((list.len() as u64).saturating_mul(per_copy))
                .map_err(|reason| EvalError {
                    at: at.clone(),
                    reason,
                })?;
            for (i, elem) in list.into_iter().enumerate() {
                let mut copy = doc.clone();
                let set = path.set(&mut copy, elem).and_then(|()| {
                    crate::jsonpath::JsonPath::parse("$.metadata.name")?
                        .set(&mut copy, Value::String(format!("{name}-{i}")))
                });
                set.map_err(|e| EvalError {
                    at: at.clone(),
                    reason: e.to_string(),
                })?;
                out.push(Item::Doc(copy));
            }
        }
        Stage::Gather { at, .. } => {
            return Err(EvalError {
                at: at.clone(),
                reason: "internal: @gather run as a one-document stage".into(),
            });
        }
    }
    Ok(())
}

/// `@project`'s result: a map, or a list of maps merged in order.
fn project_result(v: Value) -> Result<Value, EvalError> {
    match v {
        Value::Object(_) => Ok(v),
        Value::Array(list) => {
            let mut out = Value::Null;
            for item in list {
                if !item.is_object() {
                    return Err(EvalError {
                        at: "@project".into(),
                        reason: format!("a step gave a {}, not a map", type_name(&item)),
                    });
                }
                out = merge(out, item);
            }
            if out.is_null() {
                out = Value::Object(Default::default());
            }
            Ok(out)
        }
        other => Err(EvalError {
            at: "@project".into(),
            reason: format!("the projection gave a {}, not a map", type_name(&other)),
        }),
    }
}

/// Upstream's merge of projection steps: maps merge key by key, lists concatenate, anything
/// else replaces.
pub fn merge(a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Null, b) => b,
        (Value::Object(mut a), Value::Object(b)) => {
            for (k, vb) in b {
                let merged = match a.remove(&k) {
                    Some(va) => merge(va, vb),
                    None => vb,
                };
                a.insert(k, merged);
            }
            Value::Object(a)
        }
        (Value::Array(mut a), Value::Array(b)) => {
            a.extend(b);
            Value::Array(a)
        }
        (_, b) => b,
    }
}

/// `@gather`'s groups: per key, the members (by origin, so removing one is exact) with the
/// value each contributes. The first member by origin is the group's template.
#[derive(Debug, Clone)]
pub struct Groups<O: Ord = Vec<usize>> {
    pub groups: std::collections::BTreeMap<String, Group<O>>,
    /// Which group each origin is in, to remove it.
    member_of: std::collections::BTreeMap<O, String>,
}

impl<O: Ord> Default for Groups<O> {
    fn default() -> Self {
        Groups {
            groups: Default::default(),
            member_of: Default::default(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Group<O: Ord = Vec<usize>> {
    pub members: std::collections::BTreeMap<O, (Value, Value)>,
}

impl<O: Ord> Default for Group<O> {
    fn default() -> Self {
        Group {
            members: Default::default(),
        }
    }
}

impl<O: Ord + Clone> Groups<O> {
    /// Removes a member; returns its group's key.
    pub fn remove(&mut self, origin: &O) -> Option<String> {
        let key = self.member_of.remove(origin)?;
        if let Some(group) = self.groups.get_mut(&key) {
            group.members.remove(origin);
            if group.members.is_empty() {
                self.groups.remove(&key);
            }
        }
        Some(key)
    }

    /// Adds a document under `origin`; returns its group key, or None when its key or value
    /// is null (upstream skips those).
    pub fn add(
        &mut self,
        key: &Expr,
        value: &JsonPath,
        at: &str,
        origin: O,
        doc: Value,
        env: &Env,
    ) -> Result<Option<String>, EvalError> {
        let (k, v) = {
            let s = Scope {
                subject: Subject::Doc(&doc),
                local: None,
                env,
            };
            let k = key.eval(&s).map_err(|e| EvalError {
                at: format!("{at}[0]"),
                reason: e.to_string(),
            })?;
            (k, value.get(&doc).cloned().unwrap_or(Value::Null))
        };
        if k.is_null() || v.is_null() {
            return Ok(None);
        }
        let group_key = key_of(&k);
        self.member_of.insert(origin.clone(), group_key.clone());
        self.groups
            .entry(group_key.clone())
            .or_default()
            .members
            .insert(origin, (doc, v));
        Ok(Some(group_key))
    }

    /// The output of one group: its template with the values, sorted, at the path.
    pub fn output(
        group: &Group<O>,
        value: &JsonPath,
        at: &str,
    ) -> Result<Option<Value>, EvalError> {
        let Some((template, _)) = group.members.values().next() else {
            return Ok(None);
        };
        let mut values: Vec<&Value> = group.members.values().map(|(_, v)| v).collect();
        values.sort_by_cached_key(|v| key_of(v));
        let mut doc = template.clone();
        value
            .set(
                &mut doc,
                Value::Array(values.into_iter().cloned().collect()),
            )
            .map_err(|e| EvalError {
                at: at.to_owned(),
                reason: e.to_string(),
            })?;
        Ok(Some(doc))
    }

    fn outputs(&self, value: &JsonPath, at: &str) -> Result<Vec<Value>, EvalError> {
        let mut out = Vec::with_capacity(self.groups.len());
        for group in self.groups.values() {
            out.extend(Self::output(group, value, at)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env() -> Env {
        Env::new(chrono::Utc::now())
    }

    fn run(spec: Value, docs: Vec<Value>) -> Vec<Value> {
        let p = Pipeline::compile(&spec, 1, "pipeline").expect("compiles");
        let env = env();
        let end = p.gather_at().unwrap_or(p.stages.len());
        let mut mid = Vec::new();
        for d in docs {
            mid.extend(p.run_linear(0..end, Item::Doc(d), &env).expect("runs"));
        }
        let mut out = p.run_batch(end, mid, &env).expect("runs");
        out.sort_by_key(|d| d.pointer("/metadata/name").map(ToString::to_string));
        out
    }

    #[test]
    fn project_builds_fresh_objects_and_merges_steps() {
        let out = run(
            json!({"@project": {"metadata": {"name": "$.metadata.name"}, "node": "$.spec.nodeName"}}),
            vec![json!({"metadata": {"name": "pod-a"}, "spec": {"nodeName": "node-1"}})],
        );
        assert_eq!(
            out,
            vec![json!({"metadata": {"name": "pod-a"}, "node": "node-1"})]
        );
        let out = run(
            json!([{"@project": [
                {"metadata": "$.metadata"},
                {"$.spec.replicas": 3},
                {"$.metadata.annotations.new-annotation": "true"}]}]),
            vec![json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {"x": 1}})],
        );
        assert_eq!(
            out,
            vec![json!({"metadata": {"name": "a", "namespace": "n",
                "annotations": {"new-annotation": "true"}}, "spec": {"replicas": 3}})]
        );
    }

    #[test]
    fn unwind_names_each_copy_by_its_index() {
        let out = run(
            json!({"@unwind": "$.spec.ports"}),
            vec![json!({"metadata": {"name": "my-svc"}, "spec": {"ports": [
                {"name": "http", "port": 80}, {"name": "https", "port": 443}]}})],
        );
        assert_eq!(
            out,
            vec![
                json!({"metadata": {"name": "my-svc-0"}, "spec": {"ports": {"name": "http", "port": 80}}}),
                json!({"metadata": {"name": "my-svc-1"}, "spec": {"ports": {"name": "https", "port": 443}}}),
            ]
        );
        assert!(
            run(
                json!({"@unwind": "$.spec.none"}),
                vec![json!({"metadata": {"name": "x"}})]
            )
            .is_empty()
        );
    }

    #[test]
    fn gather_groups_values_under_the_first_template() {
        let docs = vec![
            json!({"metadata": {"name": "my-svc-http-ep0"}, "spec": {"service": "my-svc", "port": 80, "address": "10.1.1.1"}}),
            json!({"metadata": {"name": "my-svc-https-ep0"}, "spec": {"service": "my-svc", "port": 443, "address": "10.1.1.2"}}),
            json!({"metadata": {"name": "my-svc-http-ep1"}, "spec": {"service": "my-svc", "port": 80, "address": "10.1.1.3"}}),
        ];
        let out = run(
            json!([{"@gather": ["$.spec.port", "$.spec.address"]}]),
            docs,
        );
        assert_eq!(
            out,
            vec![
                json!({"metadata": {"name": "my-svc-http-ep0"}, "spec": {"service": "my-svc", "port": 80, "address": ["10.1.1.1", "10.1.1.3"]}}),
                json!({"metadata": {"name": "my-svc-https-ep0"}, "spec": {"service": "my-svc", "port": 443, "address": ["10.1.1.2"]}}),
            ]
        );
    }

    #[test]
    fn bad_pipelines_are_refused_where_they_are_wrong() {
        let e = Pipeline::compile(&json!([{"@project": {}}]), 2, "pipeline").expect_err("join");
        assert!(e.reason.contains("needs @join"), "{e}");
        let e = Pipeline::compile(&json!([{"@select": true}, {"@join": true}]), 1, "pipeline")
            .expect_err("late join");
        assert_eq!(e.at, "pipeline[1].@join");
        let e = Pipeline::compile(&json!([{"@aggregate": []}]), 1, "pipeline").expect_err("op");
        assert!(
            e.reason.contains("unknown pipeline operation @aggregate"),
            "{e}"
        );
        let e =
            Pipeline::compile(&json!({"@unwind": {"@len": 1}}), 1, "pipeline").expect_err("path");
        assert!(e.reason.contains("takes a JSONPath"), "{e}");
    }
}
