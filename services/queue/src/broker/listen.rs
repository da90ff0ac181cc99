//! Cross-broker wake-ups: several brokers over one PostgreSQL database learn of each other's
//! Enqueue/Complete/Fail/Supersede through LISTEN/NOTIFY, so a Lease long-polling on one broker
//! wakes up when another broker made a task ready.

use std::sync::Arc;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::store::CHANGE_CHANNEL;

/// Bound on connecting and subscribing, so a dead server is retried rather than waited on.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Relays notifications on [`CHANGE_CHANNEL`] to `wake` until `stop` is cancelled.
/// Reconnects with backoff; after every (re)connection it wakes the waiters once, because
/// notifications sent while disconnected are lost.
pub(super) async fn relay(database_url: Arc<str>, wake: Arc<Notify>, stop: CancellationToken) {
    let policy = ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(10))
        .with_jitter()
        .without_max_times();
    let mut delays = policy.build();
    loop {
        let connected = tokio::select! {
            () = stop.cancelled() => return,
            result = tokio::time::timeout(CONNECT_TIMEOUT, subscribe(&database_url)) => result,
        };
        match connected {
            Ok(Ok(mut listener)) => {
                delays = policy.build();
                wake.notify_one();
                if let Err(err) = forward(&mut listener, &wake, &stop).await {
                    tracing::warn!(error = %err, "PostgreSQL LISTEN connection failed; reconnecting");
                }
            }
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "cannot LISTEN for queue changes on PostgreSQL")
            }
            Err(_) => {
                tracing::warn!(timeout = ?CONNECT_TIMEOUT, "LISTEN for queue changes timed out")
            }
        }
        if stop.is_cancelled() {
            return;
        }
        let delay = delays.next().unwrap_or(Duration::from_secs(10));
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

async fn subscribe(database_url: &str) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect(database_url).await?;
    listener.listen(CHANGE_CHANNEL).await?;
    Ok(listener)
}

/// Forwards notifications until the connection fails (an error) or `stop` fires (Ok).
async fn forward(
    listener: &mut PgListener,
    wake: &Notify,
    stop: &CancellationToken,
) -> Result<(), sqlx::Error> {
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            received = listener.try_recv() => {
                // `None` means the connection dropped and was re-established: wake anyway,
                // since notifications may have been missed in between.
                received?;
                wake.notify_one();
            }
        }
    }
}
