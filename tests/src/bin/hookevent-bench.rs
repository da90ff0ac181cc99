//! `hookevent-bench`: measures the hookevent service against its targets and prints a table.
//!
//! - **event → HookRun enqueued**: ConfigMaps are created at a steady rate (default 100/s) while
//!   1 and then 100 packages each bind a hook to them (all 100 share one watch and one
//!   jqFilter, so every event fans out to 100 HookRuns: 10,000 a second, a stress of
//!   hookevent's fan-out rather than a load workers could run); the latency is from just before
//!   the create call to the moment the HookRun task for that object reaches the broker. The
//!   broker is a stand-in in this process that only timestamps what it receives, so the figure
//!   is hookevent's own path (watch → filter → checksum → task → Enqueue) plus the API server's.
//!   Next to it, hookevent's CPU time per event (from `/proc`).
//! - **hook start overhead**: a no-op hook run through `berth_hooks::run` (temp files, process
//!   group, spawn, wait, output parsing), next to a bare fork/exec of `/bin/true`.
//! - **RSS**: `VmRSS` of the real `berth-hookevent` process before and after one binding with
//!   `keepFullObjectsInMemory: false` caches 10,000 ConfigMaps.
//!
//! The end-to-end figure (event → hook process start through a real broker and worker) is
//! `hook-latency-bench`'s. Runs against the embedded dev cluster (in this process, competing for the same cores), or
//! the cluster of `BERTH_TEST_KUBECONFIG`. Build in release:
//! `cargo build --release -p berth-hookevent -p berth-tests --bins`, then
//! `target/release/hookevent-bench [--rate 100] [--seconds 10] [--objects 10000]`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use berth_proto::hookevent::hook_events_client::HookEventsClient;
use berth_proto::hookevent::{
    KubernetesBinding, RemoveBindingsRequest, SetBindingsRequest, SynchronizationDoneRequest,
};
use berth_proto::queue::broker_server::{Broker, BrokerServer};
use berth_proto::queue::*;
use berth_tests::measure::{cpu_time, percentile};
use berth_tests::{Proc, TestCluster};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

/// Longest the bench waits for the HookRuns of what it created.
const DRAIN_DEADLINE: Duration = Duration::from_secs(120);
/// Creates in flight while filling the cluster for the RSS measurement.
const CREATE_CONCURRENCY: usize = 32;

/// One HookRun the stand-in broker received: when, and the object name its Added context names.
type Received = (Instant, String);

/// The stand-in broker: timestamps every Added HookRun it receives. The list grows with the
/// bench's own, bounded, workload (at most rate × seconds × packages + objects entries).
#[derive(Clone, Default)]
struct RecordingBroker {
    received: Arc<Mutex<Vec<Received>>>,
}

