//! Offline evaluation (`berth operator eval`): operators run over a set of objects with no
//! cluster, through the same incremental engines a package's operators run on.
//!
//! The objects stand for the cluster. Each is delivered to the sources that match it (group,
//! kind, namespace, label selector); OneShot sources get their trigger object; what a target
//! receives is applied to the objects (an Updater's object written, a Patcher's patch merged
//! into an object that exists) and delivered again, so views feed the controllers that read
//! them and one controller's writes reach another's sources, until nothing changes.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Value, json};

use crate::engine::{Engine, Event, ObjKey, Write, obj_key};
use crate::expr::{Env, EvalError};
use crate::limits::MAX_EVAL_EVENTS;
use crate::spec::{Operator, Resource, Source, SourceType, TargetType, VIEW_VERSION};
use crate::target::{merge_patch, removal_patch, updater_object};

/// The name of a OneShot source's trigger object.
pub const ONE_SHOT_TRIGGER: &str = "one-shot-trigger";

/// What one target ends up receiving.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub operator: String,
    pub controller: String,
    pub target: TargetType,
    /// The Updater's object or the Patcher's patch.
    pub object: Value,
}

/// An error of one controller.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerError {
    pub operator: String,
    pub controller: String,
    pub error: EvalError,
}

impl std::fmt::Display for ControllerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "operator {:?} controller {:?}: {}",
            self.operator, self.controller, self.error
        )
    }
}

/// The result of an offline evaluation.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    /// Sorted by kind, namespace, name (then operator and controller).
    pub received: Vec<Received>,
    pub errors: Vec<ControllerError>,
}

/// An API group and kind.
type GroupKind = (String, String);

