//! Server-side apply of rendered objects, prune, deletion with a bounded wait, and the
//! existence/readiness reads behind Status.

mod discovery;
pub mod dry_run;
pub mod impersonate;
pub mod kstatus;
mod lookup;
pub mod object;
mod watch;

pub use lookup::KubeLookup;
pub use object::ObjectKey;
pub use watch::Seen;

use discovery::DiscoveryCache;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PropagationPolicy};
use kube::discovery::ApiResource;
use kube::{Api, Client};
use object::{is_kept, stamp, str_at};
use serde_json::Value;
use std::time::Duration;

/// The field manager berth applies with.
pub const FIELD_MANAGER: &str = "berth";

/// Bound on each single API call.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a deleted object that carries finalizers is waited for before the delete says
/// what holds it (their controller may be gone for good; see `ApplyError::HeldByFinalizers`).
pub const FINALIZER_GRACE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error("no such kind {kind} in {api_version} on the cluster")]
    UnknownKind { api_version: String, kind: String },
    #[error("{object}: {reason}")]
    Invalid { object: String, reason: String },
    #[error("{op} {object}: {source}")]
    Kube {
        op: &'static str,
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("{op} {object}: timed out")]
    Timeout { op: &'static str, object: String },
    /// The object exists and is another release's, or no release's (see `object::ownership`).
    #[error("{0}")]
    Taken(String),
    /// A deleted object stayed, held by finalizers nobody removed within [`FINALIZER_GRACE`].
    #[error("{object} is held by finalizers {}", .finalizers.join(", "))]
    HeldByFinalizers {
        object: String,
        finalizers: Vec<String>,
    },
    #[error("hook {object} failed: {reason}")]
    HookFailed { object: String, reason: String },
    /// The API server refused a write made as a package's principal (its RBAC, or admission
    /// such as Pod Security): the package may not do this, and asking again will not help.
    #[error("{op} {object} as {principal}: refused by the API server: {message}")]
    Refused {
        op: &'static str,
        object: String,
        principal: String,
        message: String,
    },
}

impl ApplyError {
    pub fn is_unavailable(&self) -> bool {
        match self {
            ApplyError::Timeout { .. } => true,
            ApplyError::Kube { source, .. } => kube_unavailable(source),
            _ => false,
        }
    }
}

/// True when a kube error means the API server was not reached or not answering.
pub fn kube_unavailable(e: &kube::Error) -> bool {
    match e {
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        kube::Error::Api(s) => s.code == 503 || s.code == 504,
        _ => false,
    }
}

/// `Some(Ok)` when a Job or Pod finished successfully, `Some(Err)` when it failed, `None` while
/// it runs. (`data` holds everything but metadata: `spec`, `status`.)
fn completion(data: &Value) -> Option<Result<(), String>> {
    if let Some(phase) = data.pointer("/status/phase").and_then(Value::as_str) {
        return match phase {
            "Succeeded" => Some(Ok(())),
            "Failed" => Some(Err("pod failed".into())),
            _ => None,
        };
    }
    let conditions = data
        .pointer("/status/conditions")
        .and_then(Value::as_array)?;
    conditions.iter().find_map(|c| {
        let is_true = c.get("status").and_then(Value::as_str) == Some("True");
        match c.get("type").and_then(Value::as_str) {
            Some("Complete") if is_true => Some(Ok(())),
            Some("Failed") if is_true => {
                let msg = c
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("job failed");
                Some(Err(msg.to_string()))
            }
            _ => None,
        }
    })
}

/// Applies, deletes and reads objects for releases.
///
/// Two identities: `client`, the release service's own, reads (discovery, gets, watches,
/// waits) and creates namespaces; `writer` applies and deletes the release's objects. By
/// default they are the same; [`Applier::acting_as`] gives an applier that writes as a
/// package's principal (docs/decisions/package-identity.md).
#[derive(Clone)]
pub struct Applier {
    client: Client,
    writer: Client,
    /// Whom `writer` acts as (a ServiceAccount's user name); `None`: the service itself.
    principal: Option<std::sync::Arc<str>>,
    discovery: DiscoveryCache,
    /// The process's shared watches (`watch`).
    watches: watch::WatchHub,
    /// Namespaces lately found to exist.
    namespaces: KnownNamespaces,
}

/// How long a namespace found to exist is taken to still exist: installs into it skip the
/// lookup meanwhile. One deleted in that time makes the next install fail (naming the
/// namespace) and be forgotten, so the retry creates it again.
pub const NAMESPACE_KNOWN_FOR: std::time::Duration = std::time::Duration::from_secs(30);
/// Most namespaces remembered; past it, the memory starts over.
const MAX_KNOWN_NAMESPACES: usize = 4096;

