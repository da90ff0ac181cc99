//! The walking skeleton end to end: split topology and `berth up`, each against the dev cluster
//! (or the real cluster named by `BERTH_TEST_KUBECONFIG`).

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
    up.proc.stop().await;
    result
}
