//! A group of operators sharing one lifecycle: their controllers' engines, the views they
//! write (in memory), and the routing between them. What a group does not hold is the cluster:
//! Kubernetes objects come in as events ([`Group::upsert`], [`Group::delete`]) and the writes
//! of targets that are not views go out ([`Outbound`]) for the caller to perform. A package's
//! operators in hookevent and an offline evaluation are both a group; they differ in where
//! the objects come from and where the outbound writes go.
//!
//! An object is delivered to every Watcher source that reads its group and kind and matches it
//! (namespace, label selector). A write to a view is applied here (an Updater's object
//! written, a Patcher's patch merged into a view object that exists) and delivered again, so
//! one controller's view feeds the controllers that read it, until nothing changes.

use std::collections::{BTreeMap, VecDeque};

use serde_json::{Value, json};

use crate::engine::{Engine, Event, ObjKey, Write, obj_key};
use crate::expr::{Env, EvalError};
use crate::limits::MAX_EVAL_EVENTS;
use crate::spec::{Operator, Resource, Source, SourceType, TargetType, VIEW_VERSION};
use crate::status::{ControllerStatus, Reporter};
use crate::target::{merge_patch, removal_patch, updater_object};

/// The name of a OneShot source's trigger object.
pub const ONE_SHOT_TRIGGER: &str = "one-shot-trigger";

/// An API group and kind.
pub type GroupKind = (String, String);

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

/// A write to a target that is not a view, for the caller to perform.
#[derive(Debug, Clone, PartialEq)]
pub struct Outbound {
    /// The controller that writes (an index of [`Group::controllers`]).
    pub controller: usize,
    pub target: TargetType,
    /// The target's apiVersion and kind.
    pub api_version: String,
    pub kind: String,
    pub write: Write,
}

/// What one change did: the writes to perform and the errors met.
#[derive(Debug, Default)]
pub struct Processed {
    pub writes: Vec<Outbound>,
    pub errors: Vec<ControllerError>,
    /// Of `errors`, the messages worth reporting now (each controller's rate limit).
    pub report: Vec<String>,
    /// The changes of view objects, in the order they were made (an upsert carries the
    /// object as it is now, a delete the object as it was).
    pub views: Vec<(GroupKind, Event)>,
}

/// A Kubernetes resource some Watcher source reads, with where it looks.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Watched {
    pub group: String,
    pub version: Option<String>,
    pub kind: String,
    /// `None`: every namespace.
    pub namespace: Option<String>,
}

/// A controller of the group, as the caller sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerRef {
    pub operator: String,
    pub controller: String,
    /// Whether its target is a view.
    pub writes_view: bool,
    /// Its Periodic sources' periods.
    pub periods: Vec<std::time::Duration>,
}

struct Slot {
    operator: String,
    engine: Engine,
    /// Per input, the (group, kind) it reads.
    reads: Vec<GroupKind>,
    target: GroupKind,
    target_api_version: String,
    target_type: TargetType,
    target_is_view: bool,
    reporter: Reporter,
}

