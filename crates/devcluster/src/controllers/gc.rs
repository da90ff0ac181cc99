//! The garbage collector and namespace controller, level-triggered: every pass looks at
//! the whole store and moves it one step towards what kube-controller-manager would
//! make of it. Passes run after commits that can matter to it (deletions, terminating
//! objects, namespaces, objects with owners: `Store::subscribe_gc_changes`), coalesced
//! to at most one per `SETTLE`, so a chain such as Deployment → ReplicaSet → Pod
//! collapses in a few passes while a burst of ordinary writes costs nothing.
//!
//! - A namespace with deletionTimestamp has its contents deleted; once empty its
//!   `spec.finalizers` are cleared and it disappears.
//! - An object whose every ownerReference names a uid that no longer exists is deleted
//!   (background propagation).
//! - An owner being deleted with `foregroundDeletion` has its dependents deleted first,
//!   then loses the finalizer; with `orphan`, its dependents lose the ownerReference.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::resources::{GroupResource, Registry};
use crate::store::SharedObject as StoredObject;
use crate::store::{DeleteOptions, Part, Store, meta_str};

const MANAGER: &str = "berth-devcluster-gc";

/// After a change, how long the collector lets further changes accumulate before its
/// next pass. Each pass looks at the whole store, so passing once per write would make a
/// burst of N writes cost O(N × store size) and keep a core busy (5,000 creates took
/// 30 s that way in `benches/devcluster.rs`); with this pause a burst costs one pass per
/// interval, and garbage still goes within tens of milliseconds.
const SETTLE: Duration = Duration::from_millis(20);

pub async fn run(store: Arc<Store>, shutdown: CancellationToken) {
    let mut changes = store.subscribe_gc_changes();
    loop {
        // Everything committed up to here is seen by this pass.
        changes.borrow_and_update();
        reconcile(&store);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(SETTLE) => {}
        }
    }
}

fn uid(o: &Value) -> String {
    meta_str(o, "uid")
}

fn terminating(o: &Value) -> bool {
    o.pointer("/metadata/deletionTimestamp").is_some()
}

fn has_finalizer(o: &Value, f: &str) -> bool {
    o.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(|x| x == f))
}

fn owner_uids(o: &Value) -> Vec<String> {
    o.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid")?.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// One pass. Errors are logged and retried on the next pass: each step is idempotent.
pub fn reconcile(store: &Store) {
    let registry = store.registry();
    let objects = store.shared_snapshot();
    namespaces(store, &registry, &objects);
    super::namespace_defaults::reconcile(store, &registry, &objects);
    owners(store, &registry, &objects);
}

fn delete(store: &Store, registry: &Registry, o: &StoredObject) {
    let gr = GroupResource {
        group: o.group.clone(),
        resource: o.resource.clone(),
    };
    let Some(rt) = registry.any_version(&gr) else {
        return;
    };
    if let Err(e) = store.delete(
        rt,
        &meta_str(&o.object, "namespace"),
        &meta_str(&o.object, "name"),
        &DeleteOptions::default(),
    ) && e.code != 404
    {
        tracing::warn!(k8s.resource = %gr, error = %e, "garbage collection delete failed");
    }
}

fn mutate(store: &Store, registry: &Registry, o: &StoredObject, f: impl FnOnce(&mut Value)) {
    let gr = GroupResource {
        group: o.group.clone(),
        resource: o.resource.clone(),
    };
    let Some(rt) = registry.any_version(&gr) else {
        return;
    };
    let ns = meta_str(&o.object, "namespace");
    if let Err(e) = store.mutate(
        rt,
        &ns,
        &meta_str(&o.object, "name"),
        Part::Main,
        MANAGER,
        f,
    ) {
        tracing::warn!(k8s.resource = %gr, error = %e, "garbage collection update failed");
    }
}

fn namespaces(store: &Store, registry: &Registry, objects: &[StoredObject]) {
    let doomed: HashSet<String> = objects
        .iter()
        .filter(|o| o.group.is_empty() && o.resource == "namespaces" && terminating(&o.object))
        .map(|o| meta_str(&o.object, "name"))
        .collect();
    if doomed.is_empty() {
        return;
    }
    let mut remaining: HashMap<&str, usize> = HashMap::new();
    for o in objects {
        let ns = o
            .object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if doomed.contains(ns) {
            *remaining.entry(ns).or_default() += 1;
            if !terminating(&o.object) {
                delete(store, registry, o);
            }
        }
    }
    for o in objects
        .iter()
        .filter(|o| o.group.is_empty() && o.resource == "namespaces" && terminating(&o.object))
    {
        let name = meta_str(&o.object, "name");
        if remaining.get(name.as_str()).copied().unwrap_or(0) == 0 {
            mutate(store, registry, o, |ns| {
                ns["spec"]["finalizers"] = json!([])
            });
        }
    }
}

fn owners(store: &Store, registry: &Registry, objects: &[StoredObject]) {
    let by_uid: HashMap<String, &StoredObject> =
        objects.iter().map(|o| (uid(&o.object), o)).collect();
    let mut has_dependents: HashSet<String> = HashSet::new();
    for o in objects {
        let refs = owner_uids(&o.object);
        if refs.is_empty() {
            continue;
        }
        let live: Vec<&&StoredObject> = refs.iter().filter_map(|u| by_uid.get(u)).collect();
        if live.is_empty() {
            if !terminating(&o.object) {
                delete(store, registry, o);
            }
            continue;
        }
        let orphaning: Vec<String> = live
            .iter()
            .filter(|owner| terminating(&owner.object) && has_finalizer(&owner.object, "orphan"))
            .map(|owner| uid(&owner.object))
            .collect();
        // An owner being orphaned does not wait for the dependents losing their reference to
        // it in this pass: it loses its finalizer in this pass too (nothing else would wake
        // the collector for it).
        has_dependents.extend(refs.iter().filter(|u| !orphaning.contains(u)).cloned());
        if !orphaning.is_empty() {
            mutate(store, registry, o, |d| {
                if let Some(Value::Array(refs)) = d.pointer_mut("/metadata/ownerReferences") {
                    refs.retain(|r| {
                        !r.get("uid")
                            .and_then(Value::as_str)
                            .is_some_and(|u| orphaning.iter().any(|x| x == u))
                    });
                }
            });
            continue;
        }
        let foreground = live.iter().any(|owner| {
            terminating(&owner.object) && has_finalizer(&owner.object, "foregroundDeletion")
        });
        if foreground && !terminating(&o.object) {
            delete(store, registry, o);
        }
    }
    for o in objects.iter().filter(|o| terminating(&o.object)) {
        for f in ["foregroundDeletion", "orphan"] {
            if has_finalizer(&o.object, f) && !has_dependents.contains(&uid(&o.object)) {
                mutate(store, registry, o, |x| {
                    if let Some(Value::Array(list)) = x.pointer_mut("/metadata/finalizers") {
                        list.retain(|v| v != f);
                    }
                });
            }
        }
    }
}
