//! The generic worker runtime: lease tasks from a broker, run them on a [`Handler`], keep
//! their leases alive, and report the outcome.
//!
//! Delivery is at-least-once: a task whose result cannot be reported (broker down, lease lost)
//! is redelivered, so handlers must be idempotent.

mod client;
mod execute;
mod heartbeat;
mod held;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use berth_proto::queue as pb;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use client::{Broker, CallError};
use held::HeldLeases;

/// What the task handlers implement.
pub trait Handler: Send + Sync + 'static {
    /// Runs one task. `cancel` fires when the task was superseded, its lease was lost, or the
    /// worker's shutdown grace period ended; the handler should then stop promptly (kill its
    /// processes) and return.
    ///
    /// A task with merge fields may arrive compacted: its merge items then hold the items of
    /// several queued tasks with the same kind and merge key, oldest first (berth's HookRun:
    /// the binding contexts of several runs of one hook and binding type). `task.attempts`
    /// counts earlier failures; `task.traceparent` is already the parent of the span the
    /// handler runs in.
    fn handle(
        &self,
        task: pb::Task,
        cancel: CancellationToken,
    ) -> impl Future<Output = Result<(), TaskError>> + Send;
}

/// A task's failure. `retry == false` marks errors that retrying cannot fix: the broker records
/// and drops the task instead of retrying it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TaskError {
    pub message: String,
    pub retry: bool,
    /// Not a failure: the handler may not run the task yet and hands it back to the broker to
    /// lease again after this long, without counting an attempt (see [`TaskError::defer`]).
    pub defer: Option<std::time::Duration>,
    /// A task of several steps that got partway: its payload from now on, should it be
    /// retried, saying which steps are done (see [`TaskError::with_progress`]).
    pub progress: Option<Vec<u8>>,
}

impl TaskError {
    /// A failure worth retrying after a backoff.
    pub fn retry(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retry: true,
            defer: None,
            progress: None,
        }
    }

    /// A failure that retrying cannot fix.
    pub fn permanent(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            retry: false,
            defer: None,
            progress: None,
        }
    }

    /// Not yet: the task goes back to the head of its queue and may be leased again after
    /// `delay` (capped at an hour), as the same attempt. Tasks queued behind it meanwhile are
    /// compacted into it when it is leased again.
    pub fn defer(delay: std::time::Duration, reason: impl Into<String>) -> Self {
        Self {
            message: reason.into(),
            retry: true,
            defer: Some(delay.min(std::time::Duration::from_secs(3600))),
            progress: None,
        }
    }

    /// The task got partway before failing: should it be retried, the broker keeps `payload`
    /// (encoded as the task's producer encodes payloads) as its payload, so the retry resumes
    /// after the steps it names. A task whose worker dies before reporting starts again from
    /// its last recorded payload.
    pub fn with_progress(mut self, payload: Vec<u8>) -> Self {
        self.progress = Some(payload);
        self
    }
}

/// Settings of one worker process.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Names this worker in leases and Dump; must be unique among live workers.
    pub id: String,
    /// Tasks run at once. Default 4.
    pub concurrency: usize,
    /// Heartbeat period. Default 250 ms, so a cancellation reaches a task within a second.
    pub heartbeat: Duration,
    /// How long one Lease call waits on the broker for work. Default 1 s; it also bounds how
    /// long shutdown waits for an in-flight Lease.
    pub lease_wait: Duration,
    /// Timeout of every other call to the broker. Default 5 s.
    pub call_timeout: Duration,
    /// On shutdown, how long running tasks may finish before they are cancelled. Default 10 s.
    pub shutdown_grace: Duration,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            id: format!("worker-{}", uuid::Uuid::new_v4()),
            concurrency: 4,
            heartbeat: Duration::from_millis(250),
            lease_wait: Duration::from_secs(1),
            call_timeout: Duration::from_secs(5),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("invalid worker config: {field} {problem}")]
    Config {
        field: &'static str,
        problem: &'static str,
    },
}

impl WorkerConfig {
    fn validate(&self) -> Result<(), WorkerError> {
        let fail = |field, problem| Err(WorkerError::Config { field, problem });
        if self.id.is_empty() {
            return fail("id", "is empty");
        }
        if self.concurrency == 0 {
            return fail("concurrency", "must be at least 1");
        }
        if self.heartbeat.is_zero() {
            return fail("heartbeat", "must be positive");
        }
        if self.call_timeout.is_zero() {
            return fail("call_timeout", "must be positive");
        }
        Ok(())
    }
}

/// Largest Lease response the worker decodes: the broker's default response budget (4 MiB)
/// plus a generous allowance for the one task that may exceed it (berth's one message bound).
const LEASE_RESPONSE_LIMIT: usize = berth_runtime::MAX_MESSAGE_BYTES;

/// Lease TTL assumed until the broker's first answer names the real one.
const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(10);

/// Runs the worker until `shutdown` is cancelled.
///
/// Long-polls Lease for as many tasks as there are free slots, runs each on `handler` with its
/// own cancellation token, heartbeats every held lease, and reports Complete/Fail with the
/// fence. Reconnects with exponential backoff while the broker is unreachable. On shutdown it
/// stops leasing, lets running tasks finish for `shutdown_grace`, then cancels them and waits
/// for them to report.
pub async fn run<H: Handler>(
    broker: Broker,
    handler: Arc<H>,
    config: WorkerConfig,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    // The lease loop is not traced (an idle worker would fill a collector with Leases); each
    // task's span continues the trace of the request that queued it.
    let span =
        berth_runtime::untraced(tracing::info_span!(parent: None, "worker", worker = %config.id));
    tracing::Instrument::instrument(lease_loop(broker, handler, config, shutdown), span).await
}

