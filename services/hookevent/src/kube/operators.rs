//! Packages' declarative operators, hosted beside the hooks' watches (docs/operators.md).
//!
//! A package's operators are one [`Group`] run by one task, its host. The host reads the same
//! watches the hooks' bindings do (a [`Feed`] on each watch a Watcher source needs: one watch
//! per resource, namespace and selectors for the whole process), keeps its views in memory,
//! and performs its targets' writes as the package's ServiceAccount, so the API server
//! authorises each write by the package's rights: an App's operators write only in its
//! namespace because its principal can write nowhere else. What an App's operators read is
//! confined here, where berth's own identity watches: every source is forced into the App's
//! namespace, and a cluster-scoped kind is refused.
//!
//! Operators are registered with the package's bindings (SetBindings) and start when the
//! worker says the package is Running (StartOperators), or at once when restored after a
//! restart. A new registration that changes nothing keeps the running host; one that changes
//! the specs takes effect at the next start. Removing the package's bindings stops the host,
//! which drops its views.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_clients::scope::PackageScope;
use berth_names::{Generation, PackageKey};
use berth_operator::Operator;
use berth_operator::engine::{ObjKey, Write, obj_key};
use berth_operator::group::{Group, GroupKind, Outbound, Processed, patcher_patch};
use berth_operator::spec::TargetType;
use berth_operator::status::{ControllerStatus, Readiness};
use berth_operator::target::{removal_patch, updater_object};
use berth_proto::hookevent::ViewChange;
use berth_proto::lifecycle::ConditionStatus;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::manager::{KubeManager, SetError};
use super::registry::{Feed, Watch, WatchKey};
use super::resolve::Resolved;

/// Events one host may have queued before the watches feeding it wait.
const HOST_QUEUE: usize = 1024;
/// Bound on each write a host makes.
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// How often failed writes are tried again.
const RETRY_EVERY: Duration = Duration::from_secs(5);
/// Failed writes a host keeps for retrying (the latest per object); past it the oldest go.
const MAX_FAILED: usize = 10_000;

/// What a host hears.
pub(crate) enum HostMsg {
    /// An event of the watch this feed reads, under the watch's epoch.
    Watch {
        feed: u64,
        epoch: u64,
        event: FeedEvent,
    },
    /// A Periodic source of this controller fired.
    Tick(usize),
    /// A copy of the views, for readers.
    Views(tokio::sync::oneshot::Sender<ViewSnapshot>),
    /// A copy of the views and their changes from then on.
    WatchViews(tokio::sync::oneshot::Sender<(ViewSnapshot, broadcast::Receiver<ViewUpdate>)>),
    /// The package runs at this generation now (its health is reported under it).
    Generation(Generation),
}

/// A watch event as a feed gets it.
pub(crate) enum FeedEvent {
    Init,
    Apply(Value),
    Delete(Value),
    InitDone,
}

/// A package's views as they stand.
#[derive(Debug, Clone, Default)]
pub struct ViewSnapshot {
    /// The view kinds its operators declare: (group, kind).
    pub kinds: Vec<GroupKind>,
    /// Each with `metadata.resourceVersion`, the revision of its last change.
    pub objects: Vec<Value>,
    /// The revision of the last change of any view object.
    pub revision: u64,
}

/// One change of a view object.
#[derive(Debug, Clone)]
pub struct ViewUpdate {
    pub change: ViewChange,
    /// As it is now (as it was, for a delete), with `metadata.resourceVersion`.
    pub object: Arc<Value>,
    pub revision: u64,
}

/// View changes a watcher may lag behind before its watch ends.
const VIEW_WATCH_QUEUE: usize = 1024;

/// One controller's status, as a package's operators report it.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorStatus {
    pub operator: String,
    pub status: ControllerStatus,
}

/// A package's operators: what is registered, and the host running, if started.
pub(crate) struct Hosted {
    generation: Generation,
    registered: Vec<Operator>,
    app_namespace: String,
    /// What the package is: its principal and its release.
    scope: PackageScope,
    running: Option<Running>,
}

struct Running {
    operators: Vec<Operator>,
    cancel: CancellationToken,
    tx: mpsc::Sender<HostMsg>,
    /// The feeds it holds, by watch.
    feeds: Vec<(WatchKey, u64)>,
    statuses: Arc<Mutex<Vec<OperatorStatus>>>,
}

/// A feed's view of its watch: the objects it passed on, to tell after a relist which are
/// gone.
struct FeedState {
    gk: GroupKind,
    role: FeedRole,
    epoch: u64,
    known: HashSet<ObjKey>,
    /// Keys seen since the last Init; `Some` while a (re)list is in progress.
    seen: Option<HashSet<ObjKey>>,
}

/// What a feed is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FeedRole {
    /// Its objects go to the Watcher sources reading them.
    Source,
    /// It watches what the Updaters wrote, to repair drift.
    Target,
}

/// A target's resource, resolved.
struct TargetResource {
    resource: ApiResource,
    namespaced: bool,
}

