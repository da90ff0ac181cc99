//! The scheduler, end to end through the public API: a package is enabled only when its
//! requirements hold; until then it stays Pending with `RequirementsMet=False` naming what is
//! unmet. Real processes, and the dev cluster (or the real cluster named by
//! `BERTH_TEST_KUBECONFIG`).

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use berth_proto::v1;
use berth_tests::{SplitTopology, TestCluster, TestNamespace, journey};
use serde_json::Value;

/// Longest a package may take to reach the state a test waits for.
const DEADLINE: Duration = Duration::from_secs(120);

fn fixtures() -> String {
    berth_tests::FIXTURES_REPO.to_owned()
}

fn app(ns: &str, name: &str) -> v1::PackageRef {
    v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: name.into(),
        namespace: ns.into(),
    }
}

/// Installs fixture `package` (version `version`) as the app `r`; returns the generation.
async fn install(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    package: &str,
    version: &str,
) -> anyhow::Result<i64> {
    Ok(client
        .update(v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: fixtures(),
            package: package.into(),
            version: version.into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .generation)
}

/// The package's `RequirementsMet` condition: (status, reason, message).
fn requirements_met(p: &v1::Package) -> Option<(String, String, String)> {
    p.conditions
        .iter()
        .find(|c| c.r#type == "RequirementsMet")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Follows the package until `done` holds; fails on a task error.
async fn wait_package(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    what: &str,
    done: impl Fn(&v1::Package) -> bool,
) -> anyhow::Result<v1::Package> {
    journey::follow(client, r, DEADLINE, what, |p| {
        if !p.last_error.is_empty() {
            bail!("{}: package failed: {}", r.name, p.last_error);
        }
        Ok(done(p))
    })
    .await
}

/// Follows the package until the scheduler says it waits for `reason`; returns the message.
async fn wait_blocked(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    reason: &str,
    message_has: &str,
) -> anyhow::Result<v1::Package> {
    wait_package(client, r, &format!("RequirementsMet=False {reason}"), |p| {
        requirements_met(p)
            .is_some_and(|(s, why, m)| s == "False" && why == reason && m.contains(message_has))
    })
    .await
}

/// The first page of Dump, parsed.
async fn dump(client: &mut journey::Client) -> anyhow::Result<Value> {
    let page = client
        .dump(v1::DumpRequest {
            page_size: 1000,
            page_token: String::new(),
        })
        .await?
        .into_inner();
    Ok(serde_saphyr::from_str(&page.yaml)?)
}

/// The Dump entry of package `key`.
fn dumped<'a>(doc: &'a Value, key: &str) -> anyhow::Result<&'a Value> {
    doc["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["key"] == key))
        .with_context(|| format!("{key} not in the dump: {doc}"))
}

/// Runs `journey` against a fresh split topology and namespace.
async fn with_topology<F, Fut>(prefix: &str, journey: F) -> anyhow::Result<()>
where
    F: FnOnce(String, String) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let ns = TestNamespace::create(&cluster.client, prefix).await?;
    let result = journey(topology.gateway.endpoint(), ns.to_string()).await;
    topology.stop().await;
    drop(ns);
    cluster.stop().await;
    result
}

/// A package requiring Kubernetes `>=99` waits in Pending, naming the constraint and the
/// cluster's version, with nothing queued; Dump and `berth get` say why it is not enabled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmet_kubernetes_version_holds_the_package() -> anyhow::Result<()> {
    with_topology("sched-kube", |endpoint, ns| async move {
        let mut client = journey::connect(&endpoint).await?;
        let r = app(&ns, "future");
        install(&mut client, &r, "kube-future", "1.0.0").await?;
        let p = wait_blocked(
            &mut client,
            &r,
            "KubernetesVersion",
            "requires Kubernetes >=99, the cluster runs 1.",
        )
        .await?;
        ensure!(p.phase == "Pending", "phase {}", p.phase);
        ensure!(
            p.conditions
                .iter()
                .any(|c| c.r#type == "Loaded" && c.status == "True"),
            "it was loaded: {:?}",
            p.conditions
        );

        let doc = dump(&mut client).await?;
        let entry = dumped(&doc, &format!("{ns}.future"))?;
        ensure!(entry["scheduler"]["enabled"] == false, "{entry}");
        ensure!(
            entry["scheduler"]["reason"] == "KubernetesVersion",
            "{entry}"
        );
        // Nothing after Load was queued for it.
        let queued = entry["queues"][format!("{ns}.future")]
            .as_i64()
            .unwrap_or(0);
        ensure!(
            queued == 0,
            "tasks queued for a package that waits: {entry}"
        );
        let sched = &doc["scheduler"];
        ensure!(
            sched["kubernetesVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("1.")),
            "{sched}"
        );

        let get = berth_tests::cli()
            .args(["--server", &endpoint, "get", "future", "--namespace", &ns])
            .output()
            .await?;
        let out = String::from_utf8_lossy(&get.stdout);
        ensure!(
            get.status.success(),
            "{}",
            String::from_utf8_lossy(&get.stderr)
        );
        ensure!(out.contains("enabled: false"), "{out}");
        ensure!(
            out.contains("KubernetesVersion: requires Kubernetes >=99"),
            "{out}"
        );
        Ok(())
    })
    .await
}

/// A package whose mandatory dependency is missing waits, naming it; once the dependency is
/// installed (after the dependent) and Running, the dependent becomes Running on its own.
/// Removing the dependency is then refused naming the dependent, unless forced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_dependency_enables_its_dependent_and_guards_removal() -> anyhow::Result<()> {
    with_topology("sched-deps", |endpoint, ns| async move {
        let mut client = journey::connect(&endpoint).await?;
        let user = app(&ns, "user");
        let base = app(&ns, "dep-base");
        install(&mut client, &user, "dep-user", "1.0.0").await?;
        let p = wait_blocked(
            &mut client,
            &user,
            "Dependency",
            "requires dep-base >=1.1, which is not installed",
        )
        .await?;
        ensure!(p.phase == "Pending", "phase {}", p.phase);

        let g = install(&mut client, &base, "dep-base", "1.2.0").await?;
        journey::wait_running(&mut client, &base, g).await?;
        // No second Update: the scheduler enables the dependent once its dependency runs.
        let p = wait_package(&mut client, &user, "Running", |p| p.phase == "Running").await?;
        ensure!(
            requirements_met(&p).is_some_and(|(s, _, _)| s == "True"),
            "{:?}",
            p.conditions
        );
        let doc = dump(&mut client).await?;
        let order: Vec<&str> = doc["scheduler"]["order"]
            .as_array()
            .context("scheduler.order")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let at = |k: &str| order.iter().position(|o| *o == k);
        ensure!(
            at(&format!("{ns}.dep-base")) < at(&format!("{ns}.user"))
                && at(&format!("{ns}.user")).is_some(),
            "dependency first: {order:?}"
        );

        // Removing what another package needs is refused, naming it, and changes nothing.
        let refused = client
            .remove(v1::RemoveRequest {
                r#ref: Some(base.clone()),
                force: false,
            })
            .await
            .expect_err("removing a mandatory dependency must be refused");
        ensure!(
            refused.code() == tonic::Code::FailedPrecondition,
            "{refused:?}"
        );
        ensure!(
            refused.message().contains(&format!("{ns}.user")),
            "{refused:?}"
        );
        let still = client
            .get(v1::GetRequest {
                r#ref: Some(base.clone()),
            })
            .await?
            .into_inner();
        ensure!(
            still.phase == "Running" && still.generation == g,
            "{still:?}"
        );

        // The CLI says the same, and removes it with --force.
        let cli = |args: &[&str]| {
            let mut all = vec!["--server", endpoint.as_str()];
            all.extend_from_slice(args);
            berth_tests::cli().args(all).output()
        };
        let out = cli(&["remove", "dep-base", "--namespace", &ns]).await?;
        ensure!(!out.status.success(), "berth remove must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(err.contains(&format!("{ns}.user")), "{err}");
        let out = cli(&[
            "remove",
            "dep-base",
            "--namespace",
            &ns,
            "--force",
            "--wait",
        ])
        .await?;
        ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Issue 31.10: a forced Update of the same version checks the requirements again, and
        // finds the dependency gone (before, it ran the package again as it was).
        client
            .update(v1::UpdateRequest {
                r#ref: Some(user.clone()),
                repository: fixtures(),
                package: "dep-user".into(),
                version: "1.0.0".into(),
                force: true,
                ..Default::default()
            })
            .await?;
        let p = wait_blocked(
            &mut client,
            &user,
            "Dependency",
            "requires dep-base >=1.1, which is not installed",
        )
        .await?;
        ensure!(p.phase == "Pending", "forced: {p:?}");
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(user.clone()),
                force: false,
            })
            .await?;
        journey::wait_gone(&mut client, &user).await?;
        Ok(())
    })
    .await
}

/// Two packages that depend on each other are both refused, with the cycle spelled out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dependency_cycle_is_refused_and_spelled_out() -> anyhow::Result<()> {
    with_topology("sched-cycle", |endpoint, ns| async move {
        let mut client = journey::connect(&endpoint).await?;
        let a = app(&ns, "cycle-a");
        let b = app(&ns, "cycle-b");
        install(&mut client, &a, "cycle-a", "1.0.0").await?;
        install(&mut client, &b, "cycle-b", "1.0.0").await?;
        let (ka, kb) = (format!("{ns}.cycle-a"), format!("{ns}.cycle-b"));
        let p = wait_blocked(
            &mut client,
            &a,
            "Cycle",
            &format!("dependency cycle: {ka} → {kb} → {ka}"),
        )
        .await?;
        ensure!(p.phase == "Pending", "phase {}", p.phase);
        wait_blocked(
            &mut client,
            &b,
            "Cycle",
            &format!("dependency cycle: {kb} → {ka} → {kb}"),
        )
        .await?;
        Ok(())
    })
    .await
}
