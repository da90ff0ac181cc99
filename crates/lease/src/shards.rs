//! Shards: replicas of a service share its keys (hookevent: packages; release: releases). A key
//! belongs to shard [`shard_of`]`(key, N)` (a stable hash, the same on every replica), and each
//! shard is owned by one replica at a time through the Lease `berth-<service>-shard-<i>` (the
//! [`Elector`]'s rules: client-go's, resourceVersion-checked writes). What owning a shard means
//! is the service's business ([`ShardHandler`]): hookevent watches for the shard's packages,
//! release repairs the drift of the shard's releases.
//!
//! Balance: each replica also renews a member Lease of its own (labelled
//! `berth.io/<service>-replica`); with `R` live members (a member Lease seen renewed within its
//! duration) a replica holds at most `ceil(N / R)` shards, gives the excess up (dropping the
//! shards first, then clearing the Lease's holder so another replica takes it at once), and
//! tries for free or expired shards while it holds fewer. A replica that cannot renew a shard
//! before the renew deadline (one renew period short of the duration) drops it before anyone
//! can take it over.
//!
//! A replica may advertise an endpoint in the shard Leases it holds (annotation
//! `berth.io/<service>-endpoint`), so the others can forward a key's calls to its owner
//! ([`Shards::resolve`]); without one ([`ShardLeases::advertise`] `None`) the owners of other
//! shards are not followed, which saves a list of the shard Leases every round.
//!
//! Without Leases ([`ShardConfig::leases`] `None`: no cluster, or the only replica there can
//! be, as in `berth up`) the one replica owns every shard.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::ListParams;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::{Claim, Elector, LeaseConfig};

/// Shards when `--shards` is not given.
pub const DEFAULT_SHARDS: u32 = 16;
/// Most shards `--shards` may ask for (one Lease each, renewed every renew period).
pub const MAX_SHARDS: u32 = 1024;
/// Bound on reading one shard's Lease for a call whose owner is not known yet.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// Where a pod's namespace is, when the service runs in one.
const POD_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/// The shard of `key` among `shards`: the first 8 bytes of the SHA-256 of the key, modulo
/// `shards`. Stable across processes, versions and platforms (Rust's `Hash` is not).
pub fn shard_of(key: &str, shards: u32) -> u32 {
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) % u64::from(shards.max(1))) as u32
}

/// The namespace of the shard Leases when none is given: the pod's, else `default`.
pub fn default_namespace() -> String {
    std::fs::read_to_string(POD_NAMESPACE_FILE)
        .ok()
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_owned())
}

/// The names and labels of one service's shard and member Leases, all made from the service's
/// name (`hookevent`, `release`), so two services' Leases never mix in one namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardNames {
    service: &'static str,
}

impl ShardNames {
    pub const fn new(service: &'static str) -> ShardNames {
        ShardNames { service }
    }

    /// The name of shard `i`'s Lease: `berth-<service>-shard-<i>`.
    pub fn lease(&self, shard: u32) -> String {
        format!("berth-{}-shard-{shard}", self.service)
    }

    /// The label of every shard Lease (`berth.io/<service>-shard`); its value is the shard's
    /// number.
    pub fn shard_label(&self) -> String {
        format!("berth.io/{}-shard", self.service)
    }

    /// The label of every member Lease (`berth.io/<service>-replica`); its value is a digest
    /// of the replica's identity.
    pub fn member_label(&self) -> String {
        format!("berth.io/{}-replica", self.service)
    }

    /// The annotation of a shard Lease holding the endpoint its holder advertises.
    pub fn endpoint_annotation(&self) -> String {
        format!("berth.io/{}-endpoint", self.service)
    }

    /// The digest of `identity` that names its member Lease (identities are free text, names
    /// are not).
    fn member_digest(identity: &str) -> String {
        let digest = hex::encode(Sha256::digest(identity.as_bytes()));
        digest[..16].to_owned()
    }

    /// The member Lease's name of `identity`: `berth-<service>-replica-<digest>`.
    pub fn member(&self, identity: &str) -> String {
        format!(
            "berth-{}-replica-{}",
            self.service,
            Self::member_digest(identity)
        )
    }
}

/// How this replica takes part in the shard Leases.
#[derive(Clone, Debug)]
pub struct ShardLeases {
    /// Whose Leases these are.
    pub names: ShardNames,
    /// The namespace of the shard and member Leases.
    pub namespace: String,
    pub lease: LeaseConfig,
    /// The endpoint the other replicas forward this replica's keys' calls to (`None`: the
    /// service forwards nothing).
    pub advertise: Option<String>,
}

