//! Release operations: install/upgrade, uninstall, status, waiting for readiness, plan,
//! history, rollback, and drift repair (resumed after a restart). Knows kube (through `apply`
//! and `record`) but not gRPC; `service` adapts it to the proto contract. Each operation lives
//! in its own file; this one holds the shared types, limits and per-release locking.

mod confine;
mod drift;
mod follow;
mod health;
mod history;
mod hooks;
mod install;
mod metrics;
mod ownership;
mod plan;
mod ready;
mod resume;
mod revision;
mod rollback;
pub mod shards;
mod status;
mod uninstall;

pub use berth_lease::shards::ShardConfig;
pub use confine::AppNamespace;
pub use drift::{DriftEvent, DriftKind};
pub use health::{Health, HealthReporter};
pub use history::RevisionSummary;
pub use metrics::ReleaseMetrics;
pub use plan::{PlanAction, PlannedChange};

use crate::ReleaseInfo;
use crate::apply::kstatus::{self, Status as ObjectStatus};
use crate::apply::{Applied, Applier, ApplyError, KubeLookup, ObjectKey, object};
use crate::capabilities::CapabilitiesCache;
use crate::helm_hooks::{self, DeletePolicy, Hook, HookEvent};
pub use crate::record::Owner;
use crate::record::format::{self, HelmRelease, Info, chart_record, recorded_objects};
use crate::record::store::Stored;
use crate::record::{RecordKey, Records, ReleaseStore, Status, StoreError};
use berth_helm::order::install_rank;
use berth_helm::render::{self, Capabilities, RenderError, manifests};
use kube::Client;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

impl From<RenderError> for ReleaseError {
    fn from(e: RenderError) -> Self {
        match e {
            RenderError::Limit { message, .. } => ReleaseError::RenderLimit(message),
            other => ReleaseError::Render(other),
        }
    }
}

/// Revisions kept per release by default (Helm's `--history-max` default); see
/// [`ReleaseManager::with_history_max`].
pub const HISTORY_MAX: usize = 10;

/// Bounds on one release's render, checked where the release service renders (Install, Plan,
/// Render).
///
/// The bounds are checked by the template engine as it runs ([`render::with_budget`]): a
/// render past its deadline stops at its next template step, one template's text cannot grow
/// past the output bound, and everything the render builds (strings, lists, maps, output)
/// counts against the memory budget (`berth_helm::render::meter`). The caller also stops
/// waiting at the deadline (work outside the template engine, such as reading YAML, is not
/// interruptible). Renders hold one of a few slots (as many as CPUs) until they really end, so
/// renders cannot pile up. A render refused by a limit is [`ReleaseError::RenderLimit`]: the
/// same chart and values hit it again.
#[derive(Clone, Copy, Debug)]
pub struct RenderLimits {
    /// Longest a render may take.
    pub time: std::time::Duration,
    /// Most bytes of rendered manifests, hooks, CRDs and notes.
    pub output_bytes: usize,
    /// Most bytes the render may build (see `berth_helm::render::meter`).
    pub memory_bytes: usize,
}

impl Default for RenderLimits {
    fn default() -> Self {
        RenderLimits {
            time: std::time::Duration::from_secs(60),
            output_bytes: 32 << 20,
            memory_bytes: berth_helm::render::DEFAULT_MEMORY_BUDGET,
        }
    }
}

/// How long one deleted object may take to disappear before uninstall/prune gives up.
const DELETE_WAIT: Duration = Duration::from_secs(60);

/// How long one hook (a Job, typically) may run; Helm's default `--timeout`.
const HOOK_WAIT: Duration = Duration::from_secs(300);

/// The least time a render waits for a slot before the service answers that it is busy (four
/// render time limits when that is longer: four rounds of renders that all run to the limit).
const SLOT_WAIT_FLOOR: Duration = Duration::from_secs(60);

/// How long past its time limit a render may run before its caller stops waiting for the
/// engine's own refusal (see `render_bounded`).
const RENDER_GRACE: Duration = Duration::from_secs(1);