impl KubeManager {
    /// Registers `operators` for `package` (all of them: an empty list stops and forgets
    /// them). With `start`, they start at once (after a restart); otherwise at the next
    /// [`KubeManager::start_operators`], while a running host whose specs are the same goes on.
    pub async fn set_operators(
        self: &Arc<Self>,
        package: &PackageKey,
        generation: Generation,
        app_namespace: &str,
        scope: PackageScope,
        operators: Vec<Operator>,
        start: bool,
    ) -> Result<(), SetError> {
        if operators.is_empty() {
            self.stop_operators(package.as_str(), true);
            return Ok(());
        }
        let mut operators = operators;
        if !app_namespace.is_empty() {
            for op in &mut operators {
                for c in &mut op.controllers {
                    for s in &mut c.sources {
                        // An App's sources see its namespace only, whatever they ask for (a
                        // different one was refused at the edge).
                        s.namespace = Some(app_namespace.to_owned());
                    }
                }
            }
        }
        {
            let mut state = self.lock();
            let hosted = state
                .operators
                .entry(package.to_owned())
                .or_insert_with(|| Hosted {
                    generation,
                    registered: Vec::new(),
                    app_namespace: app_namespace.to_owned(),
                    scope: scope.clone(),
                    running: None,
                });
            hosted.generation = generation;
            hosted.registered = operators;
            hosted.app_namespace = app_namespace.to_owned();
            hosted.scope = scope;
        }
        if start {
            self.start_operators(package, generation).await?;
        }
        Ok(())
    }

