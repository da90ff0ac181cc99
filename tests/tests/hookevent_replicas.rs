//! Hookevent replicas: two `berth-hookevent` processes on one PostgreSQL database and one
//! cluster share the packages' watches by shard (each shard owned through a Lease). Every
//! event reaches its hook once; the worker talks to one replica, which forwards the calls of
//! the other's packages to it; when a replica is killed, the survivor takes its shards over,
//! re-synchronizes their packages and delivers their events (once each) from then on. Against
//! the dev cluster (or the real cluster named by `BERTH_TEST_KUBECONFIG`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use berth_proto::v1;
use berth_runtime::Role;
use berth_tests::process::{Databases, child_env, tls_args};
use berth_tests::{Proc, SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

/// Few shards and short Leases: packages land on both replicas, and a takeover is quick.
const SHARDS: u32 = 4;
const LEASE_SECS: u64 = 3;
const RENEW_SECS: u64 = 1;
/// Longest a balance, a takeover or a hook's reaction may take to show (a busy machine).
const DEADLINE: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(250);

/// Waits (bounded by [`DEADLINE`]) until `check` answers `Some`.
async fn until<T, F, Fut>(what: &str, check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    berth_tests::until(what, DEADLINE, POLL, check).await
}

/// Shard → holder of the shard Leases that have one.
async fn holders(leases: &Api<Lease>) -> anyhow::Result<BTreeMap<u32, String>> {
    Ok(berth_tests::replicated::shard_holders(leases, "hookevent")
        .await?
        .into_iter()
        .map(|(shard, (holder, _))| (shard, holder))
        .collect())
}

/// The Kubernetes watches a replica holds open (`berth_watches`).
async fn watches(proc: &Proc) -> anyhow::Result<f64> {
    let addr = proc.metrics.as_deref().context("a metrics address")?;
    let text = berth_tests::scrape_metrics(addr).await?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("berth_watches"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

fn watched(name: &str, v: &str) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "watched"}},
        "data": {"v": v},
    }))?)
}

/// One installed `watcher` app (its hook records every binding context in `seen`).
struct Watcher {
    namespace: TestNamespace,
    r: v1::PackageRef,
    shard: u32,
}

impl Watcher {
    fn key(&self) -> String {
        format!("{}.watcher", &*self.namespace)
    }
}

/// Follows the package until its `seen` satisfies `done`; fails on a hook error.
async fn wait_seen(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> anyhow::Result<Vec<String>> {
    let p = journey::follow(client, r, DEADLINE, what, |p| {
        if let Some(h) = p.hooks.iter().find(|h| !h.last_error.is_empty()) {
            bail!("hook {} failed: {}", h.name, h.last_error);
        }
        Ok(done(&journey::seen(p)))
    })
    .await?;
    Ok(journey::seen(&p))
}

fn count(seen: &[String], record: &str) -> usize {
    seen.iter().filter(|s| *s == record).count()
}

/// Creates ConfigMap `name` (v=`round`) in each watcher's namespace, then changes it (a marker:
/// once the Modified record is there, a duplicate Added would be too, the package's runs
/// being queued in order), and checks each Added reached the hook exactly once.
async fn events_once(
    kube: &kube::Client,
    client: &mut journey::Client,
    watchers: &[&Watcher],
    name: &str,
) -> anyhow::Result<()> {
    for w in watchers {
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &w.namespace);
        cms.create(&PostParams::default(), &watched(name, "1")?)
            .await?;
    }
    for w in watchers {
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &w.namespace);
        let added = format!("Event:Added:{name}:1");
        wait_seen(client, &w.r, &added, |s| s.contains(&added)).await?;
        cms.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "2"}})),
        )
        .await?;
        let modified = format!("Event:Modified:{name}:2");
        let seen = wait_seen(client, &w.r, &modified, |s| s.contains(&modified)).await?;
        ensure!(
            count(&seen, &added) == 1 && count(&seen, &modified) == 1,
            "{} (shard {}): each event reaches the hook exactly once: {seen:?}",
            w.key(),
            w.shard
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_are_shared_by_shard_and_taken_over_from_a_killed_replica() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let pg = berth_testpg::PgServer::start().await;
    let databases = Databases::on_postgres(&pg).await;
    let dir = tempfile::tempdir()?;
    // Every process of the topology gets these; only berth-hookevent reads them. The
    // topology's hookevent (the one the worker calls) is replica-a.
    child_env("BERTH_HOOKEVENT_REPLICA_ID", "replica-a");
    child_env("BERTH_HOOKEVENT_SHARDS", &SHARDS.to_string());
    child_env(
        "BERTH_HOOKEVENT_LEASE_DURATION_SECS",
        &LEASE_SECS.to_string(),
    );
    child_env("BERTH_HOOKEVENT_LEASE_RENEW_SECS", &RENEW_SECS.to_string());
    let topology = SplitTopology::start_on(&cluster.kubeconfig, dir.path(), &databases).await?;
    let result = replicas_journey(&cluster, &topology, &databases.hookevent).await;
    topology.stop().await;
    cluster.stop().await;
    result
}

