//! The watch manager: every registered `kubernetes` binding of every package, sharing one watch
//! per (resource, namespace, label selector, field selector).
//!
//! A watch is one kube-rs `watcher` task. Its events update each subscribed binding's cache
//! ([`BindingState`]) and become HookRun tasks (held back until the binding's Synchronization
//! ran). Bindings with the same jqFilter share one compiled program, and each event runs it
//! once for all of them ([`Evaluation`]). Watches keep no objects themselves, so when a binding
//! joins an existing watch the watch restarts: the relist fills the new binding's cache, and the
//! others see no events because their checksums did not change.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use berth_hooks::binding_context::{self, BindingContext};
use berth_hooks::{HookConfig, KubernetesBinding, ObjectAndFilterResult, ScheduleBinding, Snapshots, WatchEventType};
use berth_proto::hookevent as pb;
use berth_proto::queue::Task;
use berth_proto::tasks::TaskKind;
use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::binding::{BindingState, Change, Evaluation, ObjKey, obj_key};
use super::resolve::{ResolveError, Resolver};
use crate::enqueue::Enqueuer;
use crate::jq::JqCache;

/// Longest SetBindings waits for the initial lists of a package's watches.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);
/// Most kubernetes bindings one package may register.
pub const MAX_KUBE_BINDINGS: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum SetError {
    #[error("kubernetes[{index}] (hook {hook}, binding {binding}): {reason}")]
    Invalid { index: usize, hook: String, binding: String, reason: String },
    #[error("kubernetes[{index}] (hook {hook}, binding {binding}): {source}")]
    Resolve { index: usize, hook: String, binding: String, source: ResolveError },
    #[error("listing namespaces for kubernetes[{index}]: {source}")]
    Namespaces { index: usize, source: kube::Error },
    #[error("watch of {watch}: {reason}")]
    Watch { watch: String, reason: String },
    #[error("initial lists not complete after {LIST_TIMEOUT:?}: {pending}")]
    ListTimeout { pending: String },
}

impl SetError {
    pub fn is_invalid(&self) -> bool {
        matches!(self, SetError::Invalid { .. } | SetError::Resolve { source: ResolveError::NotFound { .. }, .. })
    }
}

/// What one watch covers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WatchKey {
    pub api_version: String,
    pub plural: String,
    pub namespace: Option<String>,
    pub labels: String,
    pub fields: String,
}

impl std::fmt::Display for WatchKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version, self.plural)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if !self.labels.is_empty() {
            write!(f, " labels {:?}", self.labels)?;
        }
        if !self.fields.is_empty() {
            write!(f, " fields {:?}", self.fields)?;
        }
        Ok(())
    }
}

struct Watch {
    resource: ApiResource,
    subscribers: Vec<u64>,
    epoch: u64,
    cancel: CancellationToken,
    /// Keys seen since the last `Init`; `Some` while a (re)list is in progress.
    relist: Option<HashSet<ObjKey>>,
    listed: bool,
    error: Option<String>,
}

struct Registered {
    state: BindingState,
    keys: Vec<WatchKey>,
    pending: HashSet<WatchKey>,
}

struct PackageState {
    generation: i64,
    bindings: Vec<u64>,
    /// Per hook, the bindings as the context builders need them (selectors are not needed there).
    hooks: HashMap<String, HookConfig>,
}

#[derive(Default)]
struct State {
    next_id: u64,
    next_epoch: u64,
    watches: HashMap<WatchKey, Watch>,
    bindings: HashMap<u64, Registered>,
    packages: HashMap<String, PackageState>,
}

/// A binding's objects as GetSnapshots returns them.
pub struct BindingObjects {
    pub hook: String,
    pub binding: String,
    pub objects: Vec<ObjectAndFilterResult>,
    pub synchronized: bool,
}

/// Shortest accepted `resynchronizationPeriod`: a shorter one would flood the package's queue.
const MIN_RESYNC_PERIOD: Duration = Duration::from_secs(1);

pub struct KubeManager {
    resolver: Resolver,
    /// jqFilters compiled once per distinct source, shared by the bindings using them.
    jq: JqCache,
    enqueuer: Enqueuer,
    state: Mutex<State>,
    /// Woken whenever a watch finished a list or failed.
    listed: Notify,
    shutdown: CancellationToken,
}

