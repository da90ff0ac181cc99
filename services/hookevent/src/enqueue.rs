//! Delivery of HookRun tasks to the broker: one ordered stream, sent in batches.
//!
//! Watch tasks and the scheduler hand tasks to [`Enqueuer::send`]; a single sender task delivers
//! them in order, so the events of one binding reach its queue in the order they happened.

use std::time::Duration;

use berth_proto::queue::{EnqueueRequest, Task};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Tasks waiting for the broker. When it is full, watch streams stop being read (backpressure
/// reaches the API server's watch) instead of memory growing; 4096 covers bursts of several
/// seconds at the 100 events/s the service is sized for.
const QUEUE_CAPACITY: usize = 4096;
/// Tasks per Enqueue call: bounds the request size while still amortising round trips.
const BATCH: usize = 128;
/// Longest one Enqueue call may take.
const ENQUEUE_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts for one batch while the broker is unreachable; afterwards the batch is dropped and
/// logged (hookevent keeps no durable outbox: a resynchronisation repairs hooks' view).
const ENQUEUE_ATTEMPTS: u32 = 8;

#[derive(Clone)]
pub struct Enqueuer {
    tx: mpsc::Sender<Task>,
}

impl Enqueuer {
    /// Starts the sender task; it ends when every [`Enqueuer`] is dropped or on `shutdown`.
    pub fn start(broker: berth_clients::Broker, shutdown: CancellationToken) -> Enqueuer {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        berth_runtime::spawn_in(
            tracing::info_span!(parent: None, "hookevent.enqueue"),
            deliver(broker, rx, shutdown),
        );
        Enqueuer { tx }
    }

    /// Queues tasks for delivery, waiting while the queue is full.
    pub async fn send(&self, tasks: Vec<Task>) {
        for task in tasks {
            if self.tx.send(task).await.is_err() {
                tracing::warn!("hookevent is shutting down; task dropped");
                return;
            }
        }
    }
}

async fn deliver(
    mut broker: berth_clients::Broker,
    mut rx: mpsc::Receiver<Task>,
    shutdown: CancellationToken,
) {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        batch.clear();
        let received = tokio::select! {
            n = rx.recv_many(&mut batch, BATCH) => n,
            _ = shutdown.cancelled() => return,
        };
        if received == 0 {
            return;
        }
        let mut delay = Duration::from_millis(50);
        for attempt in 1..=ENQUEUE_ATTEMPTS {
            let call = broker.enqueue(EnqueueRequest {
                tasks: batch.clone(),
            });
            let error = match tokio::time::timeout(ENQUEUE_TIMEOUT, call).await {
                Ok(Ok(_)) => break,
                Ok(Err(status)) => status.message().to_owned(),
                Err(_) => format!("no answer within {ENQUEUE_TIMEOUT:?}"),
            };
            if attempt == ENQUEUE_ATTEMPTS {
                tracing::error!(%error, tasks = batch.len(), "broker unavailable; hook runs dropped");
                break;
            }
            tracing::warn!(%error, attempt, "enqueue failed; retrying");
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.cancelled() => return,
            }
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }
}