    /// The package is Running at `generation`: its registered operators start, replacing
    /// the running ones if their specs changed. A call for an older generation than the one
    /// registered does nothing.
    pub async fn start_operators(
        self: &Arc<Self>,
        package: &PackageKey,
        generation: Generation,
    ) -> Result<(), SetError> {
        let (operators, app_namespace, scope) = {
            let state = self.lock();
            let Some(h) = state.operators.get(package.as_str()) else {
                return Ok(());
            };
            if h.generation > generation {
                return Ok(());
            }
            if let Some(r) = h.running.as_ref().filter(|r| r.operators == h.registered) {
                // The same operators go on; their health is now this generation's.
                let _ = r.tx.try_send(HostMsg::Generation(generation));
                return Ok(());
            }
            (
                h.registered.clone(),
                h.app_namespace.clone(),
                h.scope.clone(),
            )
        };
        let prepared = self.prepare_host(&operators, &app_namespace).await?;
        let client =
            self.acting_as(&scope.service_account())
                .map_err(|reason| SetError::Principal {
                    package: package.to_string(),
                    reason,
                })?;
        self.stop_operators(package.as_str(), false);
        let (tx, rx) = mpsc::channel(HOST_QUEUE);
        let cancel = self.shutdown.child_token();
        let statuses = Arc::new(Mutex::new(Vec::new()));
        let mut feeds = Vec::new();
        let mut feed_states = HashMap::new();
        {
            let mut state = self.lock();
            let Some(h) = state.operators.get(package.as_str()) else {
                return Ok(());
            };
            if h.registered != operators {
                // Registered anew meanwhile: that registration's start comes.
                return Ok(());
            }
            for (key, resource, gk, role) in &prepared.watches {
                let id = state.next_id;
                state.next_id += 1;
                let watch = state
                    .watches
                    .entry(key.clone())
                    .or_insert_with(|| Watch::new(resource.clone()));
                watch.feeds.push(Feed { id, tx: tx.clone() });
                feeds.push((key.clone(), id));
                feed_states.insert(
                    id,
                    FeedState {
                        gk: gk.clone(),
                        role: *role,
                        epoch: 0,
                        known: HashSet::new(),
                        seen: None,
                    },
                );
            }
            if let Some(h) = state.operators.get_mut(package.as_str()) {
                h.running = Some(Running {
                    operators: operators.clone(),
                    cancel: cancel.clone(),
                    tx: tx.clone(),
                    feeds: feeds.clone(),
                    statuses: statuses.clone(),
                });
            }
            // The watch lists again for the new feed (the others see no change).
            for (key, _) in &feeds {
                self.restart_locked(&mut state, key);
            }
        }
        let host = Host {
            package: package.to_owned(),
            group: prepared.group,
            feeds: feed_states,
            client,
            targets: prepared.targets,
            failed: BTreeMap::new(),
            drifted: BTreeMap::new(),
            written: Arc::default(),
            release: scope.release(),
            statuses,
            generation,
            health: self.health.clone(),
            reported: None,
            reported_at: None,
            held: false,
            view_revisions: HashMap::new(),
            revision: 0,
            view_changes: broadcast::channel(VIEW_WATCH_QUEUE).0,
        };
        let span = tracing::info_span!(parent: None, "hookevent.operators", package.key = %package);
        let periods: Vec<(usize, Duration)> = host
            .group
            .controllers()
            .iter()
            .enumerate()
            .flat_map(|(i, c)| c.periods.iter().map(move |p| (i, *p)))
            .collect();
        for (controller, period) in periods {
            let (tx, cancel) = (tx.clone(), cancel.clone());
            berth_runtime::spawn_in(span.clone(), async move {
                let mut tick =
                    tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        _ = cancel.cancelled() => return,
                    }
                    // A host still busy with the last tick skips this one.
                    let _ = tx.try_send(HostMsg::Tick(controller));
                }
            });
        }
        berth_runtime::spawn_in(span, host.run(rx, cancel));
        tracing::info!(package = %package, operators = operators.len(), "operators started");
        Ok(())
    }

    /// Stops the package's running operators (their views go with them); with `forget`,
    /// forgets their registration too.
    pub fn stop_operators(&self, package: &str, forget: bool) {
        let mut state = self.lock();
        let running = match state.operators.get_mut(package) {
            Some(h) => h.running.take(),
            None => None,
        };
        if forget {
            state.operators.remove(package);
        }
        let Some(running) = running else {
            return;
        };
        running.cancel.cancel();
        for (key, id) in running.feeds {
            if let Some(w) = state.watches.get_mut(&key) {
                w.feeds.retain(|f| f.id != id);
                if w.unused() {
                    w.cancel.cancel();
                    state.watches.remove(&key);
                }
            }
        }
        tracing::info!(package, "operators stopped");
    }

    /// The statuses of the package's running operators' controllers (empty when none run).
    pub fn operator_statuses(&self, package: &str) -> Vec<OperatorStatus> {
        let state = self.lock();
        state
            .operators
            .get(package)
            .and_then(|h| h.running.as_ref())
            .map(|r| r.statuses.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .unwrap_or_default()
    }

    /// The views of the package's running operators (`None`: none run).
    pub async fn operator_views(&self, package: &str) -> Option<ViewSnapshot> {
        let tx = self.host_of(package)?;
        let (answer, rx) = tokio::sync::oneshot::channel();
        tx.send(HostMsg::Views(answer)).await.ok()?;
        rx.await.ok()
    }

    /// The views of the package's running operators and their changes from then on.
    pub async fn watch_operator_views(
        &self,
        package: &str,
    ) -> Option<(ViewSnapshot, broadcast::Receiver<ViewUpdate>)> {
        let tx = self.host_of(package)?;
        let (answer, rx) = tokio::sync::oneshot::channel();
        tx.send(HostMsg::WatchViews(answer)).await.ok()?;
        rx.await.ok()
    }

    fn host_of(&self, package: &str) -> Option<mpsc::Sender<HostMsg>> {
        let state = self.lock();
        Some(state.operators.get(package)?.running.as_ref()?.tx.clone())
    }

    /// The packages whose operators run, and their controllers by readiness (True, False,
    /// Unknown).
    pub fn operator_figures(&self) -> (usize, [usize; 3]) {
        let state = self.lock();
        let mut packages = 0;
        let mut by = [0; 3];
        for r in state.operators.values().filter_map(|h| h.running.as_ref()) {
            packages += 1;
            for s in r.statuses.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                by[match s.status.ready {
                    Readiness::True => 0,
                    Readiness::False => 1,
                    Readiness::Unknown => 2,
                }] += 1;
            }
        }
        (packages, by)
    }

    /// Resolves what the operators watch and write, and builds their group.
    async fn prepare_host(
        &self,
        operators: &[Operator],
        app_namespace: &str,
    ) -> Result<Prepared, SetError> {
        let invalid = |op: &str, what: String| SetError::Operator {
            operator: op.to_owned(),
            reason: what,
        };
        // Targets first: the group needs their versions. A kind the cluster does not serve
        // stops only the controllers using it (Ready=False, as upstream), not the package.
        let mut targets = HashMap::new();
        let mut versions = HashMap::new();
        let mut failed: Vec<(usize, String)> = Vec::new();
        let mut index = 0;
        for op in operators {
            for c in &op.controllers {
                let i = index;
                index += 1;
                let t = &c.target.resource;
                if t.is_view(&op.name) {
                    continue;
                }
                let group = t.group_of(&op.name);
                let resolved = match self
                    .resolver()
                    .resolve_in_group(&group, t.version.as_deref(), &t.kind)
                    .await
                {
                    Ok(r) => r,
                    Err(e) if e.is_not_found() => {
                        failed.push((i, format!("target {group}/{}: {e}", t.kind)));
                        continue;
                    }
                    Err(e) => {
                        return Err(invalid(
                            &op.name,
                            format!("controller {:?}: target: {e}", c.name),
                        ));
                    }
                };
                versions.insert(
                    (group.clone(), t.kind.clone()),
                    resolved.resource.version.clone(),
                );
                targets.insert(
                    (resolved.resource.api_version.clone(), t.kind.clone()),
                    TargetResource {
                        namespaced: resolved.namespaced,
                        resource: resolved.resource,
                    },
                );
            }
        }
        let group = Group::new(
            operators,
            // A target that did not resolve gets a version that names no resolved target:
            // its controller has failed, and a write it makes fails saying so.
            |g, k| {
                Some(
                    versions
                        .get(&(g.to_owned(), k.to_owned()))
                        .cloned()
                        .unwrap_or_else(|| "unresolved".to_owned()),
                )
            },
            chrono::Utc::now(),
        )
        .map_err(SetError::Operators)?;
        let mut watches = Vec::new();
        for w in group.watched() {
            // The first operator reading it, for errors.
            let reader = operators
                .iter()
                .find(|op| {
                    op.controllers.iter().flat_map(|c| &c.sources).any(|s| {
                        s.resource.group_of(&op.name) == w.group && s.resource.kind == w.kind
                    })
                })
                .map(|op| op.name.as_str())
                .unwrap_or_default();
            let resolved = self
                .resolver()
                .resolve_in_group(&w.group, w.version.as_deref(), &w.kind)
                .await;
            let Resolved {
                resource,
                namespaced,
            } = match resolved {
                Ok(r) => r,
                Err(e) if e.is_not_found() => {
                    let gk = (w.group.clone(), w.kind.clone());
                    for i in group.readers_of(&gk) {
                        failed.push((i, format!("source {}/{}: {e}", w.group, w.kind)));
                    }
                    continue;
                }
                Err(e) => {
                    return Err(invalid(
                        reader,
                        format!("source {}/{}: {e}", w.group, w.kind),
                    ));
                }
            };
            if !namespaced && !app_namespace.is_empty() {
                return Err(invalid(
                    reader,
                    format!(
                        "source {}: {} is cluster-scoped; an app's operators are locked to its \
                         namespace {app_namespace}",
                        w.kind, resource.kind
                    ),
                ));
            }
            let key = WatchKey {
                api_version: resource.api_version.clone(),
                plural: resource.plural.clone(),
                namespace: if namespaced {
                    w.namespace.clone()
                } else {
                    None
                },
                labels: String::new(),
                fields: String::new(),
            };
            watches.push((
                key,
                resource,
                (w.group.clone(), w.kind.clone()),
                FeedRole::Source,
            ));
        }
        // The Updaters' objects are the package's: a watch of each target kind (where the
        // package may write) shows when one is changed or deleted behind their back.
        for (_, gk) in group.updater_targets() {
            let Some(t) = targets
                .iter()
                .find(|((_, kind), _)| *kind == gk.1)
                .map(|(_, t)| t)
                .filter(|t| t.resource.group == gk.0)
            else {
                continue;
            };
            let key = WatchKey {
                api_version: t.resource.api_version.clone(),
                plural: t.resource.plural.clone(),
                namespace: (t.namespaced && !app_namespace.is_empty())
                    .then(|| app_namespace.to_owned()),
                labels: String::new(),
                fields: String::new(),
            };
            if !watches
                .iter()
                .any(|(k, _, _, role)| *k == key && *role == FeedRole::Target)
            {
                watches.push((key, t.resource.clone(), gk, FeedRole::Target));
            }
        }
        let mut group = group;
        let now = chrono::Utc::now();
        for (i, message) in &failed {
            group.fail(*i, message, now);
        }
        Ok(Prepared {
            group,
            watches,
            targets,
        })
    }
}

