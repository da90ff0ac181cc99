//! Dependencies resolved to packages: dependents, the order packages are enabled in, and
//! dependency cycles.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};

use super::{Node, Scheduler};
use crate::model::id::{Kind, PackageId, PackageKey};

impl Scheduler {
    /// Whether `key`'s dependencies lead back to it (a depth-first walk from it).
    pub(super) fn reaches_itself(&self, key: &PackageKey) -> bool {
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

    /// The package a dependency named `name` of `dependent` resolves to: the module of that
    /// name, or (for an app) the app instance of that name in the app's own namespace.
    pub(super) fn resolve(
        &self,
        dependent: &PackageId,
        name: &str,
    ) -> Option<(&PackageKey, &Node)> {
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
    pub(super) fn edges<'a>(&'a self, node: &'a Node) -> impl Iterator<Item = &'a PackageKey> + 'a {
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
    pub(super) fn cycles(&self) -> HashMap<PackageKey, String> {
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
