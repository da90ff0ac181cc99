//! `scale-bench`: how long berth takes to install many small packages on a cluster, what each
//! of its processes costs in memory, and how long `helm install --wait` takes for the same.
//!
//! It writes a repository of `--packages` apps (default 1,000), each a chart with one
//! ConfigMap and one beforeHelm shell hook that sets the value the ConfigMap shows, and:
//! - `--mode split` (default): starts the services as separate processes with mutual TLS
//!   ([`SplitTopology`]), the broker, lifecycle and hookevent on a real PostgreSQL server
//!   (`berth-testpg`), and `--workers` worker processes (default 3);
//! - `--mode up`: starts one `berth up` process with its embedded defaults;
//!
//! then Updates every package (`--front resources`, `--mode up` only: creates an Application
//! resource per package instead, `--in-flight` at once, and times until every resource is
//! Ready as well; `--in-flight` Updates at once, default 16; a call the gateway's
//! rate limit refuses is retried after a moment; `--rate N` sets that limit, 100 calls/s per
//! caller after a burst of 200 by default, to N calls/s and a burst of N), and reads lifecycle's
//! `berth_packages{phase="Running"}` gauge every 100 ms until all are Running (then a List
//! confirms it). It prints the time from the first Update to all Running, the peak resident memory
//! (`VmHWM` of `/proc/PID/status`) and CPU time of every berth process, and checks that every
//! ConfigMap carries the hook's value. Then, unless `--no-helm`, it stops berth and installs
//! the same chart `--packages` times with `helm install --wait`, 8 at once (`--helm-parallel`),
//! as distinct releases in a namespace of their own, and prints that time.
//!
//! The cluster is the embedded dev cluster (in this process) or the one of
//! `BERTH_TEST_KUBECONFIG`; helm is `$HELM` or `helm` on `PATH`. The services are the builds
//! next to this binary. Run: `cargo build --release -p berth-gateway -p berth-worker
//! -p berth-lifecycle -p berth-hookevent -p berth-release -p berth-tests --bins`, then
//! `BERTH_LOG=warn target/release/scale-bench [--packages 1000] [--mode split|up] [--no-helm]`.
//!
//! Berth's scratch files go under `--scratch DIR` (default `/dev/shm`, a tmpfs; `system` for the
//! system temp directory): the hook runs' files (several per run, created and deleted; the
//! chart mounts a Memory `emptyDir` for them) and, in split mode, the workers' package caches.
//! PostgreSQL's data and `berth up`'s database stay on disk. This machine's root file system is
//! ext4 without a journal, where allocating an inode skips every inode deleted in the last
//! 60–360 s, one by one: after a run (or a build) deleted some 30,000 files, `perf` put a third
//! of the workers' CPU in that scan, and the next run took up to a third longer. A Kubernetes
//! node's file systems are journaled and do not do that.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use berth_tests::measure::{CpuByProgram, cpu_time};
use berth_tests::process::Proc;
use berth_tests::{AllInOne, Databases, SplitTopology, TestCluster, TestNamespace, journey};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::ConfigMap;

/// Longest the packages may take to all be Running (and helm to install them all).
const CONVERGE_DEADLINE: Duration = Duration::from_secs(1800);
/// How often the bench looks again while waiting for namespaces to go.
const POLL: Duration = Duration::from_millis(500);
/// How often lifecycle's packages-by-phase gauge is read while the packages converge.
const GAUGE_POLL: Duration = Duration::from_millis(100);
/// Programs shown in the machine's CPU breakdown.
const MACHINE_PROGRAMS_SHOWN: usize = 12;
/// PostgreSQL statements shown, the most costly first.
const STATEMENTS_SHOWN: i64 = 15;
/// A tmpfs on most Linux machines: the default parent of berth's scratch files (`--scratch`).
const SHM: &str = "/dev/shm";
/// The value the beforeHelm hook patches in; the chart's own default differs.
const FROM_HOOK: &str = "from-the-hook";

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Split,
    Up,
}

