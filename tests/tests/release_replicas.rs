//! Release replicas: two `berth-release` processes share one cluster and the releases' drift
//! repair, by shard. Each release's deleted ConfigMap is brought back by exactly one replica,
//! the holder of its shard's Lease, whichever replica installed it; when that replica is
//! killed, the survivor takes its shards over and repairs their releases from then on. Leases
//! of the per-release scheme of an earlier berth are deleted by the owner of their release's
//! shard. Against the dev cluster (or the real cluster named by `BERTH_TEST_KUBECONFIG`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use berth_lease::shards::shard_of;
use berth_proto::v1::{self, PackageKind};
use berth_runtime::Role;
use berth_tests::process::child_env;
use berth_tests::{Proc, SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};

/// Few shards, so both replicas own some; short Leases, so the takeover is quick to see.
const SHARDS: u32 = 4;
const LEASE_SECS: u64 = 3;
const RENEW_SECS: u64 = 1;
/// Longest a balance, a repair or a takeover may take to show: generous, the machine may be
/// busy.
const DEADLINE: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(200);
/// The label of the per-release Leases of berth before shards.
const OLD_LEASE_LABEL: &str = "berth.io/release-lease";

/// Waits (bounded by [`DEADLINE`]) until `check` answers `Some`.
async fn until<T, F, Fut>(what: &str, check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    berth_tests::until(what, DEADLINE, POLL, check).await
}

