//! Bounded evaluation, as an attacker would try it through real processes: a package's hostile
//! jq programs (a jqFilter, a JQPatch), a chart that builds gigabytes in a variable and a chart
//! whose links form a DAG are stopped with an error naming the limit, nothing is changed, and
//! `berth up` keeps serving.

use std::time::Duration;

use anyhow::Context;
use berth_proto::v1;
use berth_tests::{AllInOne, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

/// Longest a reaction may take to become visible.
const DEADLINE: Duration = Duration::from_secs(90);

/// The fixtures' repository, as an Update names it (relative to the harness's repository root).
fn fixtures() -> String {
    berth_tests::FIXTURES_REPO.to_owned()
}

fn app(name: &str, ns: &str) -> v1::PackageRef {
    v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: name.into(),
        namespace: ns.into(),
    }
}

fn configmap(name: &str, labels: Value, data: Value) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": data}),
    )?)
}

async fn install(client: &mut journey::Client, r: &v1::PackageRef) -> anyhow::Result<i64> {
    Ok(client
        .update(v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: fixtures(),
            version: "1.0.0".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .generation)
}

/// Follows the package until `done` holds on it, and returns it.
async fn wait_for(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    what: &str,
    done: impl Fn(&v1::Package) -> bool,
) -> anyhow::Result<v1::Package> {
    journey::follow(client, r, DEADLINE, what, |p| Ok(done(p))).await
}

/// `def f: [f]; f` overflowed hookevent's stack and killed `berth up` (again on every restart).
/// Now: as a jqFilter its events are dropped while a sane binding on the same objects keeps
/// firing; as a JQPatch the hook run fails naming the depth limit and the object is unchanged;
/// and the API answers throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jq_bombs_are_stopped_and_berth_up_keeps_serving() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let result = jq_bombs(&up).await;
    up.proc.stop().await;
    result
}

async fn jq_bombs(up: &AllInOne) -> anyhow::Result<()> {
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let ns = TestNamespace::create(&kube, "bounds").await?;
    let mut client = journey::connect(&up.proc.endpoint()).await?;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let labels = json!({"app": "jq"});
    cms.create(
        &PostParams::default(),
        &configmap("first", labels.clone(), json!({}))?,
    )
    .await?;

    // The jqFilter bomb: registered, run on `first` during the initial list and on `second`.
    let bomb = app("jqbomb", &ns);
    let generation = install(&mut client, &bomb).await?;
    journey::wait_running(&mut client, &bomb, generation).await?;
    cms.create(
        &PostParams::default(),
        &configmap("second", labels.clone(), json!({}))?,
    )
    .await?;
    let p = wait_for(&mut client, &bomb, "the sane binding's event", |p| {
        journey::seen(p).contains(&"second".to_owned()) || !p.last_error.is_empty()
    })
    .await?;
    assert!(p.last_error.is_empty(), "{}", p.last_error);

    // The JQPatch bomb: the hook run fails naming the limit, the ConfigMap is unchanged.
    cms.create(
        &PostParams::default(),
        &configmap("target", json!({}), json!({"a": "b"}))?,
    )
    .await?;
    let patch = app("jqpatch", &ns);
    install(&mut client, &patch).await?;
    let p = wait_for(&mut client, &patch, "the JQPatch failure", |p| {
        !p.last_error.is_empty()
    })
    .await?;
    assert!(
        p.last_error.contains("depth limit") && p.last_error.contains("def f: [f]; f"),
        "the error names the program and the limit: {}",
        p.last_error
    );
    let target = cms.get("target").await?;
    assert_eq!(
        serde_json::to_value(&target.data)?,
        json!({"a": "b"}),
        "nothing changed"
    );

    // Still serving: the API answers, and hookevent still turns events into hook runs.
    let listed = client.list(v1::ListRequest::default()).await?.into_inner();
    let names: Vec<&str> = listed
        .packages
        .iter()
        .filter_map(|p| p.r#ref.as_ref().map(|r| r.name.as_str()))
        .collect();
    assert!(
        names.contains(&"jqbomb") && names.contains(&"jqpatch"),
        "{names:?}"
    );
    cms.create(
        &PostParams::default(),
        &configmap("third", labels, json!({}))?,
    )
    .await?;
    wait_for(&mut client, &bomb, "an event after both bombs", |p| {
        journey::seen(p).contains(&"third".to_owned())
    })
    .await?;
    for r in [&bomb, &patch] {
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                ..Default::default()
            })
            .await?;
        journey::wait_gone(&mut client, r).await?;
    }
    Ok(())
}

