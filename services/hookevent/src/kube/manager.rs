//! The watch manager: every registered `kubernetes` binding of every package, sharing one watch
//! per (resource, namespace, label selector, field selector).
//!
//! A watch is one kube-rs `watcher` task. Its events update each subscribed binding's cache
//! ([`BindingState`]) and become HookRun tasks (held back until the binding's Synchronization
//! ran). Bindings with the same jqFilter share one compiled program, and each event runs it
//! once for all of them ([`Evaluation`]). Watches keep no objects themselves, so when a binding
//! joins an existing watch the watch restarts: the relist fills the new binding's cache, and the
//! others see no events because their checksums did not change.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use berth_hooks::{HookConfig, ObjectAndFilterResult, Snapshots};
use berth_names::{Generation, PackageKey};
use berth_proto::hookevent as pb;
use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::binding::{BindingState, Change, Evaluation, obj_key};
use super::metrics::WatchMetrics;
use super::operators::{FeedEvent, HostMsg};
use super::registry::{
    Feed, Follow, NamespaceWatch, PackageState, Registered, State, Watch, WatchKey,
};
use super::resolve::{ResolveError, Resolver};
use super::tasks::{event_task, hook_snapshots, release, sync_task};
use crate::convert::{schedule_spec_of, spec_of};
use crate::enqueue::Enqueuer;
use crate::jq::Jq;

/// Longest SetBindings waits for the initial lists of a package's watches.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);
/// Most kubernetes bindings one package may register.
pub const MAX_KUBE_BINDINGS: usize = 256;
/// Most namespaces one binding with a namespace label selector watches (one watch each).
const MAX_FOLLOWED_NAMESPACES: usize = 1000;

#[derive(Debug, thiserror::Error)]
pub enum SetError {
    #[error("kubernetes[{index}] (hook {hook}, binding {binding}): {reason}")]
    Invalid {
        index: usize,
        hook: String,
        binding: String,
        reason: String,
    },
    #[error("kubernetes[{index}] (hook {hook}, binding {binding}): {source}")]
    Resolve {
        index: usize,
        hook: String,
        binding: String,
        source: ResolveError,
    },
    #[error("listing namespaces for kubernetes[{index}]: {source}")]
    Namespaces { index: usize, source: kube::Error },
    #[error("watch of {watch}: {reason}")]
    Watch { watch: String, reason: String },
    #[error("initial lists not complete after {LIST_TIMEOUT:?}: {pending}")]
    ListTimeout { pending: String },
    /// A package's operator cannot run as written (a kind the cluster does not serve, a
    /// cluster-scoped source of an app).
    #[error("operator {operator:?}: {reason}")]
    Operator { operator: String, reason: String },
    /// The package's operators cannot run together as written (the message names the
    /// operator and controller).
    #[error("operators: {0}")]
    Operators(String),
    /// The package's operators cannot act as its principal.
    #[error("operators of {package}: {reason}")]
    Principal { package: String, reason: String },
}

impl SetError {
    pub fn is_invalid(&self) -> bool {
        matches!(
            self,
            SetError::Invalid { .. }
                | SetError::Operator { .. }
                | SetError::Operators(_)
                | SetError::Resolve {
                    source: ResolveError::NotFound { .. },
                    ..
                }
        )
    }
}

/// A binding's objects as GetSnapshots returns them.
pub struct BindingObjects {
    pub hook: String,
    pub binding: String,
    pub objects: Vec<ObjectAndFilterResult>,
    pub synchronized: bool,
}

pub struct KubeManager {
    resolver: Resolver,
    /// Clients acting as packages' ServiceAccounts, for their hooks' object operations.
    principals: super::impersonate::ImpersonatingClients,
    /// The jq evaluators; jqFilters checked once per distinct source, shared by the bindings
    /// using them.
    jq: Jq,
    enqueuer: Enqueuer,
    state: Mutex<State>,
    /// Woken whenever a watch finished a list or failed.
    listed: Notify,
    pub(super) shutdown: CancellationToken,
    metrics: WatchMetrics,
    /// Where the packages' operators' health goes (lifecycle's OperatorsReady).
    pub(super) health: super::operators::HealthReporter,
}