impl RecordingBroker {
    fn take(&self) -> Vec<Received> {
        std::mem::take(&mut *self.received.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn count(&self, prefix: &str) -> usize {
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(_, n)| n.starts_with(prefix))
            .count()
    }
}

/// The object name of an Added event context (the bench's jqFilter is `.metadata.name`).
fn added_name(task: &Task) -> Option<String> {
    let contexts = berth_proto::tasks::binding_contexts(task).ok()?;
    let ctx = contexts.as_array()?.last()?;
    (ctx["watchEvent"] == "Added")
        .then(|| ctx["filterResult"].as_str().map(str::to_owned))
        .flatten()
}

#[tonic::async_trait]
impl Broker for RecordingBroker {
    async fn enqueue(
        &self,
        request: Request<EnqueueRequest>,
    ) -> Result<Response<EnqueueResponse>, Status> {
        let now = Instant::now();
        let tasks = request.into_inner().tasks;
        let accepted = tasks.len() as i32;
        let names: Vec<Received> = tasks
            .iter()
            .filter_map(added_name)
            .map(|n| (now, n))
            .collect();
        self.received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(names);
        Ok(Response::new(EnqueueResponse { accepted }))
    }
    async fn supersede(
        &self,
        _: Request<SupersedeRequest>,
    ) -> Result<Response<SupersedeResponse>, Status> {
        Err(Status::unimplemented("bench broker"))
    }
    async fn lease(&self, _: Request<LeaseRequest>) -> Result<Response<LeaseResponse>, Status> {
        Err(Status::unimplemented("bench broker"))
    }
    async fn heartbeat(
        &self,
        _: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, Status> {
        Err(Status::unimplemented("bench broker"))
    }
    async fn complete(
        &self,
        _: Request<CompleteRequest>,
    ) -> Result<Response<CompleteResponse>, Status> {
        Err(Status::unimplemented("bench broker"))
    }
    async fn fail(&self, _: Request<FailRequest>) -> Result<Response<FailResponse>, Status> {
        Err(Status::unimplemented("bench broker"))
    }
    async fn defer(&self, _: Request<DeferRequest>) -> Result<Response<DeferResponse>, Status> {
        Err(Status::unimplemented("bench broker"))
    }
    async fn dump(&self, _: Request<DumpRequest>) -> Result<Response<DumpResponse>, Status> {
        Err(Status::unimplemented("bench broker"))
    }
}

#[derive(clap::Parser)]
#[command(
    name = "hookevent-bench",
    about = "hookevent's event→HookRun latency, CPU and memory"
)]
struct Options {
    /// ConfigMap changes per second.
    #[arg(long, default_value_t = 100)]
    rate: u64,
    /// Seconds of changes.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// ConfigMaps created and watched.
    #[arg(long, default_value_t = 10_000)]
    objects: usize,
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn binding(namespace: &str, selector: &str) -> KubernetesBinding {
    KubernetesBinding {
        hook: "bench.sh".into(),
        binding: "cms".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespaces: vec![namespace.to_owned()],
        label_selector: selector.to_owned(),
        jq_filter: ".metadata.name".into(),
        execute_hook_on_event: vec!["Added".into(), "Modified".into(), "Deleted".into()],
        execute_hook_on_synchronization: false,
        wait_for_synchronization: true,
        keep_full_objects_in_memory: false,
        ..Default::default()
    }
}

type Hookevent = HookEventsClient<tonic::transport::Channel>;

async fn bind(
    hookevent: &mut Hookevent,
    package: &str,
    b: KubernetesBinding,
) -> anyhow::Result<()> {
    hookevent
        .set_bindings(SetBindingsRequest {
            package: package.into(),
            generation: 1,
            kubernetes: vec![b],
            ..Default::default()
        })
        .await
        .with_context(|| format!("SetBindings {package}"))?;
    hookevent
        .synchronization_done(SynchronizationDoneRequest {
            package: package.into(),
            generation: 1,
        })
        .await?;
    Ok(())
}

async fn create_namespace(kube: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(kube.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    Ok(())
}

fn configmap(name: &str, label: &str) -> anyhow::Result<ConfigMap> {
    // About 300 bytes of data: a typical small ConfigMap.
    let data: serde_json::Map<String, Value> = (0..10)
        .map(|i| (format!("key-{i}"), Value::from("x".repeat(24))))
        .collect();
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"bench": label}}, "data": data}),
    )?)
}