/// Namespaces found to exist, and when.
#[derive(Clone, Default)]
struct KnownNamespaces(
    std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>>,
);

impl KnownNamespaces {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, std::time::Instant>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn known(&self, namespace: &str) -> bool {
        self.lock()
            .get(namespace)
            .is_some_and(|at| at.elapsed() < NAMESPACE_KNOWN_FOR)
    }

    fn found(&self, namespace: &str) {
        let mut known = self.lock();
        if known.len() >= MAX_KNOWN_NAMESPACES {
            known.clear();
        }
        known.insert(namespace.to_owned(), std::time::Instant::now());
    }
}

/// How discovery answers for an object's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindScope {
    Namespaced,
    Cluster,
    /// The cluster does not serve the kind.
    Unknown,
}

/// An object as the API server left it after an apply.
#[derive(Debug, Clone)]
pub struct Applied {
    pub key: ObjectKey,
    pub live: DynamicObject,
}

/// An object as it was found on the cluster.
#[derive(Debug, Clone)]
pub struct Observed {
    pub key: ObjectKey,
    pub object: Option<DynamicObject>,
}

impl Applier {
    pub fn new(client: Client) -> Self {
        Applier {
            writer: client.clone(),
            principal: None,
            client,
            discovery: DiscoveryCache::default(),
            watches: watch::WatchHub::default(),
            namespaces: KnownNamespaces::default(),
        }
    }

    async fn call<T>(
        op: &'static str,
        object: &impl std::fmt::Display,
        fut: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ApplyError> {
        match tokio::time::timeout(CALL_TIMEOUT, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(source)) => Err(ApplyError::Kube {
                op,
                object: object.to_string(),
                source,
            }),
            Err(_) => Err(ApplyError::Timeout {
                op,
                object: object.to_string(),
            }),
        }
    }

    /// The client this applier reads through (the release service's own).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// This applier, writing (apply, dry-run apply, delete) through `writer`: a client acting
    /// as a package's principal. Reads, watches and discovery stay the service's own and are
    /// shared with every other applier of the process.
    pub fn acting_as(&self, writer: Client, principal: &str) -> Applier {
        Applier {
            writer,
            principal: Some(principal.into()),
            ..self.clone()
        }
    }

    /// A write's error: the API server's refusal of a principal's write (403) says so.
    fn refused(&self, e: ApplyError) -> ApplyError {
        match (e, &self.principal) {
            (
                ApplyError::Kube {
                    op,
                    object,
                    source: kube::Error::Api(s),
                },
                Some(principal),
            ) if s.code == 403 => ApplyError::Refused {
                op,
                object,
                principal: principal.to_string(),
                message: s.message,
            },
            (e, _) => e,
        }
    }

    /// Whether `object`'s kind is namespaced, cluster-scoped or not served, as discovery says.
    pub async fn kind_scope(&self, object: &Value) -> Result<KindScope, ApplyError> {
        let (api_version, kind) = (str_at(object, "/apiVersion"), str_at(object, "/kind"));
        match self
            .discovery
            .resolve(&self.client, api_version, kind)
            .await
        {
            Ok((_, true)) => Ok(KindScope::Namespaced),
            Ok((_, false)) => Ok(KindScope::Cluster),
            Err(ApplyError::UnknownKind { .. }) => Ok(KindScope::Unknown),
            Err(e) => Err(e),
        }
    }

    /// Resolves an object's key: its kind's API resource and, for namespaced kinds, its
    /// namespace (the release namespace when the manifest names none).
    pub async fn key_for(
        &self,
        object: &Value,
        default_ns: &str,
    ) -> Result<(ObjectKey, ApiResource), ApplyError> {
        let api_version = str_at(object, "/apiVersion");
        let kind = str_at(object, "/kind");
        let name = str_at(object, "/metadata/name");
        if api_version.is_empty() || kind.is_empty() || name.is_empty() {
            return Err(ApplyError::Invalid {
                object: format!("{api_version}/{kind} {name:?}"),
                reason: "apiVersion, kind and metadata.name are required".into(),
            });
        }
        let (ar, namespaced) = self
            .discovery
            .resolve(&self.client, api_version, kind)
            .await?;
        let namespace = if namespaced {
            let ns = str_at(object, "/metadata/namespace");
            if ns.is_empty() { default_ns } else { ns }
        } else {
            ""
        };
        let key = ObjectKey {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        };
        Ok((key, ar))
    }