fn big_settings(bytes: usize) -> prost_types::Struct {
    berth_proto::json::to_struct(&json!({"blob": "x".repeat(bytes)}))
}

/// One package's size cannot break everyone's answers: oversized fields are refused at the edge
/// naming the field and the limit (and nothing is stored), and List and Dump are paged so that
/// five packages with almost 1 MB of settings each (over the 4 MiB a reply may hold) are all
/// listed, by the API and by the CLI following the pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_packages_are_paged_and_oversized_fields_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let database = format!("sqlite://{}", dir.path().join("lifecycle.db").display());
    let certs = dir.path().join("certs");
    berth_runtime::tls::generate(&certs, &[])?;
    let tls = |role| berth_tests::process::tls_args(&certs, role);
    // No broker: the packages stay Pending, which is all List and Dump need.
    let dead = berth_tests::RefusedPort::new();
    let broker = dead.endpoint();
    let lifecycle_tls = tls(berth_runtime::Role::Lifecycle);
    let repositories = berth_tests::process::repositories_file(dir.path(), "")?
        .display()
        .to_string();
    let mut args = vec![
        "--listen",
        "127.0.0.1:0",
        "--database",
        &database,
        "--broker",
        &broker,
        "--repositories",
        &repositories,
    ];
    args.extend(lifecycle_tls.iter().map(String::as_str));
    let lifecycle = berth_tests::Proc::start("berth-lifecycle", &args, "listening on ").await?;
    let endpoint = lifecycle.endpoint();
    let gateway_tls = tls(berth_runtime::Role::Gateway);
    let mut args = vec!["--listen", "127.0.0.1:0", "--lifecycle", &endpoint];
    args.extend(gateway_tls.iter().map(String::as_str));
    let gateway = berth_tests::Proc::start("berth-gateway", &args, "listening on ").await?;
    let result = paged(&gateway.endpoint()).await;
    gateway.stop().await;
    lifecycle.stop().await;
    result
}

