//! Shards: replicas of hookevent share the packages' watches and schedules. A package belongs
//! to shard `shard_of(package, N)` (a stable hash, the same on every replica), and each shard
//! is owned by one replica at a time through the Lease `berth-hookevent-shard-<i>` (the
//! shared `berth-lease` elector: client-go's rules, resourceVersion-checked writes). Only the
//! owner of a package's shard watches for it, keeps its snapshots and queues its HookRuns; the
//! other replicas forward the package's RPCs to it (`service`), at the endpoint it advertises
//! in the annotation [`ENDPOINT_ANNOTATION`] of the shard Leases it holds.
//!
//! Balance: each replica also renews a member Lease of its own (labelled [`MEMBER_LABEL`]);
//! with `R` live members (a member Lease seen renewed within its duration) a replica holds at
//! most `ceil(N / R)` shards, gives the excess up (dropping its watches first, then clearing
//! the Lease's holder so another replica takes it at once), and tries for free or expired
//! shards while it holds fewer. A replica that cannot renew a shard before the renew deadline
//! (one renew period short of the duration) drops it before anyone can take it over.
//!
//! Without a cluster (no kubeconfig) there are no Leases: the one replica owns every shard.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use berth_lease::{Claim, Elector, LeaseConfig};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::ListParams;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

/// Shards when `--shards` is not given.
pub const DEFAULT_SHARDS: u32 = 16;
/// Most shards `--shards` may ask for (one Lease each, renewed every renew period).
pub const MAX_SHARDS: u32 = 1024;
/// Label of every shard Lease; its value is the shard's number.
pub const SHARD_LABEL: &str = "berth.io/hookevent-shard";
/// Label of every member Lease; its value is a digest of the replica's identity.
pub const MEMBER_LABEL: &str = "berth.io/hookevent-replica";
/// Annotation of a shard Lease: the gRPC endpoint of the replica holding it.
pub const ENDPOINT_ANNOTATION: &str = "berth.io/hookevent-endpoint";
/// Bound on reading one shard's Lease for a call whose owner is not known yet.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// Where a pod's namespace is, when hookevent runs in one.
const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The shard of `package` among `shards`: the first 8 bytes of the SHA-256 of its key, modulo
/// `shards`. Stable across processes, versions and platforms (Rust's `Hash` is not).
pub fn shard_of(package: &str, shards: u32) -> u32 {
    let digest = Sha256::digest(package.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(shards.max(1))) as u32
}

/// The name of shard `i`'s Lease.
pub fn lease_name(shard: u32) -> String {
    format!("berth-hookevent-shard-{shard}")
}

/// The namespace of the shard Leases when none is given: the pod's, else `default`.
pub fn default_namespace() -> String {
    std::fs::read_to_string(POD_NAMESPACE_FILE)
        .ok()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_owned())
}

/// How this replica takes part in the shard Leases.
#[derive(Clone, Debug)]
pub struct ShardLeases {
    /// The namespace of the shard and member Leases.
    pub namespace: String,
    pub lease: LeaseConfig,
    /// The gRPC endpoint the other replicas forward this replica's packages' calls to.
    pub advertise: String,
}

/// How packages are shared out.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// N: the same on every replica.
    pub shards: u32,
    /// `None`: no Leases, this replica owns every shard (one replica, or no cluster).
    pub leases: Option<ShardLeases>,
}

impl Default for ShardConfig {
    fn default() -> Self {
        ShardConfig {
            shards: DEFAULT_SHARDS,
            leases: None,
        }
    }
}

impl ShardConfig {
    pub fn check(&self) -> Result<(), String> {
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(format!(
                "--shards {} must be between 1 and {MAX_SHARDS}",
                self.shards
            ));
        }
        if let Some(l) = &self.leases {
            l.lease.check()?;
            if l.advertise.is_empty() {
                return Err("--advertise-endpoint must not be empty".into());
            }
        }
        Ok(())
    }
}

/// Where a package's calls go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// This replica owns the package's shard.
    Local,
    /// The replica at this endpoint does (as last read from the shard's Lease).
    Remote { shard: u32, endpoint: String },
    /// Nobody is known to: the shard is being handed over.
    Unknown { shard: u32 },
}

#[derive(Clone, Debug, Default)]
struct Slot {
    owned: bool,
    /// The other replica's advertised endpoint, when another holds the shard.
    owner: Option<String>,
}