impl KubeManager {
    pub fn new(client: kube::Client, enqueuer: Enqueuer, shutdown: CancellationToken) -> Arc<KubeManager> {
        Arc::new(KubeManager {
            resolver: Resolver::new(client),
            jq: JqCache::default(),
            enqueuer,
            state: Mutex::new(State::default()),
            listed: Notify::new(),
            shutdown,
        })
    }

    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    fn lock(&self) -> MutexGuard<'_, State> {
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
        package: &str,
        generation: i64,
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
                reason: format!("{} bindings exceed the limit of {MAX_KUBE_BINDINGS}", kube.len()),
            });
        }
        let mut prepared = Vec::with_capacity(kube.len());
        for (index, b) in kube.iter().enumerate() {
            prepared.push(self.prepare(index, b, package, app_namespace).await?);
        }
        let hooks = hook_configs(kube, schedules, &prepared);
        let ids = {
            let mut state = self.lock();
            self.remove_locked(&mut state, package);
            let mut ids = vec![];
            let mut restart = HashSet::new();
            for (state_binding, resource, keys) in prepared {
                let id = state.next_id;
                state.next_id += 1;
                for key in &keys {
                    let watch = state.watches.entry(key.clone()).or_insert_with(|| Watch {
                        resource: resource.clone(),
                        subscribers: vec![],
                        epoch: 0,
                        cancel: CancellationToken::new(),
                        relist: None,
                        listed: false,
                        error: None,
                    });
                    watch.subscribers.push(id);
                    restart.insert(key.clone());
                }
                let mut state_binding = state_binding;
                state_binding.pending_lists = keys.len();
                let pending = keys.iter().cloned().collect();
                state.bindings.insert(id, Registered { state: state_binding, keys, pending });
                ids.push(id);
            }
            state.packages.insert(package.to_owned(), PackageState { generation, bindings: ids.clone(), hooks });
            for key in restart {
                self.restart_locked(&mut state, &key);
            }
            ids
        };
        if let Err(e) = self.wait_listed(&ids).await {
            self.remove(package);
            return Err(e);
        }
        let tasks = {
            let mut state = self.lock();
            let mut tasks = vec![];
            for id in &ids {
                let Some(r) = state.bindings.get(id) else { continue };
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
            let Some(r) = state.bindings.get(id) else { continue };
            if let (Some(period), true) = (r.state.spec.resynchronization_period, r.state.spec.execute_hook_on_synchronization) {
                tokio::spawn(Arc::clone(self).resync(*id, period));
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
            self.enqueuer.send(task.into_iter().collect()).await;
        }
    }

    /// Validates one binding and resolves what it watches.
    async fn prepare(
        &self,
        index: usize,
        b: &pb::KubernetesBinding,
        package: &str,
        app_namespace: &str,
    ) -> Result<(BindingState, ApiResource, Vec<WatchKey>), SetError> {
        let invalid = |reason: String| SetError::Invalid { index, hook: b.hook.clone(), binding: b.binding.clone(), reason };
        let spec = spec_of(b).map_err(invalid)?;
        let jq = match &spec.jq_filter {
            Some(f) => Some(self.jq.compile(f).map_err(|e| invalid(format!("jqFilter: {e}")))?),
            None => None,
        };
        let resolved = self
            .resolver
            .resolve(&b.api_version, &b.kind)
            .await
            .map_err(|source| SetError::Resolve { index, hook: b.hook.clone(), binding: b.binding.clone(), source })?;
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
        let namespaces: Vec<Option<String>> = if !resolved.namespaced {
            if !app_namespace.is_empty() {
                return Err(invalid(format!("{} is cluster-scoped; an app's bindings are locked to its namespace {app_namespace}", resolved.resource.kind)));
            }
            vec![None]
        } else if !app_namespace.is_empty() {
            // Apps see only their own namespace, whatever the binding asks for.
            vec![Some(app_namespace.to_owned())]
        } else if !b.namespaces.is_empty() {
            b.namespaces.iter().cloned().map(Some).collect()
        } else if !b.namespace_label_selector.is_empty() {
            self.namespaces_matching(index, &b.namespace_label_selector).await?.into_iter().map(Some).collect()
        } else {
            vec![None]
        };
        let keys = namespaces
            .into_iter()
            .map(|namespace| WatchKey {
                api_version: resolved.resource.api_version.clone(),
                plural: resolved.resource.plural.clone(),
                namespace,
                labels: b.label_selector.clone(),
                fields: fields.clone(),
            })
            .collect();
        let state = BindingState::new(package, &b.hook, spec, jq, names);
        Ok((state, resolved.resource, keys))
    }

    /// The namespaces a namespace label selector matches now. (Namespaces created later are not
    /// picked up until the package is loaded again.)
    async fn namespaces_matching(&self, index: usize, selector: &str) -> Result<Vec<String>, SetError> {
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.resolver.client().clone());
        let list = tokio::time::timeout(LIST_TIMEOUT, api.list(&ListParams::default().labels(selector)))
            .await
            .map_err(|_| SetError::ListTimeout { pending: format!("namespaces matching {selector:?}") })?
            .map_err(|source| SetError::Namespaces { index, source })?;
        Ok(list.items.into_iter().filter_map(|n| n.metadata.name).collect())
    }

    async fn wait_listed(&self, ids: &[u64]) -> Result<(), SetError> {
        let deadline = tokio::time::Instant::now() + LIST_TIMEOUT;
        loop {
            let notified = self.listed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let pending: Vec<WatchKey> = {
                let state = self.lock();
                let pending: Vec<WatchKey> = ids.iter().filter_map(|id| state.bindings.get(id)).flat_map(|r| r.pending.iter().cloned()).collect();
                for key in &pending {
                    if let Some(reason) = state.watches.get(key).and_then(|w| w.error.clone()) {
                        return Err(SetError::Watch { watch: key.to_string(), reason });
                    }
                }
                pending
            };
            if pending.is_empty() {
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let pending = pending.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
                return Err(SetError::ListTimeout { pending });
            }
        }
    }

    /// Drops the package's bindings and stops watches nobody needs any more. Idempotent.
    pub fn remove(&self, package: &str) {
        let mut state = self.lock();
        self.remove_locked(&mut state, package);
    }

    fn remove_locked(&self, state: &mut State, package: &str) {
        let Some(pkg) = state.packages.remove(package) else { return };
        for id in pkg.bindings {
            let Some(r) = state.bindings.remove(&id) else { continue };
            for key in r.keys {
                if let Some(w) = state.watches.get_mut(&key) {
                    w.subscribers.retain(|s| *s != id);
                    if w.subscribers.is_empty() {
                        w.cancel.cancel();
                        state.watches.remove(&key);
                    }
                }
            }
        }
    }

    /// (Re)starts the watch of `key` under a new epoch; events of older epochs are ignored.
    fn restart_locked(self: &Arc<Self>, state: &mut State, key: &WatchKey) {
        state.next_epoch += 1;
        let epoch = state.next_epoch;
        let Some(w) = state.watches.get_mut(key) else { return };
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
        tokio::spawn(async move {
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
        if let Some(w) = state.watches.get_mut(key).filter(|w| w.epoch == epoch && !w.listed) {
            w.error = Some(error);
            drop(state);
            self.listed.notify_waiters();
        }
    }

    async fn on_event(&self, key: &WatchKey, epoch: u64, resource: &ApiResource, event: watcher::Event<DynamicObject>) {
        let tasks = {
            let mut state = self.lock();
            let Some(w) = state.watches.get_mut(key).filter(|w| w.epoch == epoch) else { return };
            let subscribers = w.subscribers.clone();
            let mut changes: Vec<(u64, Change)> = vec![];
            match event {
                watcher::Event::Init => w.relist = Some(HashSet::new()),
                watcher::Event::InitApply(o) | watcher::Event::Apply(o) => {
                    let object = object_json(o, resource);
                    if let Some(seen) = &mut w.relist {
                        seen.insert(obj_key(&object));
                    }
                    let mut eval = Evaluation::new(&object);
                    for id in subscribers {
                        if let Some(c) = state.bindings.get_mut(&id).and_then(|r| r.state.observe_in(&mut eval)) {
                            changes.push((id, c));
                        }
                    }
                }
                watcher::Event::Delete(o) => {
                    let object = object_json(o, resource);
                    for id in subscribers {
                        if let Some(c) = state.bindings.get_mut(&id).and_then(|r| r.state.forget(&object)) {
                            changes.push((id, c));
                        }
                    }
                }
                watcher::Event::InitDone => {
                    let seen = w.relist.take().unwrap_or_default();
                    w.listed = true;
                    w.error = None;
                    for id in subscribers {
                        let Some(r) = state.bindings.get_mut(&id) else { continue };
                        changes.extend(r.state.relisted(key.namespace.as_deref(), &seen).into_iter().map(|c| (id, c)));
                        r.pending.remove(key);
                        r.state.pending_lists = r.pending.len();
                    }
                    self.listed.notify_waiters();
                }
            }
            let mut tasks = vec![];
            for (id, change) in changes {
                let Some(r) = state.bindings.get(&id) else { continue };
                if !r.state.spec.execute_hook_on_event.contains(&change.event) {
                    continue;
                }
                let Some(task) = event_task(&state, id, &change) else { continue };
                let Some(r) = state.bindings.get_mut(&id) else { continue };
                if r.state.synchronized {
                    tasks.push(task);
                } else {
                    r.state.hold(task);
                }
            }
            tasks
        };
        self.enqueuer.send(tasks).await;
    }

    /// The objects of every kubernetes binding of the package. With `for_synchronization`, the
    /// events buffered for bindings not yet synchronized are dropped: the caller's
    /// Synchronization run sees these objects, which already include them.
    pub fn snapshots(&self, package: &str, for_synchronization: bool) -> Vec<BindingObjects> {
        let mut state = self.lock();
        let ids = state.packages.get(package).map(|p| p.bindings.clone()).unwrap_or_default();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(r) = state.bindings.get_mut(&id) else { continue };
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
    pub fn adopt_generation(&self, package: &str, generation: i64) {
        if let Some(p) = self.lock().packages.get_mut(package) {
            p.generation = p.generation.max(generation);
        }
    }

    /// The hook's bindings as context builders need them.
    pub fn hook_config(&self, package: &str, hook: &str) -> HookConfig {
        self.lock().packages.get(package).and_then(|p| p.hooks.get(hook).cloned()).unwrap_or_default()
    }

    /// The worker ran the package's Synchronization: release the held events, in order.
    pub async fn synchronization_done(&self, package: &str, generation: i64) {
        let tasks = {
            let mut state = self.lock();
            let Some(pkg) = state.packages.get(package) else { return };
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

/// Marks a binding synchronized and returns what to queue: its Synchronization run (when
/// `run_sync`, or when its buffer overflowed) followed by its held events.
fn release(state: &mut State, id: u64, run_sync: bool) -> Vec<Task> {
    let Some(r) = state.bindings.get(&id) else { return vec![] };
    if r.state.synchronized {
        return vec![];
    }
    let wants_sync = (run_sync && r.state.spec.execute_hook_on_synchronization) || r.state.overflowed;
    let sync = if wants_sync { sync_task(state, id) } else { None };
    let Some(r) = state.bindings.get_mut(&id) else { return vec![] };
    r.state.synchronized = true;
    let held = std::mem::take(&mut r.state.buffer);
    let overflowed = std::mem::replace(&mut r.state.overflowed, false);
    let mut tasks: Vec<Task> = sync.into_iter().collect();
    if !overflowed {
        tasks.extend(held);
    }
    tasks
}

fn hook_snapshots(state: &State, package: &str, hook: &str) -> Snapshots {
    let Some(pkg) = state.packages.get(package) else { return Snapshots::new() };
    pkg.bindings
        .iter()
        .filter_map(|id| state.bindings.get(id))
        .filter(|r| r.state.hook == hook)
        .map(|r| (r.state.spec.name.clone(), r.state.snapshot()))
        .collect::<BTreeMap<_, _>>()
}

fn needs_snapshots(spec: &KubernetesBinding) -> bool {
    spec.group.is_some() || !spec.include_snapshots_from.is_empty()
}

fn event_task(state: &State, id: u64, change: &Change) -> Option<Task> {
    let r = state.bindings.get(&id)?;
    let b = &r.state;
    let pkg = state.packages.get(&b.package)?;
    let config = pkg.hooks.get(&b.hook)?;
    let snapshots = if needs_snapshots(&b.spec) { hook_snapshots(state, &b.package, &b.hook) } else { Snapshots::new() };
    let ctx = BindingContext::event(&b.spec, change.event, &change.object, config, &snapshots);
    Some(hook_run(&b.package, pkg.generation, &b.hook, "Kubernetes", &b.spec, vec![ctx]))
}

fn sync_task(state: &State, id: u64) -> Option<Task> {
    let r = state.bindings.get(&id)?;
    let b = &r.state;
    let pkg = state.packages.get(&b.package)?;
    let config = pkg.hooks.get(&b.hook)?;
    let snapshots = hook_snapshots(state, &b.package, &b.hook);
    let ctx = BindingContext::synchronization(&b.spec, &b.snapshot(), config, &snapshots);
    Some(hook_run(&b.package, pkg.generation, &b.hook, "Synchronization", &b.spec, vec![ctx]))
}

/// The queue a binding's runs go to: the package's main queue or `<package>/<queue>`.
pub fn queue_name(package: &str, queue: Option<&str>) -> String {
    match queue {
        None | Some("") | Some("main") => package.to_owned(),
        Some(q) => format!("{package}/{q}"),
    }
}

fn hook_run(package: &str, generation: i64, hook: &str, binding_type: &str, spec: &KubernetesBinding, contexts: Vec<BindingContext>) -> Task {
    hook_run_task(package, generation, hook, binding_type, spec.queue.as_deref(), spec.allow_failure, binding_context::to_json(&contexts))
}

/// A HookRun task in the payload shape workers and the broker's compaction read.
pub fn hook_run_task(
    package: &str,
    generation: i64,
    hook: &str,
    binding_type: &str,
    queue: Option<&str>,
    allow_failure: bool,
    contexts: Value,
) -> Task {
    Task {
        id: uuid::Uuid::new_v4().to_string(),
        queue: queue_name(package, queue),
        package: package.to_owned(),
        generation,
        kind: TaskKind::HookRun.as_str().to_owned(),
        payload_json: json!({"hook": hook, "binding_type": binding_type, "binding_contexts": contexts}).to_string(),
        traceparent: berth_telemetry::current_traceparent(),
        allow_failure,
        ..Default::default()
    }
}

fn object_json(object: DynamicObject, resource: &ApiResource) -> Value {
    let mut value = serde_json::to_value(object).unwrap_or(Value::Null);
    // List items come without apiVersion/kind; hooks expect them, as kubectl shows them.
    if let Value::Object(map) = &mut value {
        map.entry("apiVersion").or_insert_with(|| Value::from(resource.api_version.clone()));
        map.entry("kind").or_insert_with(|| Value::from(resource.kind.clone()));
    }
    value
}

/// The hook-contract view of a registered binding.
pub fn spec_of(b: &pb::KubernetesBinding) -> Result<KubernetesBinding, String> {
    if b.kind.is_empty() {
        return Err("kind: required".into());
    }
    let events = b
        .execute_hook_on_event
        .iter()
        .map(|e| {
            WatchEventType::ALL.into_iter().find(|t| t.as_str() == e).ok_or_else(|| format!("executeHookOnEvent: {e:?} is not one of Added, Modified, Deleted"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Ok(KubernetesBinding {
        name: non_empty(&b.binding).unwrap_or_else(|| "kubernetes".into()),
        api_version: non_empty(&b.api_version),
        kind: b.kind.clone(),
        execute_hook_on_event: events,
        execute_hook_on_synchronization: b.execute_hook_on_synchronization,
        wait_for_synchronization: b.wait_for_synchronization,
        keep_full_objects_in_memory: b.keep_full_objects_in_memory,
        resynchronization_period: (b.resynchronization_period_ms > 0)
            .then(|| Duration::from_millis(b.resynchronization_period_ms).max(MIN_RESYNC_PERIOD)),
        name_selector: None,
        label_selector: None,
        field_selector: None,
        namespace: None,
        jq_filter: non_empty(&b.jq_filter),
        include_snapshots_from: b.include_snapshots_from.clone(),
        allow_failure: b.allow_failure,
        queue: non_empty(&b.queue),
        group: non_empty(&b.group),
    })
}

/// The hook-contract view of a registered schedule.
pub fn schedule_spec_of(s: &pb::ScheduleBinding) -> ScheduleBinding {
    ScheduleBinding {
        name: if s.binding.is_empty() { "schedule".into() } else { s.binding.clone() },
        crontab: s.crontab.clone(),
        allow_failure: s.allow_failure,
        queue: (!s.queue.is_empty()).then(|| s.queue.clone()),
        include_snapshots_from: s.include_snapshots_from.clone(),
        group: (!s.group.is_empty()).then(|| s.group.clone()),
    }
}

fn hook_configs(
    kube: &[pb::KubernetesBinding],
    schedules: &[pb::ScheduleBinding],
    prepared: &[(BindingState, ApiResource, Vec<WatchKey>)],
) -> HashMap<String, HookConfig> {
    let mut hooks: HashMap<String, HookConfig> = HashMap::new();
    for (b, (state, _, _)) in kube.iter().zip(prepared) {
        hooks.entry(b.hook.clone()).or_default().kubernetes.push(state.spec.clone());
    }
    for s in schedules {
        hooks.entry(s.hook.clone()).or_default().schedule.push(schedule_spec_of(s));
    }
    hooks
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A package with one hook holding two bindings: `pods` (grouped with `nodes`) and `cms`,
    /// which includes the snapshots of `pods`.
    fn state() -> State {
        let binding = |name: &str, extra: Value| pb::KubernetesBinding {
            hook: "h.sh".into(),
            binding: name.into(),
            kind: "ConfigMap".into(),
            execute_hook_on_event: vec!["Added".into(), "Modified".into(), "Deleted".into()],
            execute_hook_on_synchronization: true,
            wait_for_synchronization: true,
            keep_full_objects_in_memory: true,
            include_snapshots_from: extra["include"].as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()).unwrap_or_default(),
            group: extra["group"].as_str().unwrap_or_default().to_owned(),
            ..Default::default()
        };
        let protos = [binding("pods", json!({"group": "g"})), binding("nodes", json!({"group": "g"})), binding("cms", json!({"include": ["pods"]}))];
        let mut state = State::default();
        let mut ids = vec![];
        let mut hooks: HashMap<String, HookConfig> = HashMap::new();
        for (id, p) in protos.iter().enumerate() {
            let spec = spec_of(p).unwrap();
            hooks.entry("h.sh".into()).or_default().kubernetes.push(spec.clone());
            let b = BindingState::new("ns.app", "h.sh", spec, None, vec![]);
            state.bindings.insert(id as u64, Registered { state: b, keys: vec![], pending: HashSet::new() });
            ids.push(id as u64);
        }
        state.packages.insert("ns.app".into(), PackageState { generation: 3, bindings: ids, hooks });
        state
    }

    fn cm(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "ns", "name": name}})
    }

    fn contexts(task: &Task) -> Value {
        serde_json::from_str::<Value>(&task.payload_json).unwrap()["binding_contexts"].clone()
    }

    #[test]
    fn events_carry_included_and_group_snapshots() {
        let mut s = state();
        let pods = s.bindings.get_mut(&0).unwrap();
        pods.state.observe(&cm("p1"));
        let cms = s.bindings.get_mut(&2).unwrap();
        let change = cms.state.observe(&cm("c1")).expect("an Added event");
        let task = event_task(&s, 2, &change).unwrap();
        assert_eq!((task.queue.as_str(), task.generation, task.kind.as_str()), ("ns.app", 3, "HookRun"));
        let ctx = &contexts(&task)[0];
        assert_eq!((ctx["type"].as_str(), ctx["watchEvent"].as_str()), (Some("Event"), Some("Added")));
        assert_eq!(ctx["object"]["metadata"]["name"], "c1");
        assert_eq!(ctx["snapshots"]["pods"][0]["object"]["metadata"]["name"], "p1", "{ctx}");
        assert!(ctx["snapshots"].get("cms").is_none(), "only the included bindings: {ctx}");

        let pods = s.bindings.get_mut(&0).unwrap();
        let change = pods.state.observe(&cm("p2")).unwrap();
        let ctx = &contexts(&event_task(&s, 0, &change).unwrap())[0];
        assert_eq!((ctx["type"].as_str(), ctx["groupName"].as_str()), (Some("Group"), Some("g")));
        assert_eq!(ctx["snapshots"]["pods"].as_array().unwrap().len(), 2);
        assert_eq!(ctx["snapshots"]["nodes"], json!([]), "every group member, even empty: {ctx}");
    }

    #[test]
    fn held_events_follow_the_synchronization_in_order() {
        let mut s = state();
        let cms = s.bindings.get_mut(&2).unwrap();
        cms.state.observe(&cm("c1"));
        let change = cms.state.observe(&json!({"metadata": {"namespace": "ns", "name": "c1"}, "data": {"x": "1"}})).unwrap();
        let held = event_task(&s, 2, &change).unwrap();
        s.bindings.get_mut(&2).unwrap().state.hold(held.clone());
        let tasks = release(&mut s, 2, true);
        assert_eq!(tasks.len(), 2);
        let sync = &contexts(&tasks[0])[0];
        assert_eq!(sync["type"], "Synchronization");
        assert_eq!(sync["objects"][0]["object"]["data"]["x"], "1", "current objects: {sync}");
        assert_eq!(tasks[1].id, held.id);
        assert!(release(&mut s, 2, true).is_empty(), "released once");
    }

    #[test]
    fn queues_follow_the_binding() {
        assert_eq!(queue_name("ns.app", None), "ns.app");
        assert_eq!(queue_name("ns.app", Some("main")), "ns.app");
        assert_eq!(queue_name("ns.app", Some("slow")), "ns.app/slow");
    }
}
