//! ValidateSettings answers what an Update would do (issue 14.5), through real processes: the
//! schema, the package's own settings check (module-sdk `hook check`), a render of the chart
//! and a server-side dry run, with the plan in the answer and in `berth validate`; an Update
//! whose settings fail any of them is refused and changes nothing.

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

fn update(r: &v1::PackageRef, settings: serde_json::Value) -> v1::UpdateRequest {
    v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: berth_tests::FIXTURES_REPO.to_owned(),
        package: "checked".into(),
        version: "1.0.0".into(),
        settings: Some(berth_proto::json::to_struct(&settings)),
        ..Default::default()
    }
}

fn validate(r: &v1::PackageRef, settings: serde_json::Value) -> v1::ValidateSettingsRequest {
    v1::ValidateSettingsRequest {
        r#ref: Some(r.clone()),
        settings: Some(berth_proto::json::to_struct(&settings)),
        settings_version: 0,
    }
}

/// `(action, kind/name, changed fields)` of each planned object, sorted.
fn plan(answer: &v1::ValidateSettingsResponse) -> Vec<(String, String, Vec<String>)> {
    let mut plan: Vec<_> = answer
        .plan
        .iter()
        .map(|c| {
            (
                c.action().as_str_name().to_owned(),
                format!("{}/{}", c.kind, c.name),
                c.changed.clone(),
            )
        })
        .collect();
    plan.sort();
    plan
}

async fn replicas(kube: &kube::Client, ns: &str, name: &str) -> anyhow::Result<Option<String>> {
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), ns);
    let cm = tokio::time::timeout(Duration::from_secs(10), cms.get_opt(name))
        .await
        .context("reading the ConfigMap")??;
    Ok(cm.and_then(|cm| cm.data?.get("replicas").cloned()))
}

/// The `checked` fixture: a ConfigMap named by `cmName` holding `replicas`, and a settings
/// check that refuses more than 5 replicas and warns above 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_settings_plans_and_refuses_what_an_update_would_break() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = journey_of_checked(&topology, &cluster.client).await;
    topology.stop().await;
    cluster.stop().await;
    result
}