/// Who owns which shard, as this replica knows it.
pub struct Shards {
    count: u32,
    slots: Mutex<Vec<Slot>>,
    /// Where to read a shard's Lease when its owner is not known yet (a call arriving between
    /// two rounds): the client, the Leases' namespace and this replica's identity.
    lookup: Option<(kube::Client, String, String)>,
}

impl Shards {
    /// `count` shards, none owned yet.
    pub fn new(count: u32) -> Arc<Shards> {
        Arc::new(Shards::unowned(count, None))
    }

    fn unowned(count: u32, lookup: Option<(kube::Client, String, String)>) -> Shards {
        Shards {
            count: count.max(1),
            slots: Mutex::new(vec![Slot::default(); count.max(1) as usize]),
            lookup,
        }
    }

    /// `count` shards owned through the Leases `leases` describes, none owned yet.
    pub fn with_leases(count: u32, client: kube::Client, leases: &ShardLeases) -> Arc<Shards> {
        Arc::new(Shards::unowned(
            count,
            Some((
                client,
                leases.namespace.clone(),
                leases.lease.identity.clone(),
            )),
        ))
    }

    /// `count` shards, every one owned by this replica (no Leases).
    pub fn all_owned(count: u32) -> Arc<Shards> {
        let shards = Shards::new(count);
        for slot in shards.lock().iter_mut() {
            slot.owned = true;
        }
        shards
    }

    /// Where `package`'s calls go; when the owner of its shard is not known yet, its Lease is
    /// read once to find it.
    pub async fn resolve(&self, package: &str) -> Route {
        let route = self.route(package);
        let (Route::Unknown { shard }, Some((client, namespace, identity))) =
            (&route, &self.lookup)
        else {
            return route;
        };
        let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
        let Ok(Ok(Some(lease))) =
            tokio::time::timeout(LOOKUP_TIMEOUT, api.get_opt(&lease_name(*shard))).await
        else {
            return route;
        };
        let holder = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.clone())
            .unwrap_or_default();
        let endpoint = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ENDPOINT_ANNOTATION))
            .cloned();
        match endpoint {
            Some(endpoint) if !holder.is_empty() && holder != *identity => {
                if !self.owns_shard(*shard) {
                    self.set_owner(*shard, Some(endpoint));
                }
                self.route(package)
            }
            _ => route,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    pub fn shard(&self, package: &str) -> u32 {
        shard_of(package, self.count)
    }

    /// True when this replica owns `package`'s shard.
    pub fn owns(&self, package: &str) -> bool {
        self.owns_shard(self.shard(package))
    }

    pub fn owns_shard(&self, shard: u32) -> bool {
        self.lock().get(shard as usize).is_some_and(|s| s.owned)
    }

    /// The shards this replica owns.
    pub fn owned(&self) -> Vec<u32> {
        self.lock()
            .iter()
            .enumerate()
            .filter(|(_, s)| s.owned)
            .map(|(i, _)| i as u32)
            .collect()
    }

    pub fn route(&self, package: &str) -> Route {
        let shard = self.shard(package);
        let slots = self.lock();
        match slots.get(shard as usize) {
            Some(s) if s.owned => Route::Local,
            Some(Slot {
                owner: Some(endpoint),
                ..
            }) => Route::Remote {
                shard,
                endpoint: endpoint.clone(),
            },
            _ => Route::Unknown { shard },
        }
    }

    fn set_owned(&self, shard: u32, owned: bool) {
        if let Some(s) = self.lock().get_mut(shard as usize) {
            s.owned = owned;
            if owned {
                s.owner = None;
            }
        }
    }

    fn set_owner(&self, shard: u32, owner: Option<String>) {
        if let Some(s) = self.lock().get_mut(shard as usize) {
            s.owner = owner;
        }
    }
}

/// What a replica does when it gains or loses shards (the service: restore or drop the
/// shards' packages).
pub trait ShardHandler: Send + Sync + 'static {
    /// This replica owns `shards` from now on: do for their packages what a restart does.
    fn take(&self, shards: Vec<u32>) -> impl Future<Output = ()> + Send;
    /// This replica no longer owns `shards`: stop their watches and schedules, now.
    fn drop_shards(&self, shards: &[u32]);
}

/// The Lease loop of one replica.
pub struct Coordinator<H> {
    client: kube::Client,
    config: ShardLeases,
    shards: Arc<Shards>,
    handler: Arc<H>,
    electors: Vec<Elector>,
    member: Elector,
    /// Member Leases of the other replicas: name → (resourceVersion, when first seen so).
    members: HashMap<String, (String, Instant)>,
}