struct Args {
    packages: usize,
    mode: Mode,
    workers: usize,
    in_flight: usize,
    helm: bool,
    helm_parallel: usize,
    /// The gateway's per-caller rate limit (calls per second, and the burst), when not its
    /// default.
    rate: Option<usize>,
    /// Where berth's scratch files go (`--scratch`): `None` is the system temp directory.
    scratch: Option<std::path::PathBuf>,
    /// Install through Application resources (berth's controller) instead of gRPC Updates.
    resources: bool,
}

const USAGE: &str = "flags: --packages N, --mode split|up, --front grpc|resources, --workers N, \
                     --in-flight N, --rate N, --helm-parallel N, --scratch DIR|system, --no-helm";

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        packages: 1000,
        mode: Mode::Split,
        workers: 3,
        in_flight: 16,
        helm: true,
        helm_parallel: 8,
        rate: None,
        // Off this machine's disk (see the module's comment); the chart, too, mounts a Memory
        // emptyDir for the hook files.
        scratch: Path::new(SHM)
            .is_dir()
            .then(|| Path::new(SHM).to_path_buf()),
        resources: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--no-helm" {
            args.helm = false;
            continue;
        }
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let number = || -> anyhow::Result<usize> {
            match value.parse() {
                Ok(n) if n > 0 => Ok(n),
                _ => bail!("{flag}: {value:?} is not a positive number"),
            }
        };
        match flag.as_str() {
            "--packages" => args.packages = number()?,
            "--workers" => args.workers = number()?,
            "--in-flight" => args.in_flight = number()?,
            "--helm-parallel" => args.helm_parallel = number()?,
            "--rate" => args.rate = Some(number()?),
            "--scratch" => {
                args.scratch = (value != "system").then(|| std::path::PathBuf::from(&value));
            }
            "--front" => {
                args.resources = match value.as_str() {
                    "grpc" => false,
                    "resources" => true,
                    _ => bail!("--front: {value:?} is neither grpc nor resources"),
                }
            }
            "--mode" => {
                args.mode = match value.as_str() {
                    "split" => Mode::Split,
                    "up" => Mode::Up,
                    _ => bail!("--mode: {value:?} is neither split nor up"),
                }
            }
            _ => bail!("unknown flag {flag} ({USAGE})"),
        }
    }
    if args.resources && args.mode != Mode::Up {
        bail!("--front resources needs --mode up (the controller runs in berth up)");
    }
    Ok(args)
}

fn name(i: usize) -> String {
    format!("p{i:05}")
}

/// The hook: `--config` declares beforeHelm; a run patches `greeting` into the values.
const HOOK: &str = r#"#!/bin/sh
if [ "$1" = "--config" ]; then
  printf 'configVersion: v1\nbeforeHelm: 10\n'
  exit 0
fi
printf '[{"op":"add","path":"/greeting","value":"from-the-hook"}]' > "$VALUES_JSON_PATCH_PATH"
"#;

/// Writes package `i`: `<root>/<name>/1.0.0/` with package.yaml, a chart of one ConfigMap,
/// and the hook.
fn write_package(root: &Path, i: usize) -> anyhow::Result<()> {
    berth_tests::write_app(
        root,
        &name(i),
        &[
            ("values.yaml", "greeting: from-the-chart\n"),
            (
                "templates/configmap.yaml",
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\n\
                 data:\n  greeting: {{ .Values.greeting | quote }}\n",
            ),
            ("hooks/10-greeting.sh", HOOK),
        ],
    )
}

/// Peak resident set (`VmHWM`) of `pid`, in MiB.
fn peak_rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .context("no VmHWM in /proc status")?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kib / 1024.0)
}

/// The berth processes of a run.
enum Berth {
    Split(SplitTopology),
    Up(AllInOne),
}

impl Berth {
    fn endpoint(&self) -> String {
        match self {
            Berth::Split(t) => t.gateway.endpoint(),
            Berth::Up(u) => u.proc.endpoint(),
        }
    }