struct Prepared {
    group: Group,
    watches: Vec<(WatchKey, ApiResource, GroupKind, FeedRole)>,
    targets: HashMap<(String, String), TargetResource>,
}

/// An object of a target: its apiVersion, kind and key.
type TargetObject = (String, String, ObjKey);

/// The task running one package's operators.
struct Host {
    package: PackageKey,
    group: Group,
    feeds: HashMap<u64, FeedState>,
    /// Acting as the package's ServiceAccount.
    client: kube::Client,
    /// By apiVersion and kind.
    targets: HashMap<(String, String), TargetResource>,
    /// Writes that failed, the latest per (controller, apiVersion, kind, namespace, name),
    /// tried again every [`RETRY_EVERY`].
    failed: BTreeMap<(usize, String, String, ObjKey), Outbound>,
    /// Updaters' objects changed or deleted by someone else, written again at the next retry
    /// tick (so a fight with another writer costs one write per object every 5 s).
    drifted: BTreeMap<(usize, String, String, ObjKey), Outbound>,
    /// Per Updater object, its form as last written (bookkeeping metadata and status aside):
    /// a watch event showing another form is drift.
    written: Arc<Mutex<HashMap<TargetObject, Value>>>,
    /// The package's release (name, namespace): Updaters' objects carry it, as its chart's do.
    release: (String, String),
    statuses: Arc<Mutex<Vec<OperatorStatus>>>,
    generation: Generation,
    health: HealthReporter,
    /// The health last reported, and when.
    reported: Option<(ConditionStatus, &'static str, String)>,
    reported_at: Option<tokio::time::Instant>,
    /// A report held back by [`REPORT_SPACING`], sent when it has passed.
    held: bool,
    /// Per view object, the revision of its last change.
    view_revisions: HashMap<(GroupKind, ObjKey), u64>,
    revision: u64,
    view_changes: broadcast::Sender<ViewUpdate>,
}

impl Host {
    async fn run(mut self, mut rx: mpsc::Receiver<HostMsg>, cancel: CancellationToken) {
        let started = self.group.start(chrono::Utc::now());
        self.perform(started).await;
        let mut retry = tokio::time::interval(RETRY_EVERY);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                msg = rx.recv() => match msg {
                    None => return,
                    Some(msg) => self.handle(msg).await,
                },
                _ = retry.tick(), if !self.failed.is_empty() || !self.drifted.is_empty() => {
                    self.retry().await
                }
                _ = tokio::time::sleep_until(
                    self.reported_at.unwrap_or_else(tokio::time::Instant::now) + REPORT_SPACING
                ), if self.held => self.publish(),
            }
        }
    }

    async fn handle(&mut self, msg: HostMsg) {
        let now = chrono::Utc::now();
        let processed = match msg {
            HostMsg::Tick(controller) => self.group.resync(controller, now),
            HostMsg::Generation(g) => {
                if g > self.generation {
                    self.generation = g;
                    self.reported = None;
                    self.publish();
                }
                return;
            }
            HostMsg::Views(answer) => {
                let _ = answer.send(self.snapshot());
                return;
            }
            HostMsg::WatchViews(answer) => {
                let _ = answer.send((self.snapshot(), self.view_changes.subscribe()));
                return;
            }
            HostMsg::Watch { feed, epoch, event } => {
                let Some(f) = self.feeds.get_mut(&feed) else {
                    return;
                };
                if epoch < f.epoch {
                    return;
                }
                if epoch > f.epoch {
                    f.epoch = epoch;
                    f.seen = None;
                }
                match event {
                    FeedEvent::Init => {
                        f.seen = Some(HashSet::new());
                        return;
                    }
                    FeedEvent::Apply(obj) if f.role == FeedRole::Target => {
                        let gk = f.gk.clone();
                        self.observe_target(&gk, &obj, false);
                        return;
                    }
                    FeedEvent::Delete(obj) if f.role == FeedRole::Target => {
                        let gk = f.gk.clone();
                        self.observe_target(&gk, &obj, true);
                        return;
                    }
                    FeedEvent::InitDone if f.role == FeedRole::Target => {
                        f.seen = None;
                        return;
                    }
                    FeedEvent::Apply(obj) => {
                        let key = obj_key(&obj);
                        tracing::trace!(package = %self.package, kind = %f.gk.1, namespace = %key.0, name = %key.1, "operators see an object");
                        if let Some(seen) = &mut f.seen {
                            seen.insert(key.clone());
                        }
                        f.known.insert(key);
                        let gk = f.gk.clone();
                        self.group.upsert(&gk, obj, now)
                    }
                    FeedEvent::Delete(obj) => {
                        f.known.remove(&obj_key(&obj));
                        let gk = f.gk.clone();
                        self.group.delete(&gk, obj, now)
                    }
                    FeedEvent::InitDone => {
                        // Objects not listed again were deleted while the watch was down.
                        let seen = f.seen.take().unwrap_or_default();
                        let gone: Vec<ObjKey> = f
                            .known
                            .iter()
                            .filter(|k| !seen.contains(*k))
                            .cloned()
                            .collect();
                        f.known = seen;
                        let gk = f.gk.clone();
                        let mut all = Processed::default();
                        for k in gone {
                            let obj = json!({"metadata": {"namespace": k.0, "name": k.1}});
                            let p = self.group.delete(&gk, obj, now);
                            all.writes.extend(p.writes);
                            all.errors.extend(p.errors);
                            all.report.extend(p.report);
                            all.views.extend(p.views);
                        }
                        all
                    }
                }
            }
        };
        self.perform(processed).await;
    }

    /// The views as they stand, each stamped with its revision.
    fn snapshot(&self) -> ViewSnapshot {
        let mut objects = Vec::new();
        for (gk, objs) in self.group.views() {
            for (key, obj) in objs {
                let revision = self
                    .view_revisions
                    .get(&(gk.clone(), key.clone()))
                    .copied()
                    .unwrap_or_default();
                objects.push(stamped(obj, revision));
            }
        }
        ViewSnapshot {
            kinds: self.group.view_kinds(),
            objects,
            revision: self.revision,
        }
    }

    /// Performs a change's writes, passes its view changes on to the watchers, and
    /// publishes the statuses.
    async fn perform(&mut self, processed: Processed) {
        if !processed.writes.is_empty() || !processed.views.is_empty() {
            tracing::debug!(package = %self.package, writes = processed.writes.len(),
                views = processed.views.len(), errors = processed.errors.len(), "operators evaluated a change");
        }
        for m in &processed.report {
            tracing::warn!(package = %self.package, "{m}");
        }
        for (gk, event) in processed.views {
            self.revision += 1;
            let (change, obj) = match event {
                berth_operator::Event::Upsert(o) => {
                    let previous = self.view_revisions.insert((gk, obj_key(&o)), self.revision);
                    let change = if previous.is_some() {
                        ViewChange::Modified
                    } else {
                        ViewChange::Added
                    };
                    (change, o)
                }
                berth_operator::Event::Delete(o) => {
                    self.view_revisions.remove(&(gk, obj_key(&o)));
                    (ViewChange::Deleted, o)
                }
            };
            // Nobody watching is no error.
            let _ = self.view_changes.send(ViewUpdate {
                change,
                object: Arc::new(stamped(&obj, self.revision)),
                revision: self.revision,
            });
        }
        for w in processed.writes {
            self.write(w).await;
        }
        self.publish();
    }

    /// Publishes the controllers' statuses, and reports the package's health when it changed.
    fn publish(&mut self) {
        let statuses: Vec<OperatorStatus> = self
            .group
            .statuses()
            .into_iter()
            .map(|(operator, status)| OperatorStatus { operator, status })
            .collect();
        let now = health(&statuses);
        *self.statuses.lock().unwrap_or_else(|p| p.into_inner()) = statuses;
        if self.reported.as_ref() == Some(&now) {
            self.held = false;
            return;
        }
        let same_status = self
            .reported
            .as_ref()
            .is_some_and(|r| r.0 == now.0 && r.1 == now.1);
        if same_status
            && self
                .reported_at
                .is_some_and(|at| at.elapsed() < REPORT_SPACING)
        {
            self.held = true;
            return;
        }
        self.held = false;
        self.reported_at = Some(tokio::time::Instant::now());
        self.health.report(berth_proto::lifecycle::OperatorsHealth {
            key: self.package.as_str().to_owned(),
            generation: self.generation.get(),
            status: now.0 as i32,
            reason: now.1.to_owned(),
            message: now.2.clone(),
        });
        self.reported = Some(now);
    }

    async fn retry(&mut self) {
        let failed = std::mem::take(&mut self.failed);
        let drifted = std::mem::take(&mut self.drifted);
        for (_, w) in failed.into_iter().chain(drifted) {
            self.write(w).await;
        }
        self.publish();
    }

    /// A watch event of an Updater target's kind: when the object is one an Updater made and
    /// it was deleted or no longer has the form last written, it is written again at the next
    /// retry tick.
    fn observe_target(&mut self, gk: &GroupKind, obj: &Value, deleted: bool) {
        let key = obj_key(obj);
        let Some((controller, output)) = self.group.updater_output(gk, &key) else {
            return;
        };
        let api_version = obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let id = (api_version.clone(), gk.1.clone(), key.clone());
        let last = self
            .written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned();
        let drifted = deleted || last.is_some_and(|l| l != comparable(obj));
        if !drifted {
            return;
        }
        tracing::info!(package = %self.package, object = %format!("{} {}/{}", gk.1, key.0, key.1),
            deleted, "an operator's object drifted; writing it again");
        let w = Outbound {
            controller,
            target: TargetType::Updater,
            api_version: api_version.clone(),
            kind: gk.1.clone(),
            write: Write::Upsert(output.clone()),
        };
        self.drifted
            .insert((controller, api_version, gk.1.clone(), key), w);
    }

    /// Performs one write; a failure is kept for a retry and said in the controller's status.
    async fn write(&mut self, w: Outbound) {
        let output = match &w.write {
            Write::Upsert(o) | Write::Delete(o) => o,
        };
        let key = obj_key(output);
        let id = (
            w.controller,
            w.api_version.clone(),
            w.kind.clone(),
            key.clone(),
        );
        self.failed.remove(&id);
        let object = format!("{} {}/{}", w.kind, key.0, key.1);
        let now = chrono::Utc::now();
        match self.send(&w).await {
            Ok(()) => self.group.write_done(w.controller, &object, now),
            Err(e) => {
                let message = format!("writing {object}: {e}");
                for m in self
                    .group
                    .write_failed(w.controller, &object, &message, now)
                {
                    tracing::warn!(package = %self.package, "{m}");
                }
                if self.failed.len() >= MAX_FAILED
                    && let Some(first) = self.failed.keys().next().cloned()
                {
                    self.failed.remove(&first);
                }
                self.failed.insert(id, w);
            }
        }
    }

    async fn send(&self, w: &Outbound) -> Result<(), String> {
        let Some(t) = self.targets.get(&(w.api_version.clone(), w.kind.clone())) else {
            return Err(format!(
                "{} {} is not a resolved target",
                w.api_version, w.kind
            ));
        };
        let output = match &w.write {
            Write::Upsert(o) | Write::Delete(o) => o,
        };
        let key = obj_key(output);
        let (ns, name) = (&key.0, &key.1);
        if name.is_empty() {
            return Err("the output has no metadata.name".into());
        }
        let api: Api<DynamicObject> = if t.namespaced {
            if ns.is_empty() {
                return Err(format!(
                    "{} is namespaced and the output has no metadata.namespace",
                    t.resource.kind
                ));
            }
            Api::namespaced_with(self.client.clone(), ns, &t.resource)
        } else {
            Api::all_with(self.client.clone(), &t.resource)
        };
        let call = async {
            match (w.target, &w.write) {
                (TargetType::Updater, Write::Upsert(out)) => {
                    let written = update(&api, name, out, &self.release).await?;
                    if let Some(written) = written {
                        let id = (w.api_version.clone(), w.kind.clone(), key.clone());
                        self.written
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(id, comparable(&written));
                    }
                    Ok(())
                }
                (TargetType::Updater, Write::Delete(_)) => {
                    self.written
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&(w.api_version.clone(), w.kind.clone(), key.clone()));
                    match api.delete(name, &DeleteParams::default()).await {
                        Ok(_) => Ok(()),
                        Err(e) if is_not_found(&e) => Ok(()),
                        Err(e) => Err(api_error(e)),
                    }
                }
                (TargetType::Patcher, Write::Upsert(out)) => {
                    patch(&api, name, &patcher_patch(out), false)
                        .await
                        .map_err(api_error)
                }
                (TargetType::Patcher, Write::Delete(out)) => {
                    patch(&api, name, &patcher_patch(&removal_patch(out)), true)
                        .await
                        .map_err(api_error)
                }
            }
        };
        match tokio::time::timeout(WRITE_TIMEOUT, call).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {WRITE_TIMEOUT:?}")),
        }
    }
}