async fn paged(endpoint: &str) -> anyhow::Result<()> {
    let mut client = journey::connect(endpoint).await?;
    let update = |name: &str, version: String, settings: prost_types::Struct| v1::UpdateRequest {
        r#ref: Some(app(name, "paged")),
        repository: fixtures(),
        version,
        settings: Some(settings),
        ..Default::default()
    };

    // Oversized fields: refused naming the field and the limit; nothing stored.
    let refusals = [
        (
            update("huge-version", "1".repeat(1 << 20), big_settings(1)),
            "version: longer than the 128-byte limit",
        ),
        (
            update("huge-settings", "1.0.0".into(), big_settings(1 << 20)),
            "settings: larger than the 1048576-byte limit",
        ),
    ];
    for (request, needle) in refusals {
        let name = request.r#ref.clone().map(|r| r.name).unwrap_or_default();
        let err = client.update(request).await.expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(err.message().contains(needle), "{}", err.message());
        let get = client
            .get(v1::GetRequest {
                r#ref: Some(app(&name, "paged")),
            })
            .await
            .expect_err("nothing stored");
        assert_eq!(get.code(), tonic::Code::NotFound, "{get:?}");
    }
    let err = client
        .list(v1::ListRequest {
            page_size: 5000,
            page_token: String::new(),
        })
        .await
        .expect_err("page size over the maximum");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("page_size"), "{}", err.message());

    // Five packages of almost 1 MB each: more than one reply can hold.
    let names: Vec<String> = (0..5).map(|i| format!("big{i}")).collect();
    for name in &names {
        client
            .update(update(name, "1.0.0".into(), big_settings(1_000_000)))
            .await?;
    }
    let mut listed = vec![];
    let mut pages = 0;
    let mut page_token = String::new();
    loop {
        let page = client
            .list(v1::ListRequest {
                page_size: 0,
                page_token,
            })
            .await?
            .into_inner();
        pages += 1;
        listed.extend(
            page.packages
                .into_iter()
                .filter_map(|p| p.r#ref.map(|r| r.name)),
        );
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    assert_eq!(listed, names, "every package, once, in order");
    assert!(pages >= 2, "paged by size: {pages} page(s)");

    let mut dumped = 0;
    let mut page_token = String::new();
    loop {
        let page = client
            .dump(v1::DumpRequest {
                page_size: 2,
                page_token,
            })
            .await?
            .into_inner();
        dumped += page.yaml.matches("key: paged.big").count();
        if page.next_page_token.is_empty() {
            break;
        }
        page_token = page.next_page_token;
    }
    assert_eq!(dumped, 5, "every package in the dump");

    // The CLI follows the pages.
    let cli = |args: &[&str]| {
        let mut all = vec!["--server", endpoint];
        all.extend_from_slice(args);
        berth_tests::cli().args(all).output()
    };
    let list = cli(&["list"]).await?;
    let stdout = String::from_utf8_lossy(&list.stdout);
    assert!(
        list.status.success(),
        "{}",
        String::from_utf8_lossy(&list.stderr)
    );
    for name in &names {
        assert!(
            stdout.contains(name.as_str()),
            "{name} missing from:\n{stdout}"
        );
    }
    let dump = cli(&["dump"]).await?;
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let stdout = String::from_utf8_lossy(&dump.stdout);
    assert_eq!(stdout.matches("key: paged.big").count(), 5);
    Ok(())
}

/// A hook cannot grow its package's values past the limit (which would make every answer
/// carrying them too large): the run fails naming the limit, nothing is stored, and List
/// answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_values_patch_past_the_limit_is_refused() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let result = big_values(&up).await;
    up.proc.stop().await;
    result
}

async fn big_values(up: &AllInOne) -> anyhow::Result<()> {
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let ns = TestNamespace::create(&kube, "bounds").await?;
    let mut client = journey::connect(&up.proc.endpoint()).await?;
    let r = app("bigvalues", &ns);
    install(&mut client, &r).await?;
    let p = wait_for(&mut client, &r, "the refused values patch", |p| {
        !p.last_error.is_empty()
    })
    .await?;
    assert!(
        p.last_error.contains("grow.py")
            && p.last_error.contains("over the limit of 2097152 bytes"),
        "{}",
        p.last_error
    );
    let values = p
        .values
        .as_ref()
        .map(berth_proto::json::from_struct)
        .unwrap_or(Value::Null);
    assert!(values.get("blob").is_none(), "nothing stored");
    let listed = client.list(v1::ListRequest::default()).await?.into_inner();
    assert!(
        listed
            .packages
            .iter()
            .any(|p| p.r#ref.as_ref().is_some_and(|r| r.name == "bigvalues")),
        "List answers"
    );
    client
        .remove(v1::RemoveRequest {
            r#ref: Some(r.clone()),
            ..Default::default()
        })
        .await?;
    journey::wait_gone(&mut client, &r).await
}

/// `berth up` as root runs a package's hooks as its principal's uid without being told (the
/// first package of a fresh berth: principal 1, uid 2000001): they reach their package in the
/// cache, and cannot read the services' keys or databases, nor list the data directory.
/// `--hook-uids off` is the explicit opt-out: the same hook then runs as root and reads all of
/// them. Needs root (to switch users).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn berth_up_as_root_runs_hooks_as_their_principal_away_from_its_secrets() -> anyhow::Result<()>
{
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: running hooks as another user needs root");
        return Ok(());
    }
    let principal = snoop_as(&[]).await?;
    anyhow::ensure!(
        principal == "uid=2000001 found=yes key=no db=no list=no",
        "the first principal's view of berth's data directory: {principal}"
    );
    let root = snoop_as(&["--hook-uids", "off"]).await?;
    anyhow::ensure!(
        root == "uid=0 found=yes key=yes db=yes list=yes",
        "--hook-uids off: {root}"
    );
    Ok(())
}