async fn journey_of_checked(topology: &SplitTopology, kube: &kube::Client) -> anyhow::Result<()> {
    let ns = TestNamespace::create(kube, "checked").await?;
    let endpoint = topology.gateway.endpoint();
    let mut client = journey::connect(&endpoint).await?;
    let r = app("checked", &ns);
    let installed = client
        .update(update(&r, json!({"replicas": 2})))
        .await?
        .into_inner();
    journey::wait_running(&mut client, &r, installed.generation).await?;
    ensure!(replicas(kube, &ns, "checked").await?.as_deref() == Some("2"));

    // Valid, with the check's warning, and the plan: the ConfigMap's data would change.
    let answer = client
        .validate_settings(validate(&r, json!({"replicas": 4})))
        .await?
        .into_inner();
    ensure!(answer.valid && !answer.deferred, "{answer:?}");
    ensure!(
        answer.warnings == ["more than 3 replicas need a bigger node pool"],
        "the check's warnings: {answer:?}"
    );
    ensure!(
        plan(&answer)
            == [(
                "PLAN_ACTION_UPDATE".to_owned(),
                "ConfigMap/checked".to_owned(),
                vec!["data".to_owned()]
            )],
        "{:?}",
        plan(&answer)
    );
    // Another name: the new ConfigMap would be created and the old one deleted.
    let answer = client
        .validate_settings(validate(&r, json!({"replicas": 2, "cmName": "renamed"})))
        .await?
        .into_inner();
    ensure!(
        plan(&answer)
            == [
                (
                    "PLAN_ACTION_CREATE".to_owned(),
                    "ConfigMap/renamed".to_owned(),
                    vec![]
                ),
                (
                    "PLAN_ACTION_DELETE".to_owned(),
                    "ConfigMap/checked".to_owned(),
                    vec![]
                ),
            ],
        "{:?}",
        plan(&answer)
    );
    // The same settings: nothing would change.
    let answer = client
        .validate_settings(validate(&r, json!({"replicas": 2})))
        .await?
        .into_inner();
    ensure!(
        plan(&answer)
            == [(
                "PLAN_ACTION_UNCHANGED".to_owned(),
                "ConfigMap/checked".to_owned(),
                vec![]
            )],
        "{:?}",
        plan(&answer)
    );

    // Refused by the settings check, by the schema, and by the API server (the dry run).
    let refusals = [
        (json!({"replicas": 9}), "replicas must be at most 5, got 9"),
        (json!({"replicas": "two"}), "settings.replicas"),
        (json!({"cmName": "Not_A_Name"}), "Not_A_Name"),
    ];
    for (settings, needle) in &refusals {
        let err = client
            .validate_settings(validate(&r, settings.clone()))
            .await
            .expect_err("invalid settings");
        ensure!(
            err.code() == tonic::Code::InvalidArgument && err.message().contains(needle),
            "ValidateSettings {settings}: {err:?}"
        );
        // The Update is refused the same way, and nothing changes.
        let err = client
            .update(update(&r, settings.clone()))
            .await
            .expect_err("invalid settings");
        ensure!(
            err.code() == tonic::Code::InvalidArgument && err.message().contains(needle),
            "Update {settings}: {err:?}"
        );
    }
    let p = client
        .get(v1::GetRequest {
            r#ref: Some(r.clone()),
        })
        .await?
        .into_inner();
    ensure!(
        p.generation == installed.generation && p.phase == "Running",
        "the refused Updates changed nothing: {p:?}"
    );
    ensure!(replicas(kube, &ns, "checked").await?.as_deref() == Some("2"));
    ensure!(replicas(kube, &ns, "renamed").await?.is_none());

    // `berth validate` prints the verdict, the warning and the plan.
    let settings = dir_with_settings("replicas: 4\n")?;
    let out = berth_tests::cli()
        .args([
            "--server",
            &endpoint,
            "validate",
            "checked",
            "-n",
            &ns,
            "--settings",
        ])
        .arg(settings.path().join("settings.yaml"))
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "berth validate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        stdout.starts_with("valid\n")
            && stdout.contains("warning: more than 3 replicas need a bigger node pool")
            && stdout.contains("update (data)")
            && stdout.contains(&format!("ConfigMap/checked -n {ns}")),
        "berth validate printed:\n{stdout}"
    );

    // A new instance is not loaded when its Update arrives (only the schema can be checked
    // then): the settings check refuses its settings at ApplySettings, and it fails for good
    // with the check's message, before any object is applied.
    let fresh = app("checked-fresh", &ns);
    let accepted = client
        .update(update(&fresh, json!({"replicas": 7, "cmName": "fresh"})))
        .await?
        .into_inner();
    let failed = journey::follow(
        &mut client,
        &fresh,
        Duration::from_secs(60),
        "Failed by its settings check",
        |p| Ok(p.phase == "Failed" && p.generation == accepted.generation),
    )
    .await?;
    ensure!(
        failed
            .last_error
            .contains("settings check: replicas must be at most 5, got 7"),
        "{failed:?}"
    );
    ensure!(replicas(kube, &ns, "fresh").await?.is_none());
    client
        .remove(v1::RemoveRequest {
            r#ref: Some(fresh.clone()),
            ..Default::default()
        })
        .await?;
    journey::wait_gone(&mut client, &fresh).await?;

    // A check that gives no verdict (it crashes on 0 replicas) leaves validity unknown, and
    // the condition says so and why (`ApplySettings`) while the task retries; nothing is
    // applied; settings the check judges bring the instance up.
    let unsure = app("checked-unsure", &ns);
    client
        .update(update(&unsure, json!({"replicas": 0, "cmName": "unsure"})))
        .await?;
    let p = journey::follow(
        &mut client,
        &unsure,
        Duration::from_secs(60),
        "SettingsValid Unknown ApplySettings",
        |p| {
            Ok(journey::condition(p, "SettingsValid")
                .is_some_and(|(s, reason, _)| s == "Unknown" && reason == "ApplySettings"))
        },
    )
    .await?;
    let (_, _, message) = journey::condition(&p, "SettingsValid").context("SettingsValid")?;
    ensure!(
        message.contains("gave no verdict") && message.contains("no pool for zero replicas"),
        "{message:?}"
    );
    ensure!(p.phase != "Running", "{p:?}");
    ensure!(replicas(kube, &ns, "unsure").await?.is_none());
    let judged = client
        .update(update(&unsure, json!({"replicas": 2, "cmName": "unsure"})))
        .await?
        .into_inner();
    // (Not `wait_running`: the crashed attempts' error stands until the new generation runs.)
    let p = journey::follow(
        &mut client,
        &unsure,
        Duration::from_secs(60),
        "Running",
        |p| Ok(p.phase == "Running" && p.observed_generation >= judged.generation),
    )
    .await?;
    ensure!(
        journey::condition(&p, "SettingsValid").is_some_and(|(s, _, _)| s == "True"),
        "{:?}",
        p.conditions
    );
    ensure!(replicas(kube, &ns, "unsure").await?.as_deref() == Some("2"));
    client
        .remove(v1::RemoveRequest {
            r#ref: Some(unsure.clone()),
            ..Default::default()
        })
        .await?;
    journey::wait_gone(&mut client, &unsure).await?;

    // A valid change is accepted and applied.
    let changed = client
        .update(update(&r, json!({"replicas": 4})))
        .await?
        .into_inner();
    ensure!(changed.generation > installed.generation);
    journey::wait_running(&mut client, &r, changed.generation).await?;
    ensure!(replicas(kube, &ns, "checked").await?.as_deref() == Some("4"));
    client
        .remove(v1::RemoveRequest {
            r#ref: Some(r.clone()),
            ..Default::default()
        })
        .await?;
    journey::wait_gone(&mut client, &r).await
}

fn dir_with_settings(text: &str) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("settings.yaml"), text)?;
    Ok(dir)
}
