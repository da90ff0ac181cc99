//! The scheduler: decides when a loaded package is enabled, i.e. when the task after its Load
//! (Start: ApplySettings → Startup → Run) is enqueued. Pure domain: an in-memory index of every
//! package's scheduling facts, mirrored from the store (which persists them) and consulted
//! inside the store's write transactions, so a decision and the state it changes commit
//! together.
//!
//! A package is enabled once all of these hold, checked in this order (the first that fails is
//! the reason shown): its Kubernetes constraint (`KubernetesVersion`), its berth constraint
//! (`PlatformVersion`), it is in no dependency cycle (`Cycle`), every mandatory dependency is
//! Running with a matching version, every conditional dependency that is installed likewise,
//! one member of each anyOf group is (`Dependency`), and no member of a noneOf group is
//! installed (`Conflict`). Once enabled, a package stays enabled for its generation: a
//! requirement that later stops holding does not tear a running package down.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};

use berth_package::VersionConstraint;
use semver::Version;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::model::{Generation, Kind, PackageId, PackageKey, Phase};

/// The order Deckhouse gives apps, and modules without a `weight`.
pub const DEFAULT_ORDER: i64 = 999;

/// A version constraint, stored as the text the package wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Constraint(pub VersionConstraint);

impl Serialize for Constraint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.as_str())
    }
}

impl<'de> Deserialize<'de> for Constraint {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        VersionConstraint::parse(&text)
            .map(Constraint)
            .map_err(serde::de::Error::custom)
    }
}

/// A dependency on another package by name; no constraint accepts any version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dependency {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<Constraint>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Group {
    pub name: String,
    pub members: Vec<Dependency>,
}

/// `requirements` of a loaded package.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Requirements {
    pub kubernetes: Option<Constraint>,
    pub platform: Option<Constraint>,
    pub mandatory: Vec<Dependency>,
    pub conditional: Vec<Dependency>,
    pub any_of: Vec<Group>,
    pub none_of: Vec<Group>,
}

/// What Load found out about a package that the scheduler needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedSpec {
    /// The version `package.yaml` declares.
    pub version: Version,
    /// `weight` as written (0: unset).
    pub weight: i64,
    pub requirements: Requirements,
    /// The chart may read the global values (not a scheduling fact: a change of the global
    /// values re-runs the packages that have it).
    pub reads_global: bool,
}

/// Why a package is not enabled (the reason of its `RequirementsMet=False` condition).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    KubernetesVersion,
    PlatformVersion,
    Dependency,
    Conflict,
    Cycle,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::KubernetesVersion => "KubernetesVersion",
            Reason::PlatformVersion => "PlatformVersion",
            Reason::Dependency => "Dependency",
            Reason::Conflict => "Conflict",
            Reason::Cycle => "Cycle",
        }
    }

    pub fn parse(s: &str) -> Option<Reason> {
        use Reason::*;
        [
            KubernetesVersion,
            PlatformVersion,
            Dependency,
            Conflict,
            Cycle,
        ]
        .into_iter()
        .find(|r| r.as_str() == s)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    pub reason: Reason,
    pub message: String,
}

/// A decision of a pass about one package.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Enable,
    Wait(Blocked),
}

/// One package as the scheduler sees it.
#[derive(Clone, Debug)]
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
}

impl Node {
    fn order(&self) -> i64 {
        match (&self.loaded, self.id.kind) {
            (Some(l), Kind::Module) if l.weight != 0 => l.weight,
            _ => DEFAULT_ORDER,
        }
    }
}

