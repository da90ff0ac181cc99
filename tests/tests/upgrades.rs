//! What an upgrade does to the stored settings (issue 31.1), through `berth up` and the `berth`
//! CLI, on the dev cluster or the real one named by `BERTH_TEST_KUBECONFIG`. The `upgrader`
//! fixture: 1.0.0 and 1.1.0 take `size`, 1.2.0 takes `size` of at most 2, 2.0.0 has settings
//! version 2 and renames `size` to `replicas` (`openapi/conversions/v2.yaml`).

use std::time::Duration;

use anyhow::{Context as _, ensure};
use berth_proto::v1;
use berth_tests::{AllInOne, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::{Value, json};

/// The `upgrader` ConfigMap's data (the package is Running, so it is there).
async fn configmap(kube: &kube::Client, ns: &str) -> anyhow::Result<Value> {
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), ns);
    let cm = tokio::time::timeout(Duration::from_secs(10), cms.get("upgrader"))
        .await
        .context("reading the ConfigMap")??;
    Ok(serde_json::to_value(cm.data.unwrap_or_default())?)
}

/// What the `berth` CLI printed and whether it succeeded.
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

async fn berth(endpoint: &str, args: &[&str]) -> anyhow::Result<Ran> {
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        berth_tests::cli()
            .args(["--server", endpoint])
            .args(args)
            .output(),
    )
    .await??;
    Ok(Ran {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// `berth update upgrader --version V` plus `extra`, waiting until it is Running.
async fn upgrade(endpoint: &str, ns: &str, version: &str, extra: &[&str]) -> anyhow::Result<Ran> {
    let mut args = vec![
        "update",
        "upgrader",
        "--namespace",
        ns,
        "--repo",
        berth_tests::FIXTURES_REPO,
        "--version",
        version,
        "--wait",
        "--timeout",
        "120",
    ];
    args.extend_from_slice(extra);
    berth(endpoint, &args).await
}

fn settings_of(p: &v1::Package) -> Value {
    berth_proto::json::from_opt_struct(p.settings.as_ref())
}

/// Install 1.0.0 with `size: 3`. `--version 1.1.0` without `--settings` keeps them; 1.2.0,
/// where they no longer fit, is refused naming the field and the version and changes nothing;
/// 2.0.0 converts them (`replicas: 3`, settings version 2); `--reset-settings` drops them (the
/// schema's default renders) and is refused together with `--settings`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_survive_upgrades() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let ns = TestNamespace::create(&kube, "upgrade").await?;
    let endpoint = up.proc.endpoint();
    let result = async {
        let mut client = journey::connect(&endpoint).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "upgrader".into(),
            namespace: ns.to_string(),
        };
        let get = |mut client: journey::Client| {
            let r = r.clone();
            async move {
                anyhow::Ok(
                    client
                        .get(v1::GetRequest { r#ref: Some(r) })
                        .await?
                        .into_inner(),
                )
            }
        };
        let settings_file = dir.path().join("settings.yaml");
        std::fs::write(&settings_file, "size: 3\n")?;
        let file = settings_file.display().to_string();

        let installed = upgrade(&endpoint, &ns, "1.0.0", &["--settings", &file]).await?;
        ensure!(
            installed.ok,
            "install: {}{}",
            installed.stdout,
            installed.stderr
        );
        ensure!(configmap(&kube, &ns).await?["size"] == "3");

        // A version change without --settings keeps them.
        let kept = upgrade(&endpoint, &ns, "1.1.0", &[]).await?;
        ensure!(kept.ok, "1.1.0: {}{}", kept.stdout, kept.stderr);
        let p = get(client.clone()).await?;
        ensure!(
            p.version == "1.1.0" && settings_of(&p) == json!({"size": 3}),
            "kept across the upgrade: {p:?}"
        );
        let data = configmap(&kube, &ns).await?;
        ensure!(data["version"] == "1.1.0" && data["size"] == "3", "{data}");

        // 1.2.0 takes at most 2: refused, naming the field and the version; nothing changes.
        let refused = upgrade(&endpoint, &ns, "1.2.0", &[]).await?;
        ensure!(!refused.ok, "1.2.0 was accepted: {}", refused.stdout);
        for says in ["size", "1.2.0", "do not fit"] {
            ensure!(refused.stderr.contains(says), "{says}: {}", refused.stderr);
        }
        let after = get(client.clone()).await?;
        ensure!(
            after.generation == p.generation
                && after.version == "1.1.0"
                && after.phase == "Running"
                && settings_of(&after) == json!({"size": 3}),
            "nothing changed: {after:?}"
        );

        // 2.0.0 has settings version 2: the kept settings are converted when it loads.
        let converted = upgrade(&endpoint, &ns, "2.0.0", &[]).await?;
        ensure!(
            converted.ok,
            "2.0.0: {}{}",
            converted.stdout,
            converted.stderr
        );
        let p = get(client.clone()).await?;
        ensure!(
            settings_of(&p) == json!({"replicas": 3}) && p.settings_version == 2,
            "converted: {p:?}"
        );
        let data = configmap(&kube, &ns).await?;
        ensure!(
            data["version"] == "2.0.0" && data["replicas"] == "3",
            "{data}"
        );

        // Only an explicit flag drops them, and not together with new ones.
        let both = upgrade(
            &endpoint,
            &ns,
            "2.0.0",
            &["--reset-settings", "--settings", &file],
        )
        .await?;
        ensure!(
            !both.ok && both.stderr.contains("--reset-settings"),
            "{}{}",
            both.stdout,
            both.stderr
        );
        let reset = upgrade(&endpoint, &ns, "2.0.0", &["--reset-settings"]).await?;
        ensure!(reset.ok, "reset: {}{}", reset.stdout, reset.stderr);
        let p = get(client.clone()).await?;
        ensure!(settings_of(&p) == json!({}), "reset: {p:?}");
        ensure!(
            configmap(&kube, &ns).await?["replicas"] == "1",
            "the default"
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
    drop(ns);
    result
}

/// Issue 31.3: onStartup succeeds once per enable before anything after it runs, whatever
/// Updates arrive. The `starter` fixture's onStartup hook fails until the setting `startupOk` is
/// true and records the `note` it started with; its beforeHelm hook records that it ran. A
/// settings Update that lands while Start retries the failing onStartup must not reach Running;
/// once onStartup succeeds the package runs, and a later settings Update does not run onStartup
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn onstartup_is_never_skipped_by_a_settings_update() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let ns = TestNamespace::create(&kube, "starter").await?;
    let endpoint = up.proc.endpoint();
    let result = async {
        let mut client = journey::connect(&endpoint).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "starter".into(),
            namespace: ns.to_string(),
        };
        let update = |settings: Value| v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: berth_tests::FIXTURES_REPO.to_owned(),
            version: "1.0.0".into(),
            settings: Some(berth_proto::json::to_struct(&settings)),
            ..Default::default()
        };
        let deadline = Duration::from_secs(120);
        // Generation `g` failed (its error is set: an Update clears it), or reached Running.
        let failed_or_running = |g: i64| {
            move |p: &v1::Package| {
                Ok(p.generation == g && (!p.last_error.is_empty() || p.phase == "Running"))
            }
        };

        let g1 = client
            .update(update(json!({"note": "first"})))
            .await?
            .into_inner()
            .generation;
        let p = journey::follow(
            &mut client,
            &r,
            deadline,
            "onStartup fails",
            failed_or_running(g1),
        )
        .await?;
        ensure!(
            p.phase != "Running" && p.last_error.contains("onStartup refuses"),
            "generation {g1}: {p:?}"
        );

        // A settings change while Start retries onStartup: still not Running, and it failed in
        // onStartup again (before the fix it went straight to ApplySettings and Run).
        let g2 = client
            .update(update(json!({"note": "second"})))
            .await?
            .into_inner()
            .generation;
        let p = journey::follow(
            &mut client,
            &r,
            deadline,
            "generation 2",
            failed_or_running(g2),
        )
        .await?;
        ensure!(
            p.phase != "Running" && p.last_error.contains("onStartup refuses"),
            "a settings Update skipped onStartup: {p:?}"
        );
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        ensure!(
            cms.get_opt("starter").await?.is_none(),
            "the chart was installed before onStartup succeeded"
        );

        // onStartup may succeed now: the package runs with what onStartup recorded.
        let g3 = client
            .update(update(json!({"note": "third", "startupOk": true})))
            .await?
            .into_inner()
            .generation;
        journey::wait_running(&mut client, &r, g3).await?;
        let data = serde_json::to_value(cms.get("starter").await?.data.unwrap_or_default())?;
        ensure!(
            data["startedWith"] == "third"
                && data["beforeHelmRan"] == "true"
                && data["note"] == "third",
            "{data}"
        );

        // onStartup succeeded for this enable: a settings Update runs the chart again, not
        // onStartup (startedWith stays).
        let g4 = client
            .update(update(json!({"note": "fourth", "startupOk": true})))
            .await?
            .into_inner()
            .generation;
        journey::wait_running(&mut client, &r, g4).await?;
        let data = serde_json::to_value(cms.get("starter").await?.data.unwrap_or_default())?;
        ensure!(
            data["startedWith"] == "third" && data["note"] == "fourth",
            "{data}"
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
    drop(ns);
    result
}