/// How long a CRD from `crds/` may take to become Established.
const CRD_WAIT: Duration = Duration::from_secs(60);

/// Applies of one kind in flight at once (see `apply_in_order`): enough to hide the API
/// server's round trip, few enough not to flood it with one release.
const APPLY_CONCURRENCY: usize = 8;

/// Longest release name Helm accepts (it must fit in label values and Secret names).
const MAX_NAME_LEN: usize = 53;

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    #[error(transparent)]
    Render(RenderError),
    /// The render hit one of [`RenderLimits`] (time, output, memory); the message names it.
    /// Rendering the same chart and values again hits it again.
    #[error("{0}")]
    RenderLimit(String),
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("rendering task failed: {0}")]
    Task(String),
    #[error("not found: {0}")]
    NotFound(String),
    /// An App's chart reaches outside its namespace, or a chart writes release records (see
    /// `confine`).
    #[error("{0}")]
    Confined(String),
    /// The release's records are not the requesting package's: another package's, or a release
    /// berth did not make (see `ownership`).
    #[error("{0}")]
    NotOwned(String),
    /// The service cannot take the request now (every render slot taken); it may later.
    #[error("{0}")]
    Busy(String),
    /// A package's principal (its identity) could not be made, removed or used.
    #[error(transparent)]
    Principal(#[from] crate::principal::PrincipalError),
    /// Uninstall deleted what it could, but objects stay, held by finalizers nobody removes;
    /// the message names each and its finalizers. The records are kept: a retry goes on.
    #[error("{0}")]
    RemoveBlocked(String),
}

impl ReleaseError {
    pub fn is_unavailable(&self) -> bool {
        match self {
            ReleaseError::Apply(e) => e.is_unavailable(),
            ReleaseError::Store(e) => e.is_unavailable(),
            ReleaseError::Busy(_) => true,
            ReleaseError::Principal(e) => e.is_unavailable(),
            ReleaseError::InvalidArgument(_)
            | ReleaseError::Render(_)
            | ReleaseError::RenderLimit(_)
            | ReleaseError::Task(_)
            | ReleaseError::NotFound(_)
            | ReleaseError::Confined(_)
            | ReleaseError::NotOwned(_)
            | ReleaseError::RemoveBlocked(_) => false,
        }
    }
}

/// What Install did.
#[derive(Debug, Clone)]
pub struct Installed {
    pub revision: i32,
    pub objects: Vec<ObjectKey>,
    /// True when the render matched the deployed revision and no new revision was written.
    pub unchanged: bool,
    /// The revision's recorded manifest: what a readiness wait right after watches.
    pub manifest: String,
}

/// What Uninstall did.
#[derive(Debug, Clone, Default)]
pub struct Uninstalled {
    pub found: bool,
    pub deleted: Vec<ObjectKey>,
}

/// What Status saw.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub found: bool,
    pub revision: i32,
    pub objects: Vec<ObjectKey>,
    pub ready: bool,
    pub not_ready: Vec<String>,
    /// Drift seen (and repaired) since this process installed, rolled back or resumed the
    /// release, oldest first.
    pub drift: Vec<DriftEvent>,
}

/// One lock per (namespace, release). Entries are never removed: there is one per release
/// ever touched by this process, which is small next to the releases' own records.
type LockMap = HashMap<(String, String), Arc<tokio::sync::Mutex<()>>>;

/// Serializes operations on the same release; different releases proceed in parallel.
#[derive(Clone, Default)]
struct ReleaseLocks {
    // Std mutex: only held to look up or insert a per-release lock, never across an await.
    inner: Arc<Mutex<LockMap>>,
}

impl ReleaseLocks {
    fn get(&self, ns: &str, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        match self.inner.lock() {
            Ok(mut map) => map
                .entry((ns.to_string(), name.to_string()))
                .or_default()
                .clone(),
            Err(poisoned) => poisoned
                .into_inner()
                .entry((ns.to_string(), name.to_string()))
                .or_default()
                .clone(),
        }
    }
}

