//! Workers' reports as a person watching a package sees them: a worker gathers the reports a
//! task makes within a moment and sends them together, and that never hides progress during
//! a long task. Real processes, the dev cluster (or the real one of `BERTH_TEST_KUBECONFIG`).

use std::time::Duration;

use anyhow::Context as _;
use berth_proto::v1;
use berth_tests::{SplitTopology, TestCluster, TestNamespace, journey};

/// Longest the test waits for what it expects to see.
const DEADLINE: Duration = Duration::from_secs(90);

/// The afterHelm hook: it waits until the test opens the gate (a file the test creates).
fn gated_hook(gate: &std::path::Path) -> String {
    format!(
        "#!/bin/sh\n\
         if [ \"$1\" = \"--config\" ]; then\n  printf 'configVersion: v1\\nafterHelm: 10\\n'\n  exit 0\nfi\n\
         while [ ! -e '{}' ]; do sleep 0.05; done\n",
        gate.display()
    )
}

fn condition<'a>(p: &'a v1::Package, type_: &str) -> Option<&'a v1::Condition> {
    p.conditions.iter().find(|c| c.r#type == type_)
}

/// Run reports `ManifestsApplied` once the release is installed, then runs the afterHelm
/// hooks. With a hook that runs until the test lets it go, the condition must show while the
/// hook still runs (the worker's gathered reports go out within a moment, not only when the
/// task ends), and the package must not be Running before the hook finished.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_of_a_long_task_shows_before_the_task_ends() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = async {
        let ns = TestNamespace::create(&cluster.client, "reports").await?;
        let side = berth_tests::hook_writable_dir()?;
        let gate = side.path().join("gate");
        let (repo_dir, repo) = berth_tests::temp_repo();
        berth_tests::write_app(
            repo_dir.path(),
            "gated",
            &[
                (
                    "templates/configmap.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gated\ndata:\n  a: b\n",
                ),
                ("hooks/after.sh", &gated_hook(&gate)),
            ],
        )?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "gated".into(),
            namespace: ns.to_string(),
        };
        let accepted = client
            .update(v1::UpdateRequest {
                r#ref: Some(r.clone()),
                repository: repo.clone(),
                version: "1.0.0".into(),
                ..Default::default()
            })
            .await?
            .into_inner();
        let applied = journey::follow(&mut client, &r, DEADLINE, "ManifestsApplied", |p| {
            anyhow::ensure!(p.last_error.is_empty(), "package failed: {}", p.last_error);
            anyhow::ensure!(
                p.phase != "Running",
                "Running while its afterHelm hook waits for the gate"
            );
            Ok(p.generation == accepted.generation
                && condition(p, "ManifestsApplied").is_some_and(|c| c.status == "True"))
        })
        .await?;
        assert!(
            !gate.exists() && applied.phase != "Running",
            "the condition showed while the hook still ran"
        );
        std::fs::write(&gate, "").context("opening the gate")?;
        let running = journey::wait_running(&mut client, &r, accepted.generation).await?;
        let processed = condition(&running, "HooksProcessed").context("HooksProcessed")?;
        assert_eq!(processed.status, "True", "{processed:?}");
        Ok(())
    }
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}
