//! `hook-latency-bench`: event → hook process start, end to end, through the real processes.
//!
//! The bench starts the broker, lifecycle, hookevent, release and one worker as their own
//! processes (the builds next to this binary), against the embedded dev cluster (in this process)
//! or the cluster of `BERTH_TEST_KUBECONFIG`. It installs instances of the fixture app
//! `tests/fixtures/packages/latency`, whose shell hook binds to the ConfigMaps of its namespace
//! (`jqFilter: .metadata.name`, Added only, `keepFullObjectsInMemory: false`) and, as its first
//! statement, reads the clock (`$EPOCHREALTIME`, CLOCK_REALTIME, microseconds) and then appends
//! one line per run with that time and its binding contexts to its package's file. It then creates ConfigMaps at a steady rate and
//! measures, for every (package, object), the time from just before the create call to the start
//! of the first hook process whose binding contexts name the object. Every expected hook start
//! must be seen: a missing one fails the bench, it is never dropped from the figures.
//!
//! The path measured is the whole of it: API server → hookevent's watch → jq, checksum → HookRun
//! enqueued at the broker (SQLite) → a worker's lease → the task handler (package cache, values,
//! throttle) → fork/exec of the hook → bash reaching its first statement.
//!
//! Scenarios ("100 events/s with 100 packages each watching ConfigMaps" read so that the hook
//! runs stay at the offered rate; 100 packages all watching one namespace at 100 events/s would
//! be 10,000 hook processes a second):
//! - **1 package**: one app; `rate` ConfigMaps/s in its namespace (`rate` hook runs/s, all on one
//!   queue, so the broker may merge queued runs into one hook process).
//! - **N packages, own namespaces**: N apps, each in its own namespace (apps watch only their
//!   namespace, so N watches); the `rate` ConfigMaps/s go round robin over the namespaces, so
//!   each package sees `rate / N` events/s and the total is `rate` hook runs/s.
//! - **N packages, one shared watch**: N apps in one namespace, so their bindings share one
//!   watch and every event fans out to N hooks; `rate / N` ConfigMaps/s, so again `rate` hook
//!   runs/s.
//!
//! The packages are installed and driven through lifecycle's API (the gateway only forwards to it
//! and is not on the event path). Build in release and run:
//! `cargo build --release -p berth-worker -p berth-lifecycle -p berth-hookevent -p berth-release
//! -p berth-tests --bins`, then `BERTH_LOG=warn target/release/hook-latency-bench [--rate 100]
//! [--seconds 10] [--packages 100] [--concurrency 4] [--scenarios one,own,shared]
//! [--data-dir DIR]` (`--concurrency` is the worker's: tasks it runs at once). The worker puts
//! each hook run's files in the system temp dir (`TMPDIR`), on the path before the hook starts:
//! `TMPDIR=/dev/shm ... --data-dir /var/tmp` shows what a tmpfs there changes, with the
//! databases still on disk.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail, ensure};
use berth_proto::lifecycle::lifecycle_client::LifecycleClient;
use berth_proto::v1::{self, PackageKind, PackageRef};
use berth_tests::measure::{cpu_time, percentile};
use berth_tests::{Proc, TestCluster};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};

/// Longest the packages of a scenario may take to install (or to be removed).
const CONVERGE_DEADLINE: Duration = Duration::from_secs(600);
/// Longest after the last create the bench waits for the hook starts still missing.
const DRAIN_DEADLINE: Duration = Duration::from_secs(60);
/// How often the bench looks for new hook start files and package phases.
const POLL: Duration = Duration::from_millis(50);
/// Updates (and Removes) in flight while installing a scenario's packages.
const INSTALL_CONCURRENCY: usize = 16;

/// The bench measures berth's own latency on one machine: its processes talk plain gRPC.
const PLAIN: &str = "--insecure-plaintext";

type Lifecycle = LifecycleClient<tonic::transport::Channel>;

