//! Drift: after an install, upgrade or rollback (and, after a restart, for every release
//! berth deployed: see `resume`), the release's objects are watched, one watch per kind and
//! namespace; when one is deleted, or changed so that re-applying it would change it back, the
//! change is recorded and the object re-applied. DESIGN.md leaves "when to repair" to the
//! lifecycle; until it decides, the release service repairs on its own, rate-limited per object
//! with an exponential backoff so a controller fighting berth over a field cannot cause an
//! apply storm.
//!
//! "Would change it back" is decided by a server-side apply dry run, not by comparing fields
//! here: the API server knows defaulting and quantity normalisation (`1000m` == `1`), so only
//! real differences in what berth applied count. A dry run is only needed when an object
//! differs from the last form known to be right (what berth's apply returned, or what the last
//! dry run found unchanged) outside `status` and bookkeeping metadata, so berth's own applies
//! and controllers writing status cost nothing.
//!
//! Before repairing, the release's records are read: when its newest revision is no longer the
//! deployed one being watched (another replica upgraded, rolled back or is uninstalling it),
//! the watch ends instead, and the owner reads the records again: it watches the newer deployed
//! revision, or, when there is none, stops.
//!
//! Replicas: a release's objects are watched and repaired only by the replica owning the
//! release's shard (`shards`). The monitor starts a release's repairer only while this
//! replica owns its shard (checked under the monitor's lock, so a shard dropped meanwhile
//! cannot leave a repairer behind), and a shard lost stops its releases' repairers at once
//! (in-flight repairs are dropped).

use super::health::{self, Readiness};
use super::*;
use crate::apply::Seen;
use crate::apply::dry_run::{DryRun, comparable};
use berth_lease::shards::Shards;
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// Drift events kept per release (oldest dropped first).
const MAX_EVENTS: usize = 100;
/// Wait before the second repair of an object; doubles per repair while drift continues.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between repairs of one object.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Quiet time after which an object's backoff starts over.
const BACKOFF_RESET: Duration = Duration::from_secs(600);
/// How long a just-applied object the shared watch does not show yet may take to appear there
/// before it is checked as absent (see `Repairer::run`).
const CONFIRM_ABSENT: Duration = Duration::from_secs(2);
/// Wait before reading a release's records again after reading them failed.
const RECORDS_RETRY: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum DriftKind {
    /// The object was deleted.
    Deleted,
    /// A field berth applied was changed.
    Modified,
}

impl DriftKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One observed drift and what was done about it.
#[derive(Debug, Clone)]
pub struct DriftEvent {
    pub object: ObjectKey,
    pub kind: DriftKind,
    /// The top-level fields that differed (for `Modified`).
    pub fields: Vec<String>,
    /// RFC 3339 time it was seen.
    pub at: String,
    pub repaired: bool,
    /// Why the repair failed, when it did.
    pub error: String,
}

type EventLog = Arc<Mutex<VecDeque<DriftEvent>>>;

struct Watched {
    cancel: CancellationToken,
    events: EventLog,
    /// The deployed revision being watched (the owner moves to a newer one it finds).
    revision: Arc<AtomicI32>,
}

/// The drift watches of the releases of the shards this replica owns.
#[derive(Clone)]
pub struct DriftMonitor {
    // Std mutex: held only to insert, remove or copy entries, never across an await.
    releases: Arc<Mutex<HashMap<(String, String), Watched>>>,
    /// Revisions this process is writing now (an install or upgrade between its deployed
    /// record and the watch of it): their own record's event is not a change made elsewhere.
    writing: Arc<Mutex<HashMap<(String, String), i32>>>,
    /// Cancelled when the process shuts down; each release's watch holds a child of it.
    shutdown: CancellationToken,
    metrics: ReleaseMetrics,
    /// Which shards this replica owns (all of them without shard Leases).
    shards: Arc<Shards>,
    /// Lifecycle, asked before a repair whether the release's package is suspended (`berth
    /// suspend`, a resource's `spec.suspend`): a suspended package's drift is recorded and
    /// left alone. `None`: never suspended (tests without lifecycle).
    scopes: Option<berth_clients::scope::PackageScopes>,
    /// Lifecycle, told each change of a watched release's health (`health`). `None`: not
    /// told (tests without lifecycle).
    health: Option<HealthReporter>,
}

