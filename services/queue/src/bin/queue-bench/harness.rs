//! The pieces every scenario uses: a served broker, worker runtimes, and a handler that
//! measures instead of working.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use berth_proto::queue as pb;
use berth_proto::queue::broker_client::BrokerClient;
use berth_queue::broker::BrokerConfig;
use berth_queue::worker::{self, Handler, TaskError, WorkerConfig};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

/// A temp directory removed on drop (the bench binary cannot use dev-dependencies).
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new() -> anyhow::Result<Scratch> {
        let dir = std::env::temp_dir().join(format!("berth-queue-bench-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Scratch(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Wall-clock microseconds, the timestamp carried in latency tasks' payloads.
pub fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// A broker served by `berth_queue::process::serve` until dropped.
pub struct Broker {
    pub endpoint: String,
    shutdown: CancellationToken,
    server: JoinHandle<Result<(), berth_queue::process::Error>>,
}

impl Broker {
    pub async fn start(database: &str) -> anyhow::Result<Broker> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let shutdown = CancellationToken::new();
        let database = database.to_owned();
        let server = tokio::spawn({
            let shutdown = shutdown.clone();
            async move {
                berth_queue::process::serve(
                    &database,
                    BrokerConfig::default(),
                    None,
                    listener,
                    &berth_runtime::Metrics::default(),
                    shutdown,
                )
                .await
            }
        });
        Ok(Broker {
            endpoint,
            shutdown,
            server,
        })
    }

    /// A client on its own connection.
    pub fn client(&self) -> anyhow::Result<BrokerClient<Channel>> {
        let channel = tonic::transport::Endpoint::from_shared(self.endpoint.clone())?
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .connect_lazy();
        Ok(BrokerClient::new(channel))
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        self.server.await??;
        Ok(())
    }

    /// Waits until the broker holds no task.
    pub async fn drained(&self, limit: Duration) -> anyhow::Result<()> {
        let mut client = self.client()?;
        let deadline = Instant::now() + limit;
        loop {
            let queues = client
                .dump(pb::DumpRequest {})
                .await
                .context("dump")?
                .into_inner()
                .queues;
            if queues.is_empty() {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} queues still busy after {limit:?}",
                queues.len()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// What the bench handler saw, shared with the scenario.
pub struct Probe {
    /// No-op tasks run.
    pub noops: AtomicU64,
    /// Enqueue→start latencies in microseconds of `Timed` tasks.
    pub latencies: Mutex<Vec<u64>>,
    /// `Hold` tasks report their start here (bounded: one Hold task runs at a time).
    started: mpsc::Sender<()>,
    /// …and the moment they saw their cancellation.
    cancelled: mpsc::Sender<Instant>,
}

/// Receivers of a [`Probe`]'s Hold-task events.
pub struct HoldEvents {
    pub started: mpsc::Receiver<()>,
    pub cancelled: mpsc::Receiver<Instant>,
}

impl Probe {
    pub fn new() -> (Arc<Probe>, HoldEvents) {
        // Capacity 4: the cancellation scenario has one Hold task in flight at a time.
        let (started, started_rx) = mpsc::channel(4);
        let (cancelled, cancelled_rx) = mpsc::channel(4);
        let probe = Probe {
            noops: AtomicU64::new(0),
            latencies: Mutex::new(Vec::new()),
            started,
            cancelled,
        };
        (
            Arc::new(probe),
            HoldEvents {
                started: started_rx,
                cancelled: cancelled_rx,
            },
        )
    }
}

/// Task kinds of the bench: `NoOp` (and `Warmup`) counts, `Timed` records its enqueue→start latency (payload
/// `{"t": unix_micros}`), `Hold` runs until cancelled.
pub struct BenchHandler(pub Arc<Probe>);

impl Handler for BenchHandler {
    async fn handle(&self, task: pb::Task, cancel: CancellationToken) -> Result<(), TaskError> {
        let probe = &self.0;
        match task.kind.as_str() {
            "Timed" => {
                let now = unix_micros();
                let sent: serde_json::Value = serde_json::from_slice(&task.payload)
                    .map_err(|e| TaskError::permanent(format!("payload: {e}")))?;
                let sent = sent["t"]
                    .as_u64()
                    .ok_or_else(|| TaskError::permanent("payload.t: not a number"))?;
                let mut latencies = probe
                    .latencies
                    .lock()
                    .map_err(|_| TaskError::permanent("poisoned"))?;
                latencies.push(now.saturating_sub(sent));
            }
            "Hold" => {
                let _ = probe.started.send(()).await;
                cancel.cancelled().await;
                let _ = probe.cancelled.send(Instant::now()).await;
                return Err(TaskError::retry("cancelled"));
            }
            _ => {
                probe.noops.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}

/// `count` worker runtimes in this process, each on its own connection.
pub struct Workers {
    stop: CancellationToken,
    runs: Vec<JoinHandle<Result<(), worker::WorkerError>>>,
}

impl Workers {
    pub fn start(
        broker: &Broker,
        handler: Arc<BenchHandler>,
        count: usize,
        concurrency: usize,
    ) -> anyhow::Result<Workers> {
        let stop = CancellationToken::new();
        let mut runs = Vec::new();
        for w in 0..count {
            let config = WorkerConfig {
                id: format!("bench-{w}"),
                concurrency,
                ..Default::default()
            };
            runs.push(tokio::spawn(worker::run(
                broker.client()?,
                handler.clone(),
                config,
                stop.clone(),
            )));
        }
        Ok(Workers { stop, runs })
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        self.stop.cancel();
        for run in self.runs {
            run.await??;
        }
        Ok(())
    }
}

/// A task on queue `bench-<queue>` of package `package`, with `payload` (JSON: the bench's
/// own payloads, opaque to the broker).
pub fn task(id: String, queue: usize, package: &str, kind: &str, payload: String) -> pb::Task {
    pb::Task {
        id,
        queue: format!("bench-{queue}"),
        package: package.to_owned(),
        generation: 1,
        kind: kind.to_owned(),
        payload: payload.into_bytes(),
        ..Default::default()
    }
}