#[derive(clap::Parser)]
#[command(
    name = "hook-latency-bench",
    about = "event→hook start latency of berth's hooks"
)]
struct Options {
    /// ConfigMap changes per second, over all packages.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    rate: u64,
    /// Seconds of changes per scenario.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    seconds: u64,
    /// Packages of the `own` and `shared` scenarios.
    #[arg(long, default_value_t = 100, value_parser = positive)]
    packages: usize,
    /// Tasks each worker runs at once.
    #[arg(long, default_value_t = 4, value_parser = positive)]
    concurrency: usize,
    /// Which scenarios to run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "one,own,shared",
        value_parser = ["one", "own", "shared"]
    )]
    scenarios: Vec<String>,
    /// Where the bench's data directory (databases, package cache, hook start files) goes; the
    /// system temp dir by default.
    #[arg(long)]
    data_dir: Option<std::path::PathBuf>,
}

/// A count of at least one.
fn positive(value: &str) -> Result<usize, String> {
    match value.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// The berth processes of the bench (a split topology without the gateway).
struct Topology {
    procs: Vec<Proc>,
    lifecycle: Lifecycle,
    /// hookevent's shard Leases live here (kept while the bench runs).
    _leases: berth_tests::TestNamespace,
}

impl Topology {
    async fn start(
        bin: &Path,
        kubeconfig: &Path,
        dir: &Path,
        concurrency: usize,
    ) -> anyhow::Result<Topology> {
        let start = |name: &str, args: Vec<String>, announce: &'static str| {
            let path = bin.join(name);
            async move {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                Proc::start_path(&path, &args, announce)
                    .await
                    .with_context(|| {
                        format!(
                            "starting {} (build it in the same profile as the bench)",
                            path.display()
                        )
                    })
            }
        };
        let any = "127.0.0.1:0".to_owned();
        let sqlite = |name: &str| format!("sqlite://{}", dir.join(name).display());
        let kc = kubeconfig.display().to_string();
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        let repositories = berth_tests::process::repositories_file(dir, "")?
            .display()
            .to_string();
        let broker = start(
            "berth-queue",
            s(&[
                "serve",
                "--listen",
                &any,
                "--database",
                &sqlite("queue.db"),
                PLAIN,
            ]),
            "listening on ",
        )
        .await?;
        let b = broker.endpoint();
        let lifecycle = start(
            "berth-lifecycle",
            s(&[
                "--listen",
                &any,
                "--database",
                &sqlite("lifecycle.db"),
                "--broker",
                &b,
                "--repositories",
                &repositories,
                PLAIN,
            ]),
            "listening on ",
        )
        .await?;
        let leases = berth_tests::process::lease_namespace(kubeconfig).await?;
        let hookevent = start(
            "berth-hookevent",
            s(&[
                "--listen",
                &any,
                "--database",
                &sqlite("hookevent.db"),
                "--broker",
                &b,
                "--kubeconfig",
                &kc,
                "--lease-namespace",
                &leases,
                PLAIN,
            ]),
            "listening on ",
        )
        .await?;
        let record_key = berth_tests::process::record_key_args(dir)?;
        let release = start(
            "berth-release",
            s(&[
                "--listen",
                &any,
                "--kubeconfig",
                &kc,
                "--lease-namespace",
                &leases,
                PLAIN,
                &record_key[0],
                &record_key[1],
            ]),
            "listening on ",
        )
        .await?;
        let cache = dir.join("packages").display().to_string();
        let (l, r, h) = (
            lifecycle.endpoint(),
            release.endpoint(),
            hookevent.endpoint(),
        );
        let n = concurrency.to_string();
        let worker_args = [
            "work",
            "--broker",
            &b,
            "--lifecycle",
            &l,
            "--release",
            &r,
            "--hookevent",
            &h,
            "--cache-dir",
            &cache,
            "--repositories",
            &repositories,
            "--concurrency",
            &n,
            PLAIN,
        ];
        let worker = start("berth-queue", s(&worker_args), "worker ").await?;
        let client = LifecycleClient::connect(l).await?;
        Ok(Topology {
            procs: vec![worker, release, hookevent, lifecycle, broker],
            lifecycle: client,
            _leases: leases,
        })
    }

    /// CPU time used so far by each process (with its reaped children: the worker's include
    /// the hook processes), and by this bench (the embedded dev cluster runs in it).
    fn cpu(&self) -> anyhow::Result<Vec<(String, Duration)>> {
        let mut out = Vec::with_capacity(self.procs.len() + 1);
        for p in &self.procs {
            let pid = p.pid().with_context(|| format!("{} exited", p.name))?;
            let name = if p.name == "berth-queue" {
                if out.is_empty() {
                    "worker (with hooks)"
                } else {
                    "broker"
                }
            } else {
                p.name.as_str()
            };
            out.push((name.to_owned(), cpu_time(pid, true)?));
        }
        out.push((
            "bench + dev cluster".to_owned(),
            cpu_time(std::process::id(), true)?,
        ));
        Ok(out)
    }

    async fn stop(self) {
        for p in self.procs {
            p.stop().await;
        }
    }
}