/// A revision being written (see [`DriftMonitor::writing`]); forgotten when dropped.
pub struct Writing {
    writing: Arc<Mutex<HashMap<(String, String), i32>>>,
    key: (String, String),
    revision: i32,
}

impl Drop for Writing {
    fn drop(&mut self) {
        let mut writing = lock(&self.writing);
        // A later write of the same release (never at once: one operation per release at a
        // time) keeps its own mark.
        if writing.get(&self.key) == Some(&self.revision) {
            writing.remove(&self.key);
        }
    }
}

/// What to watch: a deployed revision's objects.
pub(super) struct Desired {
    pub revision: i32,
    pub objects: Vec<serde_json::Value>,
    pub applied: Vec<Applied>,
}

/// How a repairer's watch ended.
enum Ended {
    /// Paused, stopped, shut down, or the shard was lost.
    Cancelled,
    /// The watched revision is no longer the release's deployed one.
    Outdated,
    /// The watch stream ended (nothing to watch).
    Closed,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Default for DriftMonitor {
    fn default() -> Self {
        DriftMonitor::new(CancellationToken::default(), ReleaseMetrics::default())
    }
}

impl DriftMonitor {
    /// A monitor whose watches all end when `shutdown` is cancelled, counting repairs in
    /// `metrics`, owning every shard (see [`DriftMonitor::set_shards`]).
    pub fn new(shutdown: CancellationToken, metrics: ReleaseMetrics) -> Self {
        DriftMonitor {
            releases: Arc::default(),
            writing: Arc::default(),
            shutdown,
            metrics,
            shards: Shards::all_owned(berth_lease::shards::DEFAULT_SHARDS),
            scopes: None,
            health: None,
        }
    }

    /// Tells lifecycle through `health` each change of a watched release's health.
    pub fn set_health(&mut self, health: HealthReporter) {
        self.health = Some(health);
    }

    /// Asks lifecycle through `scopes` whether a package is suspended before repairing it.
    pub fn set_scopes(&mut self, scopes: berth_clients::scope::PackageScopes) {
        self.scopes = Some(scopes);
    }

    pub fn scopes(&self) -> Option<&berth_clients::scope::PackageScopes> {
        self.scopes.as_ref()
    }

    pub fn health(&self) -> Option<&HealthReporter> {
        self.health.as_ref()
    }

    /// Repairs only the releases of the shards `shards` says this replica owns.
    pub fn set_shards(&mut self, shards: Arc<Shards>) {
        self.shards = shards;
    }

    pub fn shards(&self) -> &Arc<Shards> {
        &self.shards
    }

    /// Counts the repairs of watches started from now on in `metrics`.
    pub fn set_metrics(&mut self, metrics: ReleaseMetrics) {
        self.metrics = metrics;
    }

