//! The scheduler: decides when a loaded package is enabled, i.e. when the task after its Load
//! (Start: ApplySettings → Startup → Run) is enqueued. An in-memory index of every package's
//! scheduling facts, mirrored from the store (which persists them) by the engine, which owns it
//! and consults it in every write, so a decision and the state it changes commit together.
//!
//! A package is enabled once all of these hold, checked in this order (the first that fails is
//! the reason shown): its Kubernetes constraint (`KubernetesVersion`), its berth constraint
//! (`PlatformVersion`), it is in no dependency cycle (`Cycle`), every mandatory dependency is
//! Running with a matching version, every conditional dependency that is installed likewise,
//! one member of each anyOf group is (`Dependency`), and no member of a noneOf group is
//! installed (`Conflict`). Once enabled, a package stays enabled for its generation: a
//! requirement that later stops holding does not tear a running package down.
//!
//! - `requirements`: what a loaded package requires;
//! - `verdict`: whether a package's requirements hold, and why not;
//! - `graph`: dependencies resolved to packages: dependents, order, cycles.

mod graph;
mod requirements;
#[cfg(test)]
mod tests;
mod verdict;

use std::collections::{HashMap, HashSet};

use semver::Version;

pub use requirements::{Constraint, Dependency, Group, LoadedSpec, Requirements};
pub use verdict::{Blocked, Reason, Verdict, kubernetes_version};

use crate::model::id::{Generation, Kind, PackageId, PackageKey};
use crate::model::package::Phase;

/// The order Deckhouse gives apps, and modules without a `weight`.
pub const DEFAULT_ORDER: i64 = 999;

/// One package as the scheduler sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub id: PackageId,
    pub generation: Generation,
    pub phase: Phase,
    pub removing: bool,
    /// The tasks after Load were enqueued for this load.
    pub enabled: bool,
    /// `None` until loaded.
    pub loaded: Option<LoadedSpec>,
    /// Why it waits, as last written to its condition.
    pub blocked: Option<Blocked>,
    /// The generation it last reached Running at. Not a scheduling fact: the global package's
    /// afterAll waits for the packages ordered after it to converge.
    pub observed_generation: Generation,
    /// The global package only: its Run succeeded and its afterAll is not enqueued yet. Not a
    /// scheduling fact either.
    pub after_all_due: bool,
}

impl Node {
    fn order(&self) -> i64 {
        match (&self.loaded, self.id.kind) {
            (Some(l), Kind::Module) if l.weight != 0 => l.weight,
            _ => DEFAULT_ORDER,
        }
    }

    /// Whether `other` is the same package to a pass: only what the afterAll reads differs.
    fn schedules_as(&self, other: &Node) -> bool {
        self.id == other.id
            && self.generation == other.generation
            && self.phase == other.phase
            && self.removing == other.removing
            && self.enabled == other.enabled
            && self.loaded == other.loaded
            && self.blocked == other.blocked
    }

    /// Whether a package ordered after the global package no longer holds its afterAll back:
    /// being removed, not enabled, failed, or Running at its current generation.
    pub fn converged(&self) -> bool {
        self.removing
            || !self.enabled
            || self.phase == Phase::Failed
            || (self.phase == Phase::Running && self.observed_generation == self.generation)
    }
}

/// Every package's scheduling facts and the cluster's versions.
///
/// A pass evaluates only what may have changed: the packages marked dirty since the last pass
/// (a package that changed, and every package whose requirements name it), all of them after
/// the cluster's version changed. Cycles are recomputed only when one may have appeared (a
/// package loaded with dependencies that lead back to it) or gone (a package in a cycle changed
/// or left), so a pass stays cheap with 1,000 packages.
#[derive(Clone, Debug)]
pub struct Scheduler {
    nodes: HashMap<PackageKey, Node>,
    kubernetes: Option<Version>,
    platform: Version,
    /// Packages a verdict was written for since [`Scheduler::take_settled`] (for watchers).
    settled: Vec<PackageKey>,
    /// Package name → the packages whose requirements name it (any kind of dependency).
    named_by: HashMap<String, HashSet<PackageKey>>,
    /// Packages to evaluate in the next pass; `all_dirty`: every package.
    dirty: HashSet<PackageKey>,
    all_dirty: bool,
    /// Every package in a dependency cycle, with the cycle spelled out.
    cycles: HashMap<PackageKey, String>,
    cycles_stale: bool,
    /// The last entry of the database's change log replayed into this index (PostgreSQL, where
    /// other lifecycle replicas write too; the store's catch-up keeps it).
    changes_seen: i64,
}

impl Scheduler {
    pub fn new(platform: Version) -> Scheduler {
        Scheduler {
            nodes: HashMap::new(),
            kubernetes: None,
            platform,
            settled: Vec::new(),
            named_by: HashMap::new(),
            dirty: HashSet::new(),
            all_dirty: true,
            changes_seen: 0,
            cycles: HashMap::new(),
            cycles_stale: true,
        }
    }

    /// The packages verdicts were written for since the last call.
    pub fn take_settled(&mut self) -> Vec<PackageKey> {
        std::mem::take(&mut self.settled)
    }