/// One scenario: which packages, in which namespaces, and which ConfigMap goes where.
struct Scenario {
    title: String,
    /// (namespace, instance name) of each package.
    packages: Vec<(String, String)>,
    /// ConfigMaps per second.
    rate: f64,
    events: usize,
    /// For event `i`: its namespace and the packages (indexes) expected to run for it.
    route: fn(usize, usize) -> (usize, Vec<usize>),
}

fn own_namespaces(i: usize, n: usize) -> (usize, Vec<usize>) {
    (i % n, vec![i % n])
}

fn shared_namespace(_: usize, n: usize) -> (usize, Vec<usize>) {
    (0, (0..n).collect())
}

fn short_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..6].to_owned()
}

fn scenarios(o: &Options) -> Vec<Scenario> {
    let n = o.packages;
    let events = (o.rate * o.seconds) as usize;
    let id = short_id();
    let one = Scenario {
        title: format!("1 package, {} events/s", o.rate),
        packages: vec![(format!("lat1-{id}"), "lat-0".into())],
        rate: o.rate as f64,
        events,
        route: own_namespaces,
    };
    let own = Scenario {
        title: format!("{n} packages in own namespaces, {} events/s in all", o.rate),
        packages: (0..n)
            .map(|p| (format!("lat{n}-{id}-{p}"), format!("lat-{p}")))
            .collect(),
        rate: o.rate as f64,
        events,
        route: own_namespaces,
    };
    let shared_ns = format!("latshared-{id}");
    let shared = Scenario {
        title: format!(
            "{n} packages sharing one watch, {} events/s × {n} hooks (bursts)",
            o.rate as f64 / n as f64
        ),
        packages: (0..n)
            .map(|p| (shared_ns.clone(), format!("lat-{p}")))
            .collect(),
        rate: o.rate as f64 / n as f64,
        events: (events / n).max(1),
        route: shared_namespace,
    };
    [("one", one), ("own", own), ("shared", shared)]
        .into_iter()
        .filter(|(name, _)| o.scenarios.iter().any(|s| s == name))
        .map(|(_, s)| s)
        .collect()
}

fn package_ref(namespace: &str, name: &str) -> PackageRef {
    PackageRef {
        kind: PackageKind::App as i32,
        name: name.to_owned(),
        namespace: namespace.to_owned(),
    }
}

/// The fixtures' repository, as an Update names it (relative to the harness's repository root).
fn fixtures() -> String {
    berth_tests::FIXTURES_REPO.to_owned()
}

async fn create_namespace(kube: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(kube.clone())
        .create(&PostParams::default(), &ns)
        .await
        .with_context(|| format!("creating namespace {name}"))?;
    Ok(())
}

/// Polls List until `done` holds for the packages of `keys` (bounded); fails on a package error.
async fn wait_packages(
    lifecycle: &mut Lifecycle,
    keys: &HashMap<String, i64>,
    what: &str,
    done: fn(Option<&v1::Package>, i64) -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + CONVERGE_DEADLINE;
    loop {
        let list = lifecycle
            .list(v1::ListRequest::default())
            .await?
            .into_inner()
            .packages;
        let by_key: HashMap<&str, &v1::Package> =
            list.iter().map(|p| (p.key.as_str(), p)).collect();
        if let Some(p) = keys
            .keys()
            .filter_map(|k| by_key.get(k.as_str()))
            .find(|p| !p.last_error.is_empty())
        {
            bail!("package {} failed: {}", p.key, p.last_error);
        }
        let pending = keys
            .iter()
            .filter(|(k, g)| !done(by_key.get(k.as_str()).copied(), **g))
            .count();
        if pending == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{pending} of {} packages not {what} within {CONVERGE_DEADLINE:?}",
                keys.len()
            );
        }
        tokio::time::sleep(POLL * 4).await;
    }
}

