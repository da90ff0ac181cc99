//! Release replicas: two `berth-release` processes share one cluster; each release's drift is
//! repaired by the one replica holding the release's Lease, and by the other once the holder
//! is killed and its Lease expires. Against the dev cluster (or the real cluster named by
//! `BERTH_TEST_KUBECONFIG`).

use std::time::Duration;

use anyhow::{Context as _, ensure};
use berth_telemetry::Role;
use berth_tests::{Proc, SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;

/// The Lease timing both replicas run with: short, so the takeover is quick to see.
const LEASE_SECS: u64 = 3;
const RENEW_SECS: u64 = 1;
/// Longest a repair or a takeover may take to show: generous, the machine may be busy.
const DEADLINE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);

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

/// The release Lease's holder, once there is one.
async fn holder(leases: &Api<Lease>) -> anyhow::Result<Option<(String, Lease)>> {
    let list = leases
        .list(&ListParams::default().labels("berth.io/release-lease"))
        .await?;
    ensure!(list.items.len() <= 1, "one release, one lease: {list:?}");
    Ok(list.items.into_iter().next().and_then(|l| {
        let h = l.spec.as_ref()?.holder_identity.clone()?;
        Some((h, l))
    }))
}

/// Deletes the release's ConfigMap and waits until it is back (a new uid).
async fn delete_and_see_repaired(configmaps: &Api<ConfigMap>, name: &str) -> anyhow::Result<()> {
    let before = configmaps.get(name).await?.metadata.uid;
    configmaps.delete(name, &DeleteParams::default()).await?;
    until("the deleted ConfigMap is re-applied", || async {
        Ok(configmaps
            .get_opt(name)
            .await?
            .filter(|c| c.metadata.uid != before && c.metadata.deletion_timestamp.is_none())
            .map(drop))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_repaired_by_the_lease_holder_then_by_the_survivor() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    // Every process of the topology gets these; only berth-release reads them. The topology's
    // release (the one the worker installs through) is replica-a.
    berth_tests::process::child_env("BERTH_RELEASE_REPLICA_ID", "replica-a");
    berth_tests::process::child_env("BERTH_RELEASE_LEASE_DURATION_SECS", &LEASE_SECS.to_string());
    berth_tests::process::child_env("BERTH_RELEASE_LEASE_RENEW_SECS", &RENEW_SECS.to_string());
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = journey(&cluster, &topology).await;
    topology.stop().await;
    cluster.stop().await;
    result
}

async fn journey(cluster: &TestCluster, topology: &SplitTopology) -> anyhow::Result<()> {
    // The second replica: the same certificate role and lifecycle, its own identity.
    let kc = cluster.kubeconfig.display().to_string();
    let l = topology.lifecycle().endpoint();
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
    ]
    .map(str::to_owned)
    .into();
    args.extend(berth_tests::process::tls_args(
        &topology.certs,
        Role::Release,
    ));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let b = Proc::start("berth-release", &args, "listening on ").await?;
    let a = topology.release();

    let namespace = TestNamespace::to_be_created("replicas");
    let mut client = journey::connect(&topology.gateway.endpoint()).await?;
    let r = journey::hello(&namespace);
    let accepted = client
        .update(journey::hello_update(
            &r,
            json!({"message": "replicas", "replicas": 1}),
        ))
        .await?
        .into_inner();
    journey::wait_running(&mut client, &r, accepted.generation).await?;

    // The installing replica holds the release's Lease, as the timing configured.
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), &namespace);
    let (first, lease) = until("the release lease has a holder", || holder(&leases)).await?;
    ensure!(
        first == "replica-a",
        "the installer holds the lease: {lease:?}"
    );
    let spec = lease.spec.clone().unwrap_or_default();
    ensure!(
        spec.lease_duration_seconds == Some(LEASE_SECS as i32),
        "{lease:?}"
    );
    let release = lease
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("berth.io/release-lease"))
        .context("the lease names its release")?
        .clone();
    ensure!(
        lease.metadata.name.as_deref() == Some(format!("berth-release-{release}").as_str()),
        "{lease:?}"
    );

    // replica-b knows the release (it followed the Lease) but does not repair it.
    let configmaps: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &namespace);
    let (a0, b0) = (repairs(a).await?, repairs(&b).await?);
    delete_and_see_repaired(&configmaps, &release).await?;
    until("replica-a counts the repair", || async {
        Ok((repairs(a).await? > a0).then_some(()))
    })
    .await?;
    // Give replica-b every chance to have repaired too: a renew period and more.
    tokio::time::sleep(Duration::from_secs(RENEW_SECS * 2)).await;
    ensure!(
        repairs(&b).await? == b0,
        "replica-b repaired a release whose lease it does not hold"
    );
    let (still, _) = holder(&leases).await?.context("a holder")?;
    ensure!(still == "replica-a", "the holder renews: {still}");

    // Kill the holder: no chance to give the Lease up. Its Lease expires and replica-b takes
    // the release over, repairing what is deleted from then on.
    let pid = a.pid().context("replica-a runs")?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    let killed = std::time::Instant::now();
    let (taken, lease) = until("replica-b takes the lease over", || async {
        Ok(holder(&leases).await?.filter(|(h, _)| h == "replica-b"))
    })
    .await?;
    let took = killed.elapsed();
    println!("takeover after SIGKILL: {took:?} (lease {LEASE_SECS}s, renew {RENEW_SECS}s)");
    ensure!(taken == "replica-b");
    let transitions = lease.spec.and_then(|s| s.lease_transitions).unwrap_or(0);
    ensure!(
        transitions >= 1,
        "a takeover is a transition: {transitions}"
    );
    delete_and_see_repaired(&configmaps, &release).await?;
    until("replica-b counts the repair", || async {
        Ok((repairs(&b).await? > b0).then_some(()))
    })
    .await?;
    b.stop().await;
    Ok(())
}
