//! Settings through upgrades (issue 14.7), through real processes: an Update that follows an
//! upgrade before the new version has loaded is checked against the new version's schema, and
//! the new version is loaded all the same.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use berth_proto::v1;
use berth_tests::{SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::json;

fn app(name: &str, ns: &str) -> v1::PackageRef {
    v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: name.into(),
        namespace: ns.into(),
    }
}

fn update(r: &v1::PackageRef, version: &str, settings: serde_json::Value) -> v1::UpdateRequest {
    v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: berth_tests::FIXTURES_REPO.to_owned(),
        package: String::new(),
        version: version.into(),
        settings: Some(berth_proto::json::to_struct(&settings)),
        force: false,
        settings_version: 0,
        reset_settings: false,
    }
}

async fn with_topology<F, Fut>(journey: F) -> anyhow::Result<()>
where
    F: FnOnce(SplitTopology, kube::Client) -> Fut,
    Fut: Future<Output = anyhow::Result<SplitTopology>>,
{
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = journey(topology, cluster.client.clone()).await;
    let result = match result {
        Ok(topology) => {
            topology.stop().await;
            Ok(())
        }
        Err(e) => Err(e),
    };
    cluster.stop().await;
    result
}

/// The data of the ConfigMap the `evolve` fixture renders, sorted (asked once the package is
/// Running, so the object is there already).
async fn configmap(kube: &kube::Client, ns: &str) -> anyhow::Result<Vec<(String, String)>> {
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), ns);
    let cm = tokio::time::timeout(Duration::from_secs(10), cms.get("evolve"))
        .await
        .context("reading the ConfigMap")??;
    let mut data: Vec<(String, String)> = cm.data.unwrap_or_default().into_iter().collect();
    data.sort();
    Ok(data)
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// An upgrade to 2.0.0 followed at once (before 2.0.0 has loaded: its hook answers `--config`
/// after a second) by a settings change that only 2.0.0's schema allows: ValidateSettings
/// answers that the check waits for 2.0.0 to load (deferred), the change is
/// accepted, not checked against 1.0.0's schema, and 2.0.0 is loaded and runs with it. An
/// upgrade to 3.0.0 (which drops `color`) followed at once by a settings change valid under
/// both schemas loads 3.0.0 (the change does not supersede its Load with nothing), and then
/// 3.0.0's schema checks settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_change_right_after_an_upgrade_loads_the_new_version() -> anyhow::Result<()> {
    with_topology(|topology, kube| async move {
        let ns = TestNamespace::create(&kube, "evolve").await?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = app("evolve", &ns);

        let installed = client
            .update(update(&r, "1.0.0", json!({"size": 1})))
            .await?
            .into_inner();
        journey::wait_running(&mut client, &r, installed.generation).await?;
        ensure!(
            configmap(&kube, &ns).await? == pairs(&[("size", "1"), ("version", "1.0.0")]),
            "1.0.0 installed"
        );
        // 1.0.0's schema refuses `color`.
        let err = client
            .update(update(&r, "1.0.0", json!({"size": 1, "color": "blue"})))
            .await
            .expect_err("1.0.0 has no color");
        ensure!(err.code() == tonic::Code::InvalidArgument, "{err:?}");

        // Upgrade, then at once a change only 2.0.0 allows.
        let upgraded = client
            .update(update(&r, "2.0.0", json!({"size": 1})))
            .await?
            .into_inner();
        // Until 2.0.0 is loaded, ValidateSettings has no schema to check against: it says
        // so (deferred) instead of checking against 1.0.0's.
        let validate = |settings: serde_json::Value| v1::ValidateSettingsRequest {
            r#ref: Some(r.clone()),
            settings: Some(berth_proto::json::to_struct(&settings)),
            settings_version: 0,
        };
        let answer = client
            .validate_settings(validate(json!({"size": 2, "color": "blue"})))
            .await
            .context("ValidateSettings right after the upgrade")?
            .into_inner();
        ensure!(answer.valid && answer.deferred, "{answer:?}");
        let changed = client
            .update(update(&r, "2.0.0", json!({"size": 2, "color": "blue"})))
            .await
            .context("a 2.0.0 setting right after the upgrade")?
            .into_inner();
        ensure!(changed.generation > upgraded.generation);
        let running = journey::wait_running(&mut client, &r, changed.generation).await?;
        ensure!(running.version == "2.0.0", "{running:?}");
        ensure!(
            configmap(&kube, &ns).await?
                == pairs(&[("color", "blue"), ("size", "2"), ("version", "2.0.0")]),
            "2.0.0 runs with the new settings"
        );
        // Loaded, 2.0.0's schema checks: a color must be a string.
        let answer = client
            .validate_settings(validate(json!({"color": "green"})))
            .await?
            .into_inner();
        ensure!(answer.valid && !answer.deferred, "{answer:?}");
        let err = client
            .validate_settings(validate(json!({"color": 5})))
            .await
            .expect_err("a color is a string");
        ensure!(
            err.code() == tonic::Code::InvalidArgument && err.message().contains("color"),
            "{err:?}"
        );

        // Upgrade again (a version no worker has loaded yet, so its Load is slow too), then at
        // once a change both schemas allow: 3.0.0 is loaded.
        let again = client
            .update(update(&r, "3.0.0", json!({})))
            .await?
            .into_inner();
        let changed = client
            .update(update(&r, "3.0.0", json!({"size": 3})))
            .await?
            .into_inner();
        ensure!(changed.generation > again.generation);
        let running = journey::wait_running(&mut client, &r, changed.generation).await?;
        ensure!(running.version == "3.0.0", "{running:?}");
        ensure!(
            configmap(&kube, &ns).await? == pairs(&[("size", "3"), ("version", "3.0.0")]),
            "3.0.0 runs with the new settings"
        );
        // And now 3.0.0's schema is the one that checks.
        let err = client
            .update(update(&r, "3.0.0", json!({"size": 3, "color": "red"})))
            .await
            .expect_err("3.0.0 has no color");
        ensure!(
            err.code() == tonic::Code::InvalidArgument && err.message().contains("color"),
            "{err:?}"
        );
        Ok(topology)
    })
    .await
}
