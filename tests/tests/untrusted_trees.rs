//! Package trees are opened beneath their root, never checked then used, through real
//! processes: Updates from a local repository under a configured root while a local user swaps
//! a package's directory for a link to a private directory never bring a file of it into the
//! worker's cache (issue 30, attack 7); a module directory that is a link to elsewhere inside
//! the repository root installs, and one leading out is refused naming the link (issue 32,
//! item 11).

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{bail, ensure};
use berth_proto::v1;
use berth_tests::{SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

/// Longest a package may take to reach the phase a test waits for.
const DEADLINE: Duration = Duration::from_secs(120);
/// What must never reach a package: the content of the private directory's files.
const SECRET: &str = "-----BEGIN PRIVATE KEY----- berth's, not a package's";
/// Versions Updated to one after another during the race (each is fetched anew).
const VERSIONS: usize = 12;
/// Files in the swapped directory: a copy spends its time there.
const FILES: usize = 200;

fn app(name: &str, ns: &str) -> v1::PackageRef {
    v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: name.into(),
        namespace: ns.into(),
    }
}

fn update(r: &v1::PackageRef, repository: &str, version: &str) -> v1::UpdateRequest {
    v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: repository.into(),
        package: String::new(),
        version: version.into(),
        settings: None,
        force: false,
        settings_version: 0,
        reset_settings: false,
    }
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(path.parent().expect("a parent"))?;
    Ok(std::fs::write(path, text)?)
}

/// An App package `name` `version` in `dir`: a ConfigMap, and `extra` files under `files/`.
fn package(dir: &Path, name: &str, version: &str, extra: usize) -> anyhow::Result<()> {
    write(
        &dir.join("package.yaml"),
        &format!("type: Application\nname: {name}\nversion: {version}\n"),
    )?;
    write(
        &dir.join("Chart.yaml"),
        &format!("apiVersion: v2\nname: {name}\nversion: {version}\n"),
    )?;
    write(
        &dir.join("templates/cm.yaml"),
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}-cm\ndata:\n  version: \"{version}\"\n"
        ),
    )?;
    for i in 0..extra {
        write(
            &dir.join(format!("files/many/f-{i:03}.txt")),
            "package data\n",
        )?;
    }
    Ok(())
}

/// Every file under `dir` (links not followed) holding the secret.
fn leaked(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => found.extend(leaked(&path)),
            Ok(t)
                if t.is_file()
                    && std::fs::read_to_string(&path).is_ok_and(|text| text.contains(SECRET)) =>
            {
                found.push(path)
            }
            _ => {}
        }
    }
    found
}

/// Follows the package until `generation` is Running (`None`), or a task of it failed
/// (`Some(error)`: a fetch that met the link is refused, and retried later).
async fn settled(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    generation: i64,
) -> anyhow::Result<Option<String>> {
    let p = journey::follow(client, r, DEADLINE, "the generation to settle", |p| {
        Ok(p.generation == generation && (p.phase == "Running" || !p.last_error.is_empty()))
    })
    .await?;
    Ok((p.phase != "Running").then_some(p.last_error))
}

