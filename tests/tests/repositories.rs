//! Repositories are configured, not given: an Update names a configured repository or a
//! directory under a configured root, and nothing else on a worker's disk. Through the public
//! API of real processes, against the dev cluster (or the real cluster named by
//! `BERTH_TEST_KUBECONFIG`).

use std::path::Path;
use std::time::Duration;

use anyhow::ensure;
use berth_proto::v1;
use berth_tests::registry::Registry;
use berth_tests::{AllInOne, SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(120);

fn update(r: &v1::PackageRef, repository: &str) -> v1::UpdateRequest {
    v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: repository.to_owned(),
        version: "1.0.0".into(),
        settings: Some(berth_proto::json::to_struct(&json!({"message": "repos"}))),
        ..Default::default()
    }
}

/// Copies a package directory (files and directories, keeping the execute bits).
fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// The example `hello` package, copied to `<dir>/hello/1.0.0`.
fn hello_copy(dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let to = dir.join("hello/1.0.0");
    copy_dir(&berth_tests::examples_repo().join("hello/1.0.0"), &to)?;
    Ok(to)
}

/// Follows the package until its generation `generation` has failed permanently.
async fn wait_failed(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    generation: i64,
) -> anyhow::Result<v1::Package> {
    journey::follow(client, r, DEADLINE, "the generation to fail", |p| {
        ensure!(p.phase != "Running", "the package is Running: {p:?}");
        Ok(p.phase == "Failed" && p.generation == generation)
    })
    .await
}

/// Follows the package until its generation `generation` reports an error (retried or not).
async fn wait_errored(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    generation: i64,
) -> anyhow::Result<v1::Package> {
    journey::follow(client, r, DEADLINE, "an error to be reported", |p| {
        Ok(p.generation == generation && !p.last_error.is_empty())
    })
    .await
}

/// An absolute path, a `..` escape and an unknown name are refused with InvalidArgument naming
/// the field, what was given and what is configured, and nothing is created; a directory under
/// a root that leaves it through a symlink fails the package and installs nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_configured_repositories_are_reachable() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let named = format!("examples={}", berth_tests::examples_repo().display());
    let up = AllInOne::start_with(
        &dir.path().join("data"),
        real.as_deref(),
        &["--repository", &named],
    )
    .await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let result = refusals_and_escape(&up.proc.endpoint(), kube).await;
    up.proc.stop().await;
    result
}

async fn refusals_and_escape(endpoint: &str, kube: kube::Client) -> anyhow::Result<()> {
    let mut client = journey::connect(endpoint).await?;
    let namespace = TestNamespace::create(&kube, "repos").await?;
    let r = journey::hello(&namespace);
    let absolute = berth_tests::examples_repo().display().to_string();
    for (given, why) in [
        (absolute.as_str(), "an absolute path"),
        ("/tmp", "an absolute path"),
        ("examples/../examples/packages", "'..'"),
        ("../packages", "'..'"),
        ("nosuch", "neither a configured repository"),
    ] {
        let err = client.update(update(&r, given)).await.expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{given}: {err:?}");
        for needle in [
            "repository: ",
            &format!("{given:?}"),
            why,
            "configured repositories: [examples]",
            &berth_tests::workspace_root().display().to_string(),
        ] {
            ensure!(
                err.message().contains(needle),
                "{given}: the refusal lacks {needle:?}: {}",
                err.message()
            );
        }
    }
    // A version constraint only an OCI repository can resolve.
    let err = client
        .update(v1::UpdateRequest {
            version: "~1.0".into(),
            ..update(&r, "examples")
        })
        .await
        .expect_err("a constraint for a directory");
    ensure!(
        err.code() == tonic::Code::InvalidArgument
            && err.message().contains("\"~1.0\" is a constraint")
            && err.message().contains("only an OCI repository"),
        "{err:?}"
    );
    let listed = client
        .list(v1::ListRequest::default())
        .await?
        .into_inner()
        .packages;
    ensure!(listed.is_empty(), "a refused Update created {listed:?}");

    // A directory under a root whose symlink leads outside it: refused at the edge, naming the
    // link (lifecycle resolves it beneath the root, as the worker does when it fetches).
    let outside = tempfile::tempdir()?;
    hello_copy(outside.path())?;
    let (repo, name) = berth_tests::temp_repo();
    std::os::unix::fs::symlink(outside.path(), repo.path().join("escape"))?;
    let err = client
        .update(update(&r, &format!("{name}/escape")))
        .await
        .expect_err("refused");
    ensure!(
        err.code() == tonic::Code::InvalidArgument
            && err.message().contains("leaves the repository root")
            && err.message().contains(&format!("{name}/escape ->")),
        "{err:?}"
    );
    let listed = client
        .list(v1::ListRequest::default())
        .await?
        .into_inner()
        .packages;
    ensure!(listed.is_empty(), "a refused Update created {listed:?}");
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &namespace);
    ensure!(
        cms.get_opt("hello").await?.is_none(),
        "nothing from outside the root was installed"
    );
    // The named repository still works.
    let accepted = client.update(update(&r, "examples")).await?.into_inner();
    journey::wait_running(&mut client, &r, accepted.generation).await?;
    client
        .remove(v1::RemoveRequest {
            r#ref: Some(r.clone()),
            force: false,
        })
        .await?;
    journey::wait_gone(&mut client, &r).await
}

