//! Failover: two of every service (broker, lifecycle, hookevent, release, worker, gateway) on
//! one PostgreSQL server and one cluster. Mid-install of 50 packages, the first replica of
//! every service is killed with SIGKILL. The survivors finish the job: every package Running
//! with its ConfigMap on the cluster, no task lost (the queue drains, nothing failed), none
//! finished twice (each task id is done once in the broker's history), and every beforeHelm
//! hook ran once, or again only where the kill interrupted its task (the broker redelivered it,
//! or a call to a killed service failed it: at-least-once, as documented). Against the dev cluster (or the real cluster named by
//! `BERTH_TEST_KUBECONFIG`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use berth_proto::v1::{self, PackageKind, PackageRef};
use berth_tests::{Databases, Replicas, ReplicatedTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use sqlx::{Connection as _, Row as _};

const PACKAGES: usize = 50;
/// Running packages seen before the kill: the install is under way, not done.
const KILL_AT: usize = 5;
/// Longest the survivors may take to bring every package up.
const DEADLINE: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(100);

fn name(i: usize) -> String {
    format!("f{i:02}")
}

/// 50 apps, each one ConfigMap and one beforeHelm hook that records its run (and takes a
/// moment, so the kill lands while hooks run).
fn write_repository(root: &Path, runs: &Path) -> anyhow::Result<()> {
    for i in 0..PACKAGES {
        let hook = format!(
            "#!/usr/bin/env bash\nset -euo pipefail\nif [[ \"${{1:-}}\" == \"--config\" ]]; then\n  echo '{{\"configVersion\": \"v1\", \"beforeHelm\": 1}}'\n  exit 0\nfi\nsleep 0.5\necho {} >> {}\n",
            name(i),
            runs.display()
        );
        berth_tests::write_app(
            root,
            &name(i),
            &[
                (
                    "templates/configmap.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  package: {{ .Release.Name | quote }}\n",
                ),
                ("hooks/record.sh", &hook),
            ],
        )?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_of_every_service_mid_install_loses_nothing() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let pg = berth_testpg::PgServer::start().await;
    let databases = Databases::on_postgres(&pg).await;
    let dir = tempfile::tempdir()?;
    let side = berth_tests::hook_writable_dir()?;
    let runs = side.path().join("runs");
    // Every package's hook appends to it, each as its own principal's uid.
    std::fs::write(&runs, "")?;
    std::fs::set_permissions(&runs, std::os::unix::fs::PermissionsExt::from_mode(0o666))?;
    let (repo, repository) = berth_tests::temp_repo();
    write_repository(repo.path(), &runs)?;
    let lease = |more: &[&str]| -> Vec<String> {
        ["--lease-duration-secs", "3", "--lease-renew-secs", "1"]
            .iter()
            .chain(more)
            .map(|s| s.to_string())
            .collect()
    };
    let extra = [
        ("release", lease(&[])),
        ("hookevent", hookevent_args()),
        // A dead worker's task goes to the other after 3 s instead of 10.
        ("broker", vec!["--lease-ttl-ms".into(), "3000".into()]),
    ];
    let mut topology = ReplicatedTopology::start(
        &cluster.kubeconfig,
        dir.path(),
        &databases,
        Replicas::all(2),
        &extra,
    )
    .await?;
    let result = failover(
        &mut topology,
        &cluster.client,
        &repository,
        &databases,
        &runs,
    )
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}

/// Hookevent's replica flags: few shards (so both replicas own some), short Lease timings.
fn hookevent_args() -> Vec<String> {
    [
        "--shards",
        "4",
        "--lease-duration-secs",
        "3",
        "--lease-renew-secs",
        "1",
    ]
    .map(str::to_owned)
    .to_vec()
}

async fn failover(
    topology: &mut ReplicatedTopology,
    kube: &kube::Client,
    repository: &str,
    databases: &Databases,
    runs: &Path,
) -> anyhow::Result<()> {
    let ns = TestNamespace::create(kube, "failover").await?;
    // The client talks to the gateway that survives.
    let mut client =
        journey::connect(&topology.get("gateway", 1).context("gateway 1")?.endpoint()).await?;
    let r = |i: usize| PackageRef {
        kind: PackageKind::App as i32,
        name: name(i),
        namespace: ns.to_string(),
    };
    for i in 0..PACKAGES {
        client
            .update(v1::UpdateRequest {
                r#ref: Some(r(i)),
                repository: repository.to_owned(),
                version: "1.0.0".into(),
                ..Default::default()
            })
            .await
            .with_context(|| format!("Update {}", name(i)))?;
    }
    // Mid-install: some packages Running, not all.
    let seen = until_running(&mut client, KILL_AT).await?;
    ensure!(
        seen < PACKAGES,
        "all {PACKAGES} packages were Running before the kill: nothing was mid-install"
    );
    for service in berth_tests::replicated::SERVICES {
        topology.kill(service, 0).await?;
    }
    let killed = Instant::now();
    // The Starts (ApplySettings → Startup → Run) under way at the kill: their hooks may run
    // again (the broker redelivers a dead worker's task once its lease expires, and until then
    // the lease stays). Read after the kill: read before it, a Start leased in between was
    // missed, and its second run counted as a task run twice.
    let mut conn = sqlx::PgConnection::connect(&databases.queue).await?;
    let in_flight: Vec<String> =
        sqlx::query("SELECT package FROM tasks WHERE kind = 'Start' AND lease_holder <> ''")
            .fetch_all(&mut conn)
            .await?
            .iter()
            .map(|r| r.get("package"))
            .collect();
    let _ = conn.close().await;
    println!("killed replica 0 of every service with {seen} of {PACKAGES} packages Running");
    until_running(&mut client, PACKAGES).await?;
    println!(
        "all {PACKAGES} Running {:?} after the kill",
        killed.elapsed()
    );

    // Every ConfigMap is on the cluster.
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    for i in 0..PACKAGES {
        let cm = cms
            .get_opt(&name(i))
            .await?
            .with_context(|| format!("ConfigMap {} is missing", name(i)))?;
        ensure!(
            cm.data.unwrap_or_default().get("package") == Some(&name(i)),
            "ConfigMap {} has other data",
            name(i)
        );
    }

    // The broker: nothing left queued, nothing failed, no task finished twice.
    let mut conn = sqlx::PgConnection::connect(&databases.queue).await?;
    let left: i64 = sqlx::query("SELECT COUNT(*) AS n FROM tasks WHERE cancelled = 0")
        .fetch_one(&mut conn)
        .await?
        .get("n");
    ensure!(left == 0, "{left} tasks are still queued or leased");
    let history = sqlx::query("SELECT id, package, kind, outcome, attempts FROM task_history")
        .fetch_all(&mut conn)
        .await?;
    let mut done: BTreeMap<String, usize> = BTreeMap::new();
    let mut tasks_of: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut redelivered: BTreeMap<String, i64> = BTreeMap::new();
    for row in &history {
        let (id, package, kind, outcome, attempts): (String, String, String, String, i64) = (
            row.get("id"),
            row.get("package"),
            row.get("kind"),
            row.get("outcome"),
            row.get("attempts"),
        );
        ensure!(
            outcome == "done" || outcome == "superseded",
            "task {id} ({package} {kind}) ended {outcome}"
        );
        tasks_of
            .entry(package.clone())
            .or_default()
            .push(format!("{kind}:{outcome}:{attempts}"));
        if outcome == "done" {
            *done.entry(id).or_default() += 1;
            // `attempts`: the attempts that failed before this one.
            if kind == "Start" && attempts > 0 {
                redelivered.insert(package, attempts + 1);
            }
        }
    }
    let twice: Vec<_> = done.iter().filter(|(_, n)| **n > 1).collect();
    ensure!(twice.is_empty(), "tasks finished more than once: {twice:?}");
    let _ = conn.close().await;

    // Each beforeHelm hook ran once, or more only for a Start the kill interrupted.
    let recorded = std::fs::read_to_string(runs).unwrap_or_default();
    let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
    for line in recorded.lines() {
        *counts.entry(line.trim()).or_default() += 1;
    }
    for i in 0..PACKAGES {
        let n = counts.get(name(i).as_str()).copied().unwrap_or(0);
        let key = format!("{ns}.{}", name(i));
        let allowed =
            redelivered.get(&key).copied().unwrap_or(1) + i64::from(in_flight.contains(&key));
        ensure!(
            n >= 1 && n <= allowed,
            "{}'s beforeHelm hook ran {n} times (at most {allowed} allowed: its Start's attempts, one more if it ran at the kill); its tasks: {:?}",
            name(i),
            tasks_of.get(&key)
        );
    }
    println!(
        "hooks: {} runs for {PACKAGES} packages; Runs under way at the kill: {}; Runs that failed once or more: {}",
        recorded.lines().count(),
        in_flight.len(),
        redelivered.len()
    );
    Ok(())
}

/// Waits until at least `want` packages are Running; returns how many were. A package that
/// failed fails the wait.
async fn until_running(client: &mut journey::Client, want: usize) -> anyhow::Result<usize> {
    let started = Instant::now();
    loop {
        match client
            .list(v1::ListRequest {
                page_size: 1000,
                page_token: String::new(),
            })
            .await
        {
            Ok(page) => {
                let page = page.into_inner();
                let mut running = 0;
                for p in &page.packages {
                    if p.phase == "Failed" {
                        bail!("{} failed: {}", p.key, p.last_error);
                    }
                    running += usize::from(p.phase == "Running");
                }
                if running >= want {
                    return Ok(running);
                }
            }
            // A gateway or lifecycle replica just died: ask again.
            Err(s) if matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown) => {}
            Err(s) => bail!("List: {s}"),
        }
        if started.elapsed() > DEADLINE {
            bail!("fewer than {want} packages Running after {DEADLINE:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}