/// Waits until the broker received `expected` Added runs for names starting with `prefix`.
async fn drain(broker: &RecordingBroker, prefix: &str, expected: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + DRAIN_DEADLINE;
    while broker.count(prefix) < expected {
        if Instant::now() > deadline {
            bail!(
                "only {} of {expected} HookRuns for {prefix}* within {DRAIN_DEADLINE:?}",
                broker.count(prefix)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

struct Latency {
    packages: usize,
    events: usize,
    runs: usize,
    sorted: Vec<Duration>,
    /// CPU hookevent used while the events were created and their HookRuns delivered.
    cpu: Duration,
}

/// Binds `packages` packages to one label, creates `rate × seconds` ConfigMaps at `rate`/s and
/// measures create → HookRun at the broker for every (package, object).
async fn latency(
    o: &Options,
    packages: usize,
    pid: u32,
    kube: &kube::Client,
    hookevent: &mut Hookevent,
    broker: &RecordingBroker,
) -> anyhow::Result<Latency> {
    let ns = format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    create_namespace(kube, &ns).await?;
    let label = format!("latency-{packages}");
    for p in 0..packages {
        bind(
            hookevent,
            &format!("bench-{packages}-{p}"),
            binding(&ns, &format!("bench={label}")),
        )
        .await?;
    }
    broker.take();
    let cpu_before = cpu_time(pid, false)?;
    let events = (o.rate * o.seconds) as usize;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let prefix = format!("ev{packages}-");
    let mut started: HashMap<String, Instant> = HashMap::with_capacity(events);
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / o.rate as f64));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut creates = Vec::with_capacity(events);
    for i in 0..events {
        ticker.tick().await;
        let name = format!("{prefix}{i}");
        let cm = configmap(&name, &label)?;
        started.insert(name, Instant::now());
        let cms = cms.clone();
        // Concurrent, so a slow create does not lower the offered rate.
        creates.push(tokio::spawn(async move {
            cms.create(&PostParams::default(), &cm).await.map(|_| ())
        }));
    }
    for c in creates {
        c.await?.context("creating a ConfigMap")?;
    }
    drain(broker, &prefix, events * packages).await?;
    let cpu = cpu_time(pid, false)?.saturating_sub(cpu_before);
    let mut sorted: Vec<Duration> = broker
        .take()
        .into_iter()
        .filter_map(|(at, name)| {
            started
                .get(&name)
                .map(|t0| at.saturating_duration_since(*t0))
        })
        .collect();
    sorted.sort_unstable();
    for p in 0..packages {
        hookevent
            .remove_bindings(RemoveBindingsRequest {
                package: format!("bench-{packages}-{p}"),
            })
            .await?;
    }
    let _ = Api::<Namespace>::all(kube.clone())
        .delete(&ns, &Default::default())
        .await;
    Ok(Latency {
        packages,
        events,
        runs: sorted.len(),
        sorted,
        cpu,
    })
}

/// `VmRSS` of `pid`, in bytes.
fn rss(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS line")?;
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .context("VmRSS value")?
        .parse()?;
    Ok(kib * 1024)
}

/// RSS of hookevent before and after one binding caches `objects` ConfigMaps.
async fn memory(
    o: &Options,
    pid: u32,
    kube: &kube::Client,
    hookevent: &mut Hookevent,
    broker: &RecordingBroker,
) -> anyhow::Result<(u64, u64, Duration)> {
    let ns = format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    create_namespace(kube, &ns).await?;
    bind(hookevent, "bench-rss", binding(&ns, "bench=rss")).await?;
    broker.take();
    let before = rss(pid)?;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let started = Instant::now();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..o.objects)
        .map(|i| {
            let cms = cms.clone();
            async move {
                cms.create(
                    &PostParams::default(),
                    &configmap(&format!("rss-{i}"), "rss")?,
                )
                .await?;
                Ok(())
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    drain(broker, "rss-", o.objects).await?;
    let took = started.elapsed();
    broker.take();
    let after = rss(pid)?;
    Ok((before, after, took))
}

/// Durations of `n` no-op hook runs through berth_hooks::run, and of `n` bare `/bin/true` spawns.
async fn hook_start(n: usize) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let dir = tempfile::tempdir()?;
    let hooks = dir.path().join("hooks");
    std::fs::create_dir_all(&hooks)?;
    let path = hooks.join("noop.sh");
    std::fs::write(
        &path,
        "#!/bin/sh\n[ \"$1\" = --config ] && echo '{\"configVersion\":\"v1\",\"onStartup\":1}'\nexit 0\n",
    )?;
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let discovered = berth_hooks::discover(&hooks, Duration::from_secs(10)).await?;
    let hook = discovered
        .first()
        .context("the no-op hook was not discovered")?;
    let mut runs = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        berth_hooks::run(berth_hooks::RunRequest {
            hook,
            binding_context: json!([{"binding": "onStartup"}]),
            values: json!({}),
            config_values: json!({}),
            env: vec![],
            timeout: Duration::from_secs(10),
            cancel: CancellationToken::new(),
            tmp_dir: None,
            sandbox: None,
        })
        .await?;
        runs.push(t0.elapsed());
    }
    let mut bare = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        tokio::process::Command::new("/bin/true").status().await?;
        bare.push(t0.elapsed());
    }
    runs.sort_unstable();
    bare.sort_unstable();
    Ok((runs, bare))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = <Options as clap::Parser>::parse();
    let cluster = TestCluster::start().await?;
    let shutdown = CancellationToken::new();
    let broker = RecordingBroker::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let broker_endpoint = format!("http://{}", listener.local_addr()?);
    let router = berth_runtime::grpc_server(
        berth_runtime::Role::Broker,
        None,
        &berth_runtime::Metrics::default(),
        berth_proto::FILE_DESCRIPTOR_SET,
    )?
    .add_service(BrokerServer::new(broker.clone()));
    let serving = tokio::spawn(berth_runtime::serve_router(
        router,
        listener,
        berth_proto::FILE_DESCRIPTOR_SET,
        &["berth.queue.v1.Broker"],
        shutdown.clone(),
    ));

    let dir = tempfile::tempdir()?;
    let exe = std::env::current_exe()?;
    let hookevent_path = exe
        .parent()
        .context("bench directory")?
        .join("berth-hookevent");
    let database = format!("sqlite://{}", dir.path().join("hookevent.db").display());
    let kubeconfig = cluster.kubeconfig.display().to_string();
    let leases = berth_tests::process::lease_namespace(&cluster.kubeconfig).await?;
    let hookevent = Proc::start_path(
        &hookevent_path,
        &[
            "--listen",
            "127.0.0.1:0",
            "--database",
            &database,
            "--broker",
            &broker_endpoint,
            "--kubeconfig",
            &kubeconfig,
            "--lease-namespace",
            &leases,
            // The bench's broker is an in-process stand-in serving plain gRPC.
            "--insecure-plaintext",
        ],
        "listening on ",
    )
    .await
    .with_context(|| {
        format!(
            "starting {} (build it in the same profile)",
            hookevent_path.display()
        )
    })?;
    let pid = hookevent.pid().context("hookevent pid")?;
    let mut client = HookEventsClient::connect(hookevent.endpoint()).await?;

    // Memory first, on the fresh process: the latency runs leave allocator slack behind.
    let (rss_before, rss_after, fill) =
        memory(&o, pid, &cluster.client, &mut client, &broker).await?;
    client
        .remove_bindings(RemoveBindingsRequest {
            package: "bench-rss".into(),
        })
        .await?;
    let one = latency(&o, 1, pid, &cluster.client, &mut client, &broker).await?;
    let hundred = latency(&o, 100, pid, &cluster.client, &mut client, &broker).await?;
    let rss_end = rss(pid)?;
    let (runs, bare) = hook_start(200).await?;

    let cluster_kind = if TestCluster::is_real() {
        "BERTH_TEST_KUBECONFIG cluster"
    } else {
        "embedded dev cluster"
    };
    println!(
        "hookevent-bench: {} events/s for {} s, {cluster_kind}",
        o.rate, o.seconds
    );
    println!();
    println!("| measure | p50 | p99 | max | samples | hookevent CPU per event | target |");
    println!("|---|---|---|---|---|---|---|");
    for l in [&one, &hundred] {
        println!(
            "| event → HookRun at broker, {} package(s) | {} | {} | {} | {} runs of {} events | {:.3} ms | p99 ≤ 50 ms (with hook start) |",
            l.packages,
            ms(percentile(&l.sorted, 50.0)),
            ms(percentile(&l.sorted, 99.0)),
            ms(percentile(&l.sorted, 100.0)),
            l.runs,
            l.events,
            l.cpu.as_secs_f64() * 1000.0 / l.events.max(1) as f64
        );
    }
    println!(
        "| hook start overhead (no-op hook, berth_hooks::run) | {} | {} | {} | {} | — | — |",
        ms(percentile(&runs, 50.0)),
        ms(percentile(&runs, 99.0)),
        ms(percentile(&runs, 100.0)),
        runs.len()
    );
    println!(
        "| bare fork/exec of /bin/true | {} | {} | {} | {} | — | — |",
        ms(percentile(&bare, 50.0)),
        ms(percentile(&bare, 99.0)),
        ms(percentile(&bare, 100.0)),
        bare.len()
    );
    println!();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!("| hookevent RSS | MiB | target |");
    println!("|---|---|---|");
    println!("| idle, bindings registered | {:.1} | — |", mib(rss_before));
    println!(
        "| {} watched ConfigMaps, keepFullObjectsInMemory: false (filled in {:.1} s) | {:.1} | ≤ 100 MiB |",
        o.objects,
        fill.as_secs_f64(),
        mib(rss_after)
    );
    println!(
        "| after the latency runs (100 bindings × {} objects, then removed) | {:.1} | — |",
        o.rate * o.seconds,
        mib(rss_end)
    );

    hookevent.stop().await;
    shutdown.cancel();
    let _ = serving.await;
    cluster.stop().await;
    Ok(())
}