pub(crate) fn matches(source: &Source, obj: &Value) -> bool {
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

pub(crate) fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// The group of an apiVersion (`""` for the core group).
pub fn group_of_api_version(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

/// Operators and their views: see the module's documentation.
pub struct Group {
    slots: Vec<Slot>,
    views: BTreeMap<GroupKind, BTreeMap<ObjKey, Value>>,
}

impl Group {
    /// A group of `operators`' controllers. A target that is not a view and names no version
    /// gets `version_of(group, kind)`; `None` there is an error naming the controller.
    pub fn new(
        operators: &[Operator],
        version_of: impl Fn(&str, &str) -> Option<String>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Group, String> {
        let mut slots = Vec::new();
        for op in operators {
            for c in &op.controllers {
                let t = &c.target.resource;
                let group = t.group_of(&op.name);
                let is_view = t.is_view(&op.name);
                let version = if is_view {
                    Some(VIEW_VERSION.to_owned())
                } else {
                    t.version.clone().or_else(|| version_of(&group, &t.kind))
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
                let target_api_version = api_version(&group, &version);
                slots.push(Slot {
                    reporter: Reporter::new(&c.name, now),
                    operator: op.name.clone(),
                    engine: Engine::new(c.clone(), target_api_version.clone(), t.kind.clone()),
                    reads,
                    target: (group, t.kind.clone()),
                    target_api_version,
                    target_type: c.target.kind,
                    target_is_view: is_view,
                });
            }
        }
        Ok(Group {
            slots,
            views: BTreeMap::new(),
        })
    }

    /// The controllers, in spec order (the indexes of [`Outbound::controller`]).
    pub fn controllers(&self) -> Vec<ControllerRef> {
        self.slots
            .iter()
            .map(|s| ControllerRef {
                operator: s.operator.clone(),
                controller: s.engine.controller().name.clone(),
                writes_view: s.target_is_view,
                periods: s
                    .engine
                    .inputs()
                    .iter()
                    .filter(|i| i.kind == SourceType::Periodic)
                    .map(|i| i.period)
                    .collect(),
            })
            .collect()
    }

    /// The view kinds the controllers write or read, each once, sorted.
    pub fn view_kinds(&self) -> Vec<GroupKind> {
        let mut out: Vec<GroupKind> = Vec::new();
        for slot in &self.slots {
            let kinds = slot.reads.iter().chain(std::iter::once(&slot.target));
            for gk in kinds.filter(|gk| self.is_view_kind(gk)) {
                if !out.contains(gk) {
                    out.push(gk.clone());
                }
            }
        }
        out.sort();
        out
    }

    /// The Kubernetes resources the Watcher sources read (views aside), each once.
    pub fn watched(&self) -> Vec<Watched> {
        let mut out: Vec<Watched> = Vec::new();
        for slot in &self.slots {
            for (input, source) in slot.engine.inputs().iter().enumerate() {
                let r: &Resource = &source.resource;
                if source.kind != SourceType::Watcher || r.is_view(&slot.operator) {
                    continue;
                }
                let w = Watched {
                    group: slot.reads[input].0.clone(),
                    version: r.version.clone(),
                    kind: r.kind.clone(),
                    namespace: source.namespace.clone(),
                };
                if !out.contains(&w) {
                    out.push(w);
                }
            }
        }
        out.sort();
        out
    }

    /// Fires the OneShot sources once (their trigger object) and lets the views settle.
    pub fn start(&mut self, now: chrono::DateTime<chrono::Utc>) -> Processed {
        let mut pending = Vec::new();
        for (si, slot) in self.slots.iter().enumerate() {
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
        let mut out = Processed::default();
        let mut queue = VecDeque::new();
        for (si, input, event) in pending {
            self.deliver(si, input, event, now, &mut queue, &mut out);
        }
        self.settle(queue, now, &mut out);
        out
    }

    /// An object of `gk` was created or changed (a view object given as input is kept as a
    /// view object).
    pub fn upsert(
        &mut self,
        gk: &GroupKind,
        obj: Value,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Processed {
        if self.is_view_kind(gk) {
            self.views
                .entry(gk.clone())
                .or_default()
                .insert(obj_key(&obj), obj.clone());
        }
        self.process(gk.clone(), Event::Upsert(obj), now)
    }

    /// An object of `gk` was deleted (its namespace and name are what count).
    pub fn delete(
        &mut self,
        gk: &GroupKind,
        obj: Value,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Processed {
        if self.is_view_kind(gk)
            && let Some(m) = self.views.get_mut(gk)
        {
            m.remove(&obj_key(&obj));
        }
        self.process(gk.clone(), Event::Delete(obj), now)
    }

    /// A Periodic source of controller `controller` fired: it recomputes everything from the
    /// objects it holds and writes the difference.
    pub fn resync(&mut self, controller: usize, now: chrono::DateTime<chrono::Utc>) -> Processed {
        let mut out = Processed::default();
        let Some(slot) = self.slots.get_mut(controller) else {
            return out;
        };
        let outcome = slot.engine.resync(&Env::new(now));
        let mut queue = VecDeque::new();
        self.outcome(controller, "resync", outcome, now, &mut queue, &mut out);
        self.settle(queue, now, &mut out);
        out
    }

    /// The controllers that read objects of `gk`.
    pub fn readers_of(&self, gk: &GroupKind) -> Vec<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.reads.contains(gk))
            .map(|(i, _)| i)
            .collect()
    }

    /// Controller `controller` cannot run (a kind the cluster does not serve): `Ready=False`
    /// saying why, until the group is rebuilt. The others go on.
    pub fn fail(&mut self, controller: usize, message: &str, now: chrono::DateTime<chrono::Utc>) {
        if let Some(s) = self.slots.get_mut(controller) {
            s.reporter.critical(message, now);
        }
    }

    /// A write of controller `controller` failed where the caller performed it: the
    /// controller's status says so until the object's next evaluation succeeds.
    pub fn write_failed(
        &mut self,
        controller: usize,
        object: &str,
        message: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Vec<String> {
        match self.slots.get_mut(controller) {
            Some(s) => s.reporter.event(
                &format!("write/{object}"),
                &[message.to_owned()],
                std::time::Instant::now(),
                now,
            ),
            None => Vec::new(),
        }
    }

    /// A write of controller `controller` to `object` succeeded.
    pub fn write_done(
        &mut self,
        controller: usize,
        object: &str,
        now: chrono::DateTime<chrono::Utc>,
    ) {
        if let Some(s) = self.slots.get_mut(controller) {
            s.reporter.event(
                &format!("write/{object}"),
                &[],
                std::time::Instant::now(),
                now,
            );
        }
    }

    /// Every controller's status (its Ready condition and last errors), in spec order, with
    /// its operator's name.
    pub fn statuses(&self) -> Vec<(String, ControllerStatus)> {
        self.slots
            .iter()
            .map(|s| (s.operator.clone(), s.reporter.status()))
            .collect()
    }

    /// The views, by group and kind.
    pub fn views(&self) -> &BTreeMap<GroupKind, BTreeMap<ObjKey, Value>> {
        &self.views
    }

    /// Per controller, the target state it has written: its operator, controller name, target
    /// type, and its last output per object.
    pub fn targets(&self) -> impl Iterator<Item = (&str, &str, TargetType, &Value)> {
        self.slots.iter().flat_map(|s| {
            s.engine.target().values().map(move |v| {
                (
                    s.operator.as_str(),
                    s.engine.controller().name.as_str(),
                    s.target_type,
                    &**v,
                )
            })
        })
    }

    /// The Updater controller whose target state holds the object `key` of `gk`, and its output
    /// for it (the first such controller).
    pub fn updater_output(&self, gk: &GroupKind, key: &ObjKey) -> Option<(usize, &Value)> {
        self.slots.iter().enumerate().find_map(|(i, s)| {
            (s.target_type == TargetType::Updater && !s.target_is_view && s.target == *gk)
                .then(|| s.engine.target().get(key).map(|v| (i, &**v)))
                .flatten()
        })
    }

    /// The Updater targets that are not views: (controller, group and kind).
    pub fn updater_targets(&self) -> Vec<(usize, GroupKind)> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.target_type == TargetType::Updater && !s.target_is_view)
            .map(|(i, s)| (i, s.target.clone()))
            .collect()
    }

    /// Objects held by the engines and views (for figures).
    pub fn cached(&self) -> usize {
        self.slots.iter().map(|s| s.engine.cached()).sum::<usize>()
            + self.views.values().map(BTreeMap::len).sum::<usize>()
    }

    fn is_view_kind(&self, gk: &GroupKind) -> bool {
        gk.0.ends_with(crate::spec::VIEW_GROUP_SUFFIX)
    }

    fn process(
        &mut self,
        gk: GroupKind,
        event: Event,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Processed {
        let mut out = Processed::default();
        let queue = VecDeque::from([(gk, event)]);
        self.settle(queue, now, &mut out);
        out
    }

    /// Delivers the queued changes to the sources they match, and the view changes they make
    /// in turn, until nothing changes (or past [`MAX_EVAL_EVENTS`], a loop between views,
    /// which is reported on every controller that took part).
    fn settle(
        &mut self,
        mut queue: VecDeque<(GroupKind, Event)>,
        now: chrono::DateTime<chrono::Utc>,
        out: &mut Processed,
    ) {
        let mut events = 0usize;
        let mut left = Vec::new();
        while let Some((gk, event)) = queue.pop_front() {
            events += 1;
            if events > MAX_EVAL_EVENTS {
                let message = format!(
                    "the views did not settle after {MAX_EVAL_EVENTS} changes (do two \
                     controllers write each other's sources?)"
                );
                for slot in self.slots.iter_mut().filter(|s| s.target_is_view) {
                    slot.reporter.critical(&message, now);
                }
                out.report.push(message);
                return;
            }
            let obj = match &event {
                Event::Upsert(o) | Event::Delete(o) => o,
            };
            let mut targets = Vec::new();
            for (si, slot) in self.slots.iter().enumerate() {
                let inputs = slot.reads.iter().zip(slot.engine.controller().inputs());
                for (input, (read, source)) in inputs.enumerate() {
                    if *read != gk || source.kind != SourceType::Watcher {
                        continue;
                    }
                    if matches(source, obj) {
                        targets.push((si, input));
                    } else if source.label_selector.is_some()
                        && let Event::Upsert(o) = &event
                    {
                        // Relabelled out of the selector: gone for this source.
                        left.push((si, input, Event::Delete(o.clone())));
                    }
                }
            }
            for (si, input, e) in left.drain(..) {
                self.deliver(si, input, e, now, &mut queue, out);
            }
            // The event goes to the last target by value, to the others as copies.
            let mut event = Some(event);
            let n = targets.len();
            for (i, (si, input)) in targets.into_iter().enumerate() {
                let e = if i + 1 == n {
                    event.take()
                } else {
                    event.clone()
                };
                if let Some(e) = e {
                    self.deliver(si, input, e, now, &mut queue, out);
                }
            }
        }
    }

    /// Hands one event to one slot's input.
    fn deliver(
        &mut self,
        si: usize,
        input: usize,
        event: Event,
        now: chrono::DateTime<chrono::Utc>,
        queue: &mut VecDeque<(GroupKind, Event)>,
        out: &mut Processed,
    ) {
        let env = Env::new(now);
        let key = match &event {
            Event::Upsert(o) | Event::Delete(o) => obj_key(o),
        };
        let object = format!("{input}/{}/{}", key.0, key.1);
        let outcome = self.slots[si].engine.on_event(input, event, &env);
        self.outcome(si, &object, outcome, now, queue, out);
    }

    fn outcome(
        &mut self,
        si: usize,
        object: &str,
        outcome: crate::engine::Outcome,
        now: chrono::DateTime<chrono::Utc>,
        queue: &mut VecDeque<(GroupKind, Event)>,
        out: &mut Processed,
    ) {
        let slot = &mut self.slots[si];
        let messages: Vec<String> = outcome.errors.iter().map(ToString::to_string).collect();
        out.report.extend(
            slot.reporter
                .event(object, &messages, std::time::Instant::now(), now)
                .into_iter()
                .map(|m| {
                    format!(
                        "operator {:?} controller {:?}: {m}",
                        slot.operator,
                        slot.engine.controller().name
                    )
                }),
        );
        for e in outcome.errors {
            out.errors.push(ControllerError {
                operator: slot.operator.clone(),
                controller: slot.engine.controller().name.clone(),
                error: e,
            });
        }
        if slot.target_is_view {
            let objs = self.views.entry(slot.target.clone()).or_default();
            for w in outcome.writes {
                if let Some(event) = apply(slot.target_type, objs, w) {
                    out.views.push((slot.target.clone(), event.clone()));
                    queue.push_back((slot.target.clone(), event));
                }
            }
        } else {
            for w in outcome.writes {
                out.writes.push(Outbound {
                    controller: si,
                    target: slot.target_type,
                    api_version: slot.target_api_version.clone(),
                    kind: slot.target.1.clone(),
                    write: w,
                });
            }
        }
    }
}

/// Applies one write to the objects of its kind; returns the change it made, if any.
pub fn apply(kind: TargetType, objs: &mut BTreeMap<ObjKey, Value>, w: Write) -> Option<Event> {
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
                Write::Upsert(out) => (patcher_patch(out), obj_key(out)),
                Write::Delete(out) => (patcher_patch(&removal_patch(out)), obj_key(out)),
            };
            let existing = objs.get_mut(&key)?;
            let mut patched = existing.clone();
            merge_patch(&mut patched, &patch);
            if *existing == patched {
                return None;
            }
            *existing = patched.clone();
            Some(Event::Upsert(patched))
        }
    }
}

/// A Patcher's output as the merge patch it sends: the identity it carries is the target's,
/// and the object keeps its own.
pub fn patcher_patch(output: &Value) -> Value {
    let mut patch = output.clone();
    if let Value::Object(p) = &mut patch {
        p.remove("apiVersion");
        p.remove("kind");
    }
    patch
}
