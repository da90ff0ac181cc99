//! The shard Lease loop (`berth_lease::shards::Coordinator`) against the dev cluster (or the
//! real cluster named by `BERTH_TEST_KUBECONFIG`): a lone replica takes every shard, a second
//! one gets its share, a replica that stops renewing has its shards taken over, one that finds
//! its Lease taken drops the shard, and one that shuts down hands its shards over at once.
//! Rounds are driven by the test, so what each one does is seen in the cluster's Leases.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use berth_devcluster::test_namespace::{TestNamespace, real_cluster};
use berth_lease::LeaseConfig;
use berth_lease::shards::{Coordinator, ShardHandler, ShardLeases, ShardNames, Shards};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio_util::sync::CancellationToken;

const SHARDS: u32 = 4;
const NAMES: ShardNames = ShardNames::new("leasetest");
/// Longest a takeover may take to show (a busy machine): the Lease duration twice over, and
/// more.
const DEADLINE: Duration = Duration::from_secs(60);

/// What the coordinator told the service.
#[derive(Default)]
struct Recorder {
    taken: Mutex<Vec<u32>>,
    dropped: Mutex<Vec<u32>>,
}

impl ShardHandler for Recorder {
    fn take(&self, shards: Vec<u32>) {
        self.taken.lock().unwrap().extend(shards);
    }

    fn drop_shards(&self, shards: &[u32]) {
        self.dropped.lock().unwrap().extend_from_slice(shards);
    }
}

impl Recorder {
    fn taken(&self) -> Vec<u32> {
        sorted(self.taken.lock().unwrap().clone())
    }

    fn dropped(&self) -> Vec<u32> {
        sorted(self.dropped.lock().unwrap().clone())
    }
}

fn sorted(mut v: Vec<u32>) -> Vec<u32> {
    v.sort_unstable();
    v
}

/// One replica: its view of the shards, what its service was told, and its Lease loop.
struct Replica {
    shards: Arc<Shards>,
    seen: Arc<Recorder>,
    coordinator: Coordinator<Recorder>,
}

fn replica(client: &kube::Client, namespace: &str, identity: &str) -> Replica {
    let leases = ShardLeases {
        names: NAMES,
        namespace: namespace.to_owned(),
        lease: LeaseConfig {
            identity: identity.to_owned(),
            duration: Duration::from_secs(2),
            renew: Duration::from_secs(1),
        },
        advertise: None,
    };
    let shards = Shards::with_leases(SHARDS, client.clone(), &leases);
    let seen = Arc::new(Recorder::default());
    let coordinator = Coordinator::new(client.clone(), leases, shards.clone(), seen.clone());
    Replica {
        shards,
        seen,
        coordinator,
    }
}

/// Shard → holder, of the shard Leases that have one.
async fn holders(leases: &Api<Lease>) -> anyhow::Result<BTreeMap<u32, String>> {
    let list = leases
        .list(&ListParams::default().labels(&NAMES.shard_label()))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|l| {
            let shard = l.metadata.labels.as_ref()?.get(&NAMES.shard_label())?;
            let holder = l.spec?.holder_identity.filter(|h| !h.is_empty())?;
            Some((shard.parse().ok()?, holder))
        })
        .collect())
}

fn all(holder: &str) -> BTreeMap<u32, String> {
    (0..SHARDS).map(|i| (i, holder.to_owned())).collect()
}

