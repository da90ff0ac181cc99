//! Settings versions and conversions (issue 14.6) through `berth up` and the `berth` CLI, on the
//! dev cluster or the real one named by `BERTH_TEST_KUBECONFIG`. The `renamer` fixture: 1.0.0
//! has settings version 1 (`size`), 2.0.0 version 2 (`replicas`, `openapi/conversions/v2.yaml`
//! renames it), 3.0.0 version 3 whose `v3.yaml` recurses without end.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use berth_proto::v1;
use berth_tests::{AllInOne, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::{Value, json};

fn update(
    r: &v1::PackageRef,
    version: &str,
    settings: Value,
    settings_version: u32,
) -> v1::UpdateRequest {
    v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: berth_tests::FIXTURES_REPO.to_owned(),
        package: "renamer".into(),
        version: version.into(),
        settings: Some(berth_proto::json::to_struct(&settings)),
        settings_version,
        force: false,
        reset_settings: false,
    }
}

fn settings_of(p: &v1::Package) -> Value {
    berth_proto::json::from_opt_struct(p.settings.as_ref())
}

/// The `renamer` ConfigMap's data (the package is Running, so it is there).
async fn configmap(kube: &kube::Client, ns: &str) -> anyhow::Result<Value> {
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), ns);
    let cm = tokio::time::timeout(Duration::from_secs(10), cms.get("renamer"))
        .await
        .context("reading the ConfigMap")??;
    Ok(serde_json::to_value(cm.data.unwrap_or_default())?)
}