/// What the snoop hook saw, run by a fresh `berth up` started with `args`.
async fn snoop_as(args: &[&str]) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let up = AllInOne::start_with(&dir.path().join("data"), real.as_deref(), args).await?;
    let values = snoop(&up).await;
    up.proc.stop().await;
    let values = values?;
    values["probe"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no probe in {values}"))
}

/// Installs the snoop package on `up` and returns its values once Running (`/probe`, what its
/// hook saw; `/hookPath`, where its file was).
async fn snoop(up: &AllInOne) -> anyhow::Result<Value> {
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let ns = TestNamespace::create(&kube, "bounds").await?;
    let mut client = journey::connect(&up.proc.endpoint()).await?;
    let r = app("snoop", &ns);
    let generation = install(&mut client, &r).await?;
    let p = journey::wait_running(&mut client, &r, generation).await?;
    Ok(p.values
        .as_ref()
        .map(berth_proto::json::from_struct)
        .unwrap_or(Value::Null))
}

/// A data directory the hooks' uids cannot reach (its parent is 0700, like a checkout under
/// `/root`): `berth up` keeps it the owner's and puts the package cache in a fresh directory
/// of the temp directory instead, so hooks still run, as their principal, and that directory
/// is gone when berth stops. Needs root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn berth_up_under_a_private_directory_still_runs_hooks_as_their_principal()
-> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: running hooks as another user needs root");
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
    let data = dir.path().join("data");
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let up = AllInOne::start(&data, real.as_deref()).await?;
    let result = async {
        let values = snoop(&up).await?;
        // The hook ran from the temporary cache: berth's data directory is not above it (and
        // the probe's "list" is of `/`).
        anyhow::ensure!(
            values["probe"]
                .as_str()
                .is_some_and(|p| p.starts_with("uid=2000001 found=no key=no db=no ")),
            "the hook's view: {}",
            values["probe"]
        );
        let mode = std::fs::metadata(&data)?.permissions().mode() & 0o777;
        anyhow::ensure!(mode == 0o700, "the data directory stays private: {mode:o}");
        // `<cache>/<key>/<repository>/<version>/hooks/snoop.sh`
        let hook = std::path::PathBuf::from(values["hookPath"].as_str().unwrap_or_default());
        let cache = hook
            .ancestors()
            .nth(5)
            .with_context(|| format!("a cache above {}", hook.display()))?
            .to_path_buf();
        let name = cache.file_name().and_then(|n| n.to_str()).unwrap_or("");
        anyhow::ensure!(
            cache.parent() == Some(std::env::temp_dir().as_path())
                && name.starts_with("berth-packages-"),
            "the package cache is a fresh directory of the temp directory: {}",
            cache.display()
        );
        anyhow::Ok(cache)
    }
    .await;
    up.proc.stop().await;
    let cache = result?;
    anyhow::ensure!(
        !cache.exists(),
        "the temporary package cache {} outlived berth up",
        cache.display()
    );
    Ok(())
}

