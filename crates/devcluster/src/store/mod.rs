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
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::watch;

use crate::auth::rbac::{self, Rbac};
use crate::persistence::{Loaded, LogRecord, Persistence, StoredObject};
use crate::resources::{GroupResource, Registry, ResourceType};
use crate::status::ApiError;
use crate::watch::{EventType, Hub, StoredEvent};

pub use prepare::now;
pub use read::{ListOptions, WatchStart, WatchStream};
pub use write::{DeleteOptions, Part, Propagation, WriteCheck, WriteOptions};

/// Objects of one group/resource, ordered by (namespace, name) like etcd keys.
///
/// Objects are immutable once committed and shared (`Arc`) between the store, the
/// watch event log, every watcher's queue and controller snapshots: a commit that 50
/// watches see costs 50 reference counts, not 50 deep copies, and a controller pass over
/// the whole store copies pointers only.
type Collection = BTreeMap<(String, String), Arc<Value>>;

/// An object as controllers see it in a [`Store::shared_snapshot`].
#[derive(Debug, Clone)]
pub struct SharedObject {
    pub group: String,
    pub resource: String,
    pub object: Arc<Value>,
}

pub(crate) struct State {
    registry: Registry,
    objects: HashMap<GroupResource, Collection>,
    rv: u64,
    hub: Hub,
    persist: Option<Persistence>,
    /// Bumped by commits the garbage collector may have to act on (see
    /// [`gc_relevant`]), so that it need not look at the store after every write.
    gc_changed: watch::Sender<u64>,
    /// The RBAC objects, indexed for authorization; every commit of one updates it.
    rbac: Arc<Rbac>,
}

/// The shared store. Cheap to share behind an `Arc`.
pub struct Store {
    state: Mutex<State>,
    rbac: Arc<Rbac>,
    /// The CA clients trust (PEM), which every namespace's `kube-root-ca.crt` carries.
    root_ca: std::sync::OnceLock<String>,
    /// Latest committed resourceVersion; controllers wait on it to learn that something
    /// changed. A watch channel holds one value, so it cannot grow.
    changed: watch::Sender<u64>,
}

/// The namespaces a fresh cluster has, as kube-apiserver creates them.
const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

impl Store {
    /// A store holding what was loaded from disk (or nothing), with the system namespaces.
    pub fn new(loaded: Loaded, persist: Option<Persistence>) -> Result<Store, ApiError> {
        let rbac = Arc::new(Rbac::default());
        let mut state = State {
            registry: Registry::with_builtins(),
            objects: HashMap::new(),
            rv: loaded.resource_version,
            hub: Hub::new(loaded.resource_version),
            persist,
            gc_changed: watch::channel(loaded.resource_version).0,
            rbac: rbac.clone(),
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
            if gr.group == rbac::GROUP {
                rbac.apply(&gr.resource, &key.0, &key.1, Some(&o.object));
            }
            state
                .objects
                .entry(gr)
                .or_default()
                .insert(key, Arc::new(o.object));
        }
        let (changed, _) = watch::channel(state.rv);
        let store = Store {
            state: Mutex::new(state),
            rbac,
            root_ca: std::sync::OnceLock::new(),
            changed,
        };
        store.ensure_system_namespaces()?;
        store.ensure_bootstrap_policy()?;
        Ok(store)
    }