/// The API server's own words for a refusal (`... is forbidden: User ... cannot create ...`).
fn api_error(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({} {})", s.message, s.code, s.reason),
        e => e.to_string(),
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The release annotations an object of release `release` carries (Helm's, so Helm and berth's
/// release service see whose it is).
const RELEASE_NAME: &str = "meta.helm.sh/release-name";
const RELEASE_NAMESPACE: &str = "meta.helm.sh/release-namespace";
const ADOPT: &str = "berth.io/adopt";

/// Whether the existing object `live` may be written by release `release`: it is that
/// release's (its chart's, or its operators'), or annotated to be adopted by it.
fn owned(live: &Value, release: &(String, String)) -> Result<(), String> {
    let annotation = |k: &str| {
        live.pointer("/metadata/annotations")
            .and_then(|a| a.get(k))
            .and_then(Value::as_str)
    };
    let this = format!("{}/{}", release.1, release.0);
    match (annotation(RELEASE_NAMESPACE), annotation(RELEASE_NAME)) {
        (Some(ns), Some(name)) if ns == release.1 && name == release.0 => Ok(()),
        (ns, Some(name)) => Err(format!(
            "it belongs to release {}/{name}, not to {this}",
            ns.unwrap_or("?")
        )),
        (_, None) if annotation(ADOPT).map(str::trim) == Some(this.as_str()) => Ok(()),
        (_, None) => Err(format!(
            "it exists and belongs to no release; an operator takes it over only when it is \
             annotated {ADOPT}: \"{this}\""
        )),
    }
}

/// `obj` with the annotations and label that make it release `release`'s.
fn stamp(obj: &mut Value, release: &(String, String)) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if let Some(a) = annotations.as_object_mut() {
        a.insert(RELEASE_NAME.into(), Value::from(release.0.clone()));
        a.insert(RELEASE_NAMESPACE.into(), Value::from(release.1.clone()));
    }
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    if let Some(l) = labels.as_object_mut() {
        l.insert("app.kubernetes.io/managed-by".into(), Value::from("Helm"));
    }
}

/// An object without what every write changes (resource version, managed fields, generation,
/// timestamps, uid) and without its status: the form drift is judged by.
fn comparable(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "managedFields",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "uid",
        ] {
            meta.remove(k);
        }
    }
    if let Some(m) = o.as_object_mut() {
        m.remove("status");
    }
    o
}

