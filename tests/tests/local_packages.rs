//! What berth tells and does about the package files a user gives it (issue 31): a
//! `package.yaml` field it does not know fails the Load naming the field; a directory package
//! edited under the same version is read again by the next Update; a repositories file named by
//! a bare file name is read from the working directory; `berth validate` says NotFound or
//! FailedPrecondition when it cannot check, and finds the kind of the package it is given. Through the public API of real
//! processes, against the dev cluster (or the real cluster named by `BERTH_TEST_KUBECONFIG`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use berth_proto::v1;
use berth_tests::{AllInOne, Proc, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

const DEADLINE: Duration = Duration::from_secs(120);

fn real_cluster() -> Option<PathBuf> {
    std::env::var_os("BERTH_TEST_KUBECONFIG").map(PathBuf::from)
}

fn app(namespace: &str, name: &str) -> v1::PackageRef {
    v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: name.into(),
        namespace: namespace.into(),
    }
}

fn install(r: &v1::PackageRef, repository: &str) -> v1::UpdateRequest {
    v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: repository.to_owned(),
        version: "1.0.0".into(),
        ..Default::default()
    }
}

/// A chart of one ConfigMap `name` whose `data.edit` is `edit`.
fn configmap(name: &str, edit: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  edit: {edit}\n")
}

fn validate(r: &v1::PackageRef, settings: serde_json::Value) -> v1::ValidateSettingsRequest {
    v1::ValidateSettingsRequest {
        r#ref: Some(r.clone()),
        settings: Some(berth_proto::json::to_struct(&settings)),
        settings_version: 0,
    }
}

fn condition<'a>(p: &'a v1::Package, type_: &str) -> Option<&'a v1::Condition> {
    p.conditions.iter().find(|c| c.r#type == type_)
}

async fn edit_of(kube: &kube::Client, namespace: &str, name: &str) -> anyhow::Result<String> {
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), namespace);
    let cm = cms
        .get(name)
        .await
        .with_context(|| format!("ConfigMap {name}"))?;
    Ok(cm
        .data
        .and_then(|d| d.get("edit").cloned())
        .unwrap_or_default())
}

/// Issue 31.8: `requirments:` (a typo) in package.yaml fails the Load. The package does not
/// reach Running; `Loaded=False` with reason `LoadFailed` and the package's error name the field,
/// the field it probably meant and the known ones; nothing is installed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_package_yaml_field_fails_the_load_naming_it() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let up = AllInOne::start(&dir.path().join("data"), real_cluster().as_deref()).await?;
    let result = async {
        let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
        let ns = TestNamespace::create(&kube, "typo").await?;
        let (repo_dir, repo) = berth_tests::temp_repo();
        berth_tests::write_app(
            repo_dir.path(),
            "typo",
            &[
                (
                    "package.yaml",
                    "type: Application\nname: typo\nversion: 1.0.0\nrequirments:\n  kubernetes: '>=1.20'\n",
                ),
                ("templates/configmap.yaml", &configmap("typo", "one")),
            ],
        )?;
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        let r = app(&ns, "typo");
        let accepted = client.update(install(&r, &repo)).await?.into_inner();
        let failed = journey::follow(&mut client, &r, DEADLINE, "the Load to fail", |p| {
            ensure!(p.phase != "Running", "a package.yaml with a typo ran: {p:?}");
            Ok(p.generation == accepted.generation && p.phase == "Failed")
        })
        .await?;
        let loaded = condition(&failed, "Loaded").context("a Loaded condition")?;
        ensure!(
            loaded.status == "False" && loaded.reason == "LoadFailed",
            "{loaded:?}"
        );
        for text in [&loaded.message, &failed.last_error] {
            for needle in [
                "package.yaml",
                "`requirments`",
                "did you mean `requirements`?",
                "known fields: type, name, version",
            ] {
                ensure!(text.contains(needle), "{needle:?} missing from {text:?}");
            }
        }
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        ensure!(
            cms.get_opt("typo").await?.is_none(),
            "a package that failed to load installed its chart"
        );

        // Issue 31.7: validating settings of a package whose Load failed says so, naming why,
        // instead of answering "valid" for `replicas: many`.
        let err = client
            .validate_settings(validate(&r, serde_json::json!({"replicas": "many"})))
            .await
            .expect_err("no verdict on settings of a package that did not load");
        ensure!(
            err.code() == tonic::Code::FailedPrecondition
                && err.message().contains("did not load")
                && err.message().contains("`requirments`"),
            "{err:?}"
        );
        // ... and of a package that does not exist, NotFound.
        let err = client
            .validate_settings(validate(&app(&ns, "nosuch"), serde_json::json!({})))
            .await
            .expect_err("no verdict on settings of a package that does not exist");
        ensure!(
            err.code() == tonic::Code::NotFound && err.message().contains("nosuch"),
            "{err:?}"
        );
        Ok(())
    }
    .await;
    up.proc.stop().await;
    result
}