/// `berth up --repository NAME=archive:DIR`: a package installed from a `.tar.gz` archive
/// repository reaches Running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_installs_from_an_archive_repository() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let archives = dir.path().join("archives");
    std::fs::create_dir_all(&archives)?;
    let packed = berth_package::pack(
        &berth_tests::examples_repo().join("hello/1.0.0"),
        berth_package::Limits::default(),
    )?;
    std::fs::write(archives.join("hello-1.0.0.tar.gz"), &packed.bytes)?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let named = format!("tarballs=archive:{}", archives.display());
    let up = AllInOne::start_with(
        &dir.path().join("data"),
        real.as_deref(),
        &["--repository", &named],
    )
    .await?;
    let result = async {
        let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
        let namespace = TestNamespace::create(&kube, "archive").await?;
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        let r = journey::hello(&namespace);
        let accepted = client.update(update(&r, "tarballs")).await?.into_inner();
        journey::wait_running(&mut client, &r, accepted.generation).await?;
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &namespace);
        let data = cms.get("hello").await?.data.unwrap_or_default();
        ensure!(
            data.get("message").map(String::as_str) == Some("repos"),
            "{data:?}"
        );
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                force: false,
            })
            .await?;
        journey::wait_gone(&mut client, &r).await
    }
    .await;
    up.proc.stop().await;
    result
}

/// A repositories file (given to lifecycle and the worker) names an OCI registry: a package
/// pushed there installs and reaches Running; pushed again under the same tag with new content,
/// the next Update fetches the new image.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_installs_from_an_oci_registry() -> anyhow::Result<()> {
    let Some(registry) = Registry::start()? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let url = format!("oci://{}/berth/packages", registry.addr);
    let oci = berth_package::OciRepository::new(&url, berth_package::OciAuth::Anonymous, true)?;
    let package = hello_copy(&dir.path().join("src"))?;
    let limits = berth_package::Limits::default();
    let first = oci.push(&berth_package::pack(&package, limits)?).await?;

    let cluster = TestCluster::start().await?;
    let repositories = berth_tests::process::repositories_file(
        dir.path(),
        &format!("- name: registry\n  oci: {url}\n  plainHttp: true\n"),
    )?;
    let topology =
        SplitTopology::start_configured(&cluster.kubeconfig, dir.path(), &[], &repositories)
            .await?;
    let result = async {
        let namespace = TestNamespace::create(&cluster.client, "oci").await?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = journey::hello(&namespace);
        let accepted = client.update(update(&r, "registry")).await?.into_inner();
        journey::wait_running(&mut client, &r, accepted.generation).await?;
        let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &namespace);
        let data = cms.get("hello").await?.data.unwrap_or_default();
        ensure!(!data.contains_key("revision"), "{data:?}");

        // The same tag, pushed again with a new template: a new manifest digest.
        let template = package.join("templates/configmap.yaml");
        let mut text = std::fs::read_to_string(&template)?;
        text.push_str("  revision: \"2\"\n");
        std::fs::write(&template, text)?;
        let second = oci.push(&berth_package::pack(&package, limits)?).await?;
        ensure!(first != second, "the re-push changed the manifest digest");
        let forced = client
            .update(v1::UpdateRequest {
                force: true,
                ..update(&r, "registry")
            })
            .await?
            .into_inner();
        journey::wait_running(&mut client, &r, forced.generation).await?;
        let data = cms.get("hello").await?.data.unwrap_or_default();
        ensure!(
            data.get("revision").map(String::as_str) == Some("2"),
            "the re-pushed image was fetched: {data:?}"
        );
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                force: false,
            })
            .await?;
        journey::wait_gone(&mut client, &r).await
    }
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}

