//! Bounded evaluation, as an attacker would try it through real processes: a package's hostile
//! jq programs (a jqFilter, a JQPatch) are stopped with an error naming the limit, nothing is
//! changed, and `berth up` keeps serving.

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
        tokio::process::Command::new(berth_tests::binary("berth"))
            .args(all)
            .output()
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

/// `berth up` as root runs hooks as nobody without being told: they reach their package in
/// the cache, and cannot read the services' keys or databases, nor list the data directory.
/// `--hook-user root` is the explicit opt-out: the same hook then reads all of them. Needs
/// root (to switch users).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn berth_up_as_root_runs_hooks_as_nobody_away_from_its_secrets() -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: running hooks as another user needs root");
        return Ok(());
    }
    let nobody = snoop_as(&[]).await?;
    anyhow::ensure!(
        nobody == "uid=65534 found=yes key=no db=no list=no",
        "the default hook user's view of berth's data directory: {nobody}"
    );
    let root = snoop_as(&["--hook-user", "root"]).await?;
    anyhow::ensure!(
        root == "uid=0 found=yes key=yes db=yes list=yes",
        "--hook-user root: {root}"
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

/// A data directory the hook user cannot reach (its parent is 0700, like a checkout under
/// `/root`): `berth up` keeps it the owner's and puts the package cache in a fresh directory
/// of the temp directory instead, so hooks still run, as nobody, and that directory is gone
/// when berth stops. Needs root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn berth_up_under_a_private_directory_still_runs_hooks_as_nobody() -> anyhow::Result<()> {
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
                .is_some_and(|p| p.starts_with("uid=65534 found=no key=no db=no ")),
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
            && stderr.contains("--hook-user root"),
        "the refusal names the flag, the directory and the ways out: {stderr}"
    );
    anyhow::ensure!(
        std::path::Path::new(&cache).read_dir()?.next().is_none(),
        "nothing was fetched"
    );
    Ok(())
}