    /// Starts watching `objects` (the desired state) for the release, replacing any earlier
    /// watch of it, if this replica owns the release's shard (returns whether it started).
    /// Earlier drift events are kept. `revision` is the deployed revision the objects are
    /// from; `applied` holds the objects as berth's apply just left them (may be empty):
    /// those need no check when the watch first lists them.
    #[allow(clippy::too_many_arguments)]
    pub fn watch(
        &self,
        applier: &Applier,
        key: &RecordKey,
        release: &str,
        namespace: &str,
        revision: i32,
        objects: Vec<serde_json::Value>,
        applied: Vec<Applied>,
    ) -> bool {
        if self.shutdown.is_cancelled() {
            return false;
        }
        let cancel = self.shutdown.child_token();
        let (events, watched) = {
            let mut map = lock(&self.releases);
            // Under the lock: a shard dropped after this check has its releases stopped
            // after this insertion (`drop_shards` takes the lock too).
            if !self.shards.owns(&super::shards::key(namespace, release)) {
                return false;
            }
            let id = (namespace.to_string(), release.to_string());
            let events = map.get(&id).map(|w| w.events.clone()).unwrap_or_default();
            let watched = Arc::new(AtomicI32::new(revision));
            if let Some(old) = map.insert(
                id,
                Watched {
                    cancel: cancel.clone(),
                    events: events.clone(),
                    revision: watched.clone(),
                },
            ) {
                old.cancel.cancel();
            }
            (events, watched)
        };
        let follower = Follower {
            applier: applier.clone(),
            key: key.clone(),
            release: release.to_string(),
            namespace: namespace.to_string(),
            events,
            metrics: self.metrics.clone(),
            revision: watched,
            scopes: self.scopes.clone(),
            health: self.health.clone(),
        };
        let desired = Desired {
            revision,
            objects,
            applied,
        };
        berth_runtime::spawn_in(
            tracing::info_span!(parent: None, "release.drift_repair", release = %release, namespace = %namespace),
            follower.run(desired, cancel),
        );
        true
    }

    /// The revision whose objects are watched, while the release's objects are watched (not
    /// paused or stopped).
    pub fn watched_revision(&self, release: &str, namespace: &str) -> Option<i32> {
        let key = (namespace.to_string(), release.to_string());
        let watched = lock(&self.releases)
            .get(&key)
            .filter(|w| !w.cancel.is_cancelled())
            .map(|w| w.revision.load(Ordering::Relaxed));
        let writing = lock(&self.writing).get(&key).copied();
        watched.max(writing)
    }

    /// Marks `revision` of the release as being written by this process until the returned
    /// guard drops (after the watch of it started, or the write failed): the records watch
    /// then takes the deployed record's event for what it is, this process's own, instead of
    /// reading the release's records to resume a repair the install is about to start (a third
    /// of the installs of a 1,000-package burst did, a LIST and two GETs each).
    pub fn writing(&self, release: &str, namespace: &str, revision: i32) -> Writing {
        let key = (namespace.to_string(), release.to_string());
        lock(&self.writing).insert(key.clone(), revision);
        Writing {
            writing: self.writing.clone(),
            key,
            revision,
        }
    }

    /// Stops repairing the release but keeps its events: called before an upgrade or rollback
    /// applies and prunes, so the old watches do not resurrect what the new revision drops.
    pub fn pause(&self, release: &str, namespace: &str) {
        if let Some(w) = lock(&self.releases).get(&(namespace.to_string(), release.to_string())) {
            w.cancel.cancel();
        }
    }

    /// Stops watching the release and forgets its events (on uninstall).
    pub fn stop(&self, release: &str, namespace: &str) {
        if let Some(w) = lock(&self.releases).remove(&(namespace.to_string(), release.to_string()))
        {
            w.cancel.cancel();
        }
    }

    /// Stops, at once, repairing every release of `shards` (no longer this replica's), and
    /// forgets their events: the new owner keeps its own.
    pub fn drop_shards(&self, shards: &[u32]) {
        let mut map = lock(&self.releases);
        map.retain(|(namespace, release), w| {
            let shard = self.shards.shard(&super::shards::key(namespace, release));
            if shards.contains(&shard) {
                w.cancel.cancel();
                return false;
            }
            true
        });
    }