/// Issue 31.9: a directory package edited under the same version is read again. Installed from
/// a local repository, its template then edited, an Update with `--force` applies the edited
/// template: the cluster object shows the edit (the worker's cache keeps a copy per version,
/// checked against the directory's content digest once per generation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_directory_package_is_read_again_by_the_next_update() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let up = AllInOne::start(&dir.path().join("data"), real_cluster().as_deref()).await?;
    let result = async {
        let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
        let ns = TestNamespace::create(&kube, "edited").await?;
        let (repo_dir, repo) = berth_tests::temp_repo();
        let template = "templates/configmap.yaml";
        berth_tests::write_app(
            repo_dir.path(),
            "edited",
            &[(template, &configmap("edited", "one"))],
        )?;
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        let r = app(&ns, "edited");
        let first = client.update(install(&r, &repo)).await?.into_inner();
        journey::wait_running(&mut client, &r, first.generation).await?;
        ensure!(edit_of(&kube, &ns, "edited").await? == "one");

        // The same version, edited in place.
        std::fs::write(
            repo_dir.path().join("edited/1.0.0").join(template),
            configmap("edited", "two"),
        )?;
        let forced = client
            .update(v1::UpdateRequest {
                force: true,
                ..install(&r, &repo)
            })
            .await?
            .into_inner();
        ensure!(
            forced.generation > first.generation,
            "--force made no new generation: {forced:?}"
        );
        journey::wait_running(&mut client, &r, forced.generation).await?;
        let now = edit_of(&kube, &ns, "edited").await?;
        ensure!(
            now == "two",
            "the cluster object still shows {now:?} after the edit and --force"
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

/// `repositories.yaml` naming a directory repository `local` at `pkgs`, relative to the file.
fn bare_repositories(dir: &Path) -> anyhow::Result<()> {
    std::fs::write(
        dir.join("repos.yaml"),
        "repositories:\n- name: local\n  directory: pkgs\n",
    )?;
    berth_tests::write_app(
        &dir.join("pkgs"),
        "bare",
        &[("templates/configmap.yaml", &configmap("bare", "one"))],
    )
}

/// Issue 31.10: `--repositories repos.yaml` (a bare file name) is the file in the working
/// directory. Lifecycle and the worker started so come up (they stopped with "cannot make an
/// empty path absolute"), and `berth up` started so installs a package from the repository the
/// file names, its directory relative to the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repositories_file_named_bare_is_read_from_the_working_directory() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let cwd = dir.path().join("cwd");
    std::fs::create_dir_all(&cwd)?;
    bare_repositories(&cwd)?;

    let refused = berth_tests::RefusedPort::new();
    let database = format!("sqlite://{}", dir.path().join("lifecycle.db").display());
    let lifecycle = Proc::start_in(
        &cwd,
        "berth-lifecycle",
        &[
            "--listen",
            "127.0.0.1:0",
            "--database",
            &database,
            "--broker",
            &refused.endpoint(),
            "--repositories",
            "repos.yaml",
            "--insecure-plaintext",
        ],
        "listening on ",
    )
    .await
    .context("lifecycle with --repositories repos.yaml")?;
    lifecycle.stop().await;
    let cache = dir.path().join("cache").display().to_string();
    let worker = Proc::start_in(
        &cwd,
        "berth-queue",
        &[
            "work",
            "--broker",
            &refused.endpoint(),
            "--lifecycle",
            &refused.endpoint(),
            "--release",
            &refused.endpoint(),
            "--hookevent",
            &refused.endpoint(),
            "--cache-dir",
            &cache,
            "--repositories",
            "repos.yaml",
            "--insecure-plaintext",
        ],
        "worker ",
    )
    .await
    .context("the worker with --repositories repos.yaml")?;
    worker.stop().await;

    let data = dir.path().join("data").display().to_string();
    let real = real_cluster();
    let kc = real.as_ref().map(|k| k.display().to_string());
    let mut args = vec![
        "up",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        &data,
        "--repositories",
        "repos.yaml",
    ];
    if let Some(kc) = &kc {
        args.extend(["--kubeconfig", kc]);
    }
    let up = Proc::start_in(&cwd, "berth", &args, "listening on ").await?;
    let result = async {
        let kubeconfig = real.unwrap_or_else(|| dir.path().join("data/kubeconfig"));
        let kube = berth_tests::cluster::client_for(&kubeconfig).await?;
        let ns = TestNamespace::create(&kube, "bare").await?;
        let mut client = journey::connect(&up.endpoint()).await?;
        let r = app(&ns, "bare");
        let accepted = client.update(install(&r, "local")).await?.into_inner();
        journey::wait_running(&mut client, &r, accepted.generation).await?;
        ensure!(edit_of(&kube, &ns, "bare").await? == "one");
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                force: false,
            })
            .await?;
        journey::wait_gone(&mut client, &r).await
    }
    .await;
    up.stop().await;
    result
}