async fn lease_loop<H: Handler>(
    broker: Broker,
    handler: Arc<H>,
    config: WorkerConfig,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    config.validate()?;
    // A Lease answer holds up to the broker's response budget plus one task that may exceed
    // it (a payload of up to the broker's payload limit, or a compacted hook run).
    let broker = broker
        .max_decoding_message_size(LEASE_RESPONSE_LIMIT)
        .max_encoding_message_size(berth_runtime::MAX_MESSAGE_BYTES);
    let held = HeldLeases::default();
    let mut running = JoinSet::new();
    let mut ttl = DEFAULT_LEASE_TTL;
    let stop_heartbeat = CancellationToken::new();
    let mut heartbeat = None;
    let reconnect = ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times();
    let mut retry_delays = reconnect.build();
    tracing::info!(worker = %config.id, concurrency = config.concurrency, "worker started");
    while !shutdown.is_cancelled() {
        while running.try_join_next().is_some() {}
        let free = config.concurrency.saturating_sub(running.len());
        if free == 0 {
            tokio::select! {
                () = shutdown.cancelled() => break,
                _ = running.join_next() => continue,
            }
        }
        // Not interrupted by shutdown: tasks leased by an abandoned call would sit unseen until
        // their lease expired. The call returns within `lease_wait` anyway.
        let sent_at = Instant::now();
        match lease(&broker, &config, free).await {
            Ok(response) => {
                retry_delays = reconnect.build();
                if response.lease_ttl_ms > 0 {
                    ttl = Duration::from_millis(response.lease_ttl_ms as u64);
                }
                // Started once the lease TTL is known.
                heartbeat.get_or_insert_with(|| {
                    berth_runtime::spawn_in(
                        tracing::info_span!(parent: None, "worker.heartbeat", worker = %config.id),
                        heartbeat::run(
                            broker.clone(),
                            held.clone(),
                            config.clone(),
                            ttl,
                            stop_heartbeat.clone(),
                        ),
                    )
                });
                for task in response.tasks {
                    let cancel = held.insert(task.id.clone(), task.fence, ttl, sent_at);
                    let run = execute::execute(
                        handler.clone(),
                        broker.clone(),
                        held.clone(),
                        config.clone(),
                        shutdown.clone(),
                        task,
                        cancel,
                    );
                    running.spawn(run);
                }
            }
            Err(err) => {
                let delay = retry_delays.next().unwrap_or(Duration::from_secs(5));
                tracing::warn!(error = %err, retry_in = ?delay, "cannot lease tasks from the broker");
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
    drain(&mut running, &held, &config).await;
    stop_heartbeat.cancel();
    if let Some(heartbeat) = heartbeat {
        // The heartbeat loop only returns; a join error would be a panic already logged.
        let _ = heartbeat.await;
    }
    tracing::info!(worker = %config.id, "worker stopped");
    Ok(())
}

/// Why one Lease call failed.
#[derive(Debug, thiserror::Error)]
enum LeaseError {
    #[error("broker Lease call failed: {0}")]
    Status(#[from] CallError),
    #[error("broker Lease call timed out after {0:?}")]
    Timeout(Duration),
}

async fn lease(
    broker: &Broker,
    config: &WorkerConfig,
    free: usize,
) -> Result<pb::LeaseResponse, LeaseError> {
    let request = pb::LeaseRequest {
        worker: config.id.clone(),
        max: i32::try_from(free).unwrap_or(i32::MAX),
        wait_ms: i32::try_from(config.lease_wait.as_millis()).unwrap_or(i32::MAX),
    };
    // The broker may hold the call for `lease_wait`; allow that plus a normal call's time.
    let limit = config.lease_wait + config.call_timeout;
    let mut broker = broker.clone();
    match tokio::time::timeout(limit, broker.lease(berth_runtime::traced_request(request))).await {
        Ok(result) => Ok(result?.into_inner()),
        Err(_) => Err(LeaseError::Timeout(limit)),
    }
}

/// Lets running tasks finish for the grace period, then cancels them and gives them one more
/// grace period to stop and report; a handler that ignores cancellation even then is aborted
/// (its lease expires and the broker redelivers the task).
async fn drain(running: &mut JoinSet<()>, held: &HeldLeases, config: &WorkerConfig) {
    if running.is_empty() {
        return;
    }
    tracing::info!(tasks = running.len(), grace = ?config.shutdown_grace, "waiting for running tasks");
    if join_all_within(running, config.shutdown_grace).await {
        return;
    }
    tracing::warn!(
        tasks = held.len(),
        "shutdown grace period over; cancelling running tasks"
    );
    held.cancel_all();
    if !join_all_within(running, config.shutdown_grace).await {
        tracing::error!(
            tasks = running.len(),
            "tasks ignored cancellation; aborting them"
        );
        running.shutdown().await;
    }
}

/// Waits for every task in `running`; false when `limit` passed first.
async fn join_all_within(running: &mut JoinSet<()>, limit: Duration) -> bool {
    tokio::time::timeout(limit, async {
        while running.join_next().await.is_some() {}
    })
    .await
    .is_ok()
}