    /// The release's drift events, oldest first.
    pub fn events(&self, release: &str, namespace: &str) -> Vec<DriftEvent> {
        lock(&self.releases)
            .get(&(namespace.to_string(), release.to_string()))
            .map(|w| lock(&w.events).iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// One release's repairer, following the release to each newer deployed revision.
struct Follower {
    applier: Applier,
    /// Checks the release's records before they are acted on.
    key: RecordKey,
    release: String,
    namespace: String,
    events: EventLog,
    metrics: ReleaseMetrics,
    /// The revision watched, shared with the monitor's entry.
    revision: Arc<AtomicI32>,
    scopes: Option<berth_clients::scope::PackageScopes>,
    health: Option<HealthReporter>,
}

impl Follower {
    async fn run(self, mut desired: Desired, cancel: CancellationToken) {
        loop {
            let d = desired;
            self.revision.store(d.revision, Ordering::Relaxed);
            tracing::debug!(revision = d.revision, "repairing drift");
            let repairer = Repairer {
                applier: self.applier.clone(),
                key: self.key.clone(),
                release: self.release.clone(),
                namespace: self.namespace.clone(),
                revision: d.revision,
                events: self.events.clone(),
                metrics: self.metrics.clone(),
                scopes: self.scopes.clone(),
                health: self.health.clone(),
            };
            // Boxed, as `deployed` below and `key_for` in the repairer: a future awaited in
            // place is part of this task's allocation, which is as large as the largest of
            // them all the time; one task lives per watched release. With the API calls
            // inline, each task took some 8 KiB (8.2 MB of the release service's 33 MB heap
            // peak with 1,000 releases, measured with heaptrack); boxed, 2 KiB here and 1 KiB
            // for the repairer.
            match Box::pin(repairer.run(d.objects, d.applied, cancel.clone())).await {
                // Nothing to watch, or told to stop.
                Ended::Cancelled | Ended::Closed => return,
                Ended::Outdated => {
                    tracing::info!(
                        revision = d.revision,
                        "release changed elsewhere; reading its records again"
                    );
                }
            }
            desired = loop {
                match Box::pin(self.deployed()).await {
                    Ok(Ok(d)) => break d,
                    Ok(Err(why)) => {
                        tracing::warn!(why = %why, "release no longer deployed by berth; not repairing it");
                        if let Some(health) = &self.health {
                            health.report(
                                health::package_key(&self.release, &self.namespace),
                                Health::RepairStopped(format!(
                                    "drift repair stopped at revision {}: {why}; an Update of \
                                     the package (`berth update --force`) deploys it again",
                                    d.revision
                                )),
                            );
                        }
                        cancel.cancel();
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "reading the release's records failed");
                        tokio::select! {
                            () = cancel.cancelled() => return,
                            () = tokio::time::sleep(RECORDS_RETRY) => {}
                        }
                    }
                }
            };
        }
    }

    /// The release's latest revision, when it is deployed and berth's, with its objects as its
    /// confinement allows (see `confine::recorded`); else why not (see `not_deployed`).
    async fn deployed(&self) -> Result<Result<Desired, String>, ReleaseError> {
        let store = ReleaseStore::new(
            self.applier.client().clone(),
            &self.namespace,
            self.key.clone(),
        )
        .counted(self.metrics.record_reads());
        let records = store.stored(&self.release).await?;
        if let Some(why) = not_deployed(&records) {
            return Ok(Err(why));
        }
        let Some(latest) = records.newest() else {
            return Ok(Err("the release has no record berth wrote".into()));
        };
        let objects = confine::recorded(
            &self.applier,
            latest,
            "drift repair",
            recorded_objects(&latest.release.manifest),
        )
        .await?;
        Ok(Ok(Desired {
            revision: latest.release.version,
            objects,
            applied: Vec::new(),
        }))
    }
}

/// Why the release's newest record is not a deployed revision berth wrote, naming the revision
/// and its writer (the Secret's last field manager, `helm` for the helm CLI); `None` when it
/// is one.
fn not_deployed(records: &Records) -> Option<String> {
    let own = records.newest();
    let foreign = records.foreign.last();
    match (own, foreign) {
        (_, Some(f)) if own.is_none_or(|o| o.release.version < f.version) => {
            let by = f
                .writer
                .as_deref()
                .map(|w| format!(", written by {w:?}"))
                .unwrap_or_default();
            Some(format!(
                "its newest revision {} (Secret {}) was not written by berth ({}{by})",
                f.version, f.secret, f.why
            ))
        }
        (None, None) => Some("the release has no record berth wrote".into()),
        (Some(o), _) if o.release.info.status != Status::Deployed.as_str() => Some(format!(
            "its newest revision {} is {}, not deployed",
            o.release.version, o.release.info.status
        )),
        _ => None,
    }
}

/// Per-object repair pacing: the first repair is immediate, later ones wait 1s, 2s, 4s, ...
/// up to [`MAX_BACKOFF`], starting over after [`BACKOFF_RESET`] of quiet.
struct Pacing {
    last: Option<Instant>,
    next_wait: Duration,
}

impl Pacing {
    fn new() -> Self {
        Pacing {
            last: None,
            next_wait: Duration::ZERO,
        }
    }

    /// How long to wait before the next repair, and records that it happens.
    fn next(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) > BACKOFF_RESET)
        {
            self.next_wait = Duration::ZERO;
        }
        let wait = self.next_wait;
        self.next_wait = (self.next_wait * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
        self.last = Some(now + wait);
        wait
    }
}

/// What a watch last reported about an object.
enum Sighting {
    Present(serde_json::Value),
    Absent,
}

/// One watched object.
struct Tracked {
    desired: serde_json::Value,
    /// The object's comparable form (see `dry_run::comparable`) when last known to be as berth
    /// wants it.
    known_good: Option<serde_json::Value>,
    pacing: Pacing,
    /// A check or repair of the object is in flight.
    busy: bool,
    /// The latest sighting that arrived while busy, handled once the work in flight is done.
    later: Option<Sighting>,
}

/// How a check or repair of one object ended.
enum Done {
    /// The dry run found nothing to undo; the object as it is live is right.
    Unchanged(serde_json::Value),
    /// The dry run failed; the next event or re-list tries again.
    CheckFailed,
    /// The object belongs to another release now (its annotations name it): not repaired,
    /// and the release's health says so until it is this release's again.
    Taken(String),
    /// The dry run found drift; a repair follows.
    Drifted {
        kind: DriftKind,
        fields: Vec<String>,
    },
    /// The watched revision is no longer the release's deployed one: stop watching.
    Outdated,
    /// Time to look again at a just-applied object the watch showed absent.
    Confirm,
    /// A repair ran (successfully or not).
    Repaired {
        kind: DriftKind,
        fields: Vec<String>,
        /// The comparable form of what the repair's apply returned.
        known_good: Option<serde_json::Value>,
        /// Why the repair failed.
        error: Option<String>,
    },
}

type Work = std::pin::Pin<Box<dyn Future<Output = (ObjectKey, Done)> + Send>>;

/// Watches one release's objects and repairs them.
#[derive(Clone)]
struct Repairer {
    applier: Applier,
    key: RecordKey,
    release: String,
    namespace: String,
    revision: i32,
    events: EventLog,
    metrics: ReleaseMetrics,
    scopes: Option<berth_clients::scope::PackageScopes>,
    health: Option<HealthReporter>,
}

impl Repairer {
    async fn run(
        self,
        objects: Vec<serde_json::Value>,
        applied: Vec<Applied>,
        cancel: CancellationToken,
    ) -> Ended {
        let mut known: HashMap<ObjectKey, serde_json::Value> = applied
            .into_iter()
            .filter_map(|a| Some((a.key, comparable_of(&a.live)?)))
            .collect();
        let mut tracked = HashMap::new();
        let mut resolved = Vec::new();
        for desired in objects {
            match Box::pin(self.applier.key_for(&desired, &self.namespace)).await {
                Ok((key, ar)) => {
                    let known_good = known.remove(&key);
                    resolved.push((key.clone(), ar));
                    tracked.insert(
                        key,
                        Tracked {
                            desired,
                            known_good,
                            pacing: Pacing::new(),
                            busy: false,
                            later: None,
                        },
                    );
                }
                Err(e) => tracing::warn!(error = %e, "cannot watch a release object for drift"),
            }
        }
        // The watches are shared and may not show an object berth has just applied yet: such an
        // object reported absent is given `CONFIRM_ABSENT` to appear before it is checked (a
        // dry run, which an object that does appear never needs).
        let mut unconfirmed: std::collections::HashSet<ObjectKey> = tracked
            .iter()
            .filter(|(_, t)| t.known_good.is_some())
            .map(|(k, _)| k.clone())
            .collect();
        let mut awaited = std::collections::HashSet::new();
        let mut readiness = Readiness::new(resolved.iter().map(|(k, _)| k.clone()));
        let mut stream = self.applier.watch_objects(&resolved);
        // Every in-flight check or repair; at most one per object (`Tracked::busy`).
        let mut work: FuturesUnordered<Work> = FuturesUnordered::new();
        loop {
            let (key, sighting) = tokio::select! {
                () = cancel.cancelled() => return Ended::Cancelled,
                Some((key, done)) = work.next() => {
                    if matches!(done, Done::Outdated) {
                        return Ended::Outdated;
                    }
                    if matches!(done, Done::Confirm) {
                        if !awaited.remove(&key) {
                            // It appeared meanwhile.
                            continue;
                        }
                        (key, Sighting::Absent)
                    } else {
                    let Some(t) = tracked.get_mut(&key) else { continue };
                    // A check that got past the ownership test found the object this
                    // release's; one that did not, another's.
                    match &done {
                        Done::Taken(why) => self.owned(&mut readiness, &key, Some(why.clone())),
                        Done::Unchanged(_) | Done::Drifted { .. } => self.owned(&mut readiness, &key, None),
                        _ => {}
                    }
                    if let Some(next) = self.finish(&key, t, done) {
                        work.push(next);
                    } else if let Some(later) = t.later.take()
                        && let Some(next) = self.sighted(&key, t, later)
                    {
                        work.push(next);
                    }
                    continue;
                    }
                }
                seen = stream.next() => match seen {
                    None => return Ended::Closed,
                    Some(Seen::Error { watch, error }) => {
                        // The watcher backs off and re-lists by itself.
                        tracing::debug!(watch, error, "drift watch error");
                        continue;
                    }
                    Some(Seen::Present(key, live)) => {
                        unconfirmed.remove(&key);
                        awaited.remove(&key);
                        let Ok(value) = serde_json::to_value(&*live) else { continue };
                        let status = kstatus::compute(&value, chrono::Utc::now())
                            .unwrap_or_else(|e| kstatus::Outcome {
                                status: ObjectStatus::Unknown,
                                reason: String::new(),
                                message: e,
                            });
                        self.observed(&mut readiness, &key, status);
                        (key, Sighting::Present(comparable(&value)))
                    }
                    Some(Seen::Absent(key)) if unconfirmed.remove(&key) => {
                        awaited.insert(key.clone());
                        work.push(Box::pin(async move {
                            tokio::time::sleep(CONFIRM_ABSENT).await;
                            (key, Done::Confirm)
                        }));
                        continue;
                    }
                    Some(Seen::Absent(key)) => {
                        if awaited.contains(&key) {
                            // Still waiting for it to appear.
                            continue;
                        }
                        (key, Sighting::Absent)
                    }
                },
            };
            if matches!(sighting, Sighting::Absent) {
                let gone = kstatus::Outcome {
                    status: ObjectStatus::NotFound,
                    reason: String::new(),
                    message: "Resource not found".into(),
                };
                self.observed(&mut readiness, &key, gone);
            }
            let Some(t) = tracked.get_mut(&key) else {
                continue;
            };
            if t.busy {
                t.later = Some(sighting);
            } else if let Some(next) = self.sighted(&key, t, sighting) {
                work.push(next);
            }
        }
    }