/// An Updater's write: the object made of the output over what exists (which must be the
/// package's), stamped as its release's, created or replaced (with its status, where the
/// resource has a status subresource). Returns the object as written, when it wrote.
async fn update(
    api: &Api<DynamicObject>,
    name: &str,
    out: &Value,
    release: &(String, String),
) -> Result<Option<Value>, String> {
    let existing = api
        .get_opt(name)
        .await
        .map_err(api_error)?
        .map(|o| serde_json::to_value(o).unwrap_or(Value::Null));
    if let Some(live) = &existing {
        owned(live, release)?;
    }
    let mut new = updater_object(existing.as_ref(), out);
    stamp(&mut new, release);
    if existing.as_ref() == Some(&new) {
        return Ok(existing);
    }
    let obj: DynamicObject = serde_json::from_value(new.clone()).map_err(|e| e.to_string())?;
    let written = match &existing {
        None => api.create(&PostParams::default(), &obj).await,
        Some(_) => api.replace(name, &PostParams::default(), &obj).await,
    }
    .map_err(api_error)?;
    let mut written = serde_json::to_value(written).map_err(|e| e.to_string())?;
    if let Some(status) = new.get("status")
        && written.get("status") != Some(status)
    {
        let patch = json!({"status": status});
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(o) => written = serde_json::to_value(o).map_err(|e| e.to_string())?,
            // No status subresource: the status went with the object.
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(api_error(e)),
        }
    }
    Ok(Some(written))
}

