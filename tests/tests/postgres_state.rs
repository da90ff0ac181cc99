//! Split mode with every service's state on one PostgreSQL server (a database per service):
//! a package installed through the gateway keeps its state, settings and history across a
//! restart of lifecycle, and can be changed afterwards.

use anyhow::Context as _;
use berth_proto::v1;
use berth_tests::{Databases, SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::{Value, json};
use sqlx::{Connection as _, Row as _};

/// Rows of `sql` (one text column `v`) in the database at `url`.
async fn texts(url: &str, sql: &'static str, bind: &str) -> anyhow::Result<Vec<String>> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    let rows = sqlx::query(sql).bind(bind).fetch_all(&mut conn).await?;
    let _ = conn.close().await;
    Ok(rows.iter().map(|r| r.get::<String, _>("v")).collect())
}

/// `berth health` against lifecycle (mutual TLS; the health check needs no client
/// certificate): SERVING and exit 0 while it runs.
async fn health(topology: &SplitTopology, serving: bool) -> anyhow::Result<()> {
    let addr = topology
        .lifecycle()
        .addr
        .clone()
        .context("lifecycle address")?;
    let ca = topology.certs.join("ca.pem");
    let out = tokio::process::Command::new(berth_tests::binary("berth"))
        .args(["--ca-file", &ca.display().to_string(), "health"])
        .arg(format!("https://{addr}"))
        .args(["--tls-server-name", "lifecycle.berth"])
        .args(["--service", "berth.lifecycle.v1.Lifecycle"])
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success() == serving && stdout.contains("SERVING") == serving,
        "berth health: {:?} {stdout} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

async fn get(client: &mut journey::Client, r: &v1::PackageRef) -> anyhow::Result<v1::Package> {
    Ok(client
        .get(v1::GetRequest {
            r#ref: Some(r.clone()),
        })
        .await?
        .into_inner())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_mode_on_postgres_keeps_package_state_across_a_lifecycle_restart()
-> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let pg = berth_testpg::PgServer::start().await;
    // A database per service: each migrates its own schema and keeps its own migration
    // history, as in docker-compose.yml.
    let databases = Databases::on_postgres(&pg).await;
    let dir = tempfile::tempdir()?;
    let mut topology = SplitTopology::start_on(&cluster.kubeconfig, dir.path(), &databases).await?;
    let result = journey(&mut topology, &databases, cluster.client.clone()).await;
    topology.stop().await;
    cluster.stop().await;
    // No service fell back to a SQLite file.
    for file in ["queue.db", "lifecycle.db", "hookevent.db"] {
        anyhow::ensure!(
            !dir.path().join(file).exists(),
            "{file} was created next to the PostgreSQL databases"
        );
    }
    result
}

async fn journey(
    topology: &mut SplitTopology,
    databases: &Databases,
    kube: kube::Client,
) -> anyhow::Result<()> {
    let namespace = TestNamespace::to_be_created("pg");
    let mut client = journey::connect(&topology.gateway.endpoint()).await?;
    let r = journey::hello(&namespace);
    let update = |s: Value| journey::hello_update(&r, s);
    let installed = client
        .update(update(json!({"message": "world", "replicas": 2})))
        .await?
        .into_inner();
    journey::wait_running(&mut client, &r, installed.generation).await?;
    namespace.label(&kube).await?;
    let before = get(&mut client, &r).await?;
    let key = format!("{namespace}.hello");

    // Each service's state is in its PostgreSQL database.
    let phases = texts(
        &databases.lifecycle,
        "SELECT phase AS v FROM packages WHERE key = $1",
        &key,
    )
    .await?;
    anyhow::ensure!(phases == ["Running"], "lifecycle database: {phases:?}");
    let hooks = texts(
        &databases.hookevent,
        "SELECT hook AS v FROM schedule_bindings WHERE package = $1",
        &key,
    )
    .await?;
    anyhow::ensure!(
        hooks.iter().any(|h| h.contains("heartbeat")),
        "hookevent database holds the schedule binding: {hooks:?}"
    );
    let done = texts(
        &databases.queue,
        "SELECT kind AS v FROM task_history WHERE package = $1 AND outcome = 'done'",
        &key,
    )
    .await?;
    anyhow::ensure!(
        done.iter().any(|k| k == "Start"),
        "the broker's history holds the install's tasks: {done:?}"
    );

    health(topology, true).await?;
    topology.restart_lifecycle().await?;

    // Same state, settings and history after the restart. A schedule hook may have run in
    // between, so hooks compare by "nothing lost" rather than equality.
    let mut client = journey::connect(&topology.gateway.endpoint()).await?;
    let after = get(&mut client, &r).await?;
    assert_eq!(
        (after.generation, after.observed_generation, &after.phase),
        (before.generation, before.observed_generation, &before.phase)
    );
    assert_eq!(after.settings, before.settings, "settings kept");
    assert_eq!(after.values, before.values, "values kept");
    assert_eq!(after.conditions, before.conditions, "conditions kept");
    assert!(
        before.hooks.iter().any(|h| h.runs > 0),
        "the install ran hooks: {:?}",
        before.hooks
    );
    for hook in &before.hooks {
        let now = after
            .hooks
            .iter()
            .find(|h| h.name == hook.name)
            .with_context(|| format!("hook {} lost: {:?}", hook.name, after.hooks))?;
        assert!(
            now.runs >= hook.runs,
            "{}: {} runs before, {} after",
            hook.name,
            hook.runs,
            now.runs
        );
        if now.runs == hook.runs {
            assert_eq!(now.last_run, hook.last_run, "{}", hook.name);
        }
    }
    health(topology, true).await?;

    // A settings change still works, and reaches the cluster.
    let changed = client
        .update(update(json!({"message": "berth", "replicas": 3})))
        .await?
        .into_inner();
    assert!(changed.generation > before.generation);
    journey::wait_running(&mut client, &r, changed.generation).await?;
    let cms: Api<ConfigMap> = Api::namespaced(kube, &namespace);
    let data = cms.get("hello").await?.data.unwrap_or_default();
    assert_eq!(
        data.get("greeting").map(String::as_str),
        Some("Hello, berth!")
    );

    client
        .remove(v1::RemoveRequest {
            r#ref: Some(r.clone()),
            ..Default::default()
        })
        .await?;
    journey::wait_gone(&mut client, &r).await?;
    Ok(())
}