    /// Records an object's kstatus; a change of the release's health goes to lifecycle.
    fn observed(&self, readiness: &mut Readiness, key: &ObjectKey, outcome: kstatus::Outcome) {
        let changed = readiness.observe(key, outcome);
        self.tell(changed);
    }

    /// Records whom the drift check found an object belongs to (`taken`: another release,
    /// and why); a change of the release's health goes to lifecycle.
    fn owned(&self, readiness: &mut Readiness, key: &ObjectKey, taken: Option<String>) {
        let changed = readiness.owned(key, taken);
        self.tell(changed);
    }

    fn tell(&self, changed: Option<Health>) {
        if let Some(h) = changed
            && let Some(reporter) = &self.health
        {
            tracing::debug!(health = ?h, "release health changed");
            reporter.report(health::package_key(&self.release, &self.namespace), h);
        }
    }

    /// Decides what a sighting calls for: nothing when the object is as last known right,
    /// else a check. (An absent object is checked too: "absent" from a watch that selects by
    /// label may mean the label was edited away.)
    fn sighted(&self, key: &ObjectKey, t: &mut Tracked, sighting: Sighting) -> Option<Work> {
        if let Sighting::Present(c) = &sighting
            && t.known_good.as_ref() == Some(c)
        {
            return None;
        }
        t.busy = true;
        Some(Box::pin(self.clone().check(key.clone(), t.desired.clone())))
    }