/// Every package's scheduling facts and the cluster's versions.
#[derive(Clone, Debug)]
///
/// A pass evaluates only what may have changed: the packages marked dirty since the last pass
/// (a package that changed, and every package whose requirements name it), all of them after
/// the cluster's version changed. Cycles are recomputed only when one may have appeared (a
/// package loaded with dependencies that lead back to it) or gone (a package in a cycle changed
/// or left), so a pass stays cheap with 1,000 packages.
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
    /// other lifecycle replicas write too; see `store::catch_up`).
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

    pub fn upsert(&mut self, key: PackageKey, node: Node) {
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

    /// Whether `key`'s dependencies lead back to it (a depth-first walk from it).
    fn reaches_itself(&self, key: &PackageKey) -> bool {
        let Some(start) = self.nodes.get(key) else {
            return false;
        };
        let mut seen: HashSet<&PackageKey> = HashSet::new();
        let mut stack: Vec<&PackageKey> = self.edges(start).collect();
        while let Some(at) = stack.pop() {
            if at == key {
                return true;
            }
            if seen.insert(at)
                && let Some(node) = self.nodes.get(at)
            {
                stack.extend(self.edges(node));
            }
        }
        false
    }

    pub fn node(&self, key: &PackageKey) -> Option<&Node> {
        self.nodes.get(key)
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

    /// Records a verdict a pass returned, once it is written.
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

    /// The package a dependency named `name` of `dependent` resolves to: the module of that
    /// name, or (for an app) the app instance of that name in the app's own namespace.
    fn resolve(&self, dependent: &PackageId, name: &str) -> Option<(&PackageKey, &Node)> {
        let present = |key: &str| {
            self.nodes
                .get_key_value(&PackageKey::from_issued(key.to_owned()))
                .filter(|(_, n)| !n.removing)
        };
        if let Some(found) = present(name).filter(|(_, n)| n.id.kind == Kind::Module) {
            return Some(found);
        }
        match dependent.kind {
            Kind::App => present(&format!("{}.{name}", dependent.namespace)),
            Kind::Module => None,
        }
    }

    /// The ordering edges of `node`: its mandatory and conditional dependencies that resolve.
    fn edges<'a>(&'a self, node: &'a Node) -> impl Iterator<Item = &'a PackageKey> + 'a {
        let requirements = node.loaded.as_ref().map(|l| &l.requirements);
        requirements
            .into_iter()
            .flat_map(|r| r.mandatory.iter().chain(&r.conditional))
            .filter_map(move |d| self.resolve(&node.id, &d.name).map(|(k, _)| k))
    }

    /// Present packages whose mandatory dependencies include `key`, sorted.
    pub fn dependents(&self, key: &PackageKey) -> Vec<PackageKey> {
        let mut out: Vec<PackageKey> = self
            .nodes
            .iter()
            .filter(|(k, n)| *k != key && !n.removing)
            .filter(|(_, n)| {
                n.loaded.as_ref().is_some_and(|l| {
                    l.requirements
                        .mandatory
                        .iter()
                        .any(|d| self.resolve(&n.id, &d.name).is_some_and(|(k, _)| k == key))
                })
            })
            .map(|(k, _)| k.clone())
            .collect();
        out.sort();
        out
    }

    /// Present packages ordered after `key`: those whose mandatory or conditional dependencies
    /// resolve to it, and, in turn, those ordered after them; sorted. The global package's
    /// afterAll hooks wait for these to converge.
    pub fn ordered_after(&self, key: &PackageKey) -> Vec<PackageKey> {
        let mut followers: HashMap<&PackageKey, Vec<&PackageKey>> = HashMap::new();
        for (k, node) in self.nodes.iter().filter(|(_, n)| !n.removing) {
            for dep in self.edges(node).filter(|d| *d != k) {
                followers.entry(dep).or_default().push(k);
            }
        }
        let mut seen: HashSet<&PackageKey> = HashSet::new();
        let mut stack = vec![key];
        while let Some(at) = stack.pop() {
            for f in followers.get(at).into_iter().flatten() {
                if *f != key && seen.insert(f) {
                    stack.push(f);
                }
            }
        }
        let mut out: Vec<PackageKey> = seen.into_iter().cloned().collect();
        out.sort();
        out
    }

    /// The order packages are enabled in: dependencies first, then by order (weight) and key.
    /// Packages in a cycle come last, by order and key.
    pub fn order(&self) -> Vec<PackageKey> {
        let present: BTreeMap<&PackageKey, &Node> =
            self.nodes.iter().filter(|(_, n)| !n.removing).collect();
        let mut waiting_on: HashMap<&PackageKey, usize> = HashMap::new();
        let mut followers: HashMap<&PackageKey, Vec<&PackageKey>> = HashMap::new();
        for (key, node) in &present {
            let deps: HashSet<&PackageKey> = self.edges(node).filter(|d| d != key).collect();
            waiting_on.insert(key, deps.len());
            for dep in deps {
                followers.entry(dep).or_default().push(key);
            }
        }
        let rank = |key: &PackageKey| (present[key].order(), key.clone());
        let mut ready: BinaryHeap<Reverse<(i64, PackageKey)>> = waiting_on
            .iter()
            .filter(|(_, n)| **n == 0)
            .map(|(k, _)| Reverse(rank(k)))
            .collect();
        let mut out = Vec::with_capacity(present.len());
        while let Some(Reverse((_, key))) = ready.pop() {
            for follower in followers.get(&key).into_iter().flatten() {
                let left = waiting_on
                    .get_mut(follower)
                    .expect("every follower is present");
                *left -= 1;
                if *left == 0 {
                    ready.push(Reverse(rank(follower)));
                }
            }
            out.push(key);
        }
        if out.len() < present.len() {
            let placed: HashSet<&PackageKey> = out.iter().collect();
            let mut rest: Vec<(i64, PackageKey)> = present
                .keys()
                .filter(|k| !placed.contains(*k))
                .map(|k| rank(k))
                .collect();
            rest.sort();
            out.extend(rest.into_iter().map(|(_, k)| k));
        }
        out
    }

    /// Every package in a dependency cycle, with the cycle spelled out (`a → b → a`).
    fn cycles(&self) -> HashMap<PackageKey, String> {
        let mut graph = petgraph::graphmap::DiGraphMap::<&PackageKey, ()>::new();
        for (key, node) in self.nodes.iter().filter(|(_, n)| !n.removing) {
            graph.add_node(key);
            for dep in self.edges(node) {
                graph.add_edge(key, dep, ());
            }
        }
        let mut out = HashMap::new();
        for scc in petgraph::algo::tarjan_scc(&graph) {
            let looped = scc.len() > 1 || graph.contains_edge(scc[0], scc[0]);
            if !looped {
                continue;
            }
            let members: HashSet<&PackageKey> = scc.iter().copied().collect();
            for key in &scc {
                out.insert((*key).clone(), cycle_through(&graph, key, &members));
            }
        }
        out
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

    /// Whether `node`'s requirements hold now.
    pub fn verdict(&self, node: &Node, cycle: Option<&String>) -> Verdict {
        let Some(loaded) = &node.loaded else {
            return wait(Reason::Dependency, "not loaded yet".to_owned());
        };
        let r = &loaded.requirements;
        if let Some(c) = &r.kubernetes {
            match &self.kubernetes {
                None => {
                    return wait(
                        Reason::KubernetesVersion,
                        format!(
                            "requires Kubernetes {}; the cluster's version is not known yet",
                            c.0
                        ),
                    );
                }
                Some(v) if !c.0.matches(v) => {
                    return wait(
                        Reason::KubernetesVersion,
                        format!("requires Kubernetes {}, the cluster runs {v}", c.0),
                    );
                }
                Some(_) => {}
            }
        }
        if let Some(c) = &r.platform
            && !c.0.matches(&self.platform)
        {
            return wait(
                Reason::PlatformVersion,
                format!("requires berth {}, this is berth {}", c.0, self.platform),
            );
        }
        if let Some(path) = cycle {
            return wait(Reason::Cycle, format!("dependency cycle: {path}"));
        }
        for dep in &r.mandatory {
            if let Some(why) = self.unmet(node, dep, true) {
                return wait(Reason::Dependency, why);
            }
        }
        for dep in &r.conditional {
            if let Some(why) = self.unmet(node, dep, false) {
                return wait(Reason::Dependency, why);
            }
        }
        for group in &r.any_of {
            let met = group
                .members
                .iter()
                .any(|m| self.unmet(node, m, true).is_none());
            if !met {
                let names: Vec<&str> = group.members.iter().map(|m| m.name.as_str()).collect();
                return wait(
                    Reason::Dependency,
                    format!(
                        "requires one of {} (anyOf {:?}); none is running",
                        names.join(", "),
                        group.name
                    ),
                );
            }
        }
        for group in &r.none_of {
            for m in &group.members {
                if let Some(found) = self.conflicts(node, m) {
                    return wait(
                        Reason::Conflict,
                        format!("conflicts with {found} (noneOf {:?})", group.name),
                    );
                }
            }
        }
        Verdict::Enable
    }

    /// Why dependency `dep` of `node` does not hold; `None` when it does. An absent dependency
    /// fails only when `required`.
    fn unmet(&self, node: &Node, dep: &Dependency, required: bool) -> Option<String> {
        let wanted = dep
            .constraint
            .as_ref()
            .map(|c| format!(" {}", c.0))
            .unwrap_or_default();
        let Some((key, found)) = self.resolve(&node.id, &dep.name) else {
            return required
                .then(|| format!("requires {}{wanted}, which is not installed", dep.name));
        };
        if found.phase != Phase::Running {
            let at = if key.as_str() == dep.name {
                String::new()
            } else {
                format!(" ({key})")
            };
            return Some(format!(
                "requires {}{wanted}, which is not Running yet{at}",
                dep.name
            ));
        }
        let version = found.loaded.as_ref().map(|l| &l.version)?;
        match &dep.constraint {
            Some(c) if !c.0.matches(version) => Some(format!(
                "requires {}{wanted}, which runs version {version}",
                dep.name
            )),
            _ => None,
        }
    }

    /// The package `member` names when it is installed (and, loaded, matches its constraint).
    fn conflicts(&self, node: &Node, member: &Dependency) -> Option<String> {
        let (key, found) = self.resolve(&node.id, &member.name)?;
        match (&member.constraint, &found.loaded) {
            (Some(c), Some(l)) if !c.0.matches(&l.version) => None,
            (_, Some(l)) => Some(format!("{key} {}", l.version)),
            (_, None) => Some(key.to_string()),
        }
    }
}

fn wait(reason: Reason, message: String) -> Verdict {
    Verdict::Wait(Blocked { reason, message })
}

/// The shortest cycle through `start` inside its strongly connected component, as
/// `start → … → start`.
fn cycle_through(
    graph: &petgraph::graphmap::DiGraphMap<&PackageKey, ()>,
    start: &PackageKey,
    members: &HashSet<&PackageKey>,
) -> String {
    let mut parent: HashMap<&PackageKey, &PackageKey> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    'search: while let Some(at) = queue.pop_front() {
        let mut next: Vec<&PackageKey> = graph.neighbors(at).collect();
        next.sort();
        for n in next.into_iter().filter(|n| members.contains(n)) {
            if n == start {
                parent.insert(start, at);
                break 'search;
            }
            if let std::collections::hash_map::Entry::Vacant(e) = parent.entry(n) {
                e.insert(at);
                queue.push_back(n);
            }
        }
    }
    let mut path = vec![start.as_str()];
    let mut at = parent.get(start).copied();
    while let Some(p) = at {
        if p == start {
            break;
        }
        path.push(p.as_str());
        at = parent.get(p).copied();
    }
    path.push(start.as_str());
    // Walked backwards (each step is a parent): dependencies read forwards.
    let last = path.len() - 1;
    path[1..last].reverse();
    path.join(" → ")
}