fn running(p: Option<&v1::Package>, generation: i64) -> bool {
    p.is_some_and(|p| p.phase == "Running" && p.observed_generation >= generation)
}

fn gone(p: Option<&v1::Package>, _: i64) -> bool {
    p.is_none()
}

/// Installs the scenario's packages, each appending its hook starts to `starts/<index>`.
async fn install(
    s: &Scenario,
    lifecycle: &Lifecycle,
    kube: &kube::Client,
    starts: &Path,
) -> anyhow::Result<HashMap<String, i64>> {
    let namespaces: HashSet<&String> = s.packages.iter().map(|(ns, _)| ns).collect();
    for ns in namespaces {
        create_namespace(kube, ns).await?;
    }
    std::fs::create_dir_all(starts)?;
    let updates = s.packages.iter().enumerate().map(|(i, (ns, name))| {
        let file = starts.join(i.to_string());
        let mut client = lifecycle.clone();
        let request = v1::UpdateRequest {
            r#ref: Some(package_ref(ns, name)),
            repository: fixtures(),
            package: "latency".into(),
            version: "1.0.0".into(),
            settings: Some(berth_proto::json::to_struct(
                &json!({"startsFile": file.display().to_string()}),
            )),
            force: false,
            settings_version: 0,
            reset_settings: false,
        };
        async move {
            let accepted = client.update(request).await.context("Update")?.into_inner();
            Ok::<_, anyhow::Error>((accepted.key, accepted.generation))
        }
    });
    let keys = futures::StreamExt::collect::<Vec<_>>(futures::StreamExt::buffer_unordered(
        futures::stream::iter(updates),
        INSTALL_CONCURRENCY,
    ))
    .await;
    let keys: HashMap<String, i64> = keys.into_iter().collect::<anyhow::Result<_>>()?;
    wait_packages(&mut lifecycle.clone(), &keys, "Running", running).await?;
    Ok(keys)
}

async fn uninstall(
    s: &Scenario,
    lifecycle: &Lifecycle,
    kube: &kube::Client,
    keys: &HashMap<String, i64>,
) -> anyhow::Result<()> {
    for (ns, name) in &s.packages {
        lifecycle
            .clone()
            .remove(v1::RemoveRequest {
                r#ref: Some(package_ref(ns, name)),
                ..Default::default()
            })
            .await
            .context("Remove")?;
    }
    wait_packages(&mut lifecycle.clone(), keys, "removed", gone).await?;
    let namespaces: HashSet<&String> = s.packages.iter().map(|(ns, _)| ns).collect();
    for ns in namespaces {
        let _ = Api::<Namespace>::all(kube.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
    Ok(())
}

/// What the hook runs of a scenario showed.
#[derive(Default)]
struct Observed {
    /// First start of a hook process naming (package, object).
    starts: HashMap<(usize, String), SystemTime>,
    /// Hook processes seen.
    processes: usize,
    /// (package, object) pairs named by more than one hook process (at-least-once delivery).
    repeated: usize,
    /// Objects named that the bench did not expect for that package.
    unexpected: usize,
    /// Per package, how much of its starts file was read (up to the last complete line).
    read: HashMap<usize, usize>,
}

/// Parses one line of a starts file: the start time, a space, the binding contexts.
fn parse_start(line: &str) -> anyhow::Result<(SystemTime, Vec<String>)> {
    let (time, contexts) = line
        .split_once(' ')
        .context("no space after the start time")?;
    // `$EPOCHREALTIME` is `seconds.microseconds` (the locale's decimal point is a dot here).
    let (secs, micros) = time
        .split_once('.')
        .context("start time without a decimal point")?;
    ensure!(
        micros.len() == 6,
        "start time {time:?} does not have 6 decimals"
    );
    let at =
        UNIX_EPOCH + Duration::from_secs(secs.parse()?) + Duration::from_micros(micros.parse()?);
    let contexts: Value = serde_json::from_str(contexts).context("binding contexts")?;
    let names = contexts
        .as_array()
        .context("binding contexts are not an array")?
        .iter()
        .filter(|c| c["type"] == "Event" && c["watchEvent"] == "Added")
        .filter_map(|c| c["filterResult"].as_str().map(str::to_owned))
        .collect();
    Ok((at, names))
}

impl Observed {
    /// Reads the complete lines added to the starts files since the last scan.
    fn scan(
        &mut self,
        starts: &Path,
        packages: usize,
        expected: &HashMap<(usize, String), SystemTime>,
    ) -> anyhow::Result<()> {
        for p in 0..packages {
            let path = starts.join(p.to_string());
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
            };
            let offset = self.read.entry(p).or_default();
            // A line still being written has no newline yet: it is read next time.
            let Some(end) = text.rfind('\n').map(|i| i + 1).filter(|end| *end > *offset) else {
                continue;
            };
            for line in text[*offset..end].lines() {
                let (at, names) = parse_start(line)
                    .with_context(|| format!("{}: line {line:?}", path.display()))?;
                self.processes += 1;
                for name in names {
                    let key = (p, name);
                    if !expected.contains_key(&key) {
                        self.unexpected += 1;
                    } else if let Some(first) = self.starts.get_mut(&key) {
                        self.repeated += 1;
                        *first = (*first).min(at);
                    } else {
                        self.starts.insert(key, at);
                    }
                }
            }
            *offset = end;
        }
        Ok(())
    }
}

fn configmap(name: &str) -> anyhow::Result<ConfigMap> {
    // About 300 bytes of data: a typical small ConfigMap.
    let data: serde_json::Map<String, Value> = (0..10)
        .map(|i| (format!("key-{i}"), Value::from("x".repeat(24))))
        .collect();
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name}, "data": data}),
    )?)
}

