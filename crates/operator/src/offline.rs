//! Offline evaluation (`berth operator eval`): operators run over a set of objects with no
//! cluster, through the same incremental engines a package's operators run on.
//!
//! The objects stand for the cluster. Each is delivered to the sources that match it (group,
//! kind, namespace, label selector); OneShot sources get their trigger object; what a target
//! receives is applied to the objects (an Updater's object written, a Patcher's patch merged
//! into an object that exists) and delivered again, so views feed the controllers that read
//! them and one controller's writes reach another's sources, until nothing changes.

use std::collections::{BTreeMap, VecDeque};

use serde_json::Value;

use crate::engine::{Event, ObjKey, obj_key};
pub use crate::group::{ControllerError, ONE_SHOT_TRIGGER};
use crate::group::{Group, GroupKind, Processed, apply, group_of_api_version};
use crate::limits::MAX_EVAL_EVENTS;
use crate::spec::{Operator, TargetType};

/// What one target ends up receiving.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub operator: String,
    pub controller: String,
    pub target: TargetType,
    /// The Updater's object or the Patcher's patch.
    pub object: Value,
}

/// The result of an offline evaluation.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    /// Sorted by kind, namespace, name (then operator and controller).
    pub received: Vec<Received>,
    pub errors: Vec<ControllerError>,
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
/// each settles before the call returns. The operators are a [`Group`]; the objects it writes
/// outside its views are applied here and delivered back to it.
pub struct Simulation {
    group: Group,
    /// The objects that are not views.
    store: BTreeMap<GroupKind, BTreeMap<ObjKey, Value>>,
    errors: Vec<ControllerError>,
    now: chrono::DateTime<chrono::Utc>,
}

impl Simulation {
    /// Starts `operators` over `objects` (Kubernetes objects and views; `List`s are
    /// unpacked) and lets them settle.
    pub fn new(
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
        let mut inputs = Vec::with_capacity(flat.len());
        for (i, o) in flat.iter().enumerate() {
            let gk = identity(o).map_err(|e| format!("input object {i}: {e}"))?;
            inputs.push(gk);
        }
        let group = Group::new(operators, |g, k| default_version(g, k, &flat), now)?;
        let mut sim = Simulation {
            group,
            store: BTreeMap::new(),
            errors: Vec::new(),
            now,
        };
        let started = sim.group.start(now);
        let mut queue = VecDeque::new();
        sim.take(started, &mut queue);
        // Every input stored first, so that writes find the objects they patch.
        let mut by_kind: BTreeMap<GroupKind, BTreeMap<ObjKey, Value>> = BTreeMap::new();
        for (gk, o) in inputs.into_iter().zip(flat) {
            by_kind.entry(gk).or_default().insert(obj_key(&o), o);
        }
        for (gk, objs) in by_kind {
            for o in objs.into_values() {
                if !is_view(&gk) {
                    sim.store
                        .entry(gk.clone())
                        .or_default()
                        .insert(obj_key(&o), o.clone());
                }
                queue.push_back((gk.clone(), Event::Upsert(o)));
            }
        }
        sim.settle(queue)?;
        Ok(sim)
    }

    /// Creates or replaces an object and lets the operators settle.
    pub fn upsert(&mut self, obj: Value) -> Result<(), String> {
        let gk = identity(&obj)?;
        if !is_view(&gk) {
            self.store
                .entry(gk.clone())
                .or_default()
                .insert(obj_key(&obj), obj.clone());
        }
        self.settle(VecDeque::from([(gk, Event::Upsert(obj))]))
    }

    /// Deletes an object (by apiVersion, kind, namespace and name) and lets the operators
    /// settle.
    pub fn delete(&mut self, obj: &Value) -> Result<(), String> {
        let gk = identity(obj)?;
        let key = obj_key(obj);
        let old = if is_view(&gk) {
            self.group
                .views()
                .get(&gk)
                .and_then(|m| m.get(&key))
                .cloned()
        } else {
            self.store.get_mut(&gk).and_then(|m| m.remove(&key))
        };
        let Some(old) = old else {
            return Ok(());
        };
        self.settle(VecDeque::from([(gk, Event::Delete(old))]))
    }

    /// An object as it stands now.
    pub fn object(&self, group: &str, kind: &str, namespace: &str, name: &str) -> Option<&Value> {
        let gk = (group.to_owned(), kind.to_owned());
        let key = (namespace.to_owned(), name.to_owned());
        if is_view(&gk) {
            self.group.views().get(&gk)?.get(&key)
        } else {
            self.store.get(&gk)?.get(&key)
        }
    }

    /// Every controller's status (its Ready condition and last errors), in spec order.
    pub fn statuses(&self) -> Vec<(String, crate::status::ControllerStatus)> {
        self.group.statuses()
    }

    /// The errors the controllers met so far.
    pub fn errors(&self) -> &[ControllerError] {
        &self.errors
    }

    /// What every target receives now, sorted by kind, namespace and name.
    pub fn received(&self) -> Vec<Received> {
        let mut received: Vec<Received> = self
            .group
            .targets()
            .map(|(operator, controller, target, object)| Received {
                operator: operator.to_owned(),
                controller: controller.to_owned(),
                target,
                object: object.clone(),
            })
            .collect();
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

    /// Keeps what the group did: its errors, and its writes applied to the objects (each
    /// change they make queued to go back to the group).
    fn take(&mut self, processed: Processed, queue: &mut VecDeque<(GroupKind, Event)>) {
        self.errors.extend(processed.errors);
        for w in processed.writes {
            let gk = (
                group_of_api_version(&w.api_version).to_owned(),
                w.kind.clone(),
            );
            let objs = self.store.entry(gk.clone()).or_default();
            if let Some(event) = apply(w.target, objs, w.write) {
                queue.push_back((gk, event));
            }
        }
    }

    fn settle(&mut self, mut queue: VecDeque<(GroupKind, Event)>) -> Result<(), String> {
        let mut events = 0usize;
        while let Some((gk, event)) = queue.pop_front() {
            events += 1;
            if events > MAX_EVAL_EVENTS {
                return Err(format!(
                    "the operators did not settle after {MAX_EVAL_EVENTS} events (do two \
                     controllers write each other's sources?)"
                ));
            }
            let processed = match event {
                Event::Upsert(o) => self.group.upsert(&gk, o, self.now),
                Event::Delete(o) => self.group.delete(&gk, o, self.now),
            };
            self.take(processed, &mut queue);
        }
        Ok(())
    }
}

fn is_view(gk: &GroupKind) -> bool {
    gk.0.ends_with(crate::spec::VIEW_GROUP_SUFFIX)
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
