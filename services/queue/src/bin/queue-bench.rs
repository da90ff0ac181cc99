//! `queue-bench`: measures broker + worker throughput with no-op tasks.
//!
//! Starts a broker in-process on a loopback port (over `--database`, by default a fresh SQLite
//! file in the temp dir), enqueues `--tasks` no-op tasks spread round-robin over `--queues`
//! queues, runs `--workers` worker runtimes against it over gRPC, and reports enqueue and
//! end-to-end processing rates. Everything goes through the real gRPC API and the real store.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use berth_proto::queue as pb;
use berth_proto::queue::broker_client::BrokerClient;
use berth_queue::broker::{self, BrokerConfig, BrokerService, Store};
use berth_queue::worker::{self, Handler, TaskError, WorkerConfig};
use clap::Parser;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
#[command(
    name = "queue-bench",
    about = "no-op task throughput of the berth queue"
)]
struct Args {
    /// Queue database URL; default: a new SQLite file in the temp dir, deleted afterwards.
    #[arg(long)]
    database: Option<String>,
    #[arg(long, default_value_t = 5_000)]
    tasks: usize,
    #[arg(long, default_value_t = 100)]
    queues: usize,
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Tasks each worker runs at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Tasks per Enqueue call.
    #[arg(long, default_value_t = 500)]
    batch: usize,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

/// Counts tasks and does nothing else.
struct NoOp(AtomicU64);

impl Handler for NoOp {
    async fn handle(&self, _task: pb::Task, _cancel: CancellationToken) -> Result<(), TaskError> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let scratch = std::env::temp_dir().join(format!("berth-queue-bench-{}", uuid::Uuid::new_v4()));
    let database = match &args.database {
        Some(url) => url.clone(),
        None => {
            std::fs::create_dir_all(&scratch)
                .with_context(|| format!("creating {}", scratch.display()))?;
            format!("sqlite://{}/queue.db", scratch.display())
        }
    };
    let result = bench(&args, &database).await;
    if args.database.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    result
}

async fn bench(args: &Args, database: &str) -> anyhow::Result<()> {
    let store = Store::open(database)
        .await
        .with_context(|| format!("opening {database}"))?;
    let service = BrokerService::new(store, BrokerConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(broker::server(service.clone()))
            .serve_with_incoming_shutdown(incoming(listener), shutdown.clone().cancelled_owned()),
    );
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .connect_lazy();
    let client = BrokerClient::new(channel);

    let run_id = uuid::Uuid::new_v4();
    let started = Instant::now();
    let tasks: Vec<pb::Task> = (0..args.tasks)
        .map(|i| pb::Task {
            id: format!("{run_id}-{i}"),
            queue: format!("bench-{}", i % args.queues.max(1)),
            package: "bench".into(),
            generation: 1,
            kind: "NoOp".into(),
            payload_json: "{}".into(),
            ..Default::default()
        })
        .collect();
    for chunk in tasks.chunks(args.batch.max(1)) {
        client
            .clone()
            .enqueue(pb::EnqueueRequest {
                tasks: chunk.to_vec(),
            })
            .await
            .context("enqueue")?;
    }
    let enqueued = started.elapsed();
    println!(
        "enqueued {} tasks in {:.2?}: {:.0} tasks/s",
        args.tasks,
        enqueued,
        rate(args.tasks, enqueued)
    );

    let handler = Arc::new(NoOp(AtomicU64::new(0)));
    let stop_workers = CancellationToken::new();
    let workers: Vec<_> = (0..args.workers)
        .map(|w| {
            let config = WorkerConfig {
                id: format!("bench-{w}"),
                concurrency: args.concurrency,
                ..Default::default()
            };
            tokio::spawn(worker::run(
                client.clone(),
                handler.clone(),
                config,
                stop_workers.clone(),
            ))
        })
        .collect();
    let processing = Instant::now();
    let deadline = processing + Duration::from_secs(args.timeout);
    loop {
        let queues = client
            .clone()
            .dump(pb::DumpRequest {})
            .await
            .context("dump")?
            .into_inner()
            .queues;
        if queues.is_empty() {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "not done after {} s: {} queues left",
            args.timeout,
            queues.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let processed = processing.elapsed();
    println!(
        "processed {} tasks ({} handler runs) with {} workers x {} in {:.2?}: {:.0} tasks/s",
        args.tasks,
        handler.0.load(Ordering::Relaxed),
        args.workers,
        args.concurrency,
        processed,
        rate(args.tasks, processed)
    );
    stop_workers.cancel();
    for w in workers {
        w.await??;
    }
    shutdown.cancel();
    server.await??;
    Ok(())
}

/// Accepted connections with Nagle's algorithm off, as tonic's own listener would set them.
fn incoming(
    listener: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use futures::StreamExt;
    TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        conn.set_nodelay(true)?;
        Ok(conn)
    })
}

fn rate(n: usize, took: Duration) -> f64 {
    n as f64 / took.as_secs_f64().max(1e-9)
}
