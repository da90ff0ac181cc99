//! A Remove that finalizers block says so (issue 31.6), through `berth up` and the `berth` CLI,
//! on the dev cluster or the real one named by `BERTH_TEST_KUBECONFIG`. The `finalized` fixture
//! renders a ConfigMap held by the finalizer `example.com/hold`, which nothing removes, beside
//! one without.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use berth_proto::v1;
use berth_tests::{AllInOne, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// The package's Ready condition: (status, reason, message).
/// Install, then `berth remove --wait`: it times out naming the held object and its finalizer;
/// the package shows `Ready=False RemoveBlocked` saying the same, and the other object is gone.
/// Once the finalizer is removed, the removal finishes by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remove_blocked_by_finalizers_says_what_holds_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let ns = TestNamespace::create(&kube, "finalized").await?;
    let endpoint = up.proc.endpoint();
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let result = async {
        let mut client = journey::connect(&endpoint).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "finalized".into(),
            namespace: ns.to_string(),
        };
        let g = client
            .update(v1::UpdateRequest {
                r#ref: Some(r.clone()),
                repository: berth_tests::FIXTURES_REPO.to_owned(),
                version: "1.0.0".into(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .generation;
        journey::wait_running(&mut client, &r, g).await?;

        let out = tokio::time::timeout(
            Duration::from_secs(90),
            berth_tests::cli()
                .args(["--server", endpoint.as_str()])
                .args([
                    "remove",
                    "finalized",
                    "--namespace",
                    &ns,
                    "--wait",
                    "--timeout",
                    "30",
                ])
                .output(),
        )
        .await
        .context("berth remove --wait")??;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(!out.status.success(), "the removal finished: {stderr}");
        for says in ["timed out", "finalized-held", "example.com/hold"] {
            ensure!(stderr.contains(says), "{says:?} not in {stderr}");
        }

        let p = client
            .get(v1::GetRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        let (status, reason, message) = journey::condition(&p, "Ready").context("Ready")?;
        ensure!(
            status == "False"
                && reason == "RemoveBlocked"
                && message.contains("ConfigMap")
                && message.contains("finalized-held")
                && message.contains("example.com/hold"),
            "{p:?}"
        );
        ensure!(p.phase == "Removing", "{p:?}");
        ensure!(
            cms.get_opt("finalized-free").await?.is_none(),
            "the object without finalizers was deleted"
        );

        // Whoever owns the finalizer releases it: the removal goes on by itself.
        cms.patch(
            "finalized-held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
        journey::wait_gone(&mut client, &r).await?;
        ensure!(cms.get_opt("finalized-held").await?.is_none(), "gone");
        Ok(())
    }
    .await;
    if result.is_err() {
        // Let the namespace go even when the test failed.
        let _ = cms
            .patch(
                "finalized-held",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
    up.proc.stop().await;
    drop(ns);
    result
}
