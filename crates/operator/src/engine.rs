//! One controller, evaluated incrementally: an event recomputes only what it touches.
//!
//! The engine keeps, per source, the objects it has seen; per joined row (one object of each
//! source), what the stages before the first `@gather` made of it; per `@gather` group, its
//! members; and the target state it last wrote. An upsert or delete of one object retracts
//! the rows that hold it, joins the new object with the other sources' objects (so a
//! two-source join costs one pass over the other source, not a product), reruns the groups it
//! changed, and turns the difference of the target state into writes: an upsert for an
//! object that appears or changes, a delete for one no row makes any more.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

use crate::expr::{Env, EvalError, Expr, Op};
use crate::jsonpath::JsonPath;
use crate::pipeline::{Groups, Item, Pipeline};
use crate::spec::{Controller, Predicate, Source};
use crate::value::{key_of, type_name};

/// An object's namespace and name, shared: every row key, index entry and origin that names
/// an object holds a reference, not a copy.
pub type ObjKey = Arc<(String, String)>;

/// The key of an object.
pub fn obj_key(v: &Value) -> ObjKey {
    let field = |f: &str| {
        v.pointer(&format!("/metadata/{f}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    Arc::new((field("namespace"), field("name")))
}

/// A change of one source object.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Upsert(Value),
    Delete(Value),
}

/// A change the target is to receive.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// The object (an Updater's whole object, a Patcher's patch) appeared or changed.
    Upsert(Value),
    /// No row makes the object any more; the value is the output last written.
    Delete(Value),
}

/// The writes one event causes, and the errors evaluating it met (the rows that failed make
/// nothing; the others go on).
#[derive(Debug, Default)]
pub struct Outcome {
    pub writes: Vec<Write>,
    pub errors: Vec<EvalError>,
}

type RowKey = Vec<ObjKey>;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Origin {
    Row(RowKey, usize),
    Group(String, usize),
    Tail(usize),
}

/// The incremental state of one controller.
#[derive(Debug)]
pub struct Engine {
    controller: Controller,
    api_version: String,
    kind: String,
    /// The inputs (sources but Periodic ones): their kinds and their objects.
    kinds: Vec<String>,
    caches: Vec<BTreeMap<ObjKey, Value>>,
    /// What the stages before the first `@gather` made of each joined row.
    rows: BTreeMap<RowKey, Vec<Arc<Value>>>,
    /// Per input, per object: the rows that hold it.
    index: Vec<BTreeMap<ObjKey, BTreeSet<RowKey>>>,
    groups: Groups<(RowKey, usize)>,
    /// Per group, the outputs its tail made last.
    tails: BTreeMap<String, usize>,
    /// Per output object, who makes it (several rows may make one object; any one counts).
    produced: BTreeMap<ObjKey, BTreeMap<Origin, Arc<Value>>>,
    /// Which object each origin makes.
    made_by: BTreeMap<Origin, ObjKey>,
    target: BTreeMap<ObjKey, Arc<Value>>,
    pipeline: Arc<Pipeline>,
    /// The `@join`'s equalities between two sources, each with, per value, the objects of
    /// each side that have it: an event joins with the objects its values match, not with
    /// every object of the other source.
    equalities: Vec<Equality>,
}

/// `"@eq": ["$.A.x", "$.B.y"]`, a conjunct of the `@join`: an index of source `A` by `x` and
/// of `B` by `y`.
#[derive(Debug)]
struct Equality {
    sides: [(usize, JsonPath); 2],
    index: [BTreeMap<String, BTreeSet<ObjKey>>; 2],
}

impl Equality {
    /// The key an object of `input` is indexed under for this equality (None: the object
    /// cannot satisfy it, its value being null or missing).
    fn key(&self, side: usize, obj: &Value) -> Option<String> {
        match self.sides[side].1.get_below_first(obj) {
            None | Some(Value::Null) => None,
            Some(v) => Some(key_of(v)),
        }
    }

    fn side_of(&self, input: usize) -> Option<usize> {
        self.sides.iter().position(|(i, _)| *i == input)
    }
}

/// The equalities between two different sources among the `@join`'s conjuncts.
fn equalities(pipeline: &Pipeline, kinds: &[String]) -> Vec<Equality> {
    let Some(join) = &pipeline.join else {
        return Vec::new();
    };
    let conjuncts: &[Expr] = match join {
        Expr::Op {
            op: Op::And, arg, ..
        } => match &**arg {
            Expr::List(items) => items,
            other => std::slice::from_ref(other),
        },
        other => std::slice::from_ref(other),
    };
    let side = |e: &Expr| -> Option<(usize, JsonPath)> {
        let path = e.as_path()?;
        let kind = path.first_child()?;
        let input = kinds.iter().position(|k| k == kind)?;
        Some((input, path.clone()))
    };
    let mut out = Vec::new();
    for c in conjuncts {
        let Expr::Op {
            op: Op::Eq, arg, ..
        } = c
        else {
            continue;
        };
        let Expr::List(pair) = &**arg else {
            continue;
        };
        let [a, b] = pair.as_slice() else {
            continue;
        };
        if let (Some(a), Some(b)) = (side(a), side(b))
            && a.0 != b.0
        {
            out.push(Equality {
                sides: [a, b],
                index: [BTreeMap::new(), BTreeMap::new()],
            });
        }
    }
    out
}

impl Engine {
    /// An engine for `controller`, whose outputs get `api_version` and `kind`.
    pub fn new(controller: Controller, api_version: String, kind: String) -> Engine {
        let kinds: Vec<String> = controller
            .inputs()
            .map(|s| s.resource.kind.clone())
            .collect();
        let n = kinds.len();
        let equalities = equalities(&controller.pipeline, &kinds);
        let pipeline = Arc::new(controller.pipeline.clone());
        Engine {
            controller,
            api_version,
            kind,
            kinds,
            caches: vec![BTreeMap::new(); n],
            rows: BTreeMap::new(),
            index: vec![BTreeMap::new(); n],
            groups: Groups::default(),
            tails: BTreeMap::new(),
            produced: BTreeMap::new(),
            made_by: BTreeMap::new(),
            target: BTreeMap::new(),
            equalities,
            pipeline,
        }
    }

    pub fn controller(&self) -> &Controller {
        &self.controller
    }

    /// The target state the engine has written: per object, its last output.
    pub fn target(&self) -> &BTreeMap<ObjKey, Arc<Value>> {
        &self.target
    }

    /// The input sources, in order (the `input` of `on_event`).
    pub fn inputs(&self) -> Vec<&Source> {
        self.controller.inputs().collect()
    }

    /// Objects held per input.
    pub fn cached(&self) -> usize {
        self.caches.iter().map(BTreeMap::len).sum()
    }

    /// Applies a change of one object of input `input`.
    pub fn on_event(&mut self, input: usize, event: Event, env: &Env) -> Outcome {
        let mut out = Outcome::default();
        let Some(source) = self.controller.inputs().nth(input) else {
            return out;
        };
        let is_secret =
            source.resource.group.as_deref() == Some("") && source.resource.kind == "Secret";
        let predicate: Option<Predicate> = source.predicate.clone();
        let (key, upsert) = match event {
            Event::Upsert(mut obj) => {
                if is_secret {
                    decode_secret(&mut obj);
                }
                let key = obj_key(&obj);
                match self.caches[input].get(&key) {
                    Some(old) if *old == obj => return out,
                    Some(old) if predicate.as_ref().is_some_and(|p| !p.passes(old, &obj)) => {
                        return out;
                    }
                    _ => {}
                }
                if let Some(old) = self.caches[input].remove(&key) {
                    self.unindex(input, &key, &old);
                }
                self.index_object(input, &key, &obj);
                self.caches[input].insert(key.clone(), obj);
                (key, true)
            }
            Event::Delete(obj) => {
                let key = obj_key(&obj);
                let Some(old) = self.caches[input].remove(&key) else {
                    return out;
                };
                self.unindex(input, &key, &old);
                (key, false)
            }
        };
        let mut touched = BTreeSet::new();
        let retracted = self.retract(input, &key);
        let added = if upsert {
            self.join_one(input, &key, env, &mut out.errors)
        } else {
            Vec::new()
        };
        self.propagate(retracted, added, env, &mut touched, &mut out.errors);
        self.diff(touched, &mut out.writes);
        out
    }

    /// Recomputes everything from the objects held (a Periodic source's state-of-the-world
    /// pass) and writes the difference.
    pub fn resync(&mut self, env: &Env) -> Outcome {
        let mut out = Outcome::default();
        let mut touched: BTreeSet<ObjKey> = self.target.keys().cloned().collect();
        self.rows.clear();
        self.index.iter_mut().for_each(BTreeMap::clear);
        // The equality indexes follow the objects held, which a resync keeps.
        self.groups = Groups::default();
        self.tails.clear();
        touched.extend(self.produced.keys().cloned());
        self.produced.clear();
        self.made_by.clear();
        let mut added = Vec::new();
        if !self.caches.is_empty() {
            let keys: Vec<ObjKey> = self.caches[0].keys().cloned().collect();
            for key in keys {
                added.extend(self.join_one(0, &key, env, &mut out.errors));
            }
        }
        self.propagate(Vec::new(), added, env, &mut touched, &mut out.errors);
        self.diff(touched, &mut out.writes);
        out
    }

    fn index_object(&mut self, input: usize, key: &ObjKey, obj: &Value) {
        for eq in &mut self.equalities {
            if let Some(side) = eq.side_of(input)
                && let Some(k) = eq.key(side, obj)
            {
                eq.index[side].entry(k).or_default().insert(key.clone());
            }
        }
    }

    fn unindex(&mut self, input: usize, key: &ObjKey, obj: &Value) {
        for eq in &mut self.equalities {
            if let Some(side) = eq.side_of(input)
                && let Some(k) = eq.key(side, obj)
                && let Some(set) = eq.index[side].get_mut(&k)
            {
                set.remove(key);
                if set.is_empty() {
                    eq.index[side].remove(&k);
                }
            }
        }
    }

    /// The objects of input `j` that may join with object `fixed` of `input`: those the
    /// equalities between the two match (all of them when there is none).
    fn candidates<'s>(
        &'s self,
        input: usize,
        fixed: &Value,
        j: usize,
    ) -> Vec<(&'s ObjKey, &'s Value)> {
        let mut picked: Option<BTreeSet<&ObjKey>> = None;
        for eq in &self.equalities {
            let (Some(mine), Some(theirs)) = (eq.side_of(input), eq.side_of(j)) else {
                continue;
            };
            let keys: BTreeSet<&ObjKey> = eq
                .key(mine, fixed)
                .and_then(|k| eq.index[theirs].get(&k))
                .map(|set| set.iter().collect())
                .unwrap_or_default();
            picked = Some(match picked {
                None => keys,
                Some(before) => before.intersection(&keys).copied().collect(),
            });
        }
        match picked {
            None => self.caches[j].iter().collect(),
            Some(keys) => keys
                .into_iter()
                .filter_map(|k| self.caches[j].get_key_value(k))
                .collect(),
        }
    }

    /// Drops the rows that hold object `key` of `input`; returns what they had made.
    fn retract(&mut self, input: usize, key: &ObjKey) -> Vec<(RowKey, Vec<Arc<Value>>)> {
        let Some(rows) = self.index[input].remove(key) else {
            return Vec::new();
        };
        let mut out = Vec::with_capacity(rows.len());
        for rk in rows {
            for (j, k) in rk.iter().enumerate() {
                if j != input
                    && let Some(set) = self.index[j].get_mut(k)
                {
                    set.remove(&rk);
                    if set.is_empty() {
                        self.index[j].remove(k);
                    }
                }
            }
            if let Some(made) = self.rows.remove(&rk) {
                out.push((rk, made));
            }
        }
        out
    }

    /// Joins object `key` of `input` with every combination of the other inputs' objects,
    /// runs the stages before `@gather` on the rows that pass, and records them.
    fn join_one(
        &mut self,
        input: usize,
        key: &ObjKey,
        env: &Env,
        errors: &mut Vec<EvalError>,
    ) -> Vec<RowKey> {
        let n = self.kinds.len();
        let Some(fixed) = self.caches[input].get(key) else {
            return Vec::new();
        };
        let pipeline = Arc::clone(&self.pipeline);
        let prefix_end = pipeline.gather_at().unwrap_or(pipeline.stages.len());
        let others: Vec<Vec<(&ObjKey, &Value)>> = (0..n)
            .map(|j| {
                if j == input {
                    vec![(key, fixed)]
                } else {
                    self.candidates(input, fixed, j)
                }
            })
            .collect();
        let mut made: Vec<(RowKey, Vec<Arc<Value>>)> = Vec::new();
        let last_stage = prefix_end == pipeline.stages.len();
        if others.iter().all(|o| !o.is_empty()) {
            let mut at = vec![0usize; n];
            let mut row: Vec<(&str, &Value)> = Vec::with_capacity(n);
            'combos: loop {
                if let Err(reason) = env.charge(1) {
                    errors.push(EvalError {
                        at: "@join".into(),
                        reason,
                    });
                    break;
                }
                row.clear();
                row.extend((0..n).map(|j| (self.kinds[j].as_str(), others[j][at[j]].1)));
                let result = if pipeline.join.is_some() || n > 1 {
                    pipeline.joins(&row, env).and_then(|pass| {
                        if pass {
                            pipeline.run_linear(0..prefix_end, Item::Row(&row), env)
                        } else {
                            Ok(Vec::new())
                        }
                    })
                } else {
                    pipeline.run_linear(0..prefix_end, Item::Source(row[0].1), env)
                };
                match result {
                    Ok(docs) if !docs.is_empty() => {
                        let rk: RowKey = (0..n).map(|j| others[j][at[j]].0.clone()).collect();
                        // Without a @gather the row's outputs are the target's objects: made
                        // whole here once, and shared with the target state.
                        let docs = docs
                            .into_iter()
                            .filter_map(|d| {
                                if !last_stage {
                                    return Some(Arc::new(d));
                                }
                                match target_object(&self.api_version, &self.kind, d) {
                                    Ok(d) => Some(Arc::new(d)),
                                    Err(e) => {
                                        errors.push(e);
                                        None
                                    }
                                }
                            })
                            .collect::<Vec<_>>();
                        if !docs.is_empty() {
                            made.push((rk, docs));
                        }
                    }
                    Ok(_) => {}
                    Err(e) => errors.push(e),
                }
                // Next combination (the fixed input has one entry, so it never advances).
                for j in (0..n).rev() {
                    at[j] += 1;
                    if at[j] < others[j].len() {
                        continue 'combos;
                    }
                    at[j] = 0;
                }
                break;
            }
        }
        let mut keys = Vec::with_capacity(made.len());
        for (rk, docs) in made {
            for (j, k) in rk.iter().enumerate() {
                self.index[j]
                    .entry(k.clone())
                    .or_default()
                    .insert(rk.clone());
            }
            self.rows.insert(rk.clone(), docs);
            keys.push(rk);
        }
        keys
    }

    /// Carries retracted and added rows through `@gather` (if any) into the produced outputs.
    fn propagate(
        &mut self,
        retracted: Vec<(RowKey, Vec<Arc<Value>>)>,
        added: Vec<RowKey>,
        env: &Env,
        touched: &mut BTreeSet<ObjKey>,
        errors: &mut Vec<EvalError>,
    ) {
        let pipeline = Arc::clone(&self.pipeline);
        let Some(g) = pipeline.gather_at() else {
            for (rk, docs) in retracted {
                for i in 0..docs.len() {
                    self.unproduce(&Origin::Row(rk.clone(), i), touched);
                }
            }
            for rk in added {
                let docs = self.rows.get(&rk).cloned().unwrap_or_default();
                for (i, doc) in docs.into_iter().enumerate() {
                    self.record(Origin::Row(rk.clone(), i), doc, touched);
                }
            }
            return;
        };
        let crate::pipeline::Stage::Gather { at, key, value } = &pipeline.stages[g] else {
            return;
        };
        let mut affected = BTreeSet::new();
        for (rk, docs) in retracted {
            for i in 0..docs.len() {
                affected.extend(self.groups.remove(&(rk.clone(), i)));
            }
        }
        for rk in added {
            let docs = self.rows.get(&rk).cloned().unwrap_or_default();
            for (i, doc) in docs.into_iter().enumerate() {
                match self
                    .groups
                    .add(key, value, at, (rk.clone(), i), (*doc).clone(), env)
                {
                    Ok(group) => affected.extend(group),
                    Err(e) => errors.push(e),
                }
            }
        }
        let later_gather = pipeline.stages[g + 1..]
            .iter()
            .any(|s| matches!(s, crate::pipeline::Stage::Gather { .. }));
        if later_gather {
            // A second @gather regroups across groups: its tail is rerun whole.
            if affected.is_empty() {
                return;
            }
            let count = self.tails.remove("").unwrap_or(0);
            for i in 0..count {
                self.unproduce(&Origin::Tail(i), touched);
            }
            let mut docs = Vec::new();
            for group in self.groups.groups.values() {
                match Groups::output(group, value, at) {
                    Ok(doc) => docs.extend(doc),
                    Err(e) => errors.push(e),
                }
            }
            match pipeline.run_batch(g + 1, docs, env) {
                Ok(outputs) => {
                    self.tails.insert(String::new(), outputs.len());
                    for (i, doc) in outputs.into_iter().enumerate() {
                        self.produce(Origin::Tail(i), doc, touched, errors);
                    }
                }
                Err(e) => errors.push(e),
            }
            return;
        }
        for gk in affected {
            let count = self.tails.remove(&gk).unwrap_or(0);
            for i in 0..count {
                self.unproduce(&Origin::Group(gk.clone(), i), touched);
            }
            let Some(group) = self.groups.groups.get(&gk) else {
                continue;
            };
            let result = Groups::output(group, value, at).and_then(|doc| match doc {
                Some(doc) => pipeline.run_batch(g + 1, vec![doc], env),
                None => Ok(Vec::new()),
            });
            match result {
                Ok(outputs) => {
                    self.tails.insert(gk.clone(), outputs.len());
                    for (i, doc) in outputs.into_iter().enumerate() {
                        self.produce(Origin::Group(gk.clone(), i), doc, touched, errors);
                    }
                }
                Err(e) => errors.push(e),
            }
        }
    }

    fn produce(
        &mut self,
        origin: Origin,
        doc: Value,
        touched: &mut BTreeSet<ObjKey>,
        errors: &mut Vec<EvalError>,
    ) {
        match target_object(&self.api_version, &self.kind, doc) {
            Ok(doc) => self.record(origin, Arc::new(doc), touched),
            Err(e) => errors.push(e),
        }
    }

    fn record(&mut self, origin: Origin, doc: Arc<Value>, touched: &mut BTreeSet<ObjKey>) {
        let key = obj_key(&doc);
        touched.insert(key.clone());
        self.made_by.insert(origin.clone(), key.clone());
        self.produced.entry(key).or_default().insert(origin, doc);
    }

    fn unproduce(&mut self, origin: &Origin, touched: &mut BTreeSet<ObjKey>) {
        let Some(key) = self.made_by.remove(origin) else {
            return;
        };
        if let Some(by) = self.produced.get_mut(&key) {
            by.remove(origin);
            if by.is_empty() {
                self.produced.remove(&key);
            }
        }
        touched.insert(key);
    }

    fn diff(&mut self, touched: BTreeSet<ObjKey>, writes: &mut Vec<Write>) {
        let mut deletes = Vec::new();
        let mut upserts = Vec::new();
        for key in touched {
            let now = self
                .produced
                .get(&key)
                .and_then(|by| by.values().next_back())
                .cloned();
            match (self.target.get(&key), now) {
                (Some(old), None) => {
                    deletes.push(Write::Delete(Value::clone(old)));
                    self.target.remove(&key);
                }
                (Some(old), Some(new)) if Arc::ptr_eq(old, &new) || **old == *new => {}
                (_, Some(new)) => {
                    upserts.push(Write::Upsert(Value::clone(&new)));
                    self.target.insert(key, new);
                }
                (None, None) => {}
            }
        }
        // Deletes first, then upserts (as upstream orders a batch).
        writes.extend(deletes);
        writes.extend(upserts);
    }
}