struct Outcome {
    title: String,
    events: usize,
    offered: f64,
    expected: usize,
    processes: usize,
    repeated: usize,
    sorted: Vec<Duration>,
    create_p99: Duration,
    load: String,
    /// CPU used per process while the events were created and the hooks started.
    cpu: Vec<(String, Duration)>,
}

/// Creates the scenario's ConfigMaps at its rate and waits for every expected hook start.
async fn drive(
    s: &Scenario,
    topology: &Topology,
    kube: &kube::Client,
    starts: &Path,
) -> anyhow::Result<Outcome> {
    let n = s.packages.len();
    let cpu_before = topology.cpu()?;
    let mut expected: HashMap<(usize, String), SystemTime> = HashMap::new();
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / s.rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut creates = Vec::with_capacity(s.events);
    let began = Instant::now();
    for i in 0..s.events {
        ticker.tick().await;
        let (ns, runs) = (s.route)(i, n);
        let name = format!("ev-{i}");
        let cm = configmap(&name)?;
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &s.packages[ns].0);
        let t0 = SystemTime::now();
        for p in runs {
            expected.insert((p, name.clone()), t0);
        }
        // Concurrent, so a slow create does not lower the offered rate.
        creates.push(tokio::spawn(async move {
            let t = Instant::now();
            cms.create(&PostParams::default(), &cm)
                .await
                .map(|_| t.elapsed())
        }));
    }
    let offered = s.events as f64 / began.elapsed().as_secs_f64();
    let mut create_times = Vec::with_capacity(creates.len());
    for c in creates {
        create_times.push(c.await?.context("creating a ConfigMap")?);
    }
    create_times.sort_unstable();
    let mut observed = Observed::default();
    let deadline = Instant::now() + DRAIN_DEADLINE;
    loop {
        observed.scan(starts, n, &expected)?;
        if observed.starts.len() == expected.len() {
            break;
        }
        if Instant::now() > deadline {
            let mut missing: Vec<String> = expected
                .keys()
                .filter(|k| !observed.starts.contains_key(*k))
                .map(|(p, name)| format!("{}/{name}", s.packages[*p].1))
                .collect();
            missing.sort();
            missing.truncate(5);
            bail!(
                "{}: {} of {} hook starts missing {DRAIN_DEADLINE:?} after the last create (e.g. {})",
                s.title,
                expected.len() - observed.starts.len(),
                expected.len(),
                missing.join(", ")
            );
        }
        tokio::time::sleep(POLL).await;
    }
    let cpu = topology
        .cpu()?
        .into_iter()
        .zip(cpu_before)
        .map(|((name, after), (_, before))| (name, after.saturating_sub(before)))
        .collect();
    ensure!(
        observed.unexpected == 0,
        "{}: hooks ran for {} objects the bench did not create for them",
        s.title,
        observed.unexpected
    );
    let mut sorted: Vec<Duration> = observed
        .starts
        .iter()
        .map(|(key, at)| at.duration_since(expected[key]).unwrap_or(Duration::ZERO))
        .collect();
    sorted.sort_unstable();
    Ok(Outcome {
        title: s.title.clone(),
        events: s.events,
        offered,
        expected: expected.len(),
        processes: observed.processes,
        repeated: observed.repeated,
        sorted,
        create_p99: percentile(&create_times, 99.0),
        load: loadavg(),
        cpu,
    })
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// The 1-minute load average.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = <Options as clap::Parser>::parse();
    let load_before = loadavg();
    let cluster = TestCluster::start().await?;
    let dir = match &o.data_dir {
        Some(parent) => tempfile::tempdir_in(parent)
            .with_context(|| format!("--data-dir {}", parent.display()))?,
        None => tempfile::tempdir()?,
    };
    let exe = std::env::current_exe()?;
    let bin = exe.parent().context("bench directory")?;
    let topology = Topology::start(bin, &cluster.kubeconfig, dir.path(), o.concurrency).await?;
    let mut outcomes = vec![];
    let mut result = Ok(());
    for (i, s) in scenarios(&o).iter().enumerate() {
        let starts = dir.path().join(format!("starts-{i}"));
        let run = async {
            let keys = install(s, &topology.lifecycle, &cluster.client, &starts).await?;
            let outcome = drive(s, &topology, &cluster.client, &starts).await?;
            uninstall(s, &topology.lifecycle, &cluster.client, &keys).await?;
            Ok::<_, anyhow::Error>(outcome)
        };
        match run.await {
            Ok(outcome) => outcomes.push(outcome),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    topology.stop().await;
    cluster.stop().await;

    let cluster_kind = if TestCluster::is_real() {
        "BERTH_TEST_KUBECONFIG cluster"
    } else {
        "embedded dev cluster"
    };
    println!(
        "hook-latency-bench: {} hook runs/s for {} s, worker concurrency {}, {cluster_kind}, load average before {load_before}",
        o.rate, o.seconds, o.concurrency
    );
    println!();
    println!(
        "| scenario | events (offered/s) | hook starts | hook processes | event → hook start p50 | p99 | max | create call p99 | load (1 min) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for r in &outcomes {
        println!(
            "| {} | {} ({:.1}/s) | {} of {} | {}{} | {} ms | {} ms | {} ms | {} ms | {} |",
            r.title,
            r.events,
            r.offered,
            r.sorted.len(),
            r.expected,
            r.processes,
            if r.repeated > 0 {
                format!(" ({} repeated)", r.repeated)
            } else {
                String::new()
            },
            ms(percentile(&r.sorted, 50.0)),
            ms(percentile(&r.sorted, 99.0)),
            ms(percentile(&r.sorted, 100.0)),
            ms(r.create_p99),
            r.load
        );
    }
    println!();
    println!("Target: p99 event → hook start ≤ 50 ms.");
    if let Some(first) = outcomes.first() {
        println!();
        println!("CPU per hook start (ms), while the events were created and the hooks started:");
        println!();
        let names: Vec<&str> = first.cpu.iter().map(|(n, _)| n.as_str()).collect();
        println!("| scenario | {} | total |", names.join(" | "));
        println!("|---|{}---|", "---|".repeat(names.len()));
        for r in &outcomes {
            let per =
                |d: Duration| format!("{:.2}", d.as_secs_f64() * 1000.0 / r.expected.max(1) as f64);
            let total: Duration = r.cpu.iter().map(|(_, d)| *d).sum();
            println!(
                "| {} | {} | {} |",
                r.title,
                r.cpu
                    .iter()
                    .map(|(_, d)| per(*d))
                    .collect::<Vec<_>>()
                    .join(" | "),
                per(total)
            );
        }
    }
    result
}
