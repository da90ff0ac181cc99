//! One owner per object (issue 31.2), through `berth up`, on the dev cluster or the real one
//! named by `BERTH_TEST_KUBECONFIG`. Two instances of the `upgrader` fixture in one namespace
//! render the same ConfigMap (`upgrader`): the second is refused naming the object and its
//! owner (`ManifestsApplied=False NotOwned`) and never writes it, while the first stays
//! Running; ValidateSettings of the second answers the same refusal; once the first is
//! removed, the second goes on by itself; an object taken from it by hand turns its Ready
//! False naming the new owner, and True again when given back.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use berth_proto::v1;
use berth_tests::{AllInOne, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

const DEADLINE: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_releases_never_share_an_object() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let ns = TestNamespace::create(&kube, "owners").await?;
    let endpoint = up.proc.endpoint();
    let result = async {
        let mut client = journey::connect(&endpoint).await?;
        let app = |name: &str| v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: name.into(),
            namespace: ns.to_string(),
        };
        let install = |r: &v1::PackageRef| v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: berth_tests::FIXTURES_REPO.to_owned(),
            package: "upgrader".into(),
            version: "1.0.0".into(),
            ..Default::default()
        };
        let (first, twin) = (app("upgrader"), app("twin"));
        let g = client
            .update(install(&first))
            .await?
            .into_inner()
            .generation;
        journey::wait_running(&mut client, &first, g).await?;
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        let before = cms.get("upgrader").await?.metadata.resource_version;

        let g = client.update(install(&twin)).await?.into_inner().generation;
        let p = journey::follow(&mut client, &twin, DEADLINE, "NotOwned", |p| {
            Ok(journey::condition(p, "ManifestsApplied")
                .is_some_and(|(s, reason, _)| s == "False" && reason == "NotOwned"))
        })
        .await?;
        let (_, _, message) = journey::condition(&p, "ManifestsApplied").context("ManifestsApplied")?;
        for says in [
            format!("ConfigMap {ns}/upgrader"),
            format!("belongs to release {ns}/upgrader"),
            "not to".to_owned(),
        ] {
            ensure!(message.contains(&says), "{says:?} not in {message:?}");
        }
        ensure!(p.phase != "Running", "{p:?}");
        let still = cms.get("upgrader").await?;
        ensure!(
            still.metadata.resource_version == before,
            "the refused release wrote the object"
        );
        let p = client
            .get(v1::GetRequest {
                r#ref: Some(first.clone()),
            })
            .await?
            .into_inner();
        ensure!(p.phase == "Running", "the owner is untouched: {p:?}");

        // Validate says what the Update would meet: the object and its owner, not "valid".
        let refused = client
            .validate_settings(v1::ValidateSettingsRequest {
                r#ref: Some(twin.clone()),
                settings: Some(berth_proto::json::to_struct(&serde_json::json!({}))),
                settings_version: 0,
            })
            .await
            .expect_err("settings whose object another release owns are not valid");
        ensure!(
            refused.code() == tonic::Code::InvalidArgument,
            "{refused:?}"
        );
        for says in [
            format!("ConfigMap {ns}/upgrader"),
            format!("belongs to release {ns}/upgrader"),
        ] {
            ensure!(
                refused.message().contains(&says),
                "{says:?} not in {refused:?}"
            );
        }

        // The owner goes: the twin's retry takes the object over by itself.
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(first.clone()),
                ..Default::default()
            })
            .await?;
        journey::wait_gone(&mut client, &first).await?;
        journey::follow(&mut client, &twin, DEADLINE, "Running", |p| {
            Ok(p.phase == "Running" && p.observed_generation >= g)
        })
        .await?;
        let owner = cms
            .get("upgrader")
            .await?
            .metadata
            .annotations
            .unwrap_or_default()
            .get("meta.helm.sh/release-name")
            .cloned();
        ensure!(owner.as_deref() == Some("twin"), "{owner:?}");

        // Taken from it by hand (as `helm install --take-ownership` would): the twin stops
        // repairing the object and says so in Ready, still Running; given back, Ready again.
        let annotate = |release: &str| {
            serde_json::json!({"metadata": {"annotations": {"meta.helm.sh/release-name": release}}})
        };
        let merge = kube::api::PatchParams::default();
        cms.patch("upgrader", &merge, &kube::api::Patch::Merge(annotate("someone-else")))
            .await?;
        let p = journey::follow(&mut client, &twin, DEADLINE, "Ready=False NotOwned", |p| {
            Ok(journey::condition(p, "Ready").is_some_and(|(s, reason, _)| s == "False" && reason == "NotOwned"))
        })
        .await?;
        let (_, _, message) = journey::condition(&p, "Ready").context("Ready")?;
        for says in [
            format!("ConfigMap {ns}/upgrader"),
            format!("belongs to release {ns}/someone-else"),
            "no longer repairs".to_owned(),
        ] {
            ensure!(message.contains(&says), "{says:?} not in {message:?}");
        }
        ensure!(p.phase == "Running", "{p:?}");
        cms.patch("upgrader", &merge, &kube::api::Patch::Merge(annotate("twin")))
            .await?;
        journey::follow(&mut client, &twin, DEADLINE, "Ready=True again", |p| {
            Ok(journey::condition(p, "Ready").is_some_and(|(s, _, _)| s == "True"))
        })
        .await?;

        client
            .remove(v1::RemoveRequest {
                r#ref: Some(twin.clone()),
                ..Default::default()
            })
            .await?;
        journey::wait_gone(&mut client, &twin).await
    }
    .await;
    up.proc.stop().await;
    drop(ns);
    result
}