/// How keys are shared out.
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
    /// Checks the configuration; the error names the flag that is wrong.
    pub fn check(&self) -> Result<(), String> {
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(format!(
                "--shards {} must be between 1 and {MAX_SHARDS}",
                self.shards
            ));
        }
        if let Some(l) = &self.leases {
            l.lease.check()?;
            if l.namespace.is_empty() {
                return Err("--lease-namespace must not be empty".into());
            }
            if l.advertise.as_deref().is_some_and(str::is_empty) {
                return Err("--advertise-endpoint must not be empty".into());
            }
        }
        Ok(())
    }
}

/// Where a key's calls go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// This replica owns the key's shard.
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

/// Where to read a shard's Lease when its owner is not known yet.
struct Lookup {
    client: kube::Client,
    names: ShardNames,
    namespace: String,
    identity: String,
}

/// Who owns which shard, as this replica knows it.
pub struct Shards {
    count: u32,
    slots: Mutex<Vec<Slot>>,
    /// Where to read a shard's Lease when its owner is not known yet (a call arriving between
    /// two rounds).
    lookup: Option<Lookup>,
}

impl Shards {
    /// `count` shards, none owned yet.
    pub fn new(count: u32) -> Arc<Shards> {
        Arc::new(Shards::unowned(count, None))
    }