async fn replicas_journey(
    cluster: &TestCluster,
    topology: &SplitTopology,
    database: &str,
) -> anyhow::Result<()> {
    let kube = cluster.client.clone();
    let leases: Api<Lease> = Api::namespaced(kube.clone(), &topology.lease_namespace);
    // The lone replica takes every shard at start (before it serves; it announces its
    // address a moment earlier).
    until("replica-a holds every shard", || async {
        let h = holders(&leases).await?;
        Ok((h.len() == SHARDS as usize && h.values().all(|x| x == "replica-a")).then_some(()))
    })
    .await?;

    // replica-b: the same database, broker, lifecycle and Lease namespace.
    let kc = cluster.kubeconfig.display().to_string();
    let (b_url, l_url) = (
        topology.broker().endpoint(),
        topology.lifecycle().endpoint(),
    );
    let mut args: Vec<String> = [
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--database",
        database,
        "--broker",
        &b_url,
        "--lifecycle",
        &l_url,
        "--kubeconfig",
        &kc,
        "--lease-namespace",
        &topology.lease_namespace,
        "--replica-id",
        "replica-b",
    ]
    .map(str::to_owned)
    .into();
    args.extend(tls_args(&topology.certs, Role::Hookevent));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let b = Proc::start("berth-hookevent", &args, "listening on ").await?;
    let a = topology.hookevent();

    // The shards are shared out: two each, each Lease holder advertising its endpoint.
    let balanced = until("the shards are shared by both replicas", || async {
        let h = holders(&leases).await?;
        let of = |r: &str| h.values().filter(|x| *x == r).count();
        Ok(
            (h.len() == SHARDS as usize && of("replica-a") == 2 && of("replica-b") == 2)
                .then_some(h),
        )
    })
    .await?;
    println!("shards: {balanced:?}");

    // Packages on both replicas' shards: watcher apps in fresh namespaces until each replica
    // owns at least two of them.
    let owner = |w: &Watcher| balanced.get(&w.shard).cloned().unwrap_or_default();
    let mut watchers: Vec<Watcher> = vec![];
    while ["replica-a", "replica-b"]
        .iter()
        .any(|r| watchers.iter().filter(|w| owner(w) == *r).count() < 2)
    {
        ensure!(watchers.len() < 16, "16 namespaces and still one-sided");
        let namespace = TestNamespace::create(&kube, "shards").await?;
        let key = format!("{}.watcher", &*namespace);
        let shard = berth_lease::shards::shard_of(&key, SHARDS);
        let w = Watcher {
            r: v1::PackageRef {
                kind: v1::PackageKind::App as i32,
                name: "watcher".into(),
                namespace: namespace.to_string(),
            },
            namespace,
            shard,
        };
        let over = ["replica-a", "replica-b"]
            .iter()
            .all(|r| *r != owner(&w) || watchers.iter().filter(|x| owner(x) == *r).count() >= 2);
        if !over {
            watchers.push(w);
        }
    }
    let mut client = journey::connect(&topology.gateway.endpoint()).await?;
    for w in &watchers {
        // A ConfigMap before the install: the Synchronization run shows the snapshot the
        // owner kept (GetSnapshots reached it, wherever it landed).
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &w.namespace);
        cms.create(&PostParams::default(), &watched("pre", "1")?)
            .await?;
        let accepted = client
            .update(v1::UpdateRequest {
                r#ref: Some(w.r.clone()),
                repository: berth_tests::FIXTURES_REPO.to_owned(),
                version: "1.0.0".into(),
                ..Default::default()
            })
            .await?
            .into_inner();
        journey::wait_running(&mut client, &w.r, accepted.generation).await?;
    }
    for w in &watchers {
        let seen = wait_seen(&mut client, &w.r, "Synchronization and onStartup", |s| {
            s.len() >= 2
        })
        .await?;
        ensure!(
            seen[..2] == ["Synchronization:cms:pre=1", "onStartup"],
            "{} (shard {}, owner {}): {seen:?}",
            w.key(),
            w.shard,
            owner(w)
        );
    }
    // Both replicas watch (each for its own packages).
    let (wa, wb) = (watches(a).await?, watches(&b).await?);
    ensure!(wa > 0.0 && wb > 0.0, "both replicas watch: a {wa}, b {wb}");

    // Events, while both live: once each (the held events of replica-b's packages were
    // released by a SynchronizationDone the worker sent to replica-a).
    let all: Vec<&Watcher> = watchers.iter().collect();
    events_once(&kube, &mut client, &all, "x").await?;

    // SIGKILL replica-b: it gives nothing up. replica-a takes its shards over once their
    // Leases expire, and re-synchronizes their packages.
    let b_shards: BTreeSet<u32> = balanced
        .iter()
        .filter(|(_, h)| *h == "replica-b")
        .map(|(s, _)| *s)
        .collect();
    let pid = b.pid().context("replica-b runs")?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    let killed = std::time::Instant::now();
    until("replica-a takes every shard over", || async {
        let h = holders(&leases).await?;
        Ok((h.len() == SHARDS as usize && h.values().all(|x| x == "replica-a")).then_some(()))
    })
    .await?;
    println!(
        "takeover of shards {b_shards:?} after SIGKILL: {:?} (lease {LEASE_SECS}s, renew {RENEW_SECS}s)",
        killed.elapsed()
    );
    let orphans: Vec<&Watcher> = watchers
        .iter()
        .filter(|w| b_shards.contains(&w.shard))
        .collect();
    ensure!(orphans.len() >= 2);
    for w in &orphans {
        // The takeover is a restart for these packages: a Synchronization with what exists.
        let seen = wait_seen(&mut client, &w.r, "the re-synchronization", |s| {
            count(s, "Synchronization:cms:pre=1,x=2") == 1
        })
        .await?;
        println!("{}: {seen:?}", w.key());
    }
    events_once(&kube, &mut client, &orphans, "y").await?;
    // replica-a's own packages were never interrupted.
    let own: Vec<&Watcher> = watchers
        .iter()
        .filter(|w| !b_shards.contains(&w.shard))
        .collect();
    events_once(&kube, &mut client, &own, "z").await?;
    Ok(())
}