#[derive(Clone)]
pub struct ReleaseManager {
    client: Client,
    /// Authenticates the release records berth writes (see `record::key`).
    key: RecordKey,
    applier: Applier,
    locks: ReleaseLocks,
    capabilities: CapabilitiesCache,
    drift: drift::DriftMonitor,
    /// How the releases are shared out between replicas (see `shards`).
    shard_config: ShardConfig,
    metrics: ReleaseMetrics,
    /// Whether installed objects are watched and repaired (see `drift`).
    repair_drift: bool,
    /// Revisions kept per release; older records are deleted after each install or rollback.
    history_max: usize,
    render_limits: RenderLimits,
    /// Renders running at once, including those abandoned at their deadline that still run:
    /// a chart that keeps timing out cannot pile up threads burning CPU.
    renders: Arc<tokio::sync::Semaphore>,
    /// Packages' identities: with them, what is written for a release goes through its
    /// package's principal (see [`ReleaseManager::acting_for`]); without (the release service
    /// alone, in tests), through the service's own identity.
    principals: Option<crate::principal::Principals>,
}

/// Validates a release name (DNS-1123 subdomain, at most 53 characters, as Helm requires) or
/// a namespace (`dots: false`: DNS-1123 label, at most 63).
pub fn validate_name(what: &str, name: &str, max: usize, dots: bool) -> Result<(), ReleaseError> {
    let ok = if dots {
        berth_names::is_dns_subdomain(name, max)
    } else {
        name.len() <= max && berth_names::is_dns_label(name)
    };
    if ok {
        return Ok(());
    }
    let allowed = if dots {
        "lower-case letters, digits, '-' and '.'"
    } else {
        "lower-case letters, digits and '-'"
    };
    Err(ReleaseError::InvalidArgument(format!(
        "{what} {name:?} must be 1-{max} characters of {allowed}, each part starting and ending alphanumeric"
    )))
}

fn validate_release(name: &str, namespace: &str) -> Result<(), ReleaseError> {
    validate_name("release name", name, MAX_NAME_LEN, true)?;
    validate_name("namespace", namespace, berth_names::MAX_LABEL_LEN, false)
}

/// A release's identity: its name (a DNS-1123 subdomain of at most 53 characters, as Helm
/// requires) in its namespace (a DNS-1123 label). Only [`ReleaseId::new`] makes one, so every
/// manager operation works on a checked name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReleaseId {
    name: String,
    namespace: String,
}