/// A Patcher's write: a merge patch of an object that exists (of its status too, where the
/// patch sets one). Taking a patch back from an object that is gone is done.
async fn patch(
    api: &Api<DynamicObject>,
    name: &str,
    patch: &Value,
    removal: bool,
) -> Result<(), kube::Error> {
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => {}
        Err(e) if removal && is_not_found(&e) => return Ok(()),
        Err(e) => return Err(e),
    }
    if let Some(status) = patch.get("status") {
        let patch = json!({"status": status});
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The OperatorsReady condition a package's controllers make: True when all are Ready;
/// False naming the first that could not start; Unknown naming those whose last evaluation
/// failed, with the last error of the first.
pub(crate) fn health(statuses: &[OperatorStatus]) -> (ConditionStatus, &'static str, String) {
    let name = |s: &OperatorStatus| format!("{}/{}", s.operator, s.status.name);
    if let Some(s) = statuses.iter().find(|s| s.status.ready == Readiness::False) {
        return (
            ConditionStatus::False,
            "NotReady",
            format!(
                "controller {}: {}{}",
                name(s),
                s.status.message,
                last_errors(s)
            ),
        );
    }
    let failing: Vec<&OperatorStatus> = statuses
        .iter()
        .filter(|s| s.status.ready == Readiness::Unknown)
        .collect();
    match failing.first() {
        None => (
            ConditionStatus::True,
            "Ready",
            format!("{} controllers ready", statuses.len()),
        ),
        Some(first) => (
            ConditionStatus::Unknown,
            "ReconciliationFailed",
            format!(
                "{} of {} controllers failing ({}): {}{}",
                failing.len(),
                statuses.len(),
                failing
                    .iter()
                    .map(|s| name(s))
                    .collect::<Vec<_>>()
                    .join(", "),
                first.status.message,
                last_errors(first)
            ),
        ),
    }
}

/// A controller's ring of last errors (oldest first, each at most 245 characters), for the
/// condition's message: `; last errors of op/c: [e1] [e2]`.
fn last_errors(s: &OperatorStatus) -> String {
    if s.status.last_errors.len() < 2 {
        return String::new();
    }
    let ring: Vec<String> = s
        .status
        .last_errors
        .iter()
        .map(|e| format!("[{e}]"))
        .collect();
    format!(
        "; last errors of {}/{}: {}",
        s.operator,
        s.status.name,
        ring.join(" ")
    )
}

/// The shortest spacing of two reports of the package's health that differ only in their
/// message (a change of status or reason is reported at once), as upstream spaces its error
/// reports: an error storm costs lifecycle one write every 2 s, not one per error.
const REPORT_SPACING: Duration = Duration::from_secs(2);

/// Wait before sending a report again after lifecycle could not be reached.
const HEALTH_RETRY: Duration = Duration::from_secs(2);
/// Wait before offering lifecycle a report it did not apply (the package is not Running at
/// that generation yet: operators start just before the Run reports success), and how many
/// times at most.
const NOT_RUNNING_RETRY: Duration = Duration::from_secs(1);
const NOT_RUNNING_ATTEMPTS: u32 = 120;

/// Sends the packages' operators' health to lifecycle, decoupled from the hosts: a report
/// waits in a map keyed by package, the newest replacing an unsent older one (at most one
/// entry per package with operators), and one task sends them. A report offered again later
/// (lifecycle could not apply it yet) goes back only if no newer one of its package came since.
#[derive(Clone)]
pub struct HealthReporter {
    pending: Arc<Mutex<HashMap<String, Pending>>>,
    /// Per package, the sequence number of its newest report.
    latest: Arc<Mutex<HashMap<String, u64>>>,
    next: Arc<std::sync::atomic::AtomicU64>,
    wake: Arc<tokio::sync::Notify>,
}

#[derive(Clone)]
struct Pending {
    health: berth_proto::lifecycle::OperatorsHealth,
    attempts: u32,
    seq: u64,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl HealthReporter {
    pub fn start(lifecycle: berth_clients::Lifecycle, shutdown: CancellationToken) -> Self {
        let reporter = HealthReporter {
            pending: Arc::default(),
            latest: Arc::default(),
            next: Arc::default(),
            wake: Arc::default(),
        };
        berth_runtime::spawn_in(
            tracing::info_span!(parent: None, "hookevent.operators.health"),
            reporter.clone().send_all(lifecycle, shutdown),
        );
        reporter
    }

    /// Queues `health`, replacing what was not sent yet for its package.
    fn report(&self, health: berth_proto::lifecycle::OperatorsHealth) {
        let seq = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        locked(&self.latest).insert(health.key.clone(), seq);
        locked(&self.pending).insert(
            health.key.clone(),
            Pending {
                health,
                attempts: 0,
                seq,
            },
        );
        self.wake.notify_one();
    }

    async fn send_all(self, lifecycle: berth_clients::Lifecycle, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.wake.notified() => {}
            }
            let batch: Vec<(String, Pending)> = locked(&self.pending).drain().collect();
            for (key, p) in batch {
                match lifecycle
                    .clone()
                    .report_operators_health(p.health.clone())
                    .await
                {
                    Ok(answer) if answer.get_ref().applied => {}
                    Ok(_) if p.attempts + 1 >= NOT_RUNNING_ATTEMPTS => {
                        tracing::debug!(package.key = %key, "operators health not applied: the package is not Running at that generation");
                    }
                    Ok(_) => self.later(
                        key,
                        Pending {
                            attempts: p.attempts + 1,
                            ..p
                        },
                        NOT_RUNNING_RETRY,
                    ),
                    Err(status) => {
                        tracing::debug!(package.key = %key, error = %status, "reporting operators health failed; retrying");
                        self.later(key, p, HEALTH_RETRY);
                    }
                }
            }
        }
    }

    /// Offers `p` again after `wait`, unless a newer report of the package came meanwhile.
    fn later(&self, key: String, p: Pending, wait: Duration) {
        let this = self.clone();
        berth_runtime::spawn_in(tracing::Span::current(), async move {
            tokio::time::sleep(wait).await;
            if locked(&this.latest).get(&key) != Some(&p.seq) {
                return;
            }
            if let std::collections::hash_map::Entry::Vacant(slot) =
                locked(&this.pending).entry(key)
            {
                slot.insert(p);
                this.wake.notify_one();
            }
        });
    }
}