/// A client of the cluster, and the dev cluster when it is one (kept running by the caller).
async fn cluster() -> anyhow::Result<(kube::Client, Option<berth_devcluster::DevCluster>)> {
    let (kubeconfig, dev) = match real_cluster() {
        Some(path) => (
            Kubeconfig::read_from(&path).with_context(|| format!("reading {}", path.display()))?,
            None,
        ),
        None => {
            let dev = berth_devcluster::DevCluster::start(Default::default()).await?;
            (Kubeconfig::from_yaml(&dev.kubeconfig_yaml())?, Some(dev))
        }
    };
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok((kube::Client::try_from(config)?, dev))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_are_balanced_and_taken_over_from_a_replica_that_stops_renewing()
-> anyhow::Result<()> {
    let (client, _dev) = cluster().await?;
    let ns = TestNamespace::create(&client, "lease-test").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let mut a = replica(&client, &ns, "replica-a");
    let mut b = replica(&client, &ns, "replica-b");

    // Alone, a takes every shard in its first round and tells its service.
    a.coordinator.round().await;
    ensure!(
        a.shards.owned() == vec![0, 1, 2, 3],
        "{:?}",
        a.shards.owned()
    );
    ensure!(a.seen.taken() == vec![0, 1, 2, 3]);
    ensure!(holders(&leases).await? == all("replica-a"));

    // b joins: it sees a alive and every shard held, so it takes nothing yet; a, seeing b,
    // gives up its excess (the highest shards, dropped before the Leases are freed), and b
    // takes them at its next round without waiting for them to expire.
    b.coordinator.round().await;
    ensure!(b.shards.owned().is_empty(), "{:?}", b.shards.owned());
    a.coordinator.round().await;
    // a's last renewal of everything it holds.
    let renewed = Instant::now();
    ensure!(a.shards.owned() == vec![0, 1], "{:?}", a.shards.owned());
    ensure!(a.seen.dropped() == vec![2, 3], "{:?}", a.seen.dropped());
    b.coordinator.round().await;
    ensure!(b.shards.owned() == vec![2, 3], "{:?}", b.shards.owned());
    let shared = holders(&leases).await?;
    ensure!(
        shared.values().filter(|h| *h == "replica-a").count() == 2
            && shared.values().filter(|h| *h == "replica-b").count() == 2,
        "{shared:?}"
    );

    // a stops renewing (as a killed process would: nothing given up). b sees its member
    // Lease go stale, then its shard Leases unrenewed for their duration, and takes them.
    let stopped = Instant::now();
    while b.shards.owned().len() < SHARDS as usize {
        if stopped.elapsed() > DEADLINE {
            bail!("b holds {:?} after {DEADLINE:?}", b.shards.owned());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        b.coordinator.round().await;
    }
    let took = stopped.elapsed();
    ensure!(
        renewed.elapsed() >= Duration::from_secs(2),
        "taken over before the Lease duration passed since a's last renewal"
    );
    ensure!(b.seen.taken() == vec![0, 1, 2, 3], "{:?}", b.seen.taken());
    ensure!(holders(&leases).await? == all("replica-b"));
    println!("takeover after the holder stopped renewing: {took:?} (lease 2 s, renew 1 s)");

    // The stale replica renews again: its shards are another's now, so it drops them.
    a.coordinator.round().await;
    ensure!(a.shards.owned().is_empty(), "{:?}", a.shards.owned());
    ensure!(
        a.seen.dropped() == vec![0, 1, 2, 3],
        "{:?}",
        a.seen.dropped()
    );
    ensure!(holders(&leases).await? == all("replica-b"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_taken_is_dropped_and_a_clean_shutdown_hands_every_shard_over() -> anyhow::Result<()>
{
    let (client, _dev) = cluster().await?;
    let ns = TestNamespace::create(&client, "lease-test").await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let mut a = replica(&client, &ns, "replica-a");
    a.coordinator.round().await;
    ensure!(a.shards.owned().len() == SHARDS as usize);

    // The API server serves Leases with optimistic concurrency: a replace carrying a stale
    // resourceVersion is refused (409), which is what keeps two replicas from both taking
    // one Lease.
    let lease = leases.get(&NAMES.lease(1)).await?;
    let mut stale = lease.clone();
    stale.metadata.resource_version = Some("1".into());
    if lease.metadata.resource_version.as_deref() != Some("1") {
        match leases
            .replace(&NAMES.lease(1), &PostParams::default(), &stale)
            .await
        {
            Err(kube::Error::Api(s)) => ensure!(s.code == 409, "{s:?}"),
            other => bail!("a stale replace of a Lease: {other:?}"),
        }
    }

    // Someone else writes shard 1's Lease: a's next renewal finds it taken and drops it.
    leases
        .patch(
            &NAMES.lease(1),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"holderIdentity": "intruder"}})),
        )
        .await?;
    a.coordinator.round().await;
    ensure!(a.shards.owned() == vec![0, 2, 3], "{:?}", a.shards.owned());
    ensure!(a.seen.dropped() == vec![1], "{:?}", a.seen.dropped());

    // A clean shutdown drops every shard, frees the Leases and deletes the member Lease, so
    // the next replica takes every shard held in its first round (shard 1 stays the
    // intruder's until it expires).
    let shutdown = CancellationToken::new();
    let Replica {
        coordinator, seen, ..
    } = a;
    let running = tokio::spawn(coordinator.run(shutdown.clone()));
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(30), running).await??;
    ensure!(seen.dropped() == vec![0, 1, 2, 3], "{:?}", seen.dropped());
    ensure!(
        holders(&leases).await?.into_iter().collect::<Vec<_>>() == vec![(1, "intruder".into())],
        "every Lease of a is free"
    );
    let members = leases
        .list(&ListParams::default().labels(&NAMES.member_label()))
        .await?;
    ensure!(members.items.is_empty(), "{members:?}");
    let mut b = replica(&client, &ns, "replica-b");
    b.coordinator.round().await;
    ensure!(b.shards.owned() == vec![0, 2, 3], "{:?}", b.shards.owned());
    Ok(())
}