impl ReleaseId {
    /// Checks `name` and `namespace`; the error names the one that is wrong.
    pub fn new(name: &str, namespace: &str) -> Result<ReleaseId, ReleaseError> {
        validate_release(name, namespace)?;
        Ok(ReleaseId {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

impl std::fmt::Display for ReleaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}
impl ReleaseManager {
    /// A manager of the releases on `client`'s cluster whose records are authenticated with
    /// `key` (every replica of one installation must be given the same key).
    pub fn new(client: Client, key: RecordKey) -> Self {
        ReleaseManager {
            applier: Applier::new(client.clone()),
            client,
            key,
            locks: ReleaseLocks::default(),
            capabilities: CapabilitiesCache::default(),
            drift: drift::DriftMonitor::default(),
            shard_config: ShardConfig::default(),
            metrics: ReleaseMetrics::default(),
            repair_drift: true,
            history_max: HISTORY_MAX,
            render_limits: RenderLimits::default(),
            renders: Arc::new(tokio::sync::Semaphore::new(
                std::thread::available_parallelism().map_or(2, |n| n.get().max(2)),
            )),
            principals: None,
        }
    }

    /// Acts for packages as their principals (docs/decisions/package-identity.md): every
    /// object of a release is applied, pruned and deleted (chart hooks and drift repairs too)
    /// by impersonating its package's ServiceAccount; records, namespaces and reads stay the
    /// service's own. `endpoint` is where hooks reach the API server.
    pub fn with_principals(
        mut self,
        endpoint: crate::principal::HookEndpoint,
        pod_security: crate::principal::PodSecurity,
    ) -> Self {
        self.principals = Some(crate::principal::Principals::new(
            self.applier.clone(),
            endpoint,
            pod_security,
        ));
        self
    }

    /// The packages' principals, when this manager acts as them.
    pub fn principals(&self) -> Option<&crate::principal::Principals> {
        self.principals.as_ref()
    }

    /// The applier that writes for the release `name` in `namespace`: as its package's
    /// principal (a Module's release lives in `berth-system`, an App's is named after it in its
    /// namespace), or as the service itself without principals.
    fn acting_for(&self, name: &str, namespace: &str) -> Result<Applier, ReleaseError> {
        let Some(principals) = &self.principals else {
            return Ok(self.applier.clone());
        };
        let scope = berth_clients::scope::PackageScope::of_release(name, namespace);
        let user = scope.service_account().username();
        Ok(self.applier.acting_as(principals.client(&scope)?, &user))
    }

    /// The labels the namespace of release `name` in `namespace` gets when berth makes it:
    /// an App's Pod Security labels (with principals), none for `berth-system`.
    fn namespace_labels(&self, name: &str, namespace: &str) -> Vec<(&'static str, &'static str)> {
        let scope = berth_clients::scope::PackageScope::of_release(name, namespace);
        self.principals
            .as_ref()
            .map(|p| p.namespace_labels(&scope))
            .unwrap_or_default()
    }

    /// Keeps at most `revisions` release records per release (at least 1: the deployed one).
    pub fn with_history_max(mut self, revisions: usize) -> Self {
        self.history_max = revisions.max(1);
        self
    }

    /// Asks lifecycle through `scopes` before each drift repair whether the package is
    /// suspended (then its drift is left alone).
    pub fn with_package_scopes(mut self, scopes: berth_clients::scope::PackageScopes) -> Self {
        self.drift.set_scopes(scopes);
        self
    }

    /// Switches drift repair on or off (on by default). Off, deleted or edited objects stay
    /// as they are until the next install.
    pub fn with_drift_repair(mut self, on: bool) -> Self {
        self.repair_drift = on;
        self
    }

    /// Bounds every render with `limits`.
    pub fn with_render_limits(mut self, limits: RenderLimits) -> Self {
        self.render_limits = limits;
        self
    }

    /// Renders on a blocking thread (an App's `lookup` sees only its namespace; template execution is CPU-bound and recursive; keep it off
    /// the async workers) within [`RenderLimits`]: past the time limit, or with more output
    /// than allowed, the render is refused with an error naming the limit.
    async fn render_bounded(
        &self,
        files: Vec<(String, Vec<u8>)>,
        values: serde_json::Value,
        info: ReleaseInfo,
        caps: Capabilities,
        app: Option<&AppNamespace>,
    ) -> Result<render::Rendered, ReleaseError> {
        let limits = self.render_limits;
        let lookup: Arc<dyn render::Lookup> = Arc::new(KubeLookup::new(
            self.applier.clone(),
            app.map(|a| a.0.clone()),
        ));
        let slot_wait = limits.time.saturating_mul(4).max(SLOT_WAIT_FLOOR);
        let rendered = bounded(&self.renders, limits.time, slot_wait, move || {
            // The engine checks the same bounds as it runs, so a render past its deadline
            // stops (and frees its slot) instead of running on unobserved.
            let budget = render::Budget {
                time: Some(limits.time),
                since: Some(std::time::Instant::now()),
                output: Some(limits.output_bytes),
                memory: Some(limits.memory_bytes),
            };
            render::with_budget(budget, || {
                render::render_release_with_lookup(&files, &values, &info, &caps, Some(lookup))
            })
        })
        .await??;
        let size: usize = rendered
            .crds
            .iter()
            .chain(&rendered.manifests)
            .chain(&rendered.hooks)
            .map(|m| m.text.len())
            .sum::<usize>()
            + rendered.notes.len();
        if size > limits.output_bytes {
            return Err(ReleaseError::RenderLimit(format!(
                "the chart rendered {size} bytes, over the render output limit of {} bytes",
                limits.output_bytes
            )));
        }
        Ok(rendered)
    }

    /// Ends every drift watch when `shutdown` is cancelled (they run as their own tasks).
    /// Call before the first install.
    pub fn with_shutdown(mut self, shutdown: tokio_util::sync::CancellationToken) -> Self {
        let shards = self.drift.shards().clone();
        let scopes = self.drift.scopes().cloned();
        let health = self.drift.health().cloned();
        self.drift = drift::DriftMonitor::new(shutdown, self.metrics.clone());
        self.drift.set_shards(shards);
        if let Some(scopes) = scopes {
            self.drift.set_scopes(scopes);
        }
        if let Some(health) = health {
            self.drift.set_health(health);
        }
        self
    }

    /// Tells lifecycle through `health` each change of a watched release's health (readiness
    /// after Running, drift repair stopping).
    pub fn with_health(mut self, health: HealthReporter) -> Self {
        self.drift.set_health(health);
        self
    }

    /// Shares the releases' drift repair with the other replicas as `config` says (see
    /// `shards`): with shard Leases, this replica repairs only the releases of the shards it
    /// owns, none until [`ReleaseManager::run_shards`] takes some; without, every release.
    pub fn with_shards(mut self, config: ShardConfig) -> Self {
        let shards = match &config.leases {
            Some(leases) => {
                berth_lease::shards::Shards::with_leases(config.shards, self.client.clone(), leases)
            }
            None => berth_lease::shards::Shards::all_owned(config.shards),
        };
        self.drift.set_shards(shards);
        self.shard_config = config;
        self
    }

    /// This replica's share of the releases.
    pub fn shard_config(&self) -> &ShardConfig {
        &self.shard_config
    }

    /// Takes part in the shard Leases until `shutdown`, following the release records
    /// meanwhile; returns the Lease loop, which gives the Leases up once `shutdown` comes
    /// (await it before the process exits, so another replica takes over at once). Without
    /// shard Leases, resumes the drift repair of every release berth deployed instead.
    pub fn run_shards(
        &self,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let Some(leases) = self.shard_config.leases.clone() else {
            let resume = self.clone();
            berth_runtime::spawn_in(
                tracing::info_span!(parent: None, "release.resume_drift_repair"),
                async move {
                    match resume.resume_drift_repair().await {
                        Ok(n) => tracing::info!(releases = n, "drift repair resumed"),
                        Err(e) => tracing::warn!(error = %e, "cannot resume drift repair"),
                    }
                },
            );
            return None;
        };
        tracing::info!(replica = %leases.lease.identity, namespace = %leases.namespace,
            shards = self.shard_config.shards, "release replica");
        let follow = self.clone();
        let until = shutdown.clone();
        berth_runtime::spawn_in(
            tracing::info_span!(parent: None, "release.follow_records"),
            async move { follow.follow_records(until).await },
        );
        let mut coordinator = berth_lease::shards::Coordinator::new(
            self.client.clone(),
            leases,
            self.drift.shards().clone(),
            Arc::new(self.clone()),
        );
        Some(berth_runtime::spawn_in(
            tracing::info_span!(parent: None, "release.shards"),
            async move {
                // The first round at once: a lone replica owns every shard from the start.
                coordinator.round().await;
                coordinator.run(shutdown).await;
            },
        ))
    }

    /// Keeps the release metrics (apply and readiness durations, drift repairs) in `metrics`
    /// (by default, in a registry nobody serves).
    pub fn with_metrics(mut self, metrics: &berth_runtime::Metrics) -> Self {
        metrics.register(|r| self.metrics.register(r));
        self.drift.set_metrics(self.metrics.clone());
        self.applier.count_watches_in(self.metrics.watches());
        self
    }

    /// The release records of `namespace`, their reads counted in the release metrics.
    fn store(&self, namespace: &str) -> ReleaseStore {
        ReleaseStore::new(self.client.clone(), namespace, self.key.clone())
            .counted(self.metrics.record_reads())
    }

    /// The counts of release record reads by where they were served from (see
    /// [`ReleaseStore::stored`]).
    pub fn record_reads(&self) -> &crate::record::store::RecordReads {
        self.metrics.record_reads()
    }

    /// `.Capabilities` for renders, from the cluster (cached briefly); defaults for whatever
    /// the cluster does not answer.
    async fn capabilities(&self) -> Capabilities {
        self.capabilities.get(&self.client).await
    }
}

fn kind_of(o: &serde_json::Value) -> &str {
    o.get("kind").and_then(|k| k.as_str()).unwrap_or_default()
}

/// Runs `work` (a render) on the blocking pool in a slot of `renders`, within `time`.
///
/// The time limit is the chart's: it counts the render, not the wait for a slot behind other
/// charts' renders (a sane chart refused as too slow because the service was busy would be told
/// to fix what is not broken). The wait has a bound of its own, `slot_wait`, and running out of
/// it is the service's state ([`ReleaseError::Busy`]), to try again. The slot goes with the
/// work and is given back when it really ends, not when its caller stopped waiting.
async fn bounded<T: Send + 'static>(
    renders: &Arc<tokio::sync::Semaphore>,
    time: Duration,
    slot_wait: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ReleaseError> {
    let slot = match tokio::time::timeout(slot_wait, renders.clone().acquire_owned()).await {
        Err(_) => {
            return Err(ReleaseError::Busy(format!(
                "every render slot stayed taken for {slot_wait:?}; try again"
            )));
        }
        Ok(slot) => slot.map_err(|e| ReleaseError::Task(e.to_string()))?,
    };
    let running = berth_runtime::spawn_blocking_here(move || {
        let _slot = slot;
        work()
    });
    // A backstop should the engine not reach a check in time: a moment past the limit, so the
    // engine's own refusal (which names the template) normally comes first.
    match tokio::time::timeout(time + RENDER_GRACE, running).await {
        Err(_) => Err(ReleaseError::RenderLimit(format!(
            "the chart's render took longer than the render time limit of {time:?}"
        ))),
        Ok(joined) => joined.map_err(|e| ReleaseError::Task(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::validate_release;

    mod render_slots {
        use std::sync::Arc;
        use std::time::Duration;

        use super::super::{ReleaseError, bounded};

        /// A render that waits for a slot longer than the render time limit (the slot is held
        /// for three limits here) still gets its whole limit once it runs.
        #[tokio::test]
        async fn waiting_for_a_slot_is_not_render_time() {
            let renders = Arc::new(tokio::sync::Semaphore::new(1));
            let held = renders.clone().acquire_owned().await.unwrap();
            let limit = Duration::from_millis(200);
            let holder = tokio::spawn(async move {
                tokio::time::sleep(3 * limit).await;
                drop(held);
            });
            let out = bounded(&renders, limit, Duration::from_secs(30), || 42).await;
            assert_eq!(out.unwrap(), 42);
            holder.await.unwrap();
        }

        /// Slots taken for longer than the slot wait: the service is busy, not the chart at
        /// fault, and the work never runs.
        #[tokio::test]
        async fn slots_taken_past_the_slot_wait_are_busy() {
            let renders = Arc::new(tokio::sync::Semaphore::new(1));
            let _held = renders.clone().acquire_owned().await.unwrap();
            let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flag = ran.clone();
            let out = bounded(
                &renders,
                Duration::from_secs(1),
                Duration::from_millis(100),
                move || flag.store(true, std::sync::atomic::Ordering::SeqCst),
            )
            .await;
            assert!(matches!(out, Err(ReleaseError::Busy(_))), "{out:?}");
            assert!(!ran.load(std::sync::atomic::Ordering::SeqCst));
        }
    }

    #[test]
    fn names_follow_helm_rules() {
        assert!(validate_release("my-app.v2", "team-a").is_ok());
        assert!(validate_release("My_App", "ns").is_err());
        assert!(validate_release("app", "team.a").is_err());
        assert!(validate_release(&"a".repeat(54), "ns").is_err());
        assert!(validate_release("app-", "ns").is_err());
    }
}