    fn unowned(count: u32, lookup: Option<Lookup>) -> Shards {
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
            Some(Lookup {
                client,
                names: leases.names,
                namespace: leases.namespace.clone(),
                identity: leases.lease.identity.clone(),
            }),
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

    /// Where `key`'s calls go; when the owner of its shard is not known yet, its Lease is
    /// read once to find it.
    pub async fn resolve(&self, key: &str) -> Route {
        let route = self.route(key);
        let (Route::Unknown { shard }, Some(lookup)) = (&route, &self.lookup) else {
            return route;
        };
        let api: Api<Lease> = Api::namespaced(lookup.client.clone(), &lookup.namespace);
        let Ok(Ok(Some(lease))) =
            tokio::time::timeout(LOOKUP_TIMEOUT, api.get_opt(&lookup.names.lease(*shard))).await
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
            .and_then(|a| a.get(&lookup.names.endpoint_annotation()))
            .cloned();
        match endpoint {
            Some(endpoint) if !holder.is_empty() && holder != lookup.identity => {
                if !self.owns_shard(*shard) {
                    self.set_owner(*shard, Some(endpoint));
                }
                self.route(key)
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

    pub fn shard(&self, key: &str) -> u32 {
        shard_of(key, self.count)
    }

    /// True when this replica owns `key`'s shard.
    pub fn owns(&self, key: &str) -> bool {
        self.owns_shard(self.shard(key))
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

    pub fn route(&self, key: &str) -> Route {
        let shard = self.shard(key);
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
/// shards' keys).
pub trait ShardHandler: Send + Sync + 'static {
    /// This replica owns `shards` from now on: do for their keys what a restart does. Called
    /// from the Lease loop, which must go on renewing meanwhile: start the work in a task of
    /// its own and return.
    fn take(&self, shards: Vec<u32>);
    /// This replica no longer owns `shards`: stop what it did for their keys, now.
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

impl<H: ShardHandler> Coordinator<H> {
    pub fn new(
        client: kube::Client,
        config: ShardLeases,
        shards: Arc<Shards>,
        handler: Arc<H>,
    ) -> Coordinator<H> {
        let names = config.names;
        let annotations: BTreeMap<String, String> = config
            .advertise
            .iter()
            .map(|a| (names.endpoint_annotation(), a.clone()))
            .collect();
        let electors = (0..shards.count())
            .map(|i| {
                Elector::new(
                    client.clone(),
                    &config.namespace,
                    &names.lease(i),
                    [(names.shard_label(), i.to_string())].into(),
                    config.lease.clone(),
                )
                .with_annotations(annotations.clone())
            })
            .collect();
        let member = Elector::new(
            client.clone(),
            &config.namespace,
            &names.member(&config.lease.identity),
            [(
                names.member_label(),
                ShardNames::member_digest(&config.lease.identity),
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
    /// give up the excess, try for the missing, and note who holds the others. The shards
    /// taken in this round are handed to the handler.
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
        if self.config.advertise.is_some() {
            self.note_owners().await;
        }
        if !taken.is_empty() {
            tracing::info!(shards = ?taken, live, target, "took shards over");
            self.handler.take(taken);
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
        let label = self.config.names.member_label();
        let listed = bounded(
            self.config.lease.renew,
            api.list(&ListParams::default().labels(&label)),
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
        let names = self.config.names;
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let label = names.shard_label();
        let Ok(list) = bounded(
            self.config.lease.renew,
            api.list(&ListParams::default().labels(&label)),
        )
        .await
        else {
            return;
        };
        let annotation = names.endpoint_annotation();
        let mut owners: HashMap<u32, String> = HashMap::new();
        for lease in list.items {
            let Some(shard) = lease
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(&label))
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
                .and_then(|a| a.get(&annotation))
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
        // Stable: the same on every replica and every build (a fixed hash, not Rust's). The
        // values pin the function: a change would move every key of a running deployment.
        assert_eq!(shard_of("watcher", 16), shard_of("watcher", 16));
        assert_eq!(shard_of("anything", 1), 0);
        let digest = Sha256::digest(b"ns/app");
        let first = u64::from_be_bytes(digest[..8].try_into().unwrap());
        assert_eq!(u64::from(shard_of("ns/app", 1000)), first % 1000);
        let mut counts = [0u32; 4];
        for i in 0..400 {
            counts[shard_of(&format!("package-{i}"), 4) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 50), "{counts:?}");
    }

    #[test]
    fn names_are_the_services_own() {
        let h = ShardNames::new("hookevent");
        assert_eq!(h.lease(3), "berth-hookevent-shard-3");
        assert_eq!(h.shard_label(), "berth.io/hookevent-shard");
        assert_eq!(h.member_label(), "berth.io/hookevent-replica");
        assert_eq!(h.endpoint_annotation(), "berth.io/hookevent-endpoint");
        let member = h.member("replica-a");
        assert!(member.starts_with("berth-hookevent-replica-"), "{member}");
        assert_eq!(member.len(), "berth-hookevent-replica-".len() + 16);
        assert_eq!(member, h.member("replica-a"));
        assert_ne!(member, h.member("replica-b"));
        let r = ShardNames::new("release");
        assert_eq!(r.lease(0), "berth-release-shard-0");
        assert!(r.member("replica-a").starts_with("berth-release-replica-"));
    }

    #[test]
    fn routes_follow_ownership() {
        let shards = Shards::new(4);
        let p = "some-package";
        let i = shards.shard(p);
        assert_eq!(shards.route(p), Route::Unknown { shard: i });
        assert!(!shards.owns(p));
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
        assert_eq!(shards.owned(), vec![i]);
        shards.set_owned(i, false);
        assert_eq!(
            shards.route(p),
            Route::Unknown { shard: i },
            "an owner given up is not remembered as another's"
        );
        let all = Shards::all_owned(4);
        assert!(all.owns(p));
        assert_eq!(all.owned(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn configurations_are_checked() {
        let bad = ShardConfig {
            shards: 0,
            leases: None,
        };
        assert!(bad.check().unwrap_err().contains("--shards"));
        let bad = ShardConfig {
            shards: MAX_SHARDS + 1,
            leases: None,
        };
        assert!(bad.check().unwrap_err().contains("--shards"));
        assert!(ShardConfig::default().check().is_ok());
        let leases = ShardLeases {
            names: ShardNames::new("release"),
            namespace: "berth".into(),
            lease: LeaseConfig::new("replica-a".into()),
            advertise: None,
        };
        let good = ShardConfig {
            shards: 4,
            leases: Some(leases.clone()),
        };
        assert!(good.check().is_ok());
        let bad = ShardConfig {
            leases: Some(ShardLeases {
                advertise: Some(String::new()),
                ..leases.clone()
            }),
            ..good.clone()
        };
        assert!(bad.check().unwrap_err().contains("--advertise-endpoint"));
        let bad = ShardConfig {
            leases: Some(ShardLeases {
                namespace: String::new(),
                ..leases.clone()
            }),
            ..good.clone()
        };
        assert!(bad.check().unwrap_err().contains("--lease-namespace"));
        let bad = ShardConfig {
            leases: Some(ShardLeases {
                lease: LeaseConfig::new(String::new()),
                ..leases
            }),
            ..good
        };
        assert!(bad.check().unwrap_err().contains("replica id"));
    }
}