impl KubeManager {
    /// A manager whose watches are counted in `metrics` (`berth_watches`,
    /// `berth_watch_events_total`).
    pub fn new(
        client: kube::Client,
        enqueuer: Enqueuer,
        shutdown: CancellationToken,
        jq: Jq,
        metrics: WatchMetrics,
        health: super::operators::HealthReporter,
    ) -> Arc<KubeManager> {
        let manager = Arc::new(KubeManager {
            health,
            principals: super::impersonate::ImpersonatingClients::new(client.clone()),
            resolver: Resolver::new(client),
            jq,
            enqueuer,
            state: Mutex::new(State::default()),
            listed: Notify::new(),
            shutdown,
            metrics,
        });
        manager.metrics.watch(&manager);
        manager
    }

    /// The Kubernetes watches open: one per watched (resource, namespace, selectors), plus one
    /// per namespace label selector followed.
    pub fn watch_count(&self) -> usize {
        let state = self.lock();
        state.watches.len() + state.namespace_watches.len()
    }

    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    /// A client acting as the ServiceAccount `sa` (a package's principal): its object
    /// operations are the package's acts, which the API server authorises by its rights.
    pub fn acting_as(
        &self,
        sa: &berth_clients::scope::ServiceAccountRef,
    ) -> Result<kube::Client, String> {
        let user = sa.username();
        self.principals
            .get(&user)
            .map_err(|e| format!("impersonating {user}: {e}"))
    }