/// A worker running as root whose package cache hooks could not reach (a parent directory is
/// 0700) refuses to start, naming the directory and the ways out, instead of failing every
/// hook later. Needs root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_cache_hooks_cannot_reach_refuses_to_start() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: running hooks as another user needs root");
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    let private = dir.path().join("private");
    std::fs::create_dir(&private)?;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700))?;
    let cache = private.join("cache").display().to_string();
    let certs = dir.path().join("certs");
    berth_runtime::tls::generate(&certs, &[])?;
    let dead = berth_tests::RefusedPort::new();
    let endpoint = dead.endpoint();
    let mut args = vec!["work".to_owned(), "--cache-dir".into(), cache.clone()];
    for flag in ["--broker", "--lifecycle", "--release", "--hookevent"] {
        args.extend([flag.to_owned(), endpoint.clone()]);
    }
    args.extend(berth_tests::process::tls_args(
        &certs,
        berth_runtime::Role::Worker,
    ));
    let run = tokio::process::Command::new(berth_tests::binary("berth-queue"))
        .args(&args)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .context("the worker started instead of refusing")??;
    let stderr = String::from_utf8_lossy(&out.stderr);
    anyhow::ensure!(!out.status.success(), "the worker started: {stderr}");
    let named = format!(
        "{} (mode 0700, owner 0:0) is not searchable",
        private.display()
    );
    anyhow::ensure!(
        stderr.contains("--cache-dir")
            && stderr.contains(&named)
            && stderr.contains("--hook-uids off"),
        "the refusal names the flag, the directory and the ways out: {stderr}"
    );
    anyhow::ensure!(
        std::path::Path::new(&cache).read_dir()?.next().is_none(),
        "nothing was fetched"
    );
    Ok(())
}

/// issue 30's render memory bomb: a string doubled forty times in a variable.
const MEMORY_BOMB: &str =
    r#"{{ $s := repeat 1048576 "x" }}{{ range until 40 }}{{ $s = printf "%s%s" $s $s }}{{ end }}"#;

/// A ConfigMap template named `name`.
fn config_map_template(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: b\n")
}

/// Writes, as version 1.0.0 of app `name` in `repo`, a chart whose `templates/dag` holds 11
/// levels of 16 links each to the next level (16^10 paths; the stager takes such links, as
/// they stay inside the package).
fn write_link_dag(repo: &std::path::Path, name: &str) -> anyhow::Result<()> {
    berth_tests::write_app_version(repo, name, "1.0.0", &[])?;
    let dag = repo.join(name).join("1.0.0/templates/dag");
    std::fs::create_dir_all(dag.join("l10/leaf"))?;
    for level in 0..10 {
        let dir = dag.join(format!("l{level}"));
        std::fs::create_dir_all(&dir)?;
        for i in 0..16 {
            std::os::unix::fs::symlink(format!("../l{}", level + 1), dir.join(format!("n{i}")))?;
        }
    }
    Ok(())
}

/// `VmHWM` (peak resident memory) of process `pid`, in KiB.
fn peak_rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .context("no VmHWM")?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .context("VmHWM value")?
        .parse()?)
}

/// Issue 30.5 and 30.6: a chart building gigabytes in a variable got `berth up` OOM-killed,
/// and two charts whose links form a DAG froze it, again after every restart (the retried task
/// did it again). Now each package fails with the limit named while another package installs,
/// neither is retried (one attempt in the broker's history, none queued) until a new Update,
/// which recovers it, and `berth up`'s peak memory stays far below what the bomb asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_and_chart_walk_bombs_fail_for_good_while_berth_up_serves() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let data = dir.path().join("data");
    let up = AllInOne::start(&data, real.as_deref()).await?;
    let result = chart_bombs(&up, &data).await;
    up.proc.stop().await;
    result
}

