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
    // Its data (databases, package cache, the dev cluster's Secrets and kubeconfig) is the
    // owner's only.
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode =
            |p: &std::path::Path| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777);
        // Searchable (0711) when hooks run as another user (berth as root), so they reach
        // the package cache; never listable or writable by others.
        let data = mode(&dir.path().join("data"))?;
        anyhow::ensure!(
            data == 0o700 || data == 0o711,
            "data dir readable by others: {data:o}"
        );
        // The CA and every service's key: the owner's only.
        anyhow::ensure!(mode(&dir.path().join("data/tls"))? == 0o700, "tls dir");
        for entry in std::fs::read_dir(dir.path().join("data/tls"))? {
            let path = entry?.path();
            anyhow::ensure!(
                mode(&path)? == 0o600,
                "{} readable by others",
                path.display()
            );
        }
        if real.is_none() {
            anyhow::ensure!(
                mode(&up.kubeconfig)? == 0o600,
                "kubeconfig readable by others"
            );
            for entry in std::fs::read_dir(dir.path().join("data/cluster"))? {
                let path = entry?.path();
                anyhow::ensure!(
                    path.is_dir() || mode(&path)? == 0o600,
                    "{} readable by others",
                    path.display()
                );
            }
        }
    }
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
    let r = v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: "ticker".into(),
        namespace: String::new(),
    };
    let accepted = client
        .update(v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: berth_tests::FIXTURES_REPO.into(),
            version: "1.0.0".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    journey::wait_running(&mut client, &r, accepted.generation).await?;

    let runs = |p: &v1::Package| {
        p.hooks
            .iter()
            .find(|h| h.name == "tick.sh")
            .map(|h| (h.runs, h.last_error.clone()))
    };
    let fired = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut stream = client
            .watch(v1::WatchRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
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
            client
                .remove(v1::RemoveRequest {
                    r#ref: Some(r.clone()),
                    ..Default::default()
                })
                .await?;
            journey::wait_gone(&mut client, &r).await
        }
        Ok(Err(e)) => Err(e),
        Err(_) => Err(anyhow::anyhow!(
            "the schedule hook did not run twice within 30 s"
        )),
    };
    topology.stop().await;
    cluster.stop().await;
    result
}

/// `--wait` (the Run task's readiness wait) holds until every object of the release is Current:
/// a Deployment whose pods can never be scheduled keeps the package from Running (the Run
/// fails at the ready timeout, naming the Deployment), and once the pods can run, the package
/// is Running only when the Deployment reports its replicas available.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_holds_until_every_object_is_current() -> anyhow::Result<()> {
    use berth_proto::v1;
    use futures::StreamExt;
    use k8s_openapi::api::apps::v1::Deployment;

    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology =
        SplitTopology::start_with(&cluster.kubeconfig, dir.path(), &["--ready-timeout", "5"])
            .await?;
    let namespace = berth_tests::TestNamespace::to_be_created("wait");
    let result = async {
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "gated".into(),
            namespace: namespace.to_string(),
        };
        let update = |hold: bool| v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: berth_tests::FIXTURES_REPO.into(),
            version: "1.0.0".into(),
            settings: Some(berth_proto::json::to_struct(
                &serde_json::json!({ "hold": hold }),
            )),
            ..Default::default()
        };
        let deadline = std::time::Duration::from_secs(120);

        // Held pods: the Run gives up at the ready timeout, naming the Deployment, and the
        // package never reports Running.
        let held = client.update(update(true)).await?.into_inner();
        let mut stream = client
            .watch(v1::WatchRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        let failed = tokio::time::timeout(deadline, async {
            while let Some(p) = stream.next().await {
                let p = p?;
                anyhow::ensure!(
                    p.phase != "Running",
                    "Running while its Deployment has no available replica: {p:?}"
                );
                if p.last_error.contains("not ready after") {
                    return Ok(p.last_error);
                }
            }
            anyhow::bail!("watch ended")
        })
        .await
        .context("the Run did not fail at its ready timeout")??;
        anyhow::ensure!(
            failed.contains("Deployment") && failed.contains("Available: 0/2"),
            "{failed}"
        );
        namespace.label(&cluster.client).await?;
        let p = client
            .get(v1::GetRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        anyhow::ensure!(
            p.generation == held.generation && p.phase != "Running",
            "{p:?}"
        );

        // Released pods: Running comes only with the rollout done.
        let released = client.update(update(false)).await?.into_inner();
        let mut stream = client
            .watch(v1::WatchRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        tokio::time::timeout(deadline, async {
            while let Some(p) = stream.next().await {
                let p = p?;
                if p.phase == "Running" && p.observed_generation >= released.generation {
                    return Ok(());
                }
            }
            anyhow::bail!("watch ended")
        })
        .await
        .context("the package did not become Running")??;
        let d = kube::Api::<Deployment>::namespaced(cluster.client.clone(), &namespace)
            .get("gated")
            .await?;
        let status = d.status.unwrap_or_default();
        anyhow::ensure!(
            status.observed_generation == d.metadata.generation
                && status.available_replicas == Some(2)
                && status.updated_replicas == Some(2)
                && status.replicas == Some(2),
            "Running before the Deployment was available: {status:?}"
        );
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                ..Default::default()
            })
            .await?;
        journey::wait_gone(&mut client, &r).await
    }
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}

/// `berth up` stops in order: a task running when SIGTERM arrives finishes and reports while
/// lifecycle and the broker still answer, so after a restart nothing runs it again (the
/// sleeper's beforeHelm hook records one run, not two).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_running_at_sigterm_is_not_run_again_after_restart() -> anyhow::Result<()> {
    use berth_proto::v1;

    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let namespace = berth_tests::TestNamespace::to_be_created("stop");
    let side = berth_tests::hook_writable_dir()?;
    let pids = side.path().join("pids");
    let r = v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: "sleeper".into(),
        namespace: namespace.to_string(),
    };
    let update = v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: berth_tests::FIXTURES_REPO.into(),
        version: "1.0.0".into(),
        settings: Some(berth_proto::json::to_struct(&serde_json::json!({
            "pidFile": pids.display().to_string(),
            "mode": "gate",
        }))),
        ..Default::default()
    };
    let runs = |path: &std::path::Path| -> usize {
        std::fs::read_to_string(path)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };

    let up = AllInOne::start(&data, real.as_deref()).await?;
    let first = async {
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        let accepted = client.update(update).await?.into_inner();
        // The hook is running (it recorded its pid) and waits for its gate.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        while runs(&pids) == 0 {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the beforeHelm hook did not start"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        // SIGTERM while it runs; then the hook may finish.
        let pid = up.proc.pid().context("berth up is running")?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGTERM,
        )?;
        std::fs::write(pids.with_extension("go"), "")?;
        Ok::<_, anyhow::Error>(accepted.generation)
    }
    .await;
    up.proc.stop().await;
    let generation = first?;

    let up = AllInOne::start(&data, real.as_deref()).await?;
    let second = async {
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        journey::wait_running(&mut client, &r, generation).await?;
        let n = runs(&pids);
        anyhow::ensure!(
            n == 1,
            "the beforeHelm hook ran {n} times across the restart: its task was run again"
        );
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                ..Default::default()
            })
            .await?;
        journey::wait_gone(&mut client, &r).await
    }
    .await;
    up.proc.stop().await;
    second
}