    /// The jq evaluators (for JQPatch operations too).
    pub fn jq(&self) -> &Jq {
        &self.jq
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Objects cached across all bindings (for tests and benchmarks).
    pub fn object_count(&self) -> usize {
        self.lock().bindings.values().map(|r| r.state.len()).sum()
    }

    /// Replaces the package's kubernetes bindings and waits for their initial lists. Bindings
    /// with `waitForSynchronization: false` (and all bindings when `restored`, i.e. re-registered
    /// after a hookevent restart) get their Synchronization run queued here, ahead of their events;
    /// the others wait for the worker's [`KubeManager::synchronization_done`].
    pub async fn set(
        self: &Arc<Self>,
        package: &PackageKey,
        generation: Generation,
        app_namespace: &str,
        kube: &[pb::KubernetesBinding],
        schedules: &[pb::ScheduleBinding],
        restored: bool,
    ) -> Result<(), SetError> {
        if kube.len() > MAX_KUBE_BINDINGS {
            return Err(SetError::Invalid {
                index: MAX_KUBE_BINDINGS,
                hook: String::new(),
                binding: String::new(),
                reason: format!(
                    "{} bindings exceed the limit of {MAX_KUBE_BINDINGS}",
                    kube.len()
                ),
            });
        }
        let mut prepared = Vec::with_capacity(kube.len());
        for (index, b) in kube.iter().enumerate() {
            prepared.push(self.prepare(index, b, package, app_namespace).await?);
        }
        let hooks = hook_configs(kube, schedules, &prepared);
        let ids = {
            let mut state = self.lock();
            self.remove_locked(&mut state, package.as_str());
            let mut ids = vec![];
            let mut restart = HashSet::new();
            for Prepared {
                state: state_binding,
                resource,
                keys,
                follow,
            } in prepared
            {
                let id = state.next_id;
                state.next_id += 1;
                if let Some(f) = &follow {
                    if let Some(w) = state.namespace_watches.get_mut(&f.selector) {
                        w.subscribers.push(id);
                    } else {
                        let cancel = self.shutdown.child_token();
                        state.namespace_watches.insert(
                            f.selector.clone(),
                            NamespaceWatch {
                                subscribers: vec![id],
                                cancel: cancel.clone(),
                            },
                        );
                        self.follow_namespaces(f.selector.clone(), cancel);
                    }
                }
                for key in &keys {
                    let watch = state
                        .watches
                        .entry(key.clone())
                        .or_insert_with(|| Watch::new(resource.clone()));
                    watch.subscribers.push(id);
                    restart.insert(key.clone());
                }
                let mut state_binding = state_binding;
                state_binding.pending_lists = keys.len();
                let pending = keys.iter().cloned().collect();
                state.bindings.insert(
                    id,
                    Registered {
                        state: state_binding,
                        keys,
                        pending,
                        follow,
                    },
                );
                ids.push(id);
            }
            state.packages.insert(
                package.to_owned(),
                PackageState {
                    generation,
                    bindings: ids.clone(),
                    hooks,
                },
            );
            for key in restart {
                self.restart_locked(&mut state, &key);
            }
            ids
        };
        if let Err(e) = self.wait_listed(&ids).await {
            self.remove(package.as_str());
            return Err(e);
        }
        let tasks = {
            let mut state = self.lock();
            let mut tasks = vec![];
            for id in &ids {
                let Some(r) = state.bindings.get(id) else {
                    continue;
                };
                if restored || !r.state.spec.wait_for_synchronization {
                    tasks.extend(release(&mut state, *id, true));
                }
            }
            tasks
        };
        self.enqueuer.send(tasks).await;
        self.start_resyncs(&ids);
        Ok(())
    }

    /// Starts a periodic Synchronization for each of `ids` that has a `resynchronizationPeriod`.
    /// A loop ends by itself once its binding is gone (ids are never reused).
    fn start_resyncs(self: &Arc<Self>, ids: &[u64]) {
        let state = self.lock();
        for id in ids {
            let Some(r) = state.bindings.get(id) else {
                continue;
            };
            if let (Some(period), true) = (
                r.state.spec.resynchronization_period,
                r.state.spec.execute_hook_on_synchronization,
            ) {
                berth_runtime::spawn_in(
                    tracing::info_span!(parent: None, "hookevent.resync", binding = id),
                    Arc::clone(self).resync(*id, period),
                );
            }
        }
    }

    async fn resync(self: Arc<Self>, id: u64, period: Duration) {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        // A slow broker must not turn into a burst of catch-up runs.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = self.shutdown.cancelled() => return,
            }
            let task = {
                let state = self.lock();
                match state.bindings.get(&id) {
                    None => return,
                    // Until the first Synchronization ran, events are held and a resync is moot.
                    Some(r) if !r.state.synchronized => continue,
                    Some(_) => sync_task(&state, id),
                }
            };
            let mut tasks: Vec<_> = task.into_iter().collect();
            new_trace(
                &mut tasks,
                tracing::info_span!(parent: None, "hookevent.resync", binding = id),
            );
            self.enqueuer.send(tasks).await;
        }
    }

    /// Validates one binding and resolves what it watches.
    async fn prepare(
        &self,
        index: usize,
        b: &pb::KubernetesBinding,
        package: &PackageKey,
        app_namespace: &str,
    ) -> Result<Prepared, SetError> {
        let invalid = |reason: String| SetError::Invalid {
            index,
            hook: b.hook.clone(),
            binding: b.binding.clone(),
            reason,
        };
        let spec = spec_of(b).map_err(invalid)?;
        let jq = match &spec.jq_filter {
            Some(f) => Some(
                self.jq
                    .check(f)
                    .await
                    .map_err(|e| invalid(format!("jqFilter: {e}")))?,
            ),
            None => None,
        };
        let resolved = self
            .resolver
            .resolve(&b.api_version, &b.kind)
            .await
            .map_err(|source| SetError::Resolve {
                index,
                hook: b.hook.clone(),
                binding: b.binding.clone(),
                source,
            })?;
        let mut fields = b.field_selector.clone();
        let mut names = vec![];
        match b.names.as_slice() {
            [] => {}
            // One name is a server-side filter; several cannot be ORed in a field selector.
            [one] => {
                if !fields.is_empty() {
                    fields.push(',');
                }
                fields.push_str(&format!("metadata.name={one}"));
            }
            many => names = many.to_vec(),
        }
        let mut follow = None;
        let namespaces: Vec<Option<String>> = if !resolved.namespaced {
            if !app_namespace.is_empty() {
                return Err(invalid(format!(
                    "{} is cluster-scoped; an app's bindings are locked to its namespace {app_namespace}",
                    resolved.resource.kind
                )));
            }
            vec![None]
        } else if !app_namespace.is_empty() {
            // Apps see only their own namespace, whatever the binding asks for.
            vec![Some(app_namespace.to_owned())]
        } else if !b.namespaces.is_empty() {
            b.namespaces.iter().cloned().map(Some).collect()
        } else if !b.namespace_label_selector.is_empty() {
            follow = Some(b.namespace_label_selector.clone());
            let matching = self
                .namespaces_matching(index, &b.namespace_label_selector)
                .await?;
            if matching.len() > MAX_FOLLOWED_NAMESPACES {
                return Err(invalid(format!(
                    "namespace labelSelector {:?} matches {} namespaces, more than the {MAX_FOLLOWED_NAMESPACES} one binding may watch",
                    b.namespace_label_selector,
                    matching.len()
                )));
            }
            matching.into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        let template = WatchKey {
            api_version: resolved.resource.api_version.clone(),
            plural: resolved.resource.plural.clone(),
            namespace: None,
            labels: b.label_selector.clone(),
            fields,
        };
        let keys = namespaces
            .into_iter()
            .map(|namespace| WatchKey {
                namespace,
                ..template.clone()
            })
            .collect();
        let follow = follow.map(|selector| Follow {
            selector,
            template,
            resource: resolved.resource.clone(),
        });
        let state = BindingState::new(package, &b.hook, spec, jq, names);
        Ok(Prepared {
            state,
            resource: resolved.resource,
            keys,
            follow,
        })
    }

    /// The namespaces a namespace label selector matches now. Later changes reach the binding
    /// through its namespace watch ([`KubeManager::follow_namespaces`]).
    async fn namespaces_matching(
        &self,
        index: usize,
        selector: &str,
    ) -> Result<Vec<String>, SetError> {
        let api: Api<k8s_openapi::api::core::v1::Namespace> =
            Api::all(self.resolver.client().clone());
        let list = tokio::time::timeout(
            LIST_TIMEOUT,
            api.list(&ListParams::default().labels(selector)),
        )
        .await
        .map_err(|_| SetError::ListTimeout {
            pending: format!("namespaces matching {selector:?}"),
        })?
        .map_err(|source| SetError::Namespaces { index, source })?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect())
    }

    async fn wait_listed(&self, ids: &[u64]) -> Result<(), SetError> {
        let deadline = tokio::time::Instant::now() + LIST_TIMEOUT;
        loop {
            let notified = self.listed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let pending: Vec<WatchKey> = {
                let state = self.lock();
                let pending: Vec<WatchKey> = ids
                    .iter()
                    .filter_map(|id| state.bindings.get(id))
                    .flat_map(|r| r.pending.iter().cloned())
                    .collect();
                for key in &pending {
                    if let Some(reason) = state.watches.get(key).and_then(|w| w.error.clone()) {
                        return Err(SetError::Watch {
                            watch: key.to_string(),
                            reason,
                        });
                    }
                }
                pending
            };
            if pending.is_empty() {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let pending = pending
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(SetError::ListTimeout { pending });
            }
        }
    }

    /// The packages with kubernetes bindings here.
    pub fn packages(&self) -> Vec<String> {
        self.lock()
            .packages
            .keys()
            .map(|p| p.as_str().to_owned())
            .collect()
    }

    /// Drops the package's bindings and stops watches nobody needs any more. Idempotent.
    pub fn remove(&self, package: &str) {
        self.stop_operators(package, true);
        let mut state = self.lock();
        self.remove_locked(&mut state, package);
    }

    fn remove_locked(&self, state: &mut State, package: &str) {
        let Some(pkg) = state.packages.remove(package) else {
            return;
        };
        for id in pkg.bindings {
            let Some(r) = state.bindings.remove(&id) else {
                continue;
            };
            for key in r.keys {
                unsubscribe(state, &key, id);
            }
            if let Some(f) = r.follow
                && let Some(w) = state.namespace_watches.get_mut(&f.selector)
            {
                w.subscribers.retain(|s| *s != id);
                if w.subscribers.is_empty() {
                    w.cancel.cancel();
                    state.namespace_watches.remove(&f.selector);
                }
            }
        }
    }

    /// Watches the namespaces matching `selector` until `cancel`, and grows or shrinks the
    /// following bindings as namespaces start or stop matching (created, labelled, unlabelled,
    /// deleted). A relist (after the watch broke) reconciles: namespaces not seen again stop
    /// being followed.
    fn follow_namespaces(self: &Arc<Self>, selector: String, cancel: CancellationToken) {
        let api: Api<k8s_openapi::api::core::v1::Namespace> =
            Api::all(self.resolver.client().clone());
        let manager = Arc::clone(self);
        let span = tracing::info_span!(parent: None, "hookevent.namespaces", selector = %selector);
        berth_runtime::spawn_in(span, async move {
            let stream =
                watcher(api, watcher::Config::default().labels(&selector)).default_backoff();
            tokio::pin!(stream);
            let mut relist: Option<HashSet<String>> = None;
            loop {
                let next = tokio::select! {
                    n = stream.next() => n,
                    _ = cancel.cancelled() => return,
                };
                let name = |ns: &k8s_openapi::api::core::v1::Namespace| ns.metadata.name.clone();
                match next {
                    Some(Ok(watcher::Event::Init)) => relist = Some(HashSet::new()),
                    Some(Ok(watcher::Event::InitApply(ns) | watcher::Event::Apply(ns))) => {
                        if let Some(n) = name(&ns) {
                            if let Some(seen) = &mut relist {
                                seen.insert(n.clone());
                            }
                            manager.namespace_matches(&selector, &n, true);
                        }
                    }
                    Some(Ok(watcher::Event::Delete(ns))) => {
                        if let Some(n) = name(&ns) {
                            manager.namespace_matches(&selector, &n, false);
                        }
                    }
                    Some(Ok(watcher::Event::InitDone)) => {
                        let seen = relist.take().unwrap_or_default();
                        manager.namespaces_relisted(&selector, &seen);
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, "namespace watch failed; retrying with backoff")
                    }
                    None => return,
                }
            }
        });
    }

    /// Namespace `ns` now matches (`matches`) or no longer matches the selector: the bindings
    /// following it start or stop watching there. Objects of a namespace that joins come as
    /// Added events; those of one that leaves drop out of the snapshots without events (they
    /// were not deleted).
    fn namespace_matches(self: &Arc<Self>, selector: &str, ns: &str, matches: bool) {
        let mut state = self.lock();
        let Some(ids) = state
            .namespace_watches
            .get(selector)
            .map(|w| w.subscribers.clone())
        else {
            return;
        };
        let mut restart = HashSet::new();
        for id in ids {
            let Some(r) = state.bindings.get_mut(&id) else {
                continue;
            };
            let Some(f) = r.follow.clone() else {
                continue;
            };
            let key = WatchKey {
                namespace: Some(ns.to_owned()),
                ..f.template.clone()
            };
            let followed = r.keys.contains(&key);
            if matches && !followed {
                if r.keys.len() >= MAX_FOLLOWED_NAMESPACES {
                    tracing::error!(binding = %r.state.spec.name, hook = %r.state.hook, namespace = ns,
                        "not following another namespace: the binding follows {MAX_FOLLOWED_NAMESPACES} already");
                    continue;
                }
                r.keys.push(key.clone());
                state
                    .watches
                    .entry(key.clone())
                    .or_insert_with(|| Watch::new(f.resource.clone()))
                    .subscribers
                    .push(id);
                restart.insert(key);
            } else if !matches && followed {
                r.keys.retain(|k| *k != key);
                r.pending.remove(&key);
                r.state.pending_lists = r.pending.len();
                r.state.drop_namespace(ns);
                unsubscribe(&mut state, &key, id);
            }
        }
        for key in restart {
            self.restart_locked(&mut state, &key);
        }
    }

    /// After a relist of the namespaces matching `selector`: the followed namespaces not seen
    /// again no longer match.
    fn namespaces_relisted(self: &Arc<Self>, selector: &str, seen: &HashSet<String>) {
        let gone: HashSet<String> = {
            let state = self.lock();
            let Some(w) = state.namespace_watches.get(selector) else {
                return;
            };
            w.subscribers
                .iter()
                .filter_map(|id| state.bindings.get(id))
                .flat_map(|r| r.keys.iter().filter_map(|k| k.namespace.clone()))
                .filter(|ns| !seen.contains(ns))
                .collect()
        };
        for ns in gone {
            self.namespace_matches(selector, &ns, false);
        }
    }

    /// (Re)starts the watch of `key` under a new epoch; events of older epochs are ignored.
    pub(super) fn restart_locked(self: &Arc<Self>, state: &mut State, key: &WatchKey) {
        state.next_epoch += 1;
        let epoch = state.next_epoch;
        let Some(w) = state.watches.get_mut(key) else {
            return;
        };
        w.cancel.cancel();
        w.cancel = self.shutdown.child_token();
        w.epoch = epoch;
        w.listed = false;
        w.relist = None;
        w.error = None;
        let api: Api<DynamicObject> = match &key.namespace {
            Some(ns) => Api::namespaced_with(self.resolver.client().clone(), ns, &w.resource),
            None => Api::all_with(self.resolver.client().clone(), &w.resource),
        };
        let mut config = watcher::Config::default();
        if !key.labels.is_empty() {
            config = config.labels(&key.labels);
        }
        if !key.fields.is_empty() {
            config = config.fields(&key.fields);
        }
        let manager = self.clone();
        let cancel = w.cancel.clone();
        let key = key.clone();
        let resource = w.resource.clone();
        let span =
            tracing::info_span!(parent: None, "hookevent.watch", resource = %resource.plural);
        berth_runtime::spawn_in(span, async move {
            let stream = watcher(api, config).default_backoff();
            tokio::pin!(stream);
            loop {
                let next = tokio::select! {
                    n = stream.next() => n,
                    _ = cancel.cancelled() => return,
                };
                match next {
                    Some(Ok(event)) => manager.on_event(&key, epoch, &resource, event).await,
                    Some(Err(e)) => manager.on_error(&key, epoch, e.to_string()),
                    None => return,
                }
            }
        });
    }

    fn on_error(&self, key: &WatchKey, epoch: u64, error: String) {
        tracing::warn!(watch = %key, %error, "watch failed; retrying with backoff");
        let mut state = self.lock();
        if let Some(w) = state
            .watches
            .get_mut(key)
            .filter(|w| w.epoch == epoch && !w.listed)
        {
            w.error = Some(error);
            drop(state);
            self.listed.notify_waiters();
        }
    }

    async fn on_event(
        &self,
        key: &WatchKey,
        epoch: u64,
        resource: &ApiResource,
        event: watcher::Event<DynamicObject>,
    ) {
        if let watcher::Event::InitApply(_) | watcher::Event::Apply(_) | watcher::Event::Delete(_) =
            &event
        {
            self.metrics.event(&resource.kind);
        }
        let (event, object) = match event {
            watcher::Event::Init => (EventKind::Init, None),
            watcher::Event::InitApply(o) | watcher::Event::Apply(o) => {
                (EventKind::Apply, Some(object_json(o, resource)))
            }
            watcher::Event::Delete(o) => (EventKind::Delete, Some(object_json(o, resource))),
            watcher::Event::InitDone => (EventKind::InitDone, None),
        };
        // Operators reading the watch get each event first, in order (the send waits while a
        // host's queue is full: the watch slows down rather than dropping events).
        let feeds: Vec<Feed> = match self.lock().watches.get(key).filter(|w| w.epoch == epoch) {
            Some(w) => w.feeds.clone(),
            None => return,
        };
        for feed in &feeds {
            let event = match (event, &object) {
                (EventKind::Init, _) => FeedEvent::Init,
                (EventKind::InitDone, _) => FeedEvent::InitDone,
                (EventKind::Apply, Some(o)) => FeedEvent::Apply(o.clone()),
                (EventKind::Delete, Some(o)) => FeedEvent::Delete(o.clone()),
                _ => continue,
            };
            let msg = HostMsg::Watch {
                feed: feed.id,
                epoch,
                event,
            };
            // A host that stopped has dropped its receiver; its feed goes with it.
            let _ = feed.tx.send(msg).await;
        }
        let mut eval = match event {
            EventKind::Apply => object.as_ref().map(Evaluation::new),
            _ => None,
        };
        // The subscribers' jqFilters run in the evaluators, not under the lock: when the lock
        // is taken and a subscriber's filter has no result yet (first pass, or a binding that
        // joined meanwhile), the lock is let go, the filters run, and the lock is taken again.
        let tasks = loop {
            let missing = {
                let mut state = self.lock();
                let Some(w) = state.watches.get(key).filter(|w| w.epoch == epoch) else {
                    return;
                };
                let missing = match &eval {
                    Some(eval) => eval.missing(
                        w.subscribers
                            .iter()
                            .filter_map(|id| state.bindings.get(id).map(|r| &r.state)),
                    ),
                    None => vec![],
                };
                if missing.is_empty() {
                    break self.apply_event(
                        &mut state,
                        key,
                        epoch,
                        event,
                        object.as_ref(),
                        eval.as_mut(),
                    );
                }
                missing
            };
            if let (Some(eval), Some(object)) = (eval.as_mut(), object.as_ref()) {
                for (filter, hook, binding) in missing {
                    let result = self.jq.run(&filter, object).await;
                    eval.record(&filter, result, &hook, &binding);
                }
            }
        };
        let mut tasks = tasks;
        new_trace(
            &mut tasks,
            tracing::info_span!(parent: None, "hookevent.event", watch = %key),
        );
        self.enqueuer.send(tasks).await;
    }

    /// Applies one watch event (with its `object` for Apply and Delete) to the subscribed
    /// bindings (their filters already ran into `eval` for Apply) and returns the tasks to
    /// send now.
    fn apply_event(
        &self,
        state: &mut State,
        key: &WatchKey,
        epoch: u64,
        event: EventKind,
        object: Option<&Value>,
        eval: Option<&mut Evaluation<'_>>,
    ) -> Vec<berth_proto::queue::Task> {
        let Some(w) = state.watches.get_mut(key).filter(|w| w.epoch == epoch) else {
            return vec![];
        };
        let subscribers = w.subscribers.clone();
        let mut changes: Vec<(u64, Change)> = vec![];
        match (event, eval) {
            (EventKind::Init, _) => w.relist = Some(HashSet::new()),
            (EventKind::Apply, Some(eval)) => {
                if let Some(seen) = &mut w.relist {
                    seen.insert(obj_key(eval.object));
                }
                for id in subscribers {
                    if let Some(c) = state
                        .bindings
                        .get_mut(&id)
                        .and_then(|r| r.state.observe_in(eval))
                    {
                        changes.push((id, c));
                    }
                }
            }
            (EventKind::Apply, None) => {}
            (EventKind::Delete, _) => {
                let Some(object) = object else {
                    return vec![];
                };
                for id in subscribers {
                    if let Some(c) = state
                        .bindings
                        .get_mut(&id)
                        .and_then(|r| r.state.forget(object))
                    {
                        changes.push((id, c));
                    }
                }
            }
            (EventKind::InitDone, _) => {
                let seen = w.relist.take().unwrap_or_default();
                w.listed = true;
                w.error = None;
                for id in subscribers {
                    let Some(r) = state.bindings.get_mut(&id) else {
                        continue;
                    };
                    changes.extend(
                        r.state
                            .relisted(key.namespace.as_deref(), &seen)
                            .into_iter()
                            .map(|c| (id, c)),
                    );
                    r.pending.remove(key);
                    r.state.pending_lists = r.pending.len();
                }
                self.listed.notify_waiters();
            }
        }
        let mut tasks = vec![];
        for (id, change) in changes {
            let Some(r) = state.bindings.get(&id) else {
                continue;
            };
            if !r.state.spec.execute_hook_on_event.contains(&change.event) {
                continue;
            }
            let Some(task) = event_task(state, id, &change) else {
                continue;
            };
            let Some(r) = state.bindings.get_mut(&id) else {
                continue;
            };
            if r.state.synchronized {
                tasks.push(task);
            } else {
                r.state.hold(task);
            }
        }
        tasks
    }

    /// The objects of every kubernetes binding of the package. With `for_synchronization`, the
    /// events buffered for bindings not yet synchronized are dropped: the caller's
    /// Synchronization run sees these objects, which already include them.
    pub fn snapshots(&self, package: &str, for_synchronization: bool) -> Vec<BindingObjects> {
        let mut state = self.lock();
        let ids = state
            .packages
            .get(package)
            .map(|p| p.bindings.clone())
            .unwrap_or_default();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(r) = state.bindings.get_mut(&id) else {
                continue;
            };
            if for_synchronization && !r.state.synchronized {
                r.state.buffer.clear();
                r.state.overflowed = false;
            }
            out.push(BindingObjects {
                hook: r.state.hook.clone(),
                binding: r.state.spec.name.clone(),
                objects: r.state.snapshot(),
                synchronized: r.state.synchronized,
            });
        }
        out
    }

    /// The snapshots of one hook's bindings, for contexts built outside a watch event (schedules).
    pub fn hook_snapshots(&self, package: &str, hook: &str) -> Snapshots {
        hook_snapshots(&self.lock(), package, hook)
    }

    /// Runs queued from now on carry `generation` (never lowers it).
    pub fn adopt_generation(&self, package: &str, generation: Generation) {
        if let Some(p) = self.lock().packages.get_mut(package) {
            p.generation = p.generation.max(generation);
        }
    }

    /// The hook's bindings as context builders need them.
    pub fn hook_config(&self, package: &str, hook: &str) -> HookConfig {
        self.lock()
            .packages
            .get(package)
            .and_then(|p| p.hooks.get(hook).cloned())
            .unwrap_or_default()
    }

    /// The worker ran the package's Synchronization: release the held events, in order.
    pub async fn synchronization_done(&self, package: &str, generation: Generation) {
        let tasks = {
            let mut state = self.lock();
            let Some(pkg) = state.packages.get(package) else {
                return;
            };
            if pkg.generation > generation {
                return;
            }
            let ids = pkg.bindings.clone();
            let mut tasks = vec![];
            for id in ids {
                tasks.extend(release(&mut state, id, false));
            }
            tasks
        };
        self.enqueuer.send(tasks).await;
    }
}

