//! PostgreSQL LISTEN/NOTIFY for services whose replicas share one database: the brokers wake
//! each other's long-polls, lifecycle replicas tell each other's Watch streams and validations.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use sqlx::postgres::PgListener;
use tokio_util::sync::CancellationToken;

/// Bound on connecting and subscribing, so a dead server is retried rather than waited on.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a LISTEN connection delivers.
#[derive(Debug)]
pub enum Notice<'a> {
    /// A notification on `channel` with its payload.
    Message { channel: &'a str, payload: &'a str },
    /// The connection was (re)established: notifications sent while it was down are lost, so
    /// whatever they would have told must be looked up.
    Reconnected,
}

/// Delivers the notifications on `channels` of the database at `database_url` to `sink` until
/// `stop` is cancelled, reconnecting with backoff. `sink` must not block (it runs on the
/// listening task).
pub async fn relay(
    database_url: &str,
    channels: &[&str],
    mut sink: impl FnMut(Notice<'_>),
    stop: CancellationToken,
) {
    let policy = ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(10))
        .with_jitter()
        .without_max_times();
    let mut delays = policy.build();
    loop {
        let connected = tokio::select! {
            () = stop.cancelled() => return,
            result = tokio::time::timeout(CONNECT_TIMEOUT, subscribe(database_url, channels)) => result,
        };
        match connected {
            Ok(Ok(mut listener)) => {
                delays = policy.build();
                sink(Notice::Reconnected);
                if let Err(err) = forward(&mut listener, &mut sink, &stop).await {
                    tracing::warn!(error = %err, ?channels, "PostgreSQL LISTEN connection failed; reconnecting");
                }
            }
            Ok(Err(err)) => {
                tracing::warn!(error = %err, ?channels, "cannot LISTEN on PostgreSQL")
            }
            Err(_) => {
                tracing::warn!(timeout = ?CONNECT_TIMEOUT, ?channels, "LISTEN on PostgreSQL timed out")
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

async fn subscribe(database_url: &str, channels: &[&str]) -> Result<PgListener, sqlx::Error> {
    let mut listener = PgListener::connect(database_url).await?;
    listener.listen_all(channels.iter().copied()).await?;
    Ok(listener)
}

/// Forwards notifications until the connection fails (an error) or `stop` fires (Ok).
async fn forward(
    listener: &mut PgListener,
    sink: &mut impl FnMut(Notice<'_>),
    stop: &CancellationToken,
) -> Result<(), sqlx::Error> {
    loop {
        tokio::select! {
            () = stop.cancelled() => return Ok(()),
            received = listener.try_recv() => match received? {
                Some(n) => sink(Notice::Message { channel: n.channel(), payload: n.payload() }),
                // The connection dropped and was re-established inside sqlx.
                None => sink(Notice::Reconnected),
            },
        }
    }
}