    fn api(&self, key: &ObjectKey, ar: &ApiResource) -> Api<DynamicObject> {
        self.api_in(&key.namespace, ar)
    }

    /// The API of `ar` in `namespace` (cluster-wide when it is empty).
    fn api_in(&self, namespace: &str, ar: &ApiResource) -> Api<DynamicObject> {
        api_through(&self.client, namespace, ar)
    }

    /// The API writes of `key` go through (see [`Applier::acting_as`]).
    fn api_writing(&self, key: &ObjectKey, ar: &ApiResource) -> Api<DynamicObject> {
        api_through(&self.writer, &key.namespace, ar)
    }

    /// Makes the next [`Applier::ensure_namespace`] of `namespace` look it up again (an
    /// install into it failed: perhaps it was deleted).
    pub fn forget_namespace(&self, namespace: &str) {
        self.namespaces.lock().remove(namespace);
    }

    /// Creates the namespace if it does not exist (Helm's `--create-namespace`), with
    /// `labels` (an App namespace's Pod Security labels, the first of them `enforce`). A
    /// namespace that exists gets `labels` only when it has no label of the first one's key:
    /// one that has it was given its level by someone, who decides
    /// (docs/decisions/package-identity.md). A namespace found or created is not asked
    /// about again for [`NAMESPACE_KNOWN_FOR`], unless an install into it fails.
    pub async fn ensure_namespace(
        &self,
        namespace: &str,
        labels: &[(&str, &str)],
    ) -> Result<(), ApplyError> {
        if self.namespaces.known(namespace) {
            return Ok(());
        }
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        let label = format!("namespace {namespace}");
        if let Some(found) = Self::call("get", &label, api.get_opt(namespace)).await? {
            let decided = labels.first().is_none_or(|(key, _)| {
                found
                    .metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(*key))
            });
            if !decided {
                let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": namespace, "labels": labels_object(labels)}});
                // Berth's own field manager, without force: labels someone else owns stay
                // theirs (the apply fails on a conflict, and the install with it).
                let pp = PatchParams::apply(FIELD_MANAGER);
                Self::call(
                    "label",
                    &label,
                    api.patch(namespace, &pp, &Patch::Apply(&ns)),
                )
                .await?;
            }
            self.namespaces.found(namespace);
            return Ok(());
        }
        let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": namespace, "labels": labels_object(labels)}});
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        Self::call(
            "create",
            &label,
            api.patch(namespace, &pp, &Patch::Apply(&ns)),
        )
        .await?;
        self.namespaces.found(namespace);
        Ok(())
    }

    /// Server-side applies one object, stamped as belonging to the release. Returns its key
    /// and the object as the API server stored it.
    pub async fn apply(
        &self,
        object: &Value,
        release: &str,
        release_ns: &str,
    ) -> Result<Applied, ApplyError> {
        let (key, ar) = self.key_for(object, release_ns).await?;
        let mut obj = object.clone();
        let ns = (!key.namespace.is_empty()).then_some(key.namespace.as_str());
        stamp(&mut obj, release, release_ns, ns);
        // One owner per object: read with the service's own identity (what the package may
        // not read, it may still not write), refused before anything is written.
        let current = Self::call("get", &key, self.api(&key, &ar).get_opt(&key.name)).await?;
        if let Some(current) = &current {
            let current = serde_json::to_value(current).unwrap_or_default();
            object::ownership(&key, &current, release, release_ns).map_err(ApplyError::Taken)?;
        }
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        let live = Self::call(
            "apply",
            &key,
            self.api_writing(&key, &ar)
                .patch(&key.name, &pp, &Patch::Apply(&obj)),
        )
        .await
        .map_err(|e| self.refused(e))?;
        if key.kind == "CustomResourceDefinition" {
            // New kinds become resolvable; drop cached misses and stale entries.
            self.discovery.clear();
        }
        Ok(Applied { key, live })
    }

    /// Waits, up to `wait`, until the named CRD reports `Established`, so objects of its kind
    /// can be applied right after it.
    pub async fn wait_crd_established(&self, name: &str, wait: Duration) -> Result<(), ApplyError> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let cond = kube::runtime::wait::conditions::is_crd_established();
        let object = format!("CustomResourceDefinition {name}");
        let deadline = tokio::time::Instant::now() + wait;
        match tokio::time::timeout(wait, kube::runtime::wait::await_condition(api, name, cond))
            .await
        {
            Ok(Ok(crd)) => {
                self.discovery.clear();
                match crd {
                    Some(crd) => self.wait_crd_discoverable(&crd, deadline).await,
                    None => Ok(()),
                }
            }
            Ok(Err(e)) => Err(ApplyError::Invalid {
                object,
                reason: format!("watching for Established: {e}"),
            }),
            Err(_) => Err(ApplyError::Timeout {
                op: "wait for Established on",
                object,
            }),
        }
    }

    /// Waits until API discovery lists the kind of `crd`. On a real API server discovery can
    /// lag a moment behind `Established`, and a custom resource applied in between would be
    /// refused as an unknown kind. Discovery has no watch, so this asks again with a short
    /// backoff (50 ms doubling to 1 s) until `deadline`.
    async fn wait_crd_discoverable(
        &self,
        crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        deadline: tokio::time::Instant,
    ) -> Result<(), ApplyError> {
        let spec = &crd.spec;
        let Some(version) = spec.versions.iter().find(|v| v.served) else {
            return Ok(());
        };
        let api_version = format!("{}/{}", spec.group, version.name);
        let mut pause = Duration::from_millis(50);
        loop {
            match self
                .discovery
                .resolve(&self.client, &api_version, &spec.names.kind)
                .await
            {
                Err(ApplyError::UnknownKind { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(pause.min(deadline - tokio::time::Instant::now())).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                }
                Err(ApplyError::UnknownKind { .. }) => {
                    return Err(ApplyError::Timeout {
                        op: "wait for API discovery to list",
                        object: format!("{api_version}/{}", spec.names.kind),
                    });
                }
                other => return other.map(|_| ()),
            }
        }
    }

    /// Waits, up to `wait`, until a hook object has finished: a Job until `Complete` (error on
    /// `Failed`), a Pod until `Succeeded` (error on `Failed`); other kinds are done once they
    /// exist.
    pub async fn wait_complete(
        &self,
        object: &Value,
        release_ns: &str,
        wait: Duration,
    ) -> Result<(), ApplyError> {
        let (key, ar) = self.key_for(object, release_ns).await?;
        if key.kind != "Job" && key.kind != "Pod" {
            return Ok(());
        }
        let finished = |o: Option<&DynamicObject>| o.is_some_and(|o| completion(&o.data).is_some());
        let watch = kube::runtime::wait::await_condition(self.api(&key, &ar), &key.name, finished);
        let last = match tokio::time::timeout(wait, watch).await {
            Ok(Ok(last)) => last,
            Ok(Err(e)) => {
                return Err(ApplyError::Invalid {
                    object: key.to_string(),
                    reason: format!("watching hook: {e}"),
                });
            }
            Err(_) => {
                return Err(ApplyError::Timeout {
                    op: "wait for hook",
                    object: key.to_string(),
                });
            }
        };
        match last.as_ref().and_then(|o| completion(&o.data)) {
            Some(Ok(())) => Ok(()),
            Some(Err(reason)) => Err(ApplyError::HookFailed {
                object: key.to_string(),
                reason,
            }),
            None => Err(ApplyError::HookFailed {
                object: key.to_string(),
                reason: "deleted while running".into(),
            }),
        }
    }

    /// Reads an object; `None` when it does not exist (or its kind no longer does).
    pub async fn get(&self, object: &Value, release_ns: &str) -> Result<Observed, ApplyError> {
        let (key, ar) = match self.key_for(object, release_ns).await {
            Ok(v) => v,
            Err(ApplyError::UnknownKind { api_version, kind }) => {
                let key = ObjectKey {
                    api_version,
                    kind,
                    namespace: str_at(object, "/metadata/namespace").to_string(),
                    name: str_at(object, "/metadata/name").to_string(),
                };
                return Ok(Observed { key, object: None });
            }
            Err(e) => return Err(e),
        };
        let found = Self::call("get", &key, self.api(&key, &ar).get_opt(&key.name)).await?;
        Ok(Observed { key, object: found })
    }

    /// Deletes an object (background propagation) and waits, up to `wait`, until it is gone.
    /// Returns the key and whether the object existed. Objects annotated `keep` are skipped
    /// and reported as `None`.
    pub async fn delete(
        &self,
        object: &Value,
        release: &str,
        release_ns: &str,
        wait: Duration,
    ) -> Result<Option<(ObjectKey, bool)>, ApplyError> {
        if is_kept(object) {
            return Ok(None);
        }
        let (key, ar) = match self.key_for(object, release_ns).await {
            Ok(v) => v,
            // The kind is gone (e.g. its CRD was removed), so the object is too.
            Err(ApplyError::UnknownKind { api_version, kind }) => {
                let key = ObjectKey {
                    api_version,
                    kind,
                    namespace: str_at(object, "/metadata/namespace").to_string(),
                    name: str_at(object, "/metadata/name").to_string(),
                };
                return Ok(Some((key, false)));
            }
            Err(e) => return Err(e),
        };
        // Another release's object is left alone (issue #31.2: it moved there, or was always
        // theirs); what is deleted is the object read here (a uid precondition), not one made
        // since.
        let current = Self::call("get", &key, self.api(&key, &ar).get_opt(&key.name)).await?;
        let Some(current) = current else {
            return Ok(Some((key, false)));
        };
        let names_another = |v: &Value| {
            v.pointer("/metadata/annotations")
                .and_then(|a| a.get(object::RELEASE_NAME_ANNOTATION))
                .and_then(Value::as_str)
                .is_some()
                && object::ownership(&key, v, release, release_ns).is_err()
        };
        if names_another(&serde_json::to_value(&current).unwrap_or_default()) {
            tracing::info!(object = %key, "not deleting another release's object");
            return Ok(Some((key, false)));
        }
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            preconditions: Some(kube::api::Preconditions {
                uid: current.metadata.uid.clone(),
                // Not the resourceVersion: a controller writing status would fail every
                // delete of a busy object.
                resource_version: None,
            }),
            ..Default::default()
        };
        let deleting = self.api_writing(&key, &ar);
        let still = match Self::call("delete", &key, deleting.delete(&key.name, &dp)).await {
            Ok(either) => either.left(),
            Err(ApplyError::Kube {
                source: kube::Error::Api(s),
                ..
            }) if is_not_found(&s) => {
                return Ok(Some((key, false)));
            }
            Err(e) => match self.refused(e) {
                // The API server authorises before it looks: a package may not delete what
                // it could never have made (a failed install's object, say), and what is not
                // there needs no deleting. What is there, it must be allowed to delete.
                refused @ ApplyError::Refused { .. } => {
                    match Self::call("get", &key, self.api(&key, &ar).get_opt(&key.name)).await? {
                        None => return Ok(Some((key, false))),
                        Some(_) => return Err(refused),
                    }
                }
                e => return Err(e),
            },
        };
        if let Some(still) = still
            && let Some(uid) = still.metadata.uid.clone()
        {
            // Waited for with the service's own reads: a package may delete what it may not
            // watch. An object with finalizers is waited for only `FINALIZER_GRACE`, then
            // named with what holds it.
            let held = still
                .metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty());
            let wait = if held {
                wait.min(FINALIZER_GRACE)
            } else {
                wait
            };
            let api = self.api(&key, &ar);
            let cond = kube::runtime::wait::conditions::is_deleted(&uid);
            match tokio::time::timeout(
                wait,
                kube::runtime::wait::await_condition(api.clone(), &key.name, cond),
            )
            .await
            {
                Ok(Ok(_)) => {}
                Err(_) if held => {
                    let now = Self::call("get", &key, api.get_opt(&key.name)).await?;
                    let finalizers = now
                        .filter(|o| o.metadata.uid.as_deref() == Some(uid.as_str()))
                        .and_then(|o| o.metadata.finalizers)
                        .unwrap_or_default();
                    if finalizers.is_empty() {
                        // Released just now.
                        return Ok(Some((key, true)));
                    }
                    return Err(ApplyError::HeldByFinalizers {
                        object: key.to_string(),
                        finalizers,
                    });
                }
                Ok(Err(e)) => {
                    return Err(ApplyError::Invalid {
                        object: key.to_string(),
                        reason: format!("watching deletion: {e}"),
                    });
                }
                Err(_) => {
                    return Err(ApplyError::Timeout {
                        op: "wait for deletion of",
                        object: key.to_string(),
                    });
                }
            }
        }
        Ok(Some((key, true)))
    }
}

fn labels_object(labels: &[(&str, &str)]) -> serde_json::Map<String, Value> {
    labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Value::from(*v)))
        .collect()
}

/// The API of `ar` in `namespace` (cluster-wide when it is empty) through `client`.
fn api_through(client: &Client, namespace: &str, ar: &ApiResource) -> Api<DynamicObject> {
    if namespace.is_empty() {
        Api::all_with(client.clone(), ar)
    } else {
        Api::namespaced_with(client.clone(), namespace, ar)
    }
}

/// Whether the API server said "not found". kube reads the reason only, and a real API
/// server answers a group it does not serve (yet: a CRD established a moment ago) with a
/// plain-text `404 page not found`, which has no reason: the code decides.
pub(crate) fn is_not_found(s: &kube::core::Status) -> bool {
    s.is_not_found() || s.code == 404
}