/// The cluster's version from the API server's `gitVersion` (`v1.31.2+k3s1`, `v1.30.4-gke.1`):
/// major.minor.patch only, so provider suffixes do not make it a prerelease.
pub fn kubernetes_version(git_version: &str) -> Option<Version> {
    let text = git_version.trim().trim_start_matches('v');
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let mut parts = text[..end].split('.').map(|p| p.parse::<u64>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().flatten().unwrap_or(0);
    Some(Version::new(major, minor, patch))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dep(name: &str, constraint: Option<&str>) -> Dependency {
        Dependency {
            name: name.into(),
            constraint: constraint.map(|c| Constraint(VersionConstraint::parse(c).unwrap())),
        }
    }

    fn module(name: &str, weight: i64, mandatory: Vec<Dependency>, phase: Phase) -> Node {
        let phase = if phase == Phase::Loaded {
            Phase::Pending
        } else {
            phase
        };
        Node {
            id: PackageId::new(Kind::Module, name, "").unwrap(),
            generation: Generation::new(1),
            phase,
            removing: false,
            enabled: phase == Phase::Running,
            loaded: Some(LoadedSpec {
                version: Version::new(1, 2, 0),
                weight,
                requirements: Requirements {
                    mandatory,
                    ..Default::default()
                },
                reads_global: false,
            }),
            blocked: None,
        }
    }

    fn sched(nodes: Vec<Node>) -> Scheduler {
        let mut s = Scheduler::new(Version::new(0, 1, 0));
        s.set_kubernetes(Version::new(1, 31, 0));
        for n in nodes {
            s.upsert(n.id.key(), n);
        }
        s
    }

    fn key(s: &str) -> PackageKey {
        PackageKey::from_issued(s.into())
    }

    fn verdicts(s: &mut Scheduler) -> Vec<(String, String)> {
        s.pass()
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    Verdict::Enable => "Enable".to_owned(),
                    Verdict::Wait(b) => format!("{}: {}", b.reason.as_str(), b.message),
                };
                (k.into_string(), v)
            })
            .collect()
    }

    #[test]
    fn dependencies_come_first_then_weight_then_name() {
        let mut s = sched(vec![
            module("b", 10, vec![], Phase::Loaded),
            module("a", 20, vec![], Phase::Loaded),
            module("top", 1, vec![dep("a", None)], Phase::Loaded),
            module("c", 10, vec![], Phase::Loaded),
        ]);
        let order: Vec<String> = s.order().into_iter().map(|k| k.into_string()).collect();
        assert_eq!(order, ["b", "c", "a", "top"]);
        let v = verdicts(&mut s);
        let enabled: Vec<&str> = v
            .iter()
            .filter(|(_, v)| v == "Enable")
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(enabled, ["b", "c", "a"], "by weight, then name");
        assert!(v.contains(&(
            "top".into(),
            "Dependency: requires a, which is not Running yet".into()
        )));
    }

    #[test]
    fn packages_ordered_after_one_follow_its_dependents_transitively() {
        let mut global = module("global", 0, vec![], Phase::Running);
        global.loaded.as_mut().unwrap().requirements.conditional = vec![];
        let mut nested = module("nested", 0, vec![], Phase::Loaded);
        nested.loaded.as_mut().unwrap().requirements.conditional = vec![dep("global", None)];
        let mut gone = module("gone", 0, vec![dep("global", None)], Phase::Loaded);
        gone.removing = true;
        let s = sched(vec![
            global,
            nested,
            gone,
            module("on-nested", 0, vec![dep("nested", None)], Phase::Loaded),
            module("flat", 0, vec![], Phase::Running),
        ]);
        assert_eq!(
            s.ordered_after(&key("global")),
            [key("nested"), key("on-nested")]
        );
        assert!(s.ordered_after(&key("flat")).is_empty());
    }

    #[test]
    fn a_missing_or_old_dependency_waits_and_names_it() {
        let mut s = sched(vec![
            module("web", 0, vec![dep("db", None)], Phase::Loaded),
            module("api", 0, vec![dep("cache", Some(">=2"))], Phase::Loaded),
            module("cache", 0, vec![], Phase::Running),
        ]);
        let v = verdicts(&mut s);
        assert!(v.contains(&(
            "web".into(),
            "Dependency: requires db, which is not installed".into()
        )));
        assert!(v.contains(&(
            "api".into(),
            "Dependency: requires cache >=2, which runs version 1.2.0".into()
        )));
    }

    #[test]
    fn a_cycle_is_spelled_out_for_each_member() {
        let mut s = sched(vec![
            module("a", 0, vec![dep("b", None)], Phase::Loaded),
            module("b", 0, vec![dep("c", None)], Phase::Loaded),
            module("c", 0, vec![dep("a", None)], Phase::Loaded),
            module("d", 0, vec![dep("a", None)], Phase::Loaded),
        ]);
        let v: BTreeMap<String, String> = verdicts(&mut s).into_iter().collect();
        assert_eq!(v["a"], "Cycle: dependency cycle: a → b → c → a");
        assert_eq!(v["b"], "Cycle: dependency cycle: b → c → a → b");
        assert_eq!(v["d"], "Dependency: requires a, which is not Running yet");
    }

    #[test]
    fn version_gates_name_the_version_seen() {
        let mut n = module("k", 0, vec![], Phase::Loaded);
        n.loaded.as_mut().unwrap().requirements.kubernetes =
            Some(Constraint(VersionConstraint::parse(">=99").unwrap()));
        let mut p = module("p", 0, vec![], Phase::Loaded);
        p.loaded.as_mut().unwrap().requirements.platform =
            Some(Constraint(VersionConstraint::parse(">=5").unwrap()));
        let mut s = sched(vec![n.clone(), p]);
        let v: BTreeMap<String, String> = verdicts(&mut s).into_iter().collect();
        assert_eq!(
            v["k"],
            "KubernetesVersion: requires Kubernetes >=99, the cluster runs 1.31.0"
        );
        assert_eq!(
            v["p"],
            "PlatformVersion: requires berth >=5, this is berth 0.1.0"
        );
        s.kubernetes = None;
        assert!(
            matches!(s.verdict(&n, None), Verdict::Wait(b) if b.message.contains("not known yet"))
        );
    }

    #[test]
    fn any_of_and_none_of_gate_without_edges() {
        let mut n = module("x", 0, vec![], Phase::Loaded);
        let r = &mut n.loaded.as_mut().unwrap().requirements;
        r.any_of = vec![Group {
            name: "storage".into(),
            members: vec![dep("s3", None), dep("disk", None)],
        }];
        let mut s = sched(vec![n.clone()]);
        assert!(verdicts(&mut s)[0].1.contains("requires one of s3, disk"));
        let mut s = sched(vec![n.clone(), module("disk", 0, vec![], Phase::Running)]);
        assert_eq!(verdicts(&mut s), [("x".into(), "Enable".into())]);
        n.loaded.as_mut().unwrap().requirements.none_of = vec![Group {
            name: "legacy".into(),
            members: vec![dep("old", None)],
        }];
        let mut s = sched(vec![
            n,
            module("disk", 0, vec![], Phase::Running),
            module("old", 0, vec![], Phase::Loaded),
        ]);
        let v: BTreeMap<String, String> = verdicts(&mut s).into_iter().collect();
        assert_eq!(
            v["x"],
            "Conflict: conflicts with old 1.2.0 (noneOf \"legacy\")"
        );
    }

    #[test]
    fn apps_resolve_modules_then_apps_in_their_namespace() {
        let mut app = module("web", 0, vec![dep("db", None)], Phase::Loaded);
        app.id = PackageId::new(Kind::App, "web", "shop").unwrap();
        let mut db = module("db", 0, vec![], Phase::Running);
        db.id = PackageId::new(Kind::App, "db", "shop").unwrap();
        let mut other = db.clone();
        other.id = PackageId::new(Kind::App, "db", "elsewhere").unwrap();
        let mut s = sched(vec![app.clone(), other]);
        assert!(verdicts(&mut s)[0].1.contains("not installed"));
        let mut s = sched(vec![app, db]);
        assert_eq!(verdicts(&mut s), [("shop.web".into(), "Enable".into())]);
        assert_eq!(s.dependents(&key("shop.db")), [key("shop.web")]);
    }

    #[test]
    fn an_unchanged_wait_is_not_reported_again() {
        let mut s = sched(vec![module("web", 0, vec![dep("db", None)], Phase::Loaded)]);
        let (k, v) = s.pass().remove(0);
        s.settle(&k, &v);
        assert!(s.pass().is_empty());
    }

    /// Passes evaluate only what changed, yet see every change: a cycle closed by a later
    /// load, broken by a removal, and a dependency reaching Running.
    #[test]
    fn incremental_passes_follow_every_change() {
        let mut s = sched(vec![module("a", 0, vec![dep("b", None)], Phase::Loaded)]);
        let settle = |s: &mut Scheduler| {
            let out = s.pass();
            for (k, v) in &out {
                s.settle(k, v);
            }
            out.into_iter()
                .map(|(k, v)| match v {
                    Verdict::Enable => (k.into_string(), "Enable".to_owned()),
                    Verdict::Wait(b) => (
                        k.into_string(),
                        format!("{}: {}", b.reason.as_str(), b.message),
                    ),
                })
                .collect::<Vec<_>>()
        };
        let first = s.pass();
        for (k, v) in &first {
            s.settle(k, v);
        }
        assert!(s.pass().is_empty(), "nothing changed");
        let b = module("b", 0, vec![dep("a", None)], Phase::Loaded);
        s.upsert(key("b"), b.clone());
        let mut v = s.pass();
        v.sort_by(|x, y| x.0.cmp(&y.0));
        assert_eq!(v.len(), 2);
        assert!(
            v.iter()
                .all(|(_, v)| matches!(v, Verdict::Wait(b) if b.reason == Reason::Cycle))
        );
        for (k, v) in &v {
            s.settle(k, v);
        }
        s.remove(&key("b"));
        assert_eq!(
            settle(&mut s),
            [(
                "a".into(),
                "Dependency: requires b, which is not installed".into()
            )]
        );
        assert!(s.pass().is_empty(), "settled");
        s.upsert(key("b"), module("b", 0, vec![], Phase::Running));
        assert_eq!(settle(&mut s), [("a".into(), "Enable".into())]);
    }

    #[test]
    fn kubernetes_versions_drop_provider_suffixes() {
        assert_eq!(
            kubernetes_version("v1.31.2+k3s1"),
            Some(Version::new(1, 31, 2))
        );
        assert_eq!(
            kubernetes_version("v1.30.4-gke.1"),
            Some(Version::new(1, 30, 4))
        );
        assert_eq!(kubernetes_version("garbage"), None);
    }
}