/// Sets the version `hello`'s copy at `package` declares (package.yaml), and a `revision` the
/// ConfigMap shows, so a test sees which version runs.
fn set_version(package: &Path, version: &str) -> anyhow::Result<()> {
    let path = package.join("package.yaml");
    let text = std::fs::read_to_string(&path)?;
    let text: String = text
        .lines()
        .map(|l| match l.starts_with("version:") {
            true => format!("version: {version}\n"),
            false => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&path, text)?;
    let template = package.join("templates/configmap.yaml");
    let text = std::fs::read_to_string(&template)?;
    let kept: String = text
        .lines()
        .filter(|l| !l.starts_with("  revision:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&template, format!("{kept}  revision: \"{version}\"\n"))?;
    Ok(())
}

/// `berth update --version '~1.2'` against an OCI repository loads the newest tag the
/// constraint allows (1.2.1 of 1.2.0, 1.2.1, 1.3.0), and `berth get` and Get show the
/// resolved version next to the constraint. A later Update (a settings change) resolves it
/// again: after 1.2.5 is pushed, it loads 1.2.5. An identical Update stays a no-op.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_with_a_version_constraint_loads_the_newest_matching_tag() -> anyhow::Result<()> {
    let Some(registry) = Registry::start()? else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let url = format!("oci://{}/berth/packages", registry.addr);
    let oci = berth_package::OciRepository::new(&url, berth_package::OciAuth::Anonymous, true)?;
    let package = hello_copy(&dir.path().join("src"))?;
    let limits = berth_package::Limits::default();
    for version in ["1.2.0", "1.2.1", "1.3.0"] {
        set_version(&package, version)?;
        oci.push(&berth_package::pack(&package, limits)?).await?;
    }

    let cluster = TestCluster::start().await?;
    let repositories = berth_tests::process::repositories_file(
        dir.path(),
        &format!("- name: registry\n  oci: {url}\n  plainHttp: true\n"),
    )?;
    let topology =
        SplitTopology::start_configured(&cluster.kubeconfig, dir.path(), &[], &repositories)
            .await?;
    let result = async {
        let namespace = TestNamespace::create(&cluster.client, "constraint").await?;
        let endpoint = topology.gateway.endpoint();
        let mut client = journey::connect(&endpoint).await?;
        let r = journey::hello(&namespace);
        let settings = dir.path().join("settings.yaml");
        let cli = |args: Vec<String>| {
            let mut all = vec!["--server".to_owned(), endpoint.clone()];
            all.extend(args);
            berth_tests::cli().args(all).output()
        };
        let update = |message: &str| -> anyhow::Result<Vec<String>> {
            std::fs::write(&settings, format!("message: {message}\n"))?;
            Ok([
                "update",
                "hello",
                "--namespace",
                &namespace,
                "--repo",
                "registry",
                "--version",
                "~1.2",
                "--settings",
            ]
            .iter()
            .map(|s| (*s).to_owned())
            .chain([settings.display().to_string(), "--wait".to_owned()])
            .collect())
        };
        let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &namespace);
        let revision = || async {
            let data = cms.get("hello").await?.data.unwrap_or_default();
            anyhow::Ok(data.get("revision").cloned().unwrap_or_default())
        };

        let out = cli(update("first")?).await?;
        ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let p = client
            .get(v1::GetRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        ensure!(
            (
                p.phase.as_str(),
                p.version.as_str(),
                p.resolved_version.as_str()
            ) == ("Running", "~1.2", "1.2.1"),
            "{p:?}"
        );
        ensure!(revision().await? == "1.2.1", "the newest ~1.2 tag runs");
        let out = cli(vec![
            "get".into(),
            "hello".into(),
            "--namespace".into(),
            namespace.to_string(),
        ])
        .await?;
        let shown: serde_json::Value =
            serde_saphyr::from_str(&String::from_utf8_lossy(&out.stdout))?;
        ensure!(
            (&shown["version"], &shown["resolvedVersion"]) == (&json!("~1.2"), &json!("1.2.1")),
            "{shown}"
        );

        // A newer patch is pushed: an identical Update is still a no-op, a settings change
        // resolves the constraint again.
        set_version(&package, "1.2.5")?;
        oci.push(&berth_package::pack(&package, limits)?).await?;
        let same = client
            .update(v1::UpdateRequest {
                r#ref: Some(r.clone()),
                repository: "registry".into(),
                version: "~1.2".into(),
                settings: Some(berth_proto::json::to_struct(&json!({"message": "first"}))),
                ..Default::default()
            })
            .await?
            .into_inner();
        ensure!(
            same.generation == p.generation,
            "an identical Update is a no-op"
        );
        let out = cli(update("second")?).await?;
        ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let p = client
            .get(v1::GetRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        ensure!(
            (p.phase.as_str(), p.resolved_version.as_str()) == ("Running", "1.2.5"),
            "{p:?}"
        );
        ensure!(revision().await? == "1.2.5", "the newly pushed patch runs");

        // A constraint no tag satisfies fails the generation, naming it.
        let bad = client
            .update(v1::UpdateRequest {
                r#ref: Some(r.clone()),
                repository: "registry".into(),
                version: "~2.0".into(),
                settings: Some(berth_proto::json::to_struct(&json!({"message": "third"}))),
                ..Default::default()
            })
            .await?
            .into_inner();
        let failed = wait_errored(&mut client, &r, bad.generation).await?;
        ensure!(failed.last_error.contains("~2.0"), "{failed:?}");
        Ok(())
    }
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}

/// A repository lifecycle knows but the worker does not (their configurations differ) fails
/// the package permanently, saying so, instead of retrying forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_the_worker_does_not_know_fails_the_package() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let lifecycle_dir = dir.path().join("lifecycle");
    std::fs::create_dir_all(&lifecycle_dir)?;
    let lifecycle_file = berth_tests::process::repositories_file(
        &lifecycle_dir,
        &format!(
            "- name: elsewhere\n  directory: {}\n",
            berth_tests::examples_repo().display()
        ),
    )?;
    let worker_file = berth_tests::process::repositories_file(dir.path(), "")?;
    let worker_file = worker_file.display().to_string();
    let topology = SplitTopology::start_configured(
        &cluster.kubeconfig,
        dir.path(),
        &["--repositories", &worker_file],
        &lifecycle_file,
    )
    .await?;
    let result = async {
        let namespace = TestNamespace::create(&cluster.client, "unknown").await?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = journey::hello(&namespace);
        let accepted = client.update(update(&r, "elsewhere")).await?.into_inner();
        let failed = wait_failed(&mut client, &r, accepted.generation).await?;
        ensure!(
            failed
                .last_error
                .contains("\"elsewhere\" is neither a configured repository"),
            "{failed:?}"
        );
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                force: false,
            })
            .await?;
        journey::wait_gone(&mut client, &r).await
    }
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}