/// Issue 31.7: `berth validate NAME` without `--kind` checks the package NAME is installed as:
/// here a module, whose schema refuses `replicas: many` naming the field (it answered for the
/// app `default.NAME`, which does not exist). `berth validate` of nothing installed fails with
/// NotFound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_finds_the_kind_of_the_installed_package() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let up = AllInOne::start(&dir.path().join("data"), real_cluster().as_deref()).await?;
    let result = async {
        let (repo_dir, repo) = berth_tests::temp_repo();
        let version = repo_dir.path().join("counted/1.0.0");
        std::fs::create_dir_all(version.join("openapi"))?;
        std::fs::write(
            version.join("package.yaml"),
            "type: Module\nname: counted\nversion: 1.0.0\n",
        )?;
        std::fs::write(
            version.join("openapi/settings.yaml"),
            "type: object\nproperties:\n  replicas: {type: integer, default: 1}\n",
        )?;
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::Module as i32,
            name: "counted".into(),
            namespace: String::new(),
        };
        let accepted = client.update(install(&r, &repo)).await?.into_inner();
        journey::wait_running(&mut client, &r, accepted.generation).await?;

        let settings = dir.path().join("many.yaml");
        std::fs::write(&settings, "replicas: many\n")?;
        let cli = |name: &str| {
            std::process::Command::new(berth_tests::binary("berth"))
                .env("BERTH_TOKEN_FILE", &berth_tests::api_token().file)
                .args([
                    "--server",
                    &up.proc.endpoint(),
                    "validate",
                    name,
                    "--settings",
                ])
                .arg(&settings)
                .output()
        };
        let out = cli("counted")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success()
                && stderr.contains("InvalidArgument")
                && stderr.contains("replicas"),
            "validate of the module without --kind: {out:?}"
        );
        let out = cli("nosuch")?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success() && stderr.contains("NotFound"),
            "validate of nothing installed: {out:?}"
        );
        Ok(())
    }
    .await;
    up.proc.stop().await;
    result
}
