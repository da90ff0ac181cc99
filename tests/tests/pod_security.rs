//! Pod Security for Apps (issue 30.8 and attack 30.12), through real processes on the dev
//! cluster and the real control plane: an App's namespace carries Pod Security admission's
//! `enforce: baseline` label, so the API server refuses an App's Pod that would be root on its
//! node — naming each violation, nothing of it running — while an App whose pods keep within
//! the baseline profile runs in the same namespace.

use std::time::Duration;

use anyhow::{bail, ensure};
use berth_proto::v1;
use berth_tests::{SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;

/// Longest a package may take to reach the phase a test waits for.
const DEADLINE: Duration = Duration::from_secs(120);

fn app(name: &str, ns: &str) -> v1::PackageRef {
    v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: name.into(),
        namespace: ns.into(),
    }
}

fn update(r: &v1::PackageRef) -> v1::UpdateRequest {
    v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: berth_tests::FIXTURES_REPO.to_owned(),
        package: String::new(),
        version: "1.0.0".into(),
        settings: None,
        force: false,
        settings_version: 0,
        reset_settings: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_pod_with_the_nodes_root_is_refused_and_a_baseline_app_runs() -> anyhow::Result<()>
{
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = refuse_and_run(&topology, &cluster.client).await;
    topology.stop().await;
    cluster.stop().await;
    result
}

async fn refuse_and_run(topology: &SplitTopology, kube: &kube::Client) -> anyhow::Result<()> {
    let ns = TestNamespace::create(kube, "podsec").await?;
    let mut client = journey::connect(&topology.gateway.endpoint()).await?;

    let root = app("noderoot", &ns);
    let accepted = client.update(update(&root)).await?.into_inner();
    let failed = journey::follow(
        &mut client,
        &root,
        DEADLINE,
        "the generation to fail",
        |p| {
            if p.phase == "Running" {
                bail!("the package is Running: its Pod was admitted");
            }
            Ok(p.phase == "Failed" && p.generation == accepted.generation)
        },
    )
    .await?;
    let error = &failed.last_error;
    for named in [
        "violates PodSecurity \"baseline:latest\"",
        "non-default capabilities (container \"x\" must not include \"SYS_ADMIN\" in securityContext.capabilities.add)",
        "host namespaces (hostPID=true)",
        "hostPath volumes (volume \"root\")",
    ] {
        ensure!(error.contains(named), "{named:?} not in {error:?}");
    }
    ensure!(
        Api::<Pod>::namespaced(kube.clone(), &ns)
            .get_opt("noderoot")
            .await?
            .is_none(),
        "the refused Pod is not on the cluster"
    );

    // The namespace carries the labels that made the API server refuse it.
    let labels = Api::<Namespace>::all(kube.clone())
        .get(&ns)
        .await?
        .metadata
        .labels
        .unwrap_or_default();
    ensure!(
        labels
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str)
            == Some("baseline"),
        "the App's namespace is labelled enforce=baseline: {labels:?}"
    );

    // Pods within the baseline profile run in the same namespace.
    let plain = app("plainpods", &ns);
    let accepted = client.update(update(&plain)).await?.into_inner();
    journey::wait_running(&mut client, &plain, accepted.generation).await?;
    let deployment = Api::<Deployment>::namespaced(kube.clone(), &ns)
        .get("plainpods")
        .await?;
    let ready = deployment
        .status
        .and_then(|s| s.ready_replicas)
        .unwrap_or_default();
    ensure!(ready == 1, "the baseline App's pod is ready: {ready} ready");
    Ok(())
}