/// The member Lease's name of `identity` (a digest: identities are free text, names are not).
fn member_name(identity: &str) -> String {
    let digest = hex::encode(Sha256::digest(identity.as_bytes()));
    format!("berth-hookevent-replica-{}", &digest[..16])
}

impl<H: ShardHandler> Coordinator<H> {
    pub fn new(
        client: kube::Client,
        config: ShardLeases,
        shards: Arc<Shards>,
        handler: Arc<H>,
    ) -> Coordinator<H> {
        let annotations: BTreeMap<String, String> =
            [(ENDPOINT_ANNOTATION.to_owned(), config.advertise.clone())].into();
        let electors = (0..shards.count())
            .map(|i| {
                Elector::new(
                    client.clone(),
                    &config.namespace,
                    &lease_name(i),
                    [(SHARD_LABEL.to_owned(), i.to_string())].into(),
                    config.lease.clone(),
                )
                .with_annotations(annotations.clone())
            })
            .collect();
        let name = member_name(&config.lease.identity);
        let member = Elector::new(
            client.clone(),
            &config.namespace,
            &name,
            [(
                MEMBER_LABEL.to_owned(),
                name["berth-hookevent-replica-".len()..].to_owned(),
            )]
            .into(),
            config.lease.clone(),
        )
        .with_annotations(annotations);
        Coordinator {
            client,
            config,
            shards,
            handler,
            electors,
            member,
            members: HashMap::new(),
        }
    }

    /// One round: renew the member Lease, count the live replicas, renew the shards held,
    /// give up the excess, try for the missing, and note who holds the others. Returns the
    /// shards taken in this round (their packages are being restored in the background).
    pub async fn round(&mut self) {
        let renew = self.config.lease.renew;
        if let Err(e) = bounded(renew, self.member.acquire(true)).await {
            tracing::warn!(error = %e, "renewing this replica's member lease failed");
        }
        let live = self.live_members().await;
        let count = self.shards.count();
        let target = count.div_ceil(live.max(1)) as usize;

        // Renew what is held; what cannot be renewed is dropped.
        let owned = self.shards.owned();
        let renewals = futures::future::join_all(
            self.electors
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| owned.contains(&(*i as u32)))
                .map(|(i, elector)| async move {
                    (i as u32, bounded(renew, elector.acquire(true)).await)
                }),
        )
        .await;
        let mut lost = vec![];
        for (i, result) in renewals {
            match result {
                Ok(Claim::Held) => {}
                Ok(_) => lost.push(i),
                Err(e) => {
                    if !self.electors[i as usize].still_held() {
                        tracing::warn!(shard = i, error = %e, "cannot renew the shard lease before its deadline; dropping the shard");
                        lost.push(i);
                    }
                }
            }
        }
        self.drop_shards(&lost);

        // Give the excess up: the highest-numbered shards first.
        let mut owned = self.shards.owned();
        if owned.len() > target {
            let excess = owned.split_off(target);
            tracing::info!(shards = ?excess, live, target, "giving shards up to the other replicas");
            self.drop_shards(&excess);
            for i in &excess {
                self.electors[*i as usize].release().await;
            }
        }

        // Try for free or expired shards while holding fewer than the target.
        let mut taken = vec![];
        let mut held = self.shards.owned().len();
        for i in 0..count {
            if held >= target {
                break;
            }
            if self.shards.owns_shard(i) {
                continue;
            }
            match bounded(renew, self.electors[i as usize].acquire(true)).await {
                Ok(Claim::Held) => {
                    self.shards.set_owned(i, true);
                    taken.push(i);
                    held += 1;
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(shard = i, error = %e, "trying for a shard lease failed"),
            }
        }
        self.note_owners().await;
        if !taken.is_empty() {
            tracing::info!(shards = ?taken, live, target, "took shards over");
            let handler = Arc::clone(&self.handler);
            berth_telemetry::spawn_in(
                tracing::info_span!(parent: None, "hookevent.take_shards"),
                async move { handler.take(taken).await },
            );
        }
    }

    fn drop_shards(&self, shards: &[u32]) {
        if shards.is_empty() {
            return;
        }
        for &i in shards {
            self.shards.set_owned(i, false);
        }
        self.handler.drop_shards(shards);
    }