    /// Records `key`'s facts. A change that a pass would not see (the afterAll's facts only)
    /// marks nothing for the next pass.
    pub fn upsert(&mut self, key: PackageKey, node: Node) {
        if let Some(old) = self.nodes.get_mut(&key)
            && old.schedules_as(&node)
        {
            *old = node;
            return;
        }
        let old = self.nodes.remove(&key);
        if let Some(old) = &old {
            self.unindex(&key, old);
        }
        let reloaded = old.as_ref().is_none_or(|o| o.loaded != node.loaded);
        let left = old.as_ref().is_some_and(|o| o.removing != node.removing);
        if self.cycles.contains_key(&key) && (reloaded || left) {
            self.cycles_stale = true;
        }
        self.index(&key, &node);
        self.touch(&key, &node.id.name);
        self.nodes.insert(key.clone(), node);
        if reloaded && !self.cycles_stale && self.reaches_itself(&key) {
            self.cycles_stale = true;
        }
    }

    pub fn remove(&mut self, key: &PackageKey) {
        if let Some(old) = self.nodes.remove(key) {
            self.unindex(key, &old);
            self.touch(key, &old.id.name);
            if self.cycles.contains_key(key) {
                self.cycles_stale = true;
            }
        }
    }

    /// Marks `key` and every package whose requirements name `name` for the next pass.
    fn touch(&mut self, key: &PackageKey, name: &str) {
        self.dirty.insert(key.clone());
        if let Some(referrers) = self.named_by.get(name) {
            self.dirty.extend(referrers.iter().cloned());
        }
    }

    fn names(node: &Node) -> impl Iterator<Item = &str> {
        let r = node.loaded.as_ref().map(|l| &l.requirements);
        r.into_iter().flat_map(|r| {
            r.mandatory
                .iter()
                .chain(&r.conditional)
                .chain(r.any_of.iter().flat_map(|g| &g.members))
                .chain(r.none_of.iter().flat_map(|g| &g.members))
                .map(|d| d.name.as_str())
        })
    }

    fn index(&mut self, key: &PackageKey, node: &Node) {
        for name in Self::names(node) {
            self.named_by
                .entry(name.to_owned())
                .or_default()
                .insert(key.clone());
        }
    }

    fn unindex(&mut self, key: &PackageKey, node: &Node) {
        for name in Self::names(node) {
            if let Some(set) = self.named_by.get_mut(name) {
                set.remove(key);
                if set.is_empty() {
                    self.named_by.remove(name);
                }
            }
        }
    }

    pub fn node(&self, key: &PackageKey) -> Option<&Node> {
        self.nodes.get(key)
    }

    /// Every package, in no particular order.
    pub fn nodes(&self) -> impl Iterator<Item = (&PackageKey, &Node)> {
        self.nodes.iter()
    }

    pub fn kubernetes(&self) -> Option<&Version> {
        self.kubernetes.as_ref()
    }

    pub fn platform(&self) -> &Version {
        &self.platform
    }

    /// Records the cluster's version; whether it changed.
    pub fn set_kubernetes(&mut self, version: Version) -> bool {
        let changed = self.kubernetes.as_ref() != Some(&version);
        self.kubernetes = Some(version);
        self.all_dirty |= changed;
        changed
    }

    /// The last change-log entry replayed into this index.
    pub fn changes_seen(&self) -> i64 {
        self.changes_seen
    }

    pub fn set_changes_seen(&mut self, seq: i64) {
        self.changes_seen = seq;
    }

    /// Records a verdict a pass returned, as it is written.
    pub fn settle(&mut self, key: &PackageKey, verdict: &Verdict) {
        self.settled.push(key.clone());
        if let Some(node) = self.nodes.get_mut(key) {
            match verdict {
                Verdict::Enable => {
                    node.enabled = true;
                    node.blocked = None;
                }
                Verdict::Wait(blocked) => {
                    node.blocked = Some(blocked.clone());
                    node.phase = Phase::Pending;
                }
            }
        }
    }

    /// One scheduling pass: a verdict for every loaded package that is not enabled yet, may
    /// have changed since the last pass, and whose verdict differs from the one last written;
    /// by order (weight) and key. Packages enabled by one pass do not depend on each other
    /// (each one's dependencies were Running already), so this is also dependencies first.
    pub fn pass(&mut self) -> Vec<(PackageKey, Verdict)> {
        if self.cycles_stale {
            let fresh = self.cycles();
            let changed: Vec<PackageKey> = fresh
                .keys()
                .chain(self.cycles.keys())
                .filter(|k| fresh.get(*k) != self.cycles.get(*k))
                .cloned()
                .collect();
            self.dirty.extend(changed);
            self.cycles = fresh;
            self.cycles_stale = false;
        }
        let candidates: Vec<PackageKey> = if std::mem::take(&mut self.all_dirty) {
            self.dirty.clear();
            self.nodes.keys().cloned().collect()
        } else {
            self.dirty.drain().collect()
        };
        let mut ranked: Vec<(i64, PackageKey)> = candidates
            .into_iter()
            .filter_map(|key| {
                let node = self.nodes.get(&key)?;
                let waiting = !node.enabled
                    && !node.removing
                    && node.loaded.is_some()
                    && node.phase != Phase::Failed;
                waiting.then(|| (node.order(), key))
            })
            .collect();
        ranked.sort();
        ranked
            .into_iter()
            .filter_map(|(_, key)| {
                let node = &self.nodes[&key];
                let verdict = self.verdict(node, self.cycles.get(&key));
                let unchanged = match &verdict {
                    Verdict::Enable => false,
                    Verdict::Wait(b) => {
                        node.blocked.as_ref() == Some(b) && node.phase == Phase::Pending
                    }
                };
                (!unchanged).then_some((key, verdict))
            })
            .collect()
    }
}
