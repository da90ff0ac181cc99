//! The object store: every object of every kind, one resourceVersion counter, the watch
//! hub and the persistence log, behind one lock.
//!
//! One `std::sync::Mutex` guards everything because a write must, atomically, bump the
//! shared resourceVersion, change the object, append to the log and fan out to watchers;
//! all of that is in-memory work measured in microseconds, and it is never held across
//! an `.await`. The persistence append (a buffered write to a local file) happens under
//! the lock too, so the log order is the commit order.

mod defaults;
mod prepare;
mod read;
mod write;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::watch;

use crate::persistence::{Loaded, LogRecord, Persistence, StoredObject};
use crate::resources::{GroupResource, Registry, ResourceType};
use crate::status::ApiError;
use crate::watch::{EventType, Hub, StoredEvent};

pub use prepare::now;
pub use read::{ListOptions, WatchStart, WatchStream};
pub use write::{DeleteOptions, Part, Propagation, WriteOptions};

/// Objects of one group/resource, ordered by (namespace, name) like etcd keys.
type Collection = BTreeMap<(String, String), Value>;

pub(crate) struct State {
    registry: Registry,
    objects: HashMap<GroupResource, Collection>,
    rv: u64,
    hub: Hub,
    persist: Option<Persistence>,
}

/// The shared store. Cheap to share behind an `Arc`.
pub struct Store {
    state: Mutex<State>,
    /// Latest committed resourceVersion; controllers wait on it to learn that something
    /// changed. A watch channel holds one value, so it cannot grow.
    changed: watch::Sender<u64>,
}

/// The namespaces a fresh cluster has, as kube-apiserver creates them.
const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

impl Store {
    /// A store holding what was loaded from disk (or nothing), with the system namespaces.
    pub fn new(loaded: Loaded, persist: Option<Persistence>) -> Result<Store, ApiError> {
        let mut state = State {
            registry: Registry::with_builtins(),
            objects: HashMap::new(),
            rv: loaded.resource_version,
            hub: Hub::new(loaded.resource_version),
            persist,
        };
        for o in loaded.objects {
            let gr = GroupResource {
                group: o.group,
                resource: o.resource,
            };
            let key = (
                meta_str(&o.object, "namespace"),
                meta_str(&o.object, "name"),
            );
            if crate::crd::is_crd_gr(&gr) {
                for rt in crate::crd::resource_types(&o.object)? {
                    state.registry.insert(rt);
                }
            }
            state.objects.entry(gr).or_default().insert(key, o.object);
        }
        let (changed, _) = watch::channel(state.rv);
        let store = Store {
            state: Mutex::new(state),
            changed,
        };
        store.ensure_system_namespaces()?;
        Ok(store)
    }

    fn ensure_system_namespaces(&self) -> Result<(), ApiError> {
        let ns_type = self
            .resolve("", "v1", "namespaces")
            .ok_or_else(|| ApiError::internal("namespaces type missing"))?;
        for ns in SYSTEM_NAMESPACES {
            let mut st = self.lock();
            if st.get(&ns_type.gr(), "", ns).is_none() {
                let body = serde_json::json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": ns } });
                st.create(
                    &ns_type,
                    None,
                    body,
                    &WriteOptions::internal("kube-apiserver"),
                    &self.changed,
                )?;
            }
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the state as consistent as any single
        // write makes it (writes are built aside and committed in one step), so a
        // poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The resource type served at group/version/plural, if any.
    pub fn resolve(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.lock().registry.get(group, version, plural).cloned()
    }

    /// A copy of the registry, for discovery.
    pub fn registry(&self) -> Registry {
        self.lock().registry.clone()
    }

    /// The latest committed resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// A receiver that changes whenever something is committed.
    pub fn subscribe_changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Every stored object with its group/resource (controllers and persistence).
    pub fn snapshot(&self) -> Vec<StoredObject> {
        self.lock().snapshot()
    }

    /// Compacts persistence and releases the data directory.
    pub fn close(&self) -> Result<(), crate::persistence::PersistError> {
        let mut st = self.lock();
        let objects = st.snapshot();
        match st.persist.take() {
            Some(p) => p.close(st.rv, &objects),
            None => Ok(()),
        }
    }
}

impl State {
    fn snapshot(&self) -> Vec<StoredObject> {
        let mut out = Vec::new();
        for (gr, coll) in &self.objects {
            for obj in coll.values() {
                out.push(StoredObject {
                    group: gr.group.clone(),
                    resource: gr.resource.clone(),
                    object: obj.clone(),
                });
            }
        }
        out
    }

    fn get(&self, gr: &GroupResource, namespace: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(gr)?
            .get(&(namespace.to_string(), name.to_string()))
    }

    /// Commits a put (`new` is Some) or a delete (`new` is None, `old` is the object):
    /// assigns the next resourceVersion, logs, stores, and notifies watchers.
    fn commit(
        &mut self,
        gr: &GroupResource,
        new: Option<Value>,
        old: Option<Value>,
        changed: &watch::Sender<u64>,
    ) -> Result<Value, ApiError> {
        let rv = self.rv + 1;
        let (kind, mut object) = match (new, &old) {
            (Some(n), None) => (EventType::Added, n),
            (Some(n), Some(_)) => (EventType::Modified, n),
            (None, Some(o)) => (EventType::Deleted, o.clone()),
            (None, None) => return Err(ApiError::internal("commit without an object")),
        };
        set_meta(
            &mut object,
            "resourceVersion",
            Value::String(rv.to_string()),
        );
        let namespace = meta_str(&object, "namespace");
        let name = meta_str(&object, "name");
        if let Some(p) = self.persist.as_mut() {
            let record = LogRecord {
                rv,
                group: gr.group.clone(),
                resource: gr.resource.clone(),
                namespace: namespace.clone(),
                name: name.clone(),
                object: (kind != EventType::Deleted).then(|| object.clone()),
            };
            p.append(&record).map_err(|e| {
                ApiError::internal(format!("persisting {gr} {namespace}/{name}: {e}"))
            })?;
        }
        self.rv = rv;
        let coll = self.objects.entry(gr.clone()).or_default();
        if kind == EventType::Deleted {
            coll.remove(&(namespace, name));
        } else {
            coll.insert((namespace, name), object.clone());
        }
        self.hub.publish(StoredEvent {
            rv,
            gr: gr.clone(),
            kind,
            object: object.clone(),
            old,
        });
        changed.send_replace(rv);
        Ok(object)
    }
}

/// A string field of `metadata`, or empty.
pub fn meta_str(object: &Value, field: &str) -> String {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Sets a `metadata` field, creating `metadata` if needed.
pub fn set_meta(object: &mut Value, field: &str, value: Value) {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = Value::Object(Default::default());
    }
    object["metadata"][field] = value;
}

/// The object as served at `rt`'s version: objects are shared across the versions of a
/// group/resource and only apiVersion/kind are rewritten (no schema conversion).
pub fn present(rt: &ResourceType, object: &Value) -> Value {
    let mut o = object.clone();
    if let Value::Object(m) = &mut o {
        m.insert("apiVersion".into(), Value::String(rt.api_version()));
        m.insert("kind".into(), Value::String(rt.kind.clone()));
    }
    o
}