fn group_of_api_version(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// The version a target writes when its spec names none: the inputs' version of that kind, or
/// the served version of the common built-in groups.
fn default_version(group: &str, kind: &str, objects: &[Value]) -> Option<String> {
    for o in objects {
        let av = o
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if group_of_api_version(av) == group && o.get("kind").and_then(Value::as_str) == Some(kind)
        {
            return Some(av.rsplit('/').next().unwrap_or(av).to_owned());
        }
    }
    let v = match group {
        ""
        | "apps"
        | "batch"
        | "policy"
        | "networking.k8s.io"
        | "discovery.k8s.io"
        | "rbac.authorization.k8s.io"
        | "coordination.k8s.io"
        | "storage.k8s.io"
        | "scheduling.k8s.io"
        | "node.k8s.io"
        | "events.k8s.io"
        | "admissionregistration.k8s.io"
        | "apiextensions.k8s.io"
        | "certificates.k8s.io" => "v1",
        "autoscaling" => "v2",
        _ => return None,
    };
    Some(v.to_owned())
}

fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

struct Slot {
    operator: String,
    engine: Engine,
    /// Per input, the (group, kind) it reads.
    reads: Vec<GroupKind>,
    target: GroupKind,
    target_type: TargetType,
    reporter: crate::status::Reporter,
}

fn matches(source: &Source, obj: &Value) -> bool {
    if let Some(ns) = &source.namespace
        && obj.pointer("/metadata/namespace").and_then(Value::as_str) != Some(ns)
    {
        return false;
    }
    if let Some(sel) = &source.label_selector {
        let empty = serde_json::Map::new();
        let labels = obj
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        if !sel.matches(labels) {
            return false;
        }
    }
    true
}

impl Simulation {
    /// Starts `operators` over `objects` (Kubernetes objects and views; `List`s are
    /// unpacked) and lets them settle.
    pub fn new(
        operators: &[Operator],
        objects: Vec<Value>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Simulation, String> {
        start(operators, objects, now)
    }
}

fn start(
    operators: &[Operator],
    objects: Vec<Value>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Simulation, String> {
    let mut flat = Vec::with_capacity(objects.len());
    for o in objects {
        if o.get("kind").and_then(Value::as_str) == Some("List") {
            flat.extend(
                o.get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default(),
            );
        } else if !o.is_null() {
            flat.push(o);
        }
    }
    let mut store: BTreeMap<GroupKind, BTreeMap<ObjKey, Value>> = BTreeMap::new();
    for (i, o) in flat.iter().enumerate() {
        let gk = identity(o).map_err(|e| format!("input object {i}: {e}"))?;
        store.entry(gk).or_default().insert(obj_key(o), o.clone());
    }

    let mut slots = Vec::new();
    for op in operators {
        for c in &op.controllers {
            let t = &c.target.resource;
            let group = t.group_of(&op.name);
            let version = if t.is_view(&op.name) {
                Some(VIEW_VERSION.to_owned())
            } else {
                t.version
                    .clone()
                    .or_else(|| default_version(&group, &t.kind, &flat))
            };
            let Some(version) = version else {
                return Err(format!(
                    "operator {:?} controller {:?}: target {group}/{}: no version known; \
                     write target.version",
                    op.name, c.name, t.kind
                ));
            };
            let reads = c
                .inputs()
                .map(|s: &Source| (s.resource.group_of(&op.name), s.resource.kind.clone()))
                .collect();
            slots.push(Slot {
                reporter: crate::status::Reporter::new(&c.name, now),
                operator: op.name.clone(),
                engine: Engine::new(c.clone(), api_version(&group, &version), t.kind.clone()),
                reads,
                target: (group, t.kind.clone()),
                target_type: c.target.kind,
            });
        }
    }

    let errors = Vec::new();
    let mut queue: VecDeque<(GroupKind, Event)> = VecDeque::new();
    for (gk, objs) in &store {
        for o in objs.values() {
            queue.push_back((gk.clone(), Event::Upsert(o.clone())));
        }
    }
    // OneShot triggers, into their own slots only.
    let mut pending: Vec<(usize, usize, Event)> = Vec::new();
    for (si, slot) in slots.iter().enumerate() {
        for (input, source) in slot.engine.inputs().iter().enumerate() {
            if source.kind == SourceType::OneShot {
                let r: &Resource = &source.resource;
                let group = r.group_of(&slot.operator);
                let version = if r.is_view(&slot.operator) {
                    VIEW_VERSION.to_owned()
                } else {
                    r.version.clone().unwrap_or_else(|| "v1".into())
                };
                let trigger = json!({"apiVersion": api_version(&group, &version),
                    "kind": r.kind, "metadata": {"name": ONE_SHOT_TRIGGER}});
                pending.push((si, input, Event::Upsert(trigger)));
            }
        }
    }
    let mut sim = Simulation {
        slots,
        store,
        queue,
        errors,
        now,
    };
    sim.deliver(pending);
    sim.settle()?;
    Ok(sim)
}

/// Runs `operators` over `objects` (Kubernetes objects and views; `List`s are unpacked) until
/// nothing changes, and reports what every target ends up receiving.
pub fn evaluate(
    operators: &[Operator],
    objects: Vec<Value>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Evaluation, String> {
    let sim = Simulation::new(operators, objects, now)?;
    Ok(Evaluation {
        received: sim.received(),
        errors: sim.errors,
    })
}

/// Operators running over objects that stand for a cluster: changes go in one at a time, and
/// each settles before the call returns.
pub struct Simulation {
    slots: Vec<Slot>,
    store: BTreeMap<GroupKind, BTreeMap<ObjKey, Value>>,
    queue: VecDeque<(GroupKind, Event)>,
    errors: Vec<ControllerError>,
    now: chrono::DateTime<chrono::Utc>,
}

fn identity(o: &Value) -> Result<GroupKind, String> {
    let av = o.get("apiVersion").and_then(Value::as_str);
    let kind = o.get("kind").and_then(Value::as_str);
    let name = o.pointer("/metadata/name").and_then(Value::as_str);
    let (Some(av), Some(kind), Some(_)) = (av, kind, name) else {
        return Err(format!(
            "an object lacks apiVersion, kind or metadata.name: {}",
            crate::value::show(o)
        ));
    };
    Ok((group_of_api_version(av).to_owned(), kind.to_owned()))
}

impl Simulation {
    /// Creates or replaces an object and lets the operators settle.
    pub fn upsert(&mut self, obj: Value) -> Result<(), String> {
        let gk = identity(&obj)?;
        self.store
            .entry(gk.clone())
            .or_default()
            .insert(obj_key(&obj), obj.clone());
        self.queue.push_back((gk, Event::Upsert(obj)));
        self.settle()
    }

    /// Deletes an object (by apiVersion, kind, namespace and name) and lets the operators
    /// settle.
    pub fn delete(&mut self, obj: &Value) -> Result<(), String> {
        let gk = identity(obj)?;
        let Some(old) = self
            .store
            .get_mut(&gk)
            .and_then(|m| m.remove(&obj_key(obj)))
        else {
            return Ok(());
        };
        self.queue.push_back((gk, Event::Delete(old)));
        self.settle()
    }

    /// An object as it stands now.
    pub fn object(&self, group: &str, kind: &str, namespace: &str, name: &str) -> Option<&Value> {
        self.store
            .get(&(group.to_owned(), kind.to_owned()))?
            .get(&(namespace.to_owned(), name.to_owned()))
    }

    /// Every controller's status (its Ready condition and last errors), in spec order.
    pub fn statuses(&self) -> Vec<(String, crate::status::ControllerStatus)> {
        self.slots
            .iter()
            .map(|s| (s.operator.clone(), s.reporter.status()))
            .collect()
    }

    /// The errors the controllers met so far.
    pub fn errors(&self) -> &[ControllerError] {
        &self.errors
    }

    /// What every target receives now, sorted by kind, namespace and name.
    pub fn received(&self) -> Vec<Received> {
        let mut received = Vec::new();
        for slot in &self.slots {
            for obj in slot.engine.target().values() {
                received.push(Received {
                    operator: slot.operator.clone(),
                    controller: slot.engine.controller().name.clone(),
                    target: slot.target_type,
                    object: Value::clone(obj),
                });
            }
        }
        received.sort_by_cached_key(|r| {
            let (ns, name) = (*obj_key(&r.object)).clone();
            let kind = r
                .object
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            (kind, ns, name, r.operator.clone(), r.controller.clone())
        });
        received
    }

    fn settle(&mut self) -> Result<(), String> {
        let mut events = 0usize;
        while let Some((gk, event)) = self.queue.pop_front() {
            events += 1;
            if events > MAX_EVAL_EVENTS {
                self.queue.clear();
                return Err(format!(
                    "the operators did not settle after {MAX_EVAL_EVENTS} events (do two \
                     controllers write each other's sources?)"
                ));
            }
            let obj = match &event {
                Event::Upsert(o) | Event::Delete(o) => o,
            };
            let mut targets = Vec::new();
            for (si, slot) in self.slots.iter().enumerate() {
                let inputs = slot.reads.iter().zip(slot.engine.controller().inputs());
                for (input, (read, source)) in inputs.enumerate() {
                    if *read == gk && source.kind == SourceType::Watcher && matches(source, obj) {
                        targets.push((si, input, event.clone()));
                    }
                }
            }
            self.deliver(targets);
        }
        Ok(())
    }
    /// Hands events to slots' inputs and applies what their targets receive.
    fn deliver(&mut self, targets: Vec<(usize, usize, Event)>) {
        for (si, input, event) in targets {
            let env = Env::new(self.now);
            let key = match &event {
                Event::Upsert(o) | Event::Delete(o) => obj_key(o),
            };
            let object = format!("{input}/{}/{}", key.0, key.1);
            let outcome = self.slots[si].engine.on_event(input, event, &env);
            let messages: Vec<String> = outcome.errors.iter().map(ToString::to_string).collect();
            self.slots[si]
                .reporter
                .event(&object, &messages, std::time::Instant::now(), self.now);
            let slot = &self.slots[si];
            for e in outcome.errors {
                self.errors.push(ControllerError {
                    operator: slot.operator.clone(),
                    controller: slot.engine.controller().name.clone(),
                    error: e,
                });
            }
            let objs = self.store.entry(slot.target.clone()).or_default();
            for w in outcome.writes {
                if let Some(event) = apply(slot.target_type, objs, w) {
                    self.queue.push_back((slot.target.clone(), event));
                }
            }
        }
    }
}

/// Applies one write to the objects of its kind; returns the change it made, if any.
fn apply(kind: TargetType, objs: &mut BTreeMap<ObjKey, Value>, w: Write) -> Option<Event> {
    match (kind, w) {
        (TargetType::Updater, Write::Upsert(out)) => {
            let key = obj_key(&out);
            let new = updater_object(objs.get(&key), &out);
            if objs.get(&key) == Some(&new) {
                return None;
            }
            objs.insert(key, new.clone());
            Some(Event::Upsert(new))
        }
        (TargetType::Updater, Write::Delete(out)) => objs.remove(&obj_key(&out)).map(Event::Delete),
        (TargetType::Patcher, w) => {
            let (patch, key) = match &w {
                Write::Upsert(out) => (out.clone(), obj_key(out)),
                Write::Delete(out) => (removal_patch(out), obj_key(out)),
            };
            let existing = objs.get_mut(&key)?;
            let mut patched = existing.clone();
            // The identity the patch carries is the target's; the object keeps its own.
            let mut patch = patch;
            if let Value::Object(p) = &mut patch {
                p.remove("apiVersion");
                p.remove("kind");
            }
            merge_patch(&mut patched, &patch);
            if *existing == patched {
                return None;
            }
            *existing = patched.clone();
            Some(Event::Upsert(patched))
        }
    }
}