    /// Every process with its role.
    fn procs(&self) -> Vec<(&'static str, &Proc)> {
        match self {
            Berth::Split(t) => t.procs().collect(),
            Berth::Up(u) => vec![("berth up", &u.proc)],
        }
    }

    /// Where the process that counts packages by phase (lifecycle) serves its metrics.
    fn lifecycle_metrics(&self) -> anyhow::Result<&str> {
        let proc = match self {
            Berth::Split(t) => t.lifecycle(),
            Berth::Up(u) => &u.proc,
        };
        proc.metrics
            .as_deref()
            .context("lifecycle announced no metrics address")
    }

    async fn stop(self) {
        match self {
            Berth::Split(t) => t.stop().await,
            Berth::Up(u) => u.proc.stop().await,
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    if let Some(rate) = args.rate {
        // The gateway's flags' environment variables (`berth up` takes the same).
        berth_tests::process::child_env("BERTH_RATE_PER_CALLER", &rate.to_string());
        berth_tests::process::child_env("BERTH_RATE_BURST", &rate.to_string());
    }
    let dir = tempfile::tempdir()?;
    let (repo_dir, repo) = berth_tests::temp_repo();
    for i in 0..args.packages {
        write_package(repo_dir.path(), i)?;
    }
    let cluster = TestCluster::start().await?;
    // Reachable by the hook user (nobody, when the bench runs as root).
    let scratch = match &args.scratch {
        Some(parent) => tempfile::Builder::new()
            .prefix("scale-bench")
            .tempdir_in(parent)
            .with_context(|| format!("--scratch {}", parent.display()))?,
        None => tempfile::tempdir()?,
    };
    let reachable: std::fs::Permissions = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(scratch.path(), reachable.clone())?;
    let hook_tmp = scratch.path().join("hooks");
    std::fs::create_dir(&hook_tmp)?;
    std::fs::set_permissions(&hook_tmp, reachable)?;
    let hook_tmp = hook_tmp.display().to_string();
    let hook_tmp_args = ["--hook-tmp-dir", hook_tmp.as_str()];
    // Kept until the end: the PostgreSQL server of split mode.
    let mut pg = None;
    let berth = match args.mode {
        Mode::Split => {
            // pg_stat_statements: the bench prints where PostgreSQL's time went.
            let server = berth_testpg::PgServer::start_with(&[(
                "shared_preload_libraries",
                "pg_stat_statements",
            )])
            .await;
            enable_statement_stats(&server.url()).await?;
            let databases = Databases {
                queue: server.create_database("berth_queue").await,
                lifecycle: server.create_database("berth_lifecycle").await,
                hookevent: server.create_database("berth_hookevent").await,
            };
            pg = Some(server);
            let repositories = berth_tests::process::repositories_file(dir.path(), "")?;
            let mut topology = SplitTopology::start_full(
                &cluster.kubeconfig,
                scratch.path(),
                &hook_tmp_args,
                &repositories,
                &databases,
            )
            .await?;
            for _ in 1..args.workers {
                topology.add_worker().await?;
            }
            Berth::Split(topology)
        }
        // On the dev cluster, `berth up` embeds its own (as a user runs it); helm then uses
        // the bench's.
        Mode::Up => Berth::Up({
            // The package cache (`<data dir>/packages`) on the scratch directory too, as the
            // split-mode workers' caches; the databases stay in the data directory on disk.
            let data = dir.path().join("up");
            let cache = scratch.path().join("up-packages");
            std::fs::create_dir_all(&data)?;
            std::fs::create_dir(&cache)?;
            std::fs::set_permissions(&cache, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
            std::os::unix::fs::symlink(&cache, data.join("packages"))?;
            AllInOne::start_with(
                &data,
                TestCluster::is_real().then_some(cluster.kubeconfig.as_path()),
                &hook_tmp_args,
            )
            .await?
        }),
    };
    let kube = match &berth {
        Berth::Up(up) => berth_tests::cluster::client_for(&up.kubeconfig).await?,
        Berth::Split(_) => cluster.client.clone(),
    };
    let result = run(&berth, &kube, &repo, &args).await;
    if let (Ok(()), Some(server)) = (&result, &pg) {
        print_statement_stats(&server.url(), args.packages).await?;
    }
    berth.stop().await;
    drop(pg);
    let result = match result {
        Ok(()) if args.helm => helm(&cluster, repo_dir.path(), &args).await,
        other => other,
    };
    cluster.stop().await;
    result
}

/// Waits until no namespace is being deleted: the namespace controller deleting an earlier
/// run's 1,000 ConfigMaps and release Secrets would load the API server and etcd during this
/// run.
async fn settle(kube: &kube::Client) -> anyhow::Result<()> {
    let namespaces = kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(kube.clone());
    let deadline = Instant::now() + CONVERGE_DEADLINE;
    let mut told = false;
    loop {
        let terminating = namespaces
            .list(&Default::default())
            .await?
            .items
            .iter()
            .filter(|n| n.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating"))
            .count();
        if terminating == 0 {
            return Ok(());
        }
        if !told {
            println!("waiting for {terminating} namespace(s) being deleted to go");
            told = true;
        }
        if Instant::now() >= deadline {
            bail!("{terminating} namespace(s) still being deleted after {CONVERGE_DEADLINE:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Installs every package through berth and prints the figures.
async fn run(berth: &Berth, kube: &kube::Client, repo: &str, args: &Args) -> anyhow::Result<()> {
    settle(kube).await?;
    let namespace = TestNamespace::create(kube, "scale").await?;
    let client = journey::connect(&berth.endpoint()).await?;
    let cpu_before: Vec<Duration> = berth
        .procs()
        .iter()
        .map(|(_, p)| cpu_time(p.pid().context("a berth process exited")?, false))
        .collect::<anyhow::Result<_>>()?;
    let machine_before = CpuByProgram::now()?;
    let start = Instant::now();
    let applications = match berth {
        Berth::Up(up) if args.resources => Some(applications(kube, &namespace, up)),
        _ => None,
    };
    match &applications {
        Some((api, label)) => {
            futures::stream::iter(0..args.packages)
                .map(|i| create_application(api, label, &namespace, repo, i))
                .buffer_unordered(args.in_flight)
                .try_collect::<()>()
                .await?
        }
        None => {
            futures::stream::iter(0..args.packages)
                .map(|i| {
                    let mut client = client.clone();
                    let (namespace, name) = (namespace.to_string(), name(i));
                    async move { journey::update_app(&mut client, repo, &namespace, &name).await }
                })
                .buffer_unordered(args.in_flight)
                .try_collect::<()>()
                .await?
        }
    }
    let updated = start.elapsed();
    let mut client = client;
    let deadline = start + CONVERGE_DEADLINE;
    // Watched as an operator would, on lifecycle's `berth_packages{phase="Running"}` gauge:
    // a List of every package each time (what `berth list` shows) cost berth a few per cent of
    // the run's CPU. The gauge may lag the packages (it is refreshed at most twice a second),
    // never lead them; the List below confirms.
    let metrics = berth.lifecycle_metrics()?.to_owned();
    let counted = loop {
        let running = running_by_gauge(&metrics).await?;
        if running >= args.packages as f64 {
            break running;
        }
        if Instant::now() >= deadline {
            bail!("not every package was Running within {CONVERGE_DEADLINE:?}");
        }
        tokio::time::sleep(GAUGE_POLL).await;
    };
    let converged = start.elapsed();
    let ready = match &applications {
        Some((api, _)) => Some(all_ready(api, args.packages, deadline).await? - start),
        None => None,
    };
    let listed = journey::count_running(&mut client).await?;
    anyhow::ensure!(
        listed == Some(args.packages),
        "the gauge counted {counted} Running packages; List found {listed:?} of {}",
        args.packages
    );
    let (by_program, busy) = CpuByProgram::now()?.since(&machine_before);
    let mode = match args.mode {
        Mode::Split => format!(
            "split mode: PostgreSQL, {} worker process(es)",
            args.workers
        ),
        Mode::Up => "berth up".to_owned(),
    };
    println!(
        "berth ({mode}), {} packages, {} Updates in flight, gateway rate limit {}, scratch files in {}, {} cluster",
        args.packages,
        args.in_flight,
        args.rate.map_or("default".to_owned(), |r| format!("{r}/s")),
        args.scratch
            .as_ref()
            .map_or("the system temp directory".to_owned(), |d| d
                .display()
                .to_string()),
        if TestCluster::is_real() {
            "real"
        } else {
            "dev"
        }
    );
    match ready {
        Some(ready) => println!(
            "through Application resources: first create -> all created: {:.1} s; -> all Running: {:.1} s; -> all resources Ready: {:.1} s",
            updated.as_secs_f64(),
            converged.as_secs_f64(),
            ready.as_secs_f64()
        ),
        None => println!(
            "first Update -> all Updates answered: {:.1} s; -> all Running: {:.1} s",
            updated.as_secs_f64(),
            converged.as_secs_f64()
        ),
    }
    for ((role, p), before) in berth.procs().into_iter().zip(cpu_before) {
        let pid = p.pid().context("a berth process exited")?;
        // Open descriptors: mostly connections (a watch of the Kubernetes API holds one).
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count();
        println!(
            "  {role:<10} ({:<15}): peak RSS {:>6.1} MiB, CPU {:>6.2} s, {fds:>5} open fds",
            p.name,
            peak_rss_mib(pid)?,
            (cpu_time(pid, false)? - before).as_secs_f64()
        );
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "machine CPU until all Running: {:.1} s busy of {:.1} s ({cores} cores); by program:",
        busy.as_secs_f64(),
        converged.as_secs_f64() * cores as f64
    );
    for (program, cpu) in by_program.iter().take(MACHINE_PROGRAMS_SHOWN) {
        println!("  {program:<16} {:>7.2} s", cpu.as_secs_f64());
    }
    rpc_counts(berth, args.packages).await?;
    // What a user would look at: every ConfigMap shows the value the hook set.
    let maps = kube::Api::<ConfigMap>::namespaced(kube.clone(), &namespace)
        .list(&Default::default())
        .await?;
    let from_hook = maps
        .items
        .iter()
        .filter(|m| {
            m.data
                .as_ref()
                .and_then(|d| d.get("greeting"))
                .is_some_and(|g| g == FROM_HOOK)
        })
        .count();
    anyhow::ensure!(
        from_hook == args.packages,
        "{from_hook} of {} ConfigMaps carry the hook's value",
        args.packages
    );
    if let Some((api, label)) = &applications {
        remove_applications(api, label).await?;
    }
    Ok(())
}

/// Deletes the run's Applications and waits until berth has removed them all (their
/// finalizer gone), printing how long that took: the namespace is deleted next, and an
/// Application left with berth's finalizer after berth stops would hold it forever.
async fn remove_applications(
    api: &kube::Api<kube::api::DynamicObject>,
    (key, value): &(String, String),
) -> anyhow::Result<()> {
    let start = Instant::now();
    let selected = kube::api::ListParams::default().labels(&format!("{key}={value}"));
    api.delete_collection(&Default::default(), &selected)
        .await?;
    let deadline = start + CONVERGE_DEADLINE;
    loop {
        let left = api.list_metadata(&selected).await?.items.len();
        if left == 0 {
            break;
        }
        if Instant::now() >= deadline {
            bail!("{left} Applications still there {CONVERGE_DEADLINE:?} after their deletion");
        }
        tokio::time::sleep(POLL).await;
    }
    println!(
        "all Applications deleted -> all removed: {:.1} s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The Applications of the run's namespace, and the label that makes them `up`'s.
fn applications(
    kube: &kube::Client,
    namespace: &str,
    up: &AllInOne,
) -> (kube::Api<kube::api::DynamicObject>, (String, String)) {
    let resource = kube::api::ApiResource {
        group: "berth.io".into(),
        version: "v1alpha1".into(),
        api_version: "berth.io/v1alpha1".into(),
        kind: "Application".into(),
        plural: "applications".into(),
    };
    (
        kube::Api::namespaced_with(kube.clone(), namespace, &resource),
        up.instance.clone(),
    )
}

async fn create_application(
    api: &kube::Api<kube::api::DynamicObject>,
    (key, value): &(String, String),
    namespace: &str,
    repo: &str,
    i: usize,
) -> anyhow::Result<()> {
    let object: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "berth.io/v1alpha1", "kind": "Application",
        "metadata": {"name": name(i), "namespace": namespace, "labels": {key: value}},
        "spec": {"repository": repo, "version": "1.0.0"},
    }))?;
    api.create(&Default::default(), &object)
        .await
        .with_context(|| format!("creating Application {}", name(i)))?;
    Ok(())
}

/// Waits until `packages` Applications are Ready at their generation; when that was.
async fn all_ready(
    api: &kube::Api<kube::api::DynamicObject>,
    packages: usize,
    deadline: Instant,
) -> anyhow::Result<Instant> {
    loop {
        let list = api.list(&Default::default()).await?;
        let ready = list
            .items
            .iter()
            .filter(|a| {
                let status = &a.data["status"];
                status["observedGeneration"].as_i64() == a.metadata.generation
                    && status["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
            })
            .count();
        if ready >= packages {
            return Ok(Instant::now());
        }
        if Instant::now() >= deadline {
            bail!("{ready} of {packages} Applications Ready within {CONVERGE_DEADLINE:?}");
        }
        tokio::time::sleep(GAUGE_POLL * 5).await;
    }
}

/// Prints the gRPC calls the berth servers answered, per method and per package, and their
/// mean duration at the server (from each process's `berth_rpc_requests_total` and
/// `berth_rpc_request_duration_seconds`; every call is counted once, by its server).
async fn rpc_counts(berth: &Berth, packages: usize) -> anyhow::Result<()> {
    // method -> (calls, seconds spent answering them)
    let mut calls: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
    for (_, p) in berth.procs() {
        let Some(addr) = &p.metrics else { continue };
        let page = berth_tests::scrape_metrics(addr).await?;
        for line in page.lines() {
            let (count, rest) = if let Some(r) = line.strip_prefix("berth_rpc_requests_total{") {
                (true, r)
            } else if let Some(r) = line.strip_prefix("berth_rpc_request_duration_seconds_sum{") {
                (false, r)
            } else {
                continue;
            };
            let (labels, value) = rest.rsplit_once("} ").context("a metrics line")?;
            let label = |key: &str| {
                labels
                    .split(',')
                    .find_map(|l| l.strip_prefix(key))
                    .map(|v| v.trim_matches('"').to_owned())
                    .unwrap_or_default()
            };
            let method = label("method=");
            let method = method.rsplit('/').next().unwrap_or_default();
            let entry = calls
                .entry(format!("{}/{method}", label("service=")))
                .or_default();
            let value = value.parse::<f64>()?;
            if count {
                entry.0 += value;
            } else {
                entry.1 += value;
            }
        }
    }
    let mut calls: Vec<_> = calls.into_iter().collect();
    calls.sort_by(|a, b| b.1.0.total_cmp(&a.1.0));
    println!("gRPC calls answered: calls (per package), mean time at the server");
    for (method, (n, seconds)) in calls {
        println!(
            "  {method:<32} {n:>8} ({:>4.1}) {:>8.2} ms",
            n / packages as f64,
            seconds * 1000.0 / n.max(1.0)
        );
    }
    Ok(())
}

/// The value of lifecycle's `berth_packages{phase="Running"}` gauge served at `addr`.
async fn running_by_gauge(addr: &str) -> anyhow::Result<f64> {
    const SERIES: &str = r#"berth_packages{phase="Running"} "#;
    let text = berth_tests::scrape_metrics(addr).await?;
    let value = text
        .lines()
        .find_map(|line| line.strip_prefix(SERIES))
        .with_context(|| format!("no {SERIES} at {addr}"))?;
    Ok(value.trim().parse()?)
}

/// Creates the `pg_stat_statements` view in the server's default database (it shows every
/// database's statements).
async fn enable_statement_stats(url: &str) -> anyhow::Result<()> {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::query("CREATE EXTENSION pg_stat_statements")
        .execute(&mut conn)
        .await?;
    Ok(())
}

/// Prints the statements that took the server the most time, with their calls per package.
async fn print_statement_stats(url: &str, packages: usize) -> anyhow::Result<()> {
    use sqlx::{Connection as _, Row as _};
    let mut conn = sqlx::PgConnection::connect(url).await?;
    // More with SCALE_BENCH_STATEMENTS=N.
    let shown = std::env::var("SCALE_BENCH_STATEMENTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(STATEMENTS_SHOWN);
    let rows = sqlx::query(
        "SELECT calls, total_exec_time, query FROM pg_stat_statements \
         ORDER BY total_exec_time DESC LIMIT $1",
    )
    .bind(shown)
    .fetch_all(&mut conn)
    .await?;
    let (total, calls): (f64, i64) =
        sqlx::query_as("SELECT sum(total_exec_time), sum(calls)::bigint FROM pg_stat_statements")
            .fetch_one(&mut conn)
            .await?;
    println!(
        "PostgreSQL statements: {:.1} per package, {:.1} s executing in all; the most costly \
         (calls per package, ms in all):",
        calls as f64 / packages as f64,
        total / 1000.0
    );
    for row in rows {
        let calls: i64 = row.try_get(0)?;
        let ms: f64 = row.try_get(1)?;
        let query: String = row.try_get(2)?;
        let query: String = query.split_whitespace().collect::<Vec<_>>().join(" ");
        println!(
            "  {:>6.1} {:>8.0}  {}",
            calls as f64 / packages as f64,
            ms,
            query.chars().take(150).collect::<String>()
        );
    }
    Ok(())
}

/// Installs the chart `--packages` times with `helm install --wait`, `--helm-parallel` at once,
/// and prints the time.
async fn helm(cluster: &TestCluster, repo: &Path, args: &Args) -> anyhow::Result<()> {
    let helm = std::env::var_os("HELM").unwrap_or_else(|| "helm".into());
    let namespace = TestNamespace::create(&cluster.client, "scale-helm").await?;
    let chart = repo.join(name(0)).join("1.0.0");
    let home = tempfile::tempdir()?;
    let install = |i: usize| {
        let mut command = tokio::process::Command::new(&helm);
        command
            .args(["install", &format!("h{i:05}")])
            .arg(&chart)
            .args(["--namespace", &namespace, "--wait", "--timeout", "10m"])
            .arg("--kubeconfig")
            .arg(&cluster.kubeconfig)
            .env("HELM_CONFIG_HOME", home.path().join("config"))
            .env("HELM_CACHE_HOME", home.path().join("cache"))
            .env("HELM_DATA_HOME", home.path().join("data"))
            .kill_on_drop(true);
        async move {
            let out = command.output().await.context("running helm")?;
            anyhow::ensure!(
                out.status.success(),
                "helm install h{i:05}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(())
        }
    };
    let start = Instant::now();
    tokio::time::timeout(
        CONVERGE_DEADLINE,
        futures::stream::iter(0..args.packages)
            .map(install)
            .buffer_unordered(args.helm_parallel)
            .try_collect::<()>(),
    )
    .await
    .context("helm did not install every release in time")??;
    println!(
        "helm install --wait, {} releases, {} at once: {:.1} s",
        args.packages,
        args.helm_parallel,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