/// Runs the `berth` CLI against `endpoint`; its stdout, or an error with its stderr.
async fn berth(endpoint: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        berth_tests::cli()
            .args(["--server", endpoint])
            .args(args)
            .output(),
    )
    .await??;
    if !out.status.success() {
        bail!(
            "berth {args:?}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Install 1.0.0 with `size: 3`; upgrade to 2.0.0 with those settings as version 1: they are
/// converted (`replicas: 3`, version 2), shown by Get, Dump and `berth get`, and the chart
/// renders `replicas`. ValidateSettings (and `berth validate --settings-version 1`) answers
/// version-1 settings converted; a version the package does not know is refused. An Update of
/// the loaded version with version-1 settings is converted at once. An upgrade to 3.0.0, whose
/// conversion is a recursion bomb, is refused naming the file and the depth limit, and changes
/// nothing; `berth up` keeps serving, and 2.0.0 takes new settings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_settings_convert_on_upgrade_and_validate() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let ns = TestNamespace::create(&kube, "conv").await?;
    let endpoint = up.proc.endpoint();
    let result = async {
        let mut client = journey::connect(&endpoint).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "renamer".into(),
            namespace: ns.to_string(),
        };

        // 1.0.0, settings given for it (version 0: its own, known once loaded).
        let g = client
            .update(update(&r, "1.0.0", json!({"size": 3}), 0))
            .await?
            .into_inner()
            .generation;
        let p = journey::wait_running(&mut client, &r, g).await?;
        ensure!(settings_of(&p) == json!({"size": 3}), "{p:?}");
        ensure!(p.settings_version == 1, "resolved at load: {p:?}");
        ensure!(configmap(&kube, &ns).await?["size"] == "3");

        // Upgrade with the same settings, as version 1: converted when 2.0.0 loads.
        let settings_file = dir.path().join("v1.yaml");
        std::fs::write(&settings_file, "size: 3\n")?;
        let file = settings_file.display().to_string();
        let accepted = berth(
            &endpoint,
            &[
                "update",
                "renamer",
                "--namespace",
                &ns,
                "--package",
                "renamer",
                "--repo",
                berth_tests::FIXTURES_REPO,
                "--version",
                "2.0.0",
                "--settings",
                &file,
                "--settings-version",
                "1",
            ],
        )
        .await?;
        let g = accepted
            .split_whitespace()
            .skip_while(|w| *w != "generation")
            .nth(1)
            .and_then(|n| n.parse::<i64>().ok())
            .with_context(|| format!("no generation in {accepted:?}"))?;
        let p = journey::wait_running(&mut client, &r, g).await?;
        ensure!(
            settings_of(&p) == json!({"replicas": 3}),
            "converted: {:?}",
            settings_of(&p)
        );
        ensure!(p.settings_version == 2, "{p:?}");
        let data = configmap(&kube, &ns).await?;
        ensure!(
            data["version"] == "2.0.0" && data["replicas"] == "3",
            "the chart got replicas: {data}"
        );
        let get = berth(&endpoint, &["get", "renamer", "--namespace", &ns]).await?;
        ensure!(get.contains("settingsVersion: 2"), "{get}");
        ensure!(get.contains("replicas: 3"), "{get}");
        let dump = client
            .dump(v1::DumpRequest {
                page_size: 1000,
                page_token: String::new(),
            })
            .await?
            .into_inner();
        let doc: Value = serde_saphyr::from_str(&dump.yaml)?;
        let entry = doc["packages"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == "renamer"))
            .with_context(|| format!("not in the dump: {doc}"))?;
        ensure!(entry["settingsVersion"] == 2, "{entry}");
        ensure!(entry["settings"] == json!({"replicas": 3}), "{entry}");

        // ValidateSettings converts version-1 settings and checks the result.
        let validate = |settings: Value, settings_version: u32| v1::ValidateSettingsRequest {
            r#ref: Some(r.clone()),
            settings: Some(berth_proto::json::to_struct(&settings)),
            settings_version,
        };
        let answer = client
            .validate_settings(validate(json!({"size": 5}), 1))
            .await?
            .into_inner();
        ensure!(answer.valid && !answer.deferred, "{answer:?}");
        ensure!(answer.settings_version == 2, "{answer:?}");
        ensure!(
            answer
                .converted_settings
                .as_ref()
                .map(berth_proto::json::from_struct)
                == Some(json!({"replicas": 5})),
            "{answer:?}"
        );
        let own = client
            .validate_settings(validate(json!({"replicas": 5}), 0))
            .await?
            .into_inner();
        ensure!(
            own.settings_version == 2 && own.converted_settings.is_none(),
            "no conversion for the package's own version: {own:?}"
        );
        let e = client
            .validate_settings(validate(json!({"size": "many"}), 1))
            .await
            .expect_err("converted settings are checked against the schema");
        ensure!(e.code() == tonic::Code::InvalidArgument, "{e:?}");
        ensure!(e.message().contains("replicas"), "{}", e.message());
        let e = client
            .validate_settings(validate(json!({"replicas": 5}), 3))
            .await
            .expect_err("a version the package does not know");
        ensure!(e.code() == tonic::Code::InvalidArgument, "{e:?}");
        ensure!(
            e.message()
                .contains("settings version 3 is newer than this package version knows"),
            "{}",
            e.message()
        );
        std::fs::write(&settings_file, "size: 6\n")?;
        let printed = berth(
            &endpoint,
            &[
                "validate",
                "renamer",
                "--namespace",
                &ns,
                "--settings",
                &file,
                "--settings-version",
                "1",
            ],
        )
        .await?;
        ensure!(printed.starts_with("valid\n"), "{printed}");
        ensure!(printed.contains("settingsVersion: 2"), "{printed}");
        ensure!(printed.contains("replicas: 6"), "{printed}");

        // An Update of the loaded version with version-1 settings converts them at once; one
        // with a version the package does not know is refused and changes nothing.
        let g = client
            .update(update(&r, "2.0.0", json!({"size": 7}), 1))
            .await?
            .into_inner()
            .generation;
        let p = journey::wait_running(&mut client, &r, g).await?;
        ensure!(
            settings_of(&p) == json!({"replicas": 7}) && p.settings_version == 2,
            "{p:?}"
        );
        ensure!(configmap(&kube, &ns).await?["replicas"] == "7");
        let e = client
            .update(update(&r, "2.0.0", json!({"replicas": 8}), 3))
            .await
            .expect_err("settings version 3 for a package at version 2");
        ensure!(e.code() == tonic::Code::InvalidArgument, "{e:?}");
        ensure!(e.message().contains("settings_version"), "{}", e.message());

        // 3.0.0's conversion recurses without end: the Update is refused before anything is
        // written (issue 31.1: the settings an upgrade leaves must fit the new version), naming
        // the step and the limit; the package stays at 2.0.0, Running, and lifecycle serves on.
        let before = client
            .get(v1::GetRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        let e = client
            .update(update(&r, "3.0.0", json!({"replicas": 7}), 2))
            .await
            .expect_err("settings that cannot be converted to 3.0.0");
        ensure!(e.code() == tonic::Code::InvalidArgument, "{e:?}");
        for says in [
            "version 3.0.0",
            "openapi/conversions/v3.yaml",
            "conversions[0]",
            "depth limit",
        ] {
            ensure!(e.message().contains(says), "{says}: {}", e.message());
        }
        let p = client
            .get(v1::GetRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        ensure!(
            p.generation == before.generation
                && p.version == "2.0.0"
                && p.phase == "Running"
                && settings_of(&p) == json!({"replicas": 7})
                && p.settings_version == 2,
            "nothing changed: {p:?}"
        );
        let g = client
            .update(update(&r, "2.0.0", json!({"replicas": 8}), 0))
            .await?
            .into_inner()
            .generation;
        let p = journey::wait_running(&mut client, &r, g).await?;
        ensure!(p.settings_version == 2, "{p:?}");
        ensure!(configmap(&kube, &ns).await?["replicas"] == "8");
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