async fn chart_bombs(up: &AllInOne, data: &std::path::Path) -> anyhow::Result<()> {
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let ns = TestNamespace::create(&kube, "bounds").await?;
    let mut client = journey::connect(&up.proc.endpoint()).await?;
    let (repo_dir, repo) = berth_tests::temp_repo();
    let repo_path = repo_dir.path();
    berth_tests::write_app_version(
        repo_path,
        "membomb",
        "1.0.0",
        &[("templates/bomb.yaml", MEMORY_BOMB)],
    )?;
    write_link_dag(repo_path, "linkdag")?;
    for name in ["membomb", "linkdag", "calm"] {
        berth_tests::write_app_version(
            repo_path,
            name,
            "2.0.0",
            &[("templates/cm.yaml", &config_map_template(name))],
        )?;
    }
    berth_tests::write_app_version(
        repo_path,
        "calm",
        "1.0.0",
        &[("templates/cm.yaml", &config_map_template("calm"))],
    )?;
    let update = |name: &str, version: &str| v1::UpdateRequest {
        r#ref: Some(app(name, &ns)),
        repository: repo.clone(),
        version: version.into(),
        ..Default::default()
    };
    let before = peak_rss_kib(up.proc.pid().context("berth up's pid")?)?;
    for name in ["membomb", "linkdag"] {
        client.update(update(name, "1.0.0")).await?;
    }
    // Another package installs meanwhile.
    let calm = app("calm", &ns);
    let generation = client
        .update(update("calm", "1.0.0"))
        .await?
        .into_inner()
        .generation;
    journey::wait_running(&mut client, &calm, generation).await?;

    let failed = |name: &'static str, needle: &'static str| {
        let r = app(name, &ns);
        let mut client = client.clone();
        async move {
            journey::follow(&mut client, &r, DEADLINE, "failed for good", |p| {
                Ok(p.phase == "Failed" && p.last_error.contains(needle))
            })
            .await
        }
    };
    let bomb = failed(
        "membomb",
        "render: memory budget of 256 MiB exceeded building a string in template membomb/templates/bomb.yaml",
    )
    .await?;
    let dag = failed("linkdag", "20000 directory entries visited").await?;

    // Still serving: another Update of the calm package goes through.
    let generation = client
        .update(update("calm", "2.0.0"))
        .await?
        .into_inner()
        .generation;
    journey::wait_running(&mut client, &calm, generation).await?;
    let after = peak_rss_kib(up.proc.pid().context("berth up's pid")?)?;
    println!("berth up peak RSS: {before} KiB before the bombs, {after} KiB after");
    anyhow::ensure!(
        after < before + (1 << 20),
        "berth up's peak memory grew by {} KiB (the budget is 256 MiB per render)",
        after - before
    );

    // Not retried: each bomb's failing task ran once and the broker dropped it to its history
    // (a task to be retried stays queued, waiting out its backoff); nothing of it is queued.
    let url = berth_tests::Databases::sqlite(data).queue;
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect(&url).await?;
    for (name, p) in [("membomb", &bomb), ("linkdag", &dag)] {
        let key = format!("{ns}.{name}");
        let rows: Vec<(String, String, i64)> = sqlx::query_as(
            "SELECT kind, outcome, attempts FROM task_history WHERE package = $1 AND outcome <> 'done'",
        )
        .bind(&key)
        .fetch_all(&mut conn)
        .await?;
        anyhow::ensure!(
            rows.len() == 1 && rows[0].1 == "dropped" && rows[0].2 == 1,
            "{name}: one attempt, failed and dropped, expected; the history has {rows:?} ({})",
            p.last_error
        );
        let queued: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM tasks WHERE package = $1 AND cancelled = 0")
                .bind(&key)
                .fetch_one(&mut conn)
                .await?;
        anyhow::ensure!(queued == 0, "{name}: {queued} task(s) still queued");
    }
    let _ = sqlx::Connection::close(conn).await;

    // A new Update starts over: the fixed versions install.
    for name in ["membomb", "linkdag"] {
        let generation = client
            .update(update(name, "2.0.0"))
            .await?
            .into_inner()
            .generation;
        journey::wait_running(&mut client, &app(name, &ns), generation).await?;
    }
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    for name in ["membomb", "linkdag", "calm"] {
        anyhow::ensure!(cms.get_opt(name).await?.is_some(), "ConfigMap {name}");
    }
    for name in ["membomb", "linkdag", "calm"] {
        let r = app(name, &ns);
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                ..Default::default()
            })
            .await?;
        journey::wait_gone(&mut client, &r).await?;
    }
    Ok(())
}
