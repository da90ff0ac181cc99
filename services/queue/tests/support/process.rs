//! Real brokers (`queue-test-broker serve`: `berth-queue serve` built from this crate alone)
//! and `queue-test-worker` workers as child processes, for the tests that kill them. Cargo builds both binaries for this package's integration tests.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use berth_queue::broker::{HistoryEntry, Store};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// How long a process may take to announce itself; generous because the machine may be busy.
const STARTUP_DEADLINE: Duration = Duration::from_secs(60);

/// A child process; killed (SIGKILL) when dropped.
pub struct Child9 {
    child: Child,
    /// Lines the process printed before its announcement line, and that line.
    pub announced: Vec<String>,
}

impl Child9 {
    async fn start(program: &str, args: &[String], announce: &str) -> Child9 {
        let mut child = Command::new(program)
            .args(args)
            .env(
                "BERTH_LOG",
                std::env::var("BERTH_LOG").unwrap_or_else(|_| "error".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|err| panic!("start {program}: {err}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut announced = Vec::new();
        tokio::time::timeout(STARTUP_DEADLINE, async {
            while let Some(line) = lines.next_line().await.expect("read stdout") {
                let done = line.starts_with(announce);
                announced.push(line);
                if done {
                    return;
                }
            }
            panic!("{program} exited before announcing itself: {announced:?}");
        })
        .await
        .unwrap_or_else(|_| panic!("{program} did not announce `{announce}` in time"));
        // Keep draining stdout so the process never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Child9 { child, announced }
    }

    /// The value after `prefix` on an announced line.
    pub fn announced_value(&self, prefix: &str) -> Option<String> {
        self.announced
            .iter()
            .find_map(|line| line.strip_prefix(prefix).map(|v| v.trim().to_owned()))
    }

    /// `kill -9` and reap: the process gets no chance to clean up.
    pub async fn kill9(mut self) {
        self.child.kill().await.expect("SIGKILL the child");
    }
}

/// A `queue-test-broker serve` process (the `berth-queue serve` role).
pub struct BrokerProc {
    pub proc: Child9,
    /// `127.0.0.1:PORT` of its gRPC API.
    pub addr: String,
    /// `127.0.0.1:PORT` of its metrics.
    pub metrics_addr: String,
}

impl BrokerProc {
    /// Serves `database` on `listen` (`127.0.0.1:0` for a fresh port).
    pub async fn start(database: &str, listen: &str, lease_ttl_ms: u64) -> BrokerProc {
        let args = [
            "serve",
            "--listen",
            listen,
            "--database",
            database,
            "--metrics-listen",
            "127.0.0.1:0",
            "--lease-ttl-ms",
            &lease_ttl_ms.to_string(),
            // The broker alone, for the queue's own tests: no other service to authenticate.
            "--insecure-plaintext",
        ]
        .map(str::to_owned);
        let proc = Child9::start(
            env!("CARGO_BIN_EXE_queue-test-broker"),
            &args,
            "listening on ",
        )
        .await;
        let addr = proc.announced_value("listening on ").expect("gRPC address");
        let metrics_addr = proc
            .announced_value("metrics on ")
            .expect("`metrics on` is printed before `listening on`");
        BrokerProc {
            proc,
            addr,
            metrics_addr,
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The Prometheus text of its admin port. A bare HTTP/1.0 GET: one request to a server we
    /// control needs no HTTP client library.
    pub async fn scrape(&self) -> String {
        let mut conn = tokio::net::TcpStream::connect(&self.metrics_addr)
            .await
            .expect("connect to the metrics port");
        conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: broker\r\n\r\n")
            .await
            .expect("send the metrics request");
        let mut response = String::new();
        tokio::time::timeout(Duration::from_secs(10), conn.read_to_string(&mut response))
            .await
            .expect("metrics answered in time")
            .expect("read the metrics response");
        assert!(
            response.starts_with("HTTP/1.0 200") || response.starts_with("HTTP/1.1 200"),
            "{response}"
        );
        response
    }
}

/// A `queue-test-worker` process logging its executions to `log`.
pub async fn start_worker(broker: &str, id: &str, log: &Path) -> Child9 {
    let args = [
        "--broker",
        broker,
        "--id",
        id,
        "--log",
        &log.display().to_string(),
        "--concurrency",
        "4",
    ]
    .map(str::to_owned);
    Child9::start(env!("CARGO_BIN_EXE_queue-test-worker"), &args, "worker ").await
}

/// One line of a worker's execution log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execution {
    pub what: String,
    pub task: String,
    pub worker: String,
}

/// The execution log at `path` (empty if not written yet).
pub fn executions(path: &Path) -> Vec<Execution> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split(' ');
            Some(Execution {
                what: parts.next()?.to_owned(),
                task: parts.next()?.to_owned(),
                worker: parts.next()?.to_owned(),
            })
        })
        .collect()
}

/// Polls `check` every 50 ms until it returns `Some`, panicking with `what` after `limit`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The broker's task history (what it *accepted* as finished), read straight from its database,
/// once it holds an entry for every id in `ids`.
pub async fn history_covering(store: &Store, ids: &[String], limit: Duration) -> Vec<HistoryEntry> {
    wait_for("every task to finish", limit, || async {
        let history = store.history(100_000).await.ok()?;
        let finished: std::collections::HashSet<&str> =
            history.iter().map(|entry| entry.id.as_str()).collect();
        ids.iter()
            .all(|id| finished.contains(id.as_str()))
            .then_some(history)
    })
    .await
}
