//! `queue-test-worker`: a **test fixture**, not part of berth. It runs the real worker runtime
//! ([`berth_queue::worker::run`]) against a real broker, with a handler whose behaviour the
//! task's payload scripts, so the multi-process tests (`tests/processes.rs`) can kill workers
//! and brokers mid-task without needing lifecycle, release or a cluster.
//!
//! Payload (JSON object, every field optional):
//! - `sleep_ms`: how long the task runs (cancellable);
//! - `spin_iters`: CPU work done first (a fixed number of arithmetic rounds on a blocking thread,
//!   so contention for cores shows as longer runs — `queue-bench` uses it);
//! - `fail`: `"permanent"` fails without retry; `"once"` fails with retry on the first attempt.
//!
//! Every execution is appended to `--log` as `start|done|fail <task id> <worker id>` lines
//! (one `write` each, the file opened with `O_APPEND`, so lines of concurrent tasks and of several
//! processes sharing the file never interleave). The log records *executions*; what the broker
//! accepted is in its own task history.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use berth_proto::queue as pb;
use berth_proto::queue::broker_client::BrokerClient;
use berth_queue::worker::{self, Handler, TaskError, WorkerConfig};
use clap::Parser;
use tokio_util::sync::CancellationToken;

#[derive(Parser, Debug)]
#[command(
    name = "queue-test-worker",
    about = "test fixture: a scripted berth queue worker"
)]
struct Args {
    #[arg(long)]
    broker: String,
    #[arg(long)]
    id: String,
    /// Execution log, appended to.
    #[arg(long)]
    log: PathBuf,
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
}

#[derive(serde::Deserialize, Default)]
struct Script {
    #[serde(default)]
    sleep_ms: u64,
    #[serde(default)]
    fail: Option<String>,
    #[serde(default)]
    spin_iters: u64,
}

/// `iters` rounds of xorshift; the result is returned so the work cannot be optimised away.
pub fn spin(iters: u64) -> u64 {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    std::hint::black_box(x)
}

struct Scripted {
    worker: String,
    log: Mutex<std::fs::File>,
}

impl Scripted {
    fn record(&self, what: &str, id: &str) -> Result<(), TaskError> {
        let line = format!("{what} {id} {}\n", self.worker);
        let mut log = self
            .log
            .lock()
            .map_err(|_| TaskError::retry("execution log lock poisoned"))?;
        log.write_all(line.as_bytes())
            .map_err(|err| TaskError::retry(format!("cannot write the execution log: {err}")))
    }
}

impl Handler for Scripted {
    async fn handle(&self, task: pb::Task, cancel: CancellationToken) -> Result<(), TaskError> {
        // This test worker's payloads are JSON (the broker does not care what they are).
        let script: Script = serde_json::from_slice(&task.payload)
            .map_err(|err| TaskError::permanent(format!("payload: {err}")))?;
        self.record("start", &task.id)?;
        if script.spin_iters > 0 {
            let iters = script.spin_iters;
            tokio::task::spawn_blocking(move || spin(iters))
                .await
                .map_err(|err| TaskError::retry(format!("CPU work panicked: {err}")))?;
        }
        tokio::select! {
            () = cancel.cancelled() => return Err(TaskError::retry("cancelled")),
            () = tokio::time::sleep(Duration::from_millis(script.sleep_ms)) => {}
        }
        match script.fail.as_deref() {
            Some("permanent") => {
                self.record("fail", &task.id)?;
                Err(TaskError::permanent("scripted permanent failure"))
            }
            Some("once") if task.attempts == 0 => {
                self.record("fail", &task.id)?;
                Err(TaskError::retry("scripted first-attempt failure"))
            }
            _ => {
                self.record("done", &task.id)?;
                Ok(())
            }
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = berth_runtime::init("queue-test-worker", berth_runtime::LogFormat::Text);
    let shutdown = CancellationToken::new();
    tokio::spawn(berth_runtime::shutdown_on_signal(shutdown.clone()));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.log)?;
    let channel = tonic::transport::Endpoint::from_shared(args.broker.clone())?
        .connect_timeout(Duration::from_secs(5))
        .connect_lazy();
    let config = WorkerConfig {
        id: args.id.clone(),
        concurrency: args.concurrency,
        ..Default::default()
    };
    println!("worker {} started", args.id);
    let handler = std::sync::Arc::new(Scripted {
        worker: args.id.clone(),
        log: Mutex::new(log),
    });
    worker::run(BrokerClient::new(channel), handler, config, shutdown).await?;
    Ok(())
}