/// Objects a process re-applied after drift (`berth_drift_repairs_total{outcome="success"}`).
async fn repairs(proc: &Proc) -> anyhow::Result<f64> {
    let addr = proc.metrics.as_deref().context("a metrics address")?;
    let text = berth_tests::scrape_metrics(addr).await?;
    Ok(text
        .lines()
        .filter(|l| {
            l.starts_with("berth_drift_repairs_total{") && l.contains(r#"outcome="success""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Shard → holder, of the release shard Leases that have one.
async fn holders(leases: &Api<Lease>) -> anyhow::Result<BTreeMap<u32, (String, Lease)>> {
    berth_tests::replicated::shard_holders(leases, "release").await
}

/// How many shards each replica holds.
fn held(holders: &BTreeMap<u32, (String, Lease)>) -> BTreeMap<&str, usize> {
    let mut count = BTreeMap::new();
    for (holder, _) in holders.values() {
        *count.entry(holder.as_str()).or_default() += 1;
    }
    count
}

/// Deletes the release's ConfigMap and waits until it is back (a new uid).
async fn delete_and_see_repaired(configmaps: &Api<ConfigMap>, name: &str) -> anyhow::Result<()> {
    let before = configmaps.get(name).await?.metadata.uid;
    configmaps.delete(name, &DeleteParams::default()).await?;
    until(
        &format!("the deleted ConfigMap {name} is re-applied"),
        || async {
            Ok(configmaps
                .get_opt(name)
                .await?
                .filter(|c| c.metadata.uid != before && c.metadata.deletion_timestamp.is_none())
                .map(drop))
        },
    )
    .await
}

/// A Lease as berth before shards kept one per release.
fn old_lease(release: &str) -> anyhow::Result<Lease> {
    Ok(serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("berth-release-{release}"),
            "labels": {OLD_LEASE_LABEL: release},
        },
        "spec": {"holderIdentity": "an-earlier-berth", "leaseDurationSeconds": 15},
    }))?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_is_repaired_by_its_shards_owner_and_taken_over_from_a_killed_one()
-> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    // Every process of the topology gets these; only berth-release reads them. The topology's
    // release (the one the worker installs through) is replica-a.
    child_env("BERTH_RELEASE_REPLICA_ID", "replica-a");
    child_env("BERTH_RELEASE_SHARDS", &SHARDS.to_string());
    child_env("BERTH_RELEASE_LEASE_DURATION_SECS", &LEASE_SECS.to_string());
    child_env("BERTH_RELEASE_LEASE_RENEW_SECS", &RENEW_SECS.to_string());
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = replicas_journey(&cluster, &topology).await;
    topology.stop().await;
    cluster.stop().await;
    result
}

async fn replicas_journey(cluster: &TestCluster, topology: &SplitTopology) -> anyhow::Result<()> {
    let kube = cluster.client.clone();
    let leases: Api<Lease> = Api::namespaced(kube.clone(), &topology.lease_namespace);
    let a = topology.release();
    // The lone replica takes every shard at start.
    until("replica-a holds every shard", || async {
        let h = holders(&leases).await?;
        Ok((held(&h).get("replica-a") == Some(&(SHARDS as usize))).then_some(()))
    })
    .await?;
    let (_, lease) = &holders(&leases).await?[&0];
    ensure!(
        lease.spec.as_ref().and_then(|s| s.lease_duration_seconds) == Some(LEASE_SECS as i32),
        "{lease:?}"
    );

    // The apps' namespace: one app name per shard, and the Lease an earlier berth left for
    // each (one per release). replica-a took its shards before they were written, so they
    // stay until a replica takes their shard.
    let namespace = TestNamespace::create(&kube, "replicas").await?;
    let ns = namespace.to_string();
    let shard = |name: &str| shard_of(&format!("{ns}/{name}"), SHARDS);
    let names: Vec<String> = (0..SHARDS)
        .map(|s| {
            (0..1000)
                .map(|i| format!("app{i}"))
                .find(|n| shard(n) == s)
                .context("an app name in every shard")
        })
        .collect::<anyhow::Result<_>>()?;
    let old: Api<Lease> = Api::namespaced(kube.clone(), &ns);
    for name in &names {
        old.create(&PostParams::default(), &old_lease(name)?)
            .await?;
    }
    let old_left = || async {
        let left = old
            .list(&ListParams::default().labels(OLD_LEASE_LABEL))
            .await?;
        Ok::<_, anyhow::Error>(
            left.items
                .into_iter()
                .filter_map(|l| l.metadata.labels?.remove(OLD_LEASE_LABEL))
                .collect::<Vec<_>>(),
        )
    };

    // replica-b: the same certificate role, lifecycle, shards and Lease namespace.
    let kc = cluster.kubeconfig.display().to_string();
    let l = topology.lifecycle().endpoint();
    let (shards, lease_secs, renew_secs) = (
        SHARDS.to_string(),
        LEASE_SECS.to_string(),
        RENEW_SECS.to_string(),
    );
    let mut args: Vec<String> = [
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--lifecycle",
        &l,
        "--kubeconfig",
        &kc,
        "--replica-id",
        "replica-b",
        "--shards",
        &shards,
        "--lease-namespace",
        &topology.lease_namespace,
        "--lease-duration-secs",
        &lease_secs,
        "--lease-renew-secs",
        &renew_secs,
    ]
    .map(str::to_owned)
    .into();
    args.extend(berth_tests::process::tls_args(
        &topology.certs,
        Role::Release,
    ));
    args.extend(berth_tests::process::record_key_args(&topology.certs)?);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let b = Proc::start("berth-release", &args, "listening on ").await?;

    // Balanced: each holds half the shards (a gave its excess up, b took it).
    let balanced = until("the shards are shared 2 and 2", || async {
        let h = holders(&leases).await?;
        let count = held(&h);
        Ok(
            (count.get("replica-a") == Some(&2) && count.get("replica-b") == Some(&2))
                .then(|| h.into_iter().map(|(s, (holder, _))| (s, holder)).collect()),
        )
    })
    .await?;
    let balanced: BTreeMap<u32, String> = balanced;

    // b deleted the old Leases of the releases of the shards it took; a's are still there.
    let owner_of = |name: &str| balanced[&shard(name)].clone();
    let mut of_b_shards: Vec<String> = names
        .iter()
        .filter(|n| owner_of(n) == "replica-b")
        .cloned()
        .collect();
    let mut of_a_shards: Vec<String> = names
        .iter()
        .filter(|n| owner_of(n) == "replica-a")
        .cloned()
        .collect();
    of_a_shards.sort();
    until("b deletes the old Leases of its shards", || async {
        let left = old_left().await?;
        Ok(left
            .iter()
            .all(|n| !of_b_shards.contains(n))
            .then_some(left))
    })
    .await
    .and_then(|mut left| {
        left.sort();
        ensure!(left == of_a_shards, "old Leases left: {left:?}");
        Ok(())
    })?;

    // One app in a shard of each replica; the worker installs both through replica-a.
    let (of_a, of_b) = (of_a_shards[0].clone(), of_b_shards.remove(0));
    let (repo, repository) = berth_tests::temp_repo();
    let mut client = journey::connect(&topology.gateway.endpoint()).await?;
    for name in [&of_a, &of_b] {
        berth_tests::write_app(
            repo.path(),
            name,
            &[(
                "templates/configmap.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  app: {{ .Release.Name | quote }}\n",
            )],
        )?;
        journey::update_app(&mut client, &repository, &ns, name).await?;
    }
    for name in [&of_a, &of_b] {
        let r = v1::PackageRef {
            kind: PackageKind::App as i32,
            name: name.clone(),
            namespace: ns.clone(),
        };
        journey::wait_running(&mut client, &r, 1).await?;
    }

    // Each release is repaired by its shard's owner only: a's by a (which installed it),
    // b's by b (which learnt of it from the release records).
    let configmaps: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    for (name, owner, other) in [(&of_a, a, &b), (&of_b, &b, a)] {
        let (o0, x0) = (repairs(owner).await?, repairs(other).await?);
        delete_and_see_repaired(&configmaps, name).await?;
        until(
            &format!("{name}'s shard owner counts the repair"),
            || async { Ok((repairs(owner).await? > o0).then_some(())) },
        )
        .await?;
        // Give the other replica every chance to have repaired too: a renew period and more.
        tokio::time::sleep(Duration::from_secs(RENEW_SECS * 2)).await;
        ensure!(
            repairs(other).await? == x0,
            "{name} was repaired by a replica that does not own its shard"
        );
    }

    // Kill replica-a: no chance to give its shards up. Its Leases expire and replica-b takes
    // every shard over, repairing a's release from then on.
    let pid = a.pid().context("replica-a runs")?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    let killed = Instant::now();
    let taken = until("replica-b takes every shard over", || async {
        let h = holders(&leases).await?;
        Ok((held(&h).get("replica-b") == Some(&(SHARDS as usize))).then_some(h))
    })
    .await?;
    println!(
        "takeover after SIGKILL: {:?} (lease {LEASE_SECS}s, renew {RENEW_SECS}s)",
        killed.elapsed()
    );
    let a_shard = shard(&of_a);
    let transitions = taken[&a_shard]
        .1
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0);
    ensure!(
        transitions >= 1,
        "a takeover is a transition: {transitions}"
    );
    let b0 = repairs(&b).await?;
    delete_and_see_repaired(&configmaps, &of_a).await?;
    until("replica-b counts the repair", || async {
        Ok((repairs(&b).await? > b0).then_some(()))
    })
    .await?;

    // The per-release Leases of the earlier berth are all gone: taking a's shards over
    // deleted the rest.
    until("the old per-release Leases are deleted", || async {
        Ok(old_left().await?.is_empty().then_some(()))
    })
    .await?;
    b.stop().await;
    Ok(())
}
