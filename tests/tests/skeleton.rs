//! The walking skeleton end to end: split topology and `berth up`, each against the dev cluster
//! (or the real cluster named by `BERTH_TEST_KUBECONFIG`).

use anyhow::Context as _;
use berth_tests::{AllInOne, SplitTopology, TestCluster, journey};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_topology_journey() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = journey::run(&topology.gateway.endpoint(), cluster.client.clone()).await;
    topology.stop().await;
    cluster.stop().await;
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_in_one_journey() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let result = journey::run(&up.proc.endpoint(), kube).await;
    let metrics = match (&result, &up.proc.metrics) {
        (Ok(()), Some(addr)) => Some(berth_tests::scrape_metrics(addr).await),
        _ => None,
    };
    up.proc.stop().await;
    result?;
    // `berth up --metrics-listen` serves the broker's metrics: the journey's tasks were counted.
    let text = metrics.context("berth up announced no metrics port")??;
    let done: f64 = text
        .lines()
        .filter(|l| l.starts_with("berth_queue_finished_total{") && l.contains(r#"outcome="done""#))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    anyhow::ensure!(done > 0.0, "no finished tasks counted in:\n{text}");
    Ok(())
}


/// hookevent fires a schedule binding, a worker runs the hook with a Schedule binding context,
/// and the run shows up on the package; after Remove, the schedule stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_hooks_fire_until_removed() -> anyhow::Result<()> {
    use berth_proto::v1;
    use futures::StreamExt;

    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let mut client = journey::connect(&topology.gateway.endpoint()).await?;
    let r = v1::PackageRef { kind: v1::PackageKind::App as i32, name: "ticker".into(), namespace: String::new() };
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/packages");
    let accepted = client
        .update(v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: repo.display().to_string(),
            version: "1.0.0".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    journey::wait_running(&mut client, &r, accepted.generation).await?;

    let runs = |p: &v1::Package| p.hooks.iter().find(|h| h.name == "tick.sh").map(|h| (h.runs, h.last_error.clone()));
    let fired = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut stream = client.watch(v1::WatchRequest { r#ref: Some(r.clone()) }).await?.into_inner();
        while let Some(p) = stream.next().await {
            let p = p?;
            if let Some((n, error)) = runs(&p) {
                anyhow::ensure!(error.is_empty(), "the hook failed: {error}");
                if n >= 2 {
                    return Ok(n);
                }
            }
        }
        anyhow::bail!("watch ended")
    })
    .await;
    let result = match fired {
        Ok(Ok(_)) => {
            client.remove(v1::RemoveRequest { r#ref: Some(r.clone()) }).await?;
            journey::wait_gone(&mut client, &r).await
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(anyhow::anyhow!("the schedule hook did not run twice within 30 s")),
    };
    topology.stop().await;
    cluster.stop().await;
    result
}