/// Attack 7 through real processes: while a local user who may write under the repository
/// root swaps, in a loop and atomically (`renameat2(RENAME_EXCHANGE)`), the package's
/// `files/many` directory with a link to a private directory (berth's data directory, in the
/// attack), the package is Updated to one version after another, each fetched by the worker
/// into its cache. No file of the private directory ever reaches the cache, whatever the
/// fetches met (a copy, or a link refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_swapped_for_a_link_during_updates_never_brings_private_files_in()
-> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let private = tempfile::tempdir()?;
    write(&private.path().join("ca-key.pem"), SECRET)?;
    write(&private.path().join("tls/release-key.pem"), SECRET)?;
    let (repo, repo_name) = berth_tests::temp_repo();
    let versions: Vec<String> = (1..=VERSIONS).map(|v| format!("1.0.{v}")).collect();
    for (i, v) in versions.iter().enumerate() {
        package(&repo.path().join("swapped").join(v), "swapped", v, FILES)?;
        symlink(private.path(), repo.path().join(format!("side-{i}")))?;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let current = Arc::new(AtomicUsize::new(0));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, current, swaps) = (stop.clone(), current.clone(), swaps.clone());
        let (root, versions) = (repo.path().to_owned(), versions.clone());
        std::thread::spawn(move || -> anyhow::Result<()> {
            let open = |p: &Path| {
                rustix::fs::open(
                    p,
                    rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY,
                    rustix::fs::Mode::empty(),
                )
            };
            let root_fd = open(&root)?;
            while !stop.load(Ordering::Relaxed) {
                let i = current.load(Ordering::Relaxed);
                let files = open(&root.join("swapped").join(&versions[i]).join("files"))?;
                for _ in 0..1000 {
                    rustix::fs::renameat_with(
                        &files,
                        "many",
                        &root_fd,
                        format!("side-{i}"),
                        rustix::fs::RenameFlags::EXCHANGE,
                    )?;
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        })
    };

    let result = async {
        let ns = TestNamespace::create(&cluster.client, "trees").await?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = app("swapped", &ns);
        let (mut ran, mut failed) = (0, 0);
        for (i, v) in versions.iter().enumerate() {
            current.store(i, Ordering::Relaxed);
            let accepted = client.update(update(&r, &repo_name, v)).await?.into_inner();
            match settled(&mut client, &r, accepted.generation).await? {
                None => ran += 1,
                // The link seen as a link (leading out of the package), or met where the
                // directory was a moment before.
                Some(error)
                    if ["points outside the package", "symlink", "changed while"]
                        .iter()
                        .any(|refusal| error.contains(refusal)) =>
                {
                    failed += 1
                }
                Some(error) => bail!("{v}: not a refusal of the link: {error}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swaps.load(Ordering::Relaxed);
        println!("{VERSIONS} Updates ({ran} Running, {failed} refused) against {swaps} swaps");
        ensure!(swaps > 10_000, "the race ran: {swaps} swaps");
        let leaks = leaked(&dir.path().join("packages"));
        ensure!(
            leaks.is_empty(),
            "private files in the worker's cache: {leaks:?}"
        );
        ensure!(ran > 0, "some fetches copied the package");
        Ok(())
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    let swapped = swapper
        .join()
        .map_err(|_| anyhow::anyhow!("the swapper panicked"))?;
    topology.stop().await;
    cluster.stop().await;
    result?;
    swapped
}

/// Issue 32, item 11: `<module>/<version>` may be a link to a module directory stored
/// elsewhere in the same tree (beneath the configured repository root): the package installs
/// from it. A link leading out of the root is refused, and the package's error names the link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_directory_linked_inside_the_root_installs_and_one_linked_out_is_refused()
-> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = async {
        let (repo, repo_name) = berth_tests::temp_repo();
        let (store, _) = berth_tests::temp_repo();
        // Stored in another directory of the same root, linked from the repository.
        package(&store.path().join("linked-1.0.0"), "linked", "1.0.0", 0)?;
        std::fs::create_dir_all(repo.path().join("linked"))?;
        let store_name = store
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        symlink(
            format!("../../{store_name}/linked-1.0.0"),
            repo.path().join("linked/1.0.0"),
        )?;
        // Stored outside the root altogether.
        let outside = tempfile::tempdir()?;
        package(&outside.path().join("leaving-1.0.0"), "leaving", "1.0.0", 0)?;
        std::fs::create_dir_all(repo.path().join("leaving"))?;
        symlink(
            outside.path().join("leaving-1.0.0"),
            repo.path().join("leaving/1.0.0"),
        )?;

        let ns = TestNamespace::create(&cluster.client, "trees").await?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = app("linked", &ns);
        let accepted = client
            .update(update(&r, &repo_name, "1.0.0"))
            .await?
            .into_inner();
        journey::wait_running(&mut client, &r, accepted.generation).await?;
        let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
        ensure!(cms.get_opt("linked-cm").await?.is_some());

        let r = app("leaving", &ns);
        let accepted = client
            .update(update(&r, &repo_name, "1.0.0"))
            .await?
            .into_inner();
        let link = "leaving/1.0.0 ->";
        let p = journey::follow(&mut client, &r, DEADLINE, "the link to be refused", |p| {
            if p.phase == "Running" {
                bail!("a package linked out of the repository root runs");
            }
            Ok(p.generation == accepted.generation
                && p.last_error.contains("leaves the repository root")
                && p.last_error.contains(link))
        })
        .await?;
        ensure!(p.phase != "Running");
        ensure!(cms.get_opt("leaving-cm").await?.is_none());
        Ok(())
    }
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}