/// `obj` with `metadata.resourceVersion` set to `revision`.
fn stamped(obj: &Value, revision: u64) -> Value {
    let mut obj = obj.clone();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::from(revision.to_string()));
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(name: &str, ready: Readiness, message: &str) -> OperatorStatus {
        OperatorStatus {
            operator: "op".into(),
            status: ControllerStatus {
                name: name.into(),
                ready,
                reason: "",
                message: message.into(),
                since: chrono::Utc::now(),
                last_errors: vec![],
            },
        }
    }

    #[test]
    fn the_condition_names_what_fails() {
        let ok = status("a", Readiness::True, "");
        assert_eq!(
            health(&[ok.clone(), ok.clone()]),
            (ConditionStatus::True, "Ready", "2 controllers ready".into())
        );
        let mut failing = status("b", Readiness::Unknown, "the last event failed: boom");
        failing.status.last_errors = vec!["bang".into(), "boom".into()];
        let (s, reason, message) = health(&[ok.clone(), failing.clone()]);
        assert_eq!(
            (s, reason),
            (ConditionStatus::Unknown, "ReconciliationFailed")
        );
        assert!(
            message.contains("1 of 2")
                && message.contains("op/b")
                && message.ends_with("; last errors of op/b: [bang] [boom]"),
            "{message}"
        );
        let broken = status(
            "c",
            Readiness::False,
            "the controller failed to start: no kind",
        );
        let (s, reason, message) = health(&[ok, failing, broken]);
        assert_eq!((s, reason), (ConditionStatus::False, "NotReady"));
        assert!(
            message.contains("op/c") && message.contains("no kind"),
            "{message}"
        );
    }

    #[test]
    fn only_the_packages_objects_are_written_over() {
        let release = ("app".to_owned(), "ns".to_owned());
        let with =
            |annotations: Value| json!({"metadata": {"name": "x", "annotations": annotations}});
        assert!(
            owned(
                &with(json!({RELEASE_NAME: "app", RELEASE_NAMESPACE: "ns"})),
                &release
            )
            .is_ok()
        );
        assert!(owned(&with(json!({ADOPT: "ns/app"})), &release).is_ok());
        let theirs = owned(
            &with(json!({RELEASE_NAME: "other", RELEASE_NAMESPACE: "ns"})),
            &release,
        )
        .expect_err("another release's");
        assert!(theirs.contains("release ns/other"), "{theirs}");
        let nobodys = owned(&with(json!({})), &release).expect_err("nobody's");
        assert!(nobodys.contains("berth.io/adopt: \"ns/app\""), "{nobodys}");
        let mut made = json!({"metadata": {"name": "x"}, "data": {}});
        stamp(&mut made, &release);
        assert!(owned(&made, &release).is_ok());
        assert_eq!(
            made["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            json!("Helm")
        );
    }
}