    /// The replicas alive: this one, and each other whose member Lease changed within its
    /// duration (measured on this replica's clock; a Lease seen for the first time counts).
    async fn live_members(&mut self) -> u32 {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let listed = bounded(
            self.config.lease.renew,
            api.list(&ListParams::default().labels(MEMBER_LABEL)),
        )
        .await;
        let Ok(list) = listed else {
            // Unknown: keep the balance as it was (count the members last seen alive).
            return 1 + self.members_alive();
        };
        let own = self.member.name().to_owned();
        let mut seen = HashMap::new();
        for lease in list.items {
            let (Some(name), Some(version)) =
                (lease.metadata.name, lease.metadata.resource_version)
            else {
                continue;
            };
            if name == own {
                continue;
            }
            let since = match self.members.get(&name) {
                Some((v, since)) if *v == version => *since,
                _ => Instant::now(),
            };
            seen.insert(name, (version, since));
        }
        self.members = seen;
        1 + self.members_alive()
    }

    fn members_alive(&self) -> u32 {
        let duration = self.config.lease.duration;
        self.members
            .values()
            .filter(|(_, since)| since.elapsed() < duration)
            .count() as u32
    }

    /// Records, for each shard another replica holds, the endpoint it advertises.
    async fn note_owners(&self) {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let Ok(list) = bounded(
            self.config.lease.renew,
            api.list(&ListParams::default().labels(SHARD_LABEL)),
        )
        .await
        else {
            return;
        };
        let mut owners: HashMap<u32, String> = HashMap::new();
        for lease in list.items {
            let Some(shard) = lease
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SHARD_LABEL))
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let holder = lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.clone())
                .unwrap_or_default();
            if holder.is_empty() || holder == self.config.lease.identity {
                continue;
            }
            if let Some(endpoint) = lease
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ENDPOINT_ANNOTATION))
            {
                owners.insert(shard, endpoint.clone());
            }
        }
        for i in 0..self.shards.count() {
            if !self.shards.owns_shard(i) {
                self.shards.set_owner(i, owners.remove(&i));
            }
        }
    }

    /// Runs rounds every renew period (sooner when a held shard's deadline comes first) until
    /// `shutdown`; then drops every shard and gives the Leases up, so another replica takes
    /// them at once.
    pub async fn run(mut self, shutdown: CancellationToken) {
        loop {
            let next = self
                .shards
                .owned()
                .iter()
                .filter_map(|&i| self.electors[i as usize].held_until())
                .min()
                .map_or(self.config.lease.renew, |t| {
                    t.saturating_duration_since(Instant::now())
                        .min(self.config.lease.renew)
                });
            tokio::select! {
                _ = tokio::time::sleep(next) => {}
                _ = shutdown.cancelled() => break,
            }
            self.round().await;
        }
        let owned = self.shards.owned();
        self.drop_shards(&owned);
        for i in owned {
            self.electors[i as usize].release().await;
        }
        self.member.delete_if_held().await;
    }
}

/// `call`, or an error when it takes longer than `limit`.
async fn bounded<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
        Err(kube::Error::Service(
            format!("the API server did not answer a Lease request within {limit:?}").into(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_stable_and_spread() {
        // Stable: the same on every replica and every build (a fixed hash, not Rust's).
        assert_eq!(shard_of("watcher", 16), shard_of("watcher", 16));
        assert_eq!(shard_of("anything", 1), 0);
        let mut counts = [0u32; 4];
        for i in 0..400 {
            counts[shard_of(&format!("package-{i}"), 4) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 50), "{counts:?}");
    }

    #[test]
    fn routes_follow_ownership() {
        let shards = Shards::new(4);
        let p = "some-package";
        let i = shards.shard(p);
        assert_eq!(shards.route(p), Route::Unknown { shard: i });
        shards.set_owner(i, Some("http://10.0.0.2:7073".into()));
        assert_eq!(
            shards.route(p),
            Route::Remote {
                shard: i,
                endpoint: "http://10.0.0.2:7073".into()
            }
        );
        shards.set_owned(i, true);
        assert_eq!(shards.route(p), Route::Local);
        assert!(Shards::all_owned(4).owns(p));
    }

    #[test]
    fn configurations_are_checked() {
        let bad = ShardConfig {
            shards: 0,
            leases: None,
        };
        assert!(bad.check().unwrap_err().contains("--shards"));
        assert!(ShardConfig::default().check().is_ok());
    }
}