    /// Handles finished work; returns follow-up work (a repair after a check found drift).
    fn finish(&self, key: &ObjectKey, t: &mut Tracked, done: Done) -> Option<Work> {
        match done {
            Done::Unchanged(c) => t.known_good = Some(c),
            // Its next sighting is always checked: given back, the object may be just as it
            // was last known right.
            Done::Taken(_) => t.known_good = None,
            Done::CheckFailed | Done::Outdated | Done::Confirm => {}
            Done::Drifted { kind, fields } => {
                let wait = t.pacing.next();
                return Some(self.repair(key, t, kind, fields, wait));
            }
            Done::Repaired {
                kind,
                fields,
                known_good,
                error,
            } => {
                if known_good.is_some() {
                    t.known_good = known_good;
                }
                self.metrics.repaired(error.is_none());
                self.record(key, kind, fields, error);
            }
        }
        t.busy = false;
        None
    }

    fn repair(
        &self,
        key: &ObjectKey,
        t: &Tracked,
        kind: DriftKind,
        fields: Vec<String>,
        wait: Duration,
    ) -> Work {
        tracing::info!(object = %key, kind = kind.as_str(), ?fields, wait_ms = wait.as_millis() as u64, "drift detected");
        let this = self.clone();
        let (key, desired) = (key.clone(), t.desired.clone());
        // Each repair is a trace of its own (the watch loop is not traced).
        let span = tracing::info_span!(parent: None, "release.drift.repair", object = %key, kind = kind.as_str());
        Box::pin(tracing::Instrument::instrument(
            async move {
                tokio::time::sleep(wait).await;
                let outcome = this
                    .applier
                    .apply(&desired, &this.release, &this.namespace)
                    .await;
                let (known_good, error) = match outcome {
                    Ok(applied) => (comparable_of(&applied.live), None),
                    Err(e) => (None, Some(e.to_string())),
                };
                (
                    key,
                    Done::Repaired {
                        kind,
                        fields,
                        known_good,
                        error,
                    },
                )
            },
            span,
        ))
    }