    /// Creates the bootstrap ClusterRoles and ClusterRoleBindings that are missing, and puts
    /// back what was taken out of those marked for automatic updates (see
    /// [`crate::auth::bootstrap`]).
    fn ensure_bootstrap_policy(&self) -> Result<(), ApiError> {
        use crate::auth::bootstrap;
        let kinds = [
            ("clusterroles", bootstrap::cluster_roles()),
            ("clusterrolebindings", bootstrap::cluster_role_bindings()),
        ];
        for (plural, objects) in kinds {
            let rt = self
                .resolve(rbac::GROUP, "v1", plural)
                .ok_or_else(|| ApiError::internal(format!("{plural} type missing")))?;
            for wanted in objects {
                let name = meta_str(&wanted, "name");
                let mut st = self.lock();
                let stored = st.get(&rt.gr(), "", &name).cloned();
                let opts = WriteOptions::internal("kube-apiserver");
                match stored {
                    None => {
                        st.create(&rt, None, wanted, &opts, &self.changed)?;
                    }
                    Some(old) => {
                        if let Some(new) = bootstrap::reconcile(&old, &wanted) {
                            st.finish_update(
                                &rt,
                                old,
                                new,
                                Part::Main,
                                &opts,
                                true,
                                &self.changed,
                            )?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Sets the CA `kube-root-ca.crt` carries (once, at start).
    pub fn set_root_ca(&self, pem: String) {
        let _ = self.root_ca.set(pem);
    }

    /// The CA `kube-root-ca.crt` carries.
    pub fn root_ca(&self) -> &str {
        self.root_ca.get().map_or("", String::as_str)
    }

    /// The RBAC index (authorization reads it; every commit keeps it current).
    pub fn rbac(&self) -> &Arc<Rbac> {
        &self.rbac
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

    /// A receiver that changes whenever something the garbage collector and namespace
    /// controller react to is committed: deletions, terminating objects, namespaces, and
    /// objects with owners. Plain creates and updates of ownerless objects do not count.
    pub fn subscribe_gc_changes(&self) -> watch::Receiver<u64> {
        self.lock().gc_changed.subscribe()
    }

    /// Every stored object with its group/resource, shared rather than copied, for
    /// controller passes.
    pub fn shared_snapshot(&self) -> Vec<SharedObject> {
        let st = self.lock();
        let mut out = Vec::new();
        for (gr, coll) in &st.objects {
            out.extend(coll.values().map(|obj| SharedObject {
                group: gr.group.clone(),
                resource: gr.resource.clone(),
                object: obj.clone(),
            }));
        }
        out
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
                    object: Value::clone(obj),
                });
            }
        }
        out
    }

    fn get(&self, gr: &GroupResource, namespace: &str, name: &str) -> Option<&Value> {
        self.objects
            .get(gr)?
            .get(&(namespace.to_string(), name.to_string()))
            .map(|o| &**o)
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
        if gc_relevant(gr, kind, &object) {
            self.gc_changed.send_replace(rv);
        }
        if gr.group == rbac::GROUP {
            let stored = (kind != EventType::Deleted).then_some(&object);
            self.rbac.apply(&gr.resource, &namespace, &name, stored);
        }
        let shared = Arc::new(object);
        let coll = self.objects.entry(gr.clone()).or_default();
        if kind == EventType::Deleted {
            coll.remove(&(namespace, name));
        } else {
            coll.insert((namespace, name), shared.clone());
        }
        self.hub.publish(StoredEvent {
            rv,
            gr: gr.clone(),
            kind,
            object: shared.clone(),
            old: old.map(Arc::new),
            rendered: Arc::default(),
        });
        let object = Arc::unwrap_or_clone(shared);
        changed.send_replace(rv);
        Ok(object)
    }
}

/// Whether a commit can give the garbage collector or namespace controller work: a
/// deletion (dependents may be orphaned, a namespace may now be empty or miss its
/// defaults), an object being deleted (finalizers, namespace termination), any
/// namespace change (new namespaces get defaults), or an object with owners (its owner
/// may already be gone).
fn gc_relevant(gr: &GroupResource, kind: EventType, object: &Value) -> bool {
    kind == EventType::Deleted
        || (gr.group.is_empty() && gr.resource == "namespaces")
        || object.get("metadata").is_some_and(|m| {
            m.get("deletionTimestamp").is_some() || m.get("ownerReferences").is_some()
        })
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

/// Serializes an object as served at some version (see [`present`]) without copying
/// it: lists of thousands of objects and watch events fanned out to many watchers are
/// written straight from the shared stored objects.
pub struct Presented<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub object: &'a Value,
    /// Whether apiVersion and kind are written: a real API server leaves them out of the
    /// items of lists of built-in kinds (custom resources keep theirs).
    pub typed: bool,
}

impl serde::Serialize for Presented<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let Value::Object(fields) = self.object else {
            return self.object.serialize(s);
        };
        let mut map = s.serialize_map(None)?;
        if self.typed {
            map.serialize_entry("apiVersion", self.api_version)?;
            map.serialize_entry("kind", self.kind)?;
        }
        for (k, v) in fields {
            if k != "apiVersion" && k != "kind" {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
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