/// A pipeline's output as the target's object: named, with the target's apiVersion and kind
/// first (as objects are written).
fn target_object(api_version: &str, kind: &str, doc: Value) -> Result<Value, EvalError> {
    match doc.pointer("/metadata/name") {
        Some(Value::String(name)) if !name.is_empty() => {}
        other => {
            return Err(EvalError {
                at: "target".into(),
                reason: format!(
                    "the pipeline made an object whose metadata.name is {}, not a name",
                    other.map_or("missing", type_name)
                ),
            });
        }
    }
    let Value::Object(map) = doc else {
        return Err(EvalError {
            at: "target".into(),
            reason: "the pipeline made something that is not an object".into(),
        });
    };
    let mut ordered = serde_json::Map::with_capacity(map.len() + 2);
    ordered.insert("apiVersion".into(), Value::String(api_version.to_owned()));
    ordered.insert("kind".into(), Value::String(kind.to_owned()));
    for (k, v) in map {
        if k != "apiVersion" && k != "kind" {
            ordered.insert(k, v);
        }
    }
    Ok(Value::Object(ordered))
}

/// A Secret's `data` values base64-decoded in place, as upstream hands Secrets to pipelines
/// (a value that does not decode to text stays as it was).
pub fn decode_secret(obj: &mut Value) {
    use base64::Engine as _;
    let Some(Value::Object(data)) = obj.get_mut("data") else {
        return;
    };
    for v in data.values_mut() {
        if let Value::String(text) = v
            && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(text.as_bytes())
            && let Ok(decoded) = String::from_utf8(bytes)
        {
            *text = decoded;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Operator;
    use serde_json::json;

    fn engine(source: Value, pipeline: Value) -> Engine {
        let op = Operator::from_value(&json!({"apiVersion": "dcontroller.io/v1alpha1",
            "kind": "Operator", "metadata": {"name": "t"}, "spec": {"controllers": [{
                "name": "c", "sources": [source], "pipeline": pipeline,
                "target": {"kind": "V"}}]}}))
        .expect("valid");
        Engine::new(
            op.controllers[0].clone(),
            "t.view.dcontroller.io/v1alpha1".into(),
            "V".into(),
        )
    }

    fn cm(name: &str, generation: i64, label: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "n", "generation": generation,
                "labels": {"l": label}}, "data": {"g": generation.to_string()}})
    }

    #[test]
    fn a_predicate_lets_only_the_updates_it_names_through() {
        let mut e = engine(
            json!({"apiGroup": "", "kind": "ConfigMap", "predicate": "GenerationChanged"}),
            json!({"@project": {"metadata": "$.metadata", "data": "$.data"}}),
        );
        let env = Env::new(chrono::Utc::now());
        assert_eq!(
            e.on_event(0, Event::Upsert(cm("a", 1, "x")), &env)
                .writes
                .len(),
            1
        );
        // A label change alone is not a generation change: dropped.
        assert!(
            e.on_event(0, Event::Upsert(cm("a", 1, "y")), &env)
                .writes
                .is_empty()
        );
        assert_eq!(
            e.on_event(0, Event::Upsert(cm("a", 2, "y")), &env)
                .writes
                .len(),
            1
        );
        // Deletes always pass.
        let w = e.on_event(0, Event::Delete(cm("a", 2, "y")), &env).writes;
        assert!(matches!(w.as_slice(), [Write::Delete(_)]), "{w:?}");
        assert!(e.target().is_empty());
    }

    #[test]
    fn a_resync_rebuilds_the_same_state_and_writes_nothing_new() {
        let mut e = engine(
            json!({"apiGroup": "", "kind": "ConfigMap"}),
            json!([{"@project": {"metadata": {"name": "$.metadata.labels.l", "namespace": "n"},
                                 "names": "$.metadata.name"}},
                   {"@gather": ["$.metadata.name", "$.names"]}]),
        );
        let env = Env::new(chrono::Utc::now());
        for (name, label) in [("a", "x"), ("b", "x"), ("c", "y")] {
            e.on_event(0, Event::Upsert(cm(name, 1, label)), &env);
        }
        let before = e.target().clone();
        assert_eq!(before.len(), 2);
        let x = &before[&("n".to_owned(), "x".to_owned())];
        assert_eq!(x["names"], json!(["a", "b"]));
        let out = e.resync(&env);
        assert!(out.writes.is_empty(), "{:?}", out.writes);
        assert_eq!(e.target().len(), 2);
        // Moving one member to the other group rewrites both groups, nothing else.
        let out = e.on_event(0, Event::Upsert(cm("b", 2, "y")), &env);
        assert_eq!(out.writes.len(), 2, "{:?}", out.writes);
        assert_eq!(
            e.target()[&("n".to_owned(), "y".to_owned())]["names"],
            json!(["b", "c"])
        );
    }
}