    /// Does re-applying change anything? `Drifted` when it would and the watched revision is
    /// still the release's deployed one (`Outdated` when not); `finish` schedules the repair.
    async fn check(self, key: ObjectKey, desired: serde_json::Value) -> (ObjectKey, Done) {
        let done = match self
            .applier
            .dry_run(&desired, &self.release, &self.namespace)
            .await
        {
            Ok(DryRun { live: None, .. }) => Done::Drifted {
                kind: DriftKind::Deleted,
                fields: Vec::new(),
            },
            Ok(run) => {
                let fields = run.changed_fields();
                if fields.is_empty() {
                    match run.live.as_ref() {
                        Some(live) => Done::Unchanged(comparable(live)),
                        None => Done::CheckFailed,
                    }
                } else {
                    Done::Drifted {
                        kind: DriftKind::Modified,
                        fields,
                    }
                }
            }
            Err(ApplyError::Taken(why)) => {
                tracing::warn!(object = %key, owner = %why, "not repairing an object another release owns");
                Done::Taken(why)
            }
            Err(e) => {
                tracing::debug!(object = %key, error = %e, "drift check failed");
                Done::CheckFailed
            }
        };
        if !matches!(done, Done::Drifted { .. }) {
            return (key, done);
        }
        if self.suspended().await {
            // Left as it is (recorded); the next event or re-list after a resume repairs it.
            if let Done::Drifted { kind, fields } = &done {
                tracing::info!(object = %key, kind = kind.as_str(), "drift left alone: the package is suspended");
                self.record(
                    &key,
                    *kind,
                    fields.clone(),
                    Some("not repaired: the package is suspended".into()),
                );
            }
            return (key, Done::CheckFailed);
        }
        // Berth's newest record (never a label anyone could have written) must still be the
        // deployed revision watched.
        let store = ReleaseStore::new(
            self.applier.client().clone(),
            &self.namespace,
            self.key.clone(),
        )
        .counted(self.metrics.record_reads());
        match store.stored(&self.release).await {
            Ok(records) => match records.newest() {
                Some(s)
                    if s.release.version == self.revision
                        && s.release.info.status == Status::Deployed.as_str() =>
                {
                    (key, done)
                }
                _ => (key, Done::Outdated),
            },
            Err(e) => {
                tracing::debug!(object = %key, error = %e, "reading the release before a repair failed");
                (key, Done::CheckFailed)
            }
        }
    }