/// What a watch event is, its object aside.
#[derive(Clone, Copy, PartialEq, Eq)]
enum EventKind {
    Init,
    Apply,
    Delete,
    InitDone,
}

fn object_json(object: DynamicObject, resource: &ApiResource) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    // List items come without apiVersion/kind; hooks expect them, as kubectl shows them.
    if let Value::Object(map) = &mut value {
        map.entry("apiVersion")
            .or_insert_with(|| Value::from(resource.api_version.clone()));
        map.entry("kind")
            .or_insert_with(|| Value::from(resource.kind.clone()));
    }
    value
}

/// One binding, checked and resolved, before it is registered.
struct Prepared {
    state: BindingState,
    resource: ApiResource,
    keys: Vec<WatchKey>,
    follow: Option<Follow>,
}

/// Starts a trace of its own (`span`, a root) for the runs one watch event or resync queues,
/// and makes them continue it. Runs a Synchronization holds back keep the trace they got when
/// they were queued. Nothing is traced for an event that queues nothing.
fn new_trace(tasks: &mut [berth_proto::queue::Task], span: tracing::Span) {
    if tasks.is_empty() {
        return;
    }
    let traceparent = span.in_scope(berth_runtime::current_traceparent);
    for task in tasks {
        task.traceparent.clone_from(&traceparent);
    }
}

/// Takes binding `id` off the watch of `key`, stopping the watch when nobody is left on it.
fn unsubscribe(state: &mut State, key: &WatchKey, id: u64) {
    if let Some(w) = state.watches.get_mut(key) {
        w.subscribers.retain(|s| *s != id);
        if w.unused() {
            w.cancel.cancel();
            state.watches.remove(key);
        }
    }
}

fn hook_configs(
    kube: &[pb::KubernetesBinding],
    schedules: &[pb::ScheduleBinding],
    prepared: &[Prepared],
) -> HashMap<String, HookConfig> {
    let mut hooks: HashMap<String, HookConfig> = HashMap::new();
    for (b, Prepared { state, .. }) in kube.iter().zip(prepared) {
        hooks
            .entry(b.hook.clone())
            .or_default()
            .kubernetes
            .push(state.spec.clone());
    }
    for s in schedules {
        hooks
            .entry(s.hook.clone())
            .or_default()
            .schedule
            .push(schedule_spec_of(s));
    }
    hooks
}
