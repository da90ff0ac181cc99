//! Lifecycle replicas: two `berth-lifecycle` processes on one PostgreSQL database serve one
//! set of packages. An Update accepted by one replica is converged through reports the other
//! receives; a Watch on either sees every change; a ValidateSettings waiting on one replica
//! gets the worker's answer that reached the other. Against the dev cluster (or the real
//! cluster named by `BERTH_TEST_KUBECONFIG`).

use anyhow::ensure;
use berth_proto::v1;
use berth_tests::{Databases, Replicas, ReplicatedTopology, TestCluster, TestNamespace, journey};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_replicas_share_packages_watches_and_validation_answers() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let pg = berth_testpg::PgServer::start().await;
    let databases = Databases::on_postgres(&pg).await;
    let dir = tempfile::tempdir()?;
    // Gateway n and the worker call lifecycle n only: the worker's reports and answers all go
    // to lifecycle 0, while the test talks to lifecycle 1 through gateway 1.
    let replicas = Replicas {
        broker: 1,
        lifecycle: 2,
        hookevent: 1,
        release: 1,
        worker: 1,
        gateway: 2,
        pinned: true,
    };
    let topology =
        ReplicatedTopology::start(&cluster.kubeconfig, dir.path(), &databases, replicas, &[])
            .await?;
    let result = journey(&topology, &cluster.client).await;
    topology.stop().await;
    cluster.stop().await;
    result
}

async fn journey(topology: &ReplicatedTopology, kube: &kube::Client) -> anyhow::Result<()> {
    let ns = TestNamespace::create(kube, "lcrep").await?;
    let via = |n: usize| topology.get("gateway", n).expect("gateway").endpoint();
    // Lifecycle 0 gets the reports; lifecycle 1 takes the requests and serves the Watch.
    let mut reporting = journey::connect(&via(0)).await?;
    let mut serving = journey::connect(&via(1)).await?;
    let r = journey::hello(&ns);
    let installed = serving
        .update(journey::hello_update(
            &r,
            json!({"message": "one", "replicas": 1}),
        ))
        .await?
        .into_inner();
    // Every report of the install is written by lifecycle 0: lifecycle 1's Watch sees the
    // package reach Running only through the database's notifications.
    journey::wait_running(&mut serving, &r, installed.generation).await?;

    // Validation: lifecycle 1 waits, the worker answers lifecycle 0, which hands it on.
    let answer = serving
        .validate_settings(v1::ValidateSettingsRequest {
            r#ref: Some(r.clone()),
            settings: Some(berth_proto::json::to_struct(
                &json!({"message": "two", "replicas": 1}),
            )),
            settings_version: 0,
        })
        .await?
        .into_inner();
    ensure!(
        answer.deferred_reason.is_empty(),
        "the worker's answer did not reach the waiting replica: {:?}",
        answer.deferred_reason
    );
    ensure!(answer.valid, "{answer:?}");
    ensure!(
        answer
            .plan
            .iter()
            .any(|c| c.action() == v1::PlanAction::Update && c.kind == "ConfigMap"),
        "the plan shows the ConfigMap's update: {:?}",
        answer.plan
    );

    // A Remove through one replica, seen gone through the other.
    serving
        .remove(v1::RemoveRequest {
            r#ref: Some(r.clone()),
            force: false,
        })
        .await?;
    journey::wait_gone(&mut reporting, &r).await?;
    Ok(())
}
