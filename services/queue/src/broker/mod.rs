//! The queue broker: durable storage plus the `berth.queue.v1.Broker` gRPC service.
//!
//! Layout: `store` owns the SQL (one code path for SQLite and PostgreSQL); `backoff` and
//! `compaction` are pure rules; `convert` validates and maps proto messages; `service` is the
//! thin gRPC adapter that adds long polling; `metrics` and `listen` (PostgreSQL LISTEN) are
//! the cross-cutting parts.
//!
//! Retries never give up: a failing task is retried with capped backoff until it succeeds, is
//! superseded, or fails with `retry = false` (like Deckhouse packages, unlike the library default
//! that silently dropped tasks after 15 minutes).
//!
//! Deadlines (retry times, lease expiry) are wall-clock milliseconds taken by the broker that
//! writes them, so several brokers over one PostgreSQL database need synchronised clocks (NTP);
//! a skew shortens or stretches leases by that much.
//!
//! Over PostgreSQL, [`BrokerService::new`] spawns one task that LISTENs for other brokers'
//! changes (see `listen`). Nothing else is needed in the background for correctness: lease
//! expiry (redelivery) and the removal of cancelled tasks whose holder vanished happen lazily
//! inside Lease, and a waiting Lease wakes up by itself when the next retry delay ends or the
//! next lease expires. [`run_maintenance`] only refreshes the depth metrics.

mod backoff;
mod compaction;
mod completer;
mod convert;
mod metrics;
mod model;
mod service;
mod store;

use std::time::Duration;

pub use backoff::Backoff;
pub use convert::InvalidTask;
pub use metrics::BrokerMetrics;
pub use model::{
    FailOutcome, HistoryEntry, LeaseBatch, LeasedTask, NewTask, Outcome, QueueSummary, Settled,
};
pub use service::BrokerService;
pub use store::{
    CHANGE_CHANNEL, Dialect, HISTORY_LIMIT, LeaseLimits, LeaseRef, Store, StoreError, Superseded,
};

/// Tunables of a broker. [`Default`] gives the production values.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// How long a lease lasts without a heartbeat. Default 10 s: a dead worker's task is
    /// redelivered after at most this long, and workers heartbeat far more often.
    pub lease_ttl: Duration,
    /// First retry delay after a failure. Default 1 s; it doubles per attempt.
    pub retry_base: Duration,
    /// Cap of the retry delay. Default 60 s, as Deckhouse packages use.
    pub retry_max: Duration,
    /// Most tasks accepted in one Enqueue call. Default 1000.
    pub max_enqueue_batch: usize,
    /// Largest accepted payload plus merge items of a task, in bytes. Default 1 MiB.
    pub max_payload_bytes: usize,
    /// Longest a Lease call may wait for work. Default 30 s; longer requests are clamped.
    pub max_lease_wait: Duration,
    /// Most tasks handed out by one Lease call. Default 64; larger requests are clamped.
    pub max_lease_batch: usize,
    /// Payload bytes after which a Lease response takes no further task. Default 4 MiB, the
    /// default decoding limit of a tonic client.
    pub max_lease_bytes: usize,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(10),
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(60),
            max_enqueue_batch: 1000,
            max_payload_bytes: 1 << 20,
            max_lease_wait: Duration::from_secs(30),
            max_lease_batch: 64,
            max_lease_bytes: 4 << 20,
        }
    }
}

impl BrokerConfig {
    pub fn backoff(&self) -> Backoff {
        Backoff {
            base: self.retry_base,
            max: self.retry_max,
        }
    }
}

/// Background upkeep of a broker until `shutdown`: refreshes the queue-depth metrics every
/// `period` (15 s is a good default). Queue semantics do not depend on it (see the module
/// docs), so a broker without it is correct, only its depth gauges stay empty.
pub async fn run_maintenance(
    svc: BrokerService,
    period: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        if let Err(err) = svc.refresh_metrics().await {
            tracing::warn!(
                error = &err as &dyn std::error::Error,
                "cannot refresh queue metrics"
            );
        }
    }
}

/// The tonic service for `svc`, with a decoding limit that admits a full Enqueue batch.
pub fn server(
    svc: BrokerService,
) -> berth_proto::queue::broker_server::BrokerServer<BrokerService> {
    let limit = svc
        .config()
        .max_enqueue_batch
        .saturating_mul(svc.config().max_payload_bytes)
        .clamp(4 << 20, berth_runtime::MAX_MESSAGE_BYTES);
    berth_proto::queue::broker_server::BrokerServer::new(svc)
        .max_decoding_message_size(limit)
        .max_encoding_message_size(berth_runtime::MAX_MESSAGE_BYTES)
}