    /// Whether lifecycle says the release's package is suspended (an answer that fails counts
    /// as not suspended: drift repair is the default).
    async fn suspended(&self) -> bool {
        let Some(scopes) = &self.scopes else {
            return false;
        };
        let key = health::package_key(&self.release, &self.namespace);
        scopes.facts(&key).await.is_ok_and(|f| f.suspended)
    }

    fn record(&self, key: &ObjectKey, kind: DriftKind, fields: Vec<String>, error: Option<String>) {
        let event = DriftEvent {
            object: key.clone(),
            kind,
            fields,
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            repaired: error.is_none(),
            error: error.unwrap_or_default(),
        };
        let mut log = lock(&self.events);
        if log.len() >= MAX_EVENTS {
            log.pop_front();
        }
        log.push_back(event);
    }
}

/// The comparable form of a live object.
fn comparable_of(live: &kube::api::DynamicObject) -> Option<serde_json::Value> {
    serde_json::to_value(live).ok().map(|v| comparable(&v))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A revision being written counts as watched until its guard drops, so its own records'
    /// events start no resume; another release, or the release after the write, is untouched.
    #[test]
    fn a_revision_being_written_counts_as_watched_until_done() {
        let drift = DriftMonitor::default();
        assert_eq!(drift.watched_revision("a", "ns"), None);
        let writing = drift.writing("a", "ns", 3);
        assert_eq!(drift.watched_revision("a", "ns"), Some(3));
        assert_eq!(drift.watched_revision("b", "ns"), None);
        assert_eq!(drift.watched_revision("a", "other"), None);
        drop(writing);
        assert_eq!(drift.watched_revision("a", "ns"), None);
    }

    #[test]
    fn repairs_back_off_exponentially() {
        let mut p = Pacing::new();
        let waits: Vec<Duration> = (0..4).map(|_| p.next()).collect();
        assert_eq!(
            waits,
            vec![
                Duration::ZERO,
                Duration::from_secs(1),
                Duration::from_secs(2),
                Duration::from_secs(4)
            ]
        );
    }
}
