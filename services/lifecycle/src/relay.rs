//! The outbox relay: delivers committed broker work (supersede, enqueue) in commit order and
//! deletes it only once the broker accepted it, so accepted work survives a crash of lifecycle or
//! a broker outage. The broker's Enqueue is idempotent by task id, so a redelivery after a crash
//! between "broker accepted" and "row deleted" is harmless.

use std::sync::Arc;
use std::time::Duration;

use berth_proto::queue::{EnqueueRequest, SupersedeRequest, Task};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::outbox::{self, Op};
use crate::store::{Store, StoreError};

/// Outbox rows delivered per round trip.
const BATCH: i64 = 64;
/// Longest pause between retries while the broker is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Safety net: look at the outbox this often even without a wake-up.
const IDLE_POLL: Duration = Duration::from_secs(2);

pub async fn run(
    store: Store,
    mut broker: berth_clients::Broker,
    wake: Arc<Notify>,
    shutdown: CancellationToken,
) {
    let mut backoff = Duration::from_millis(50);
    loop {
        match deliver(&store, &mut broker).await {
            Ok(true) => {
                backoff = Duration::from_millis(50);
                continue;
            }
            Ok(false) => {
                backoff = Duration::from_millis(50);
                tokio::select! {
                    _ = wake.notified() => {}
                    _ = tokio::time::sleep(IDLE_POLL) => {}
                    _ = shutdown.cancelled() => return,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "outbox delivery to the broker failed");
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = shutdown.cancelled() => return,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Why a batch was not (wholly) delivered; the relay logs it and retries after a pause.
#[derive(Debug, thiserror::Error)]
enum RelayError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A row this lifecycle cannot read: the relay stops before it and keeps it, since skipping
    /// it would silently lose the work it stands for.
    #[error("{0}; the relay stops here until it can be read")]
    Unreadable(#[from] outbox::DecodeError),
    #[error("{call}: {message}")]
    Broker { call: &'static str, message: String },
}

/// Delivers one batch, in order. Ok(true) when there may be more. Rows before an unreadable row
/// are delivered and deleted; that row and everything after it stay. The batch is claimed (see
/// [`Store::outbox_claim`]): another lifecycle relaying from the same PostgreSQL database does
/// not deliver it too.
async fn deliver(store: &Store, broker: &mut berth_clients::Broker) -> Result<bool, RelayError> {
    let claim = store.outbox_claim(BATCH).await?;
    let full = claim.rows.len() as i64 == BATCH;
    let mut delivered = Vec::with_capacity(claim.rows.len());
    // Ids of the Enqueue rows in `pending`: delivered once it is flushed.
    let mut pending_ids = Vec::new();
    let mut pending: Vec<Task> = Vec::new();
    let mut unreadable = None;
    for (id, body) in &claim.rows {
        let row = match outbox::Row::decode(*id, body) {
            Ok(row) => row,
            Err(e) => {
                unreadable = Some(e);
                break;
            }
        };
        match row.op {
            Op::Enqueue { task } => {
                pending.push(task.into());
                pending_ids.push(*id);
            }
            Op::Supersede {
                package,
                generation,
            } => {
                // A failed call drops the claim unsettled: the whole batch is delivered again
                // (the broker's Enqueue and Supersede are idempotent).
                flush(broker, &mut pending).await?;
                delivered.append(&mut pending_ids);
                broker
                    .supersede(SupersedeRequest {
                        package,
                        generation,
                        // A validation's caller waits for its answer whatever generation the
                        // package reached meanwhile; the worker checks it against the newest.
                        keep_kinds: vec![
                            berth_proto::tasks::TaskKind::ValidateRun
                                .as_str()
                                .to_owned(),
                        ],
                    })
                    .await
                    .map_err(|s| RelayError::Broker {
                        call: "Supersede",
                        message: s.message().to_owned(),
                    })?;
                delivered.push(*id);
            }
        }
    }
    flush(broker, &mut pending).await?;
    delivered.append(&mut pending_ids);
    store.outbox_settle(claim, &delivered).await?;
    match unreadable {
        Some(e) => Err(e.into()),
        None => Ok(full),
    }
}

async fn flush(
    broker: &mut berth_clients::Broker,
    pending: &mut Vec<Task>,
) -> Result<(), RelayError> {
    if pending.is_empty() {
        return Ok(());
    }
    // The delivery continues the trace of the request that queued the work (the first
    // task's, when a batch holds several requests' tasks); the relay's loop is not traced.
    let span = berth_runtime::with_traceparent(
        tracing::info_span!("lifecycle.relay.enqueue", tasks = pending.len()),
        &pending[0].traceparent,
    );
    tracing::Instrument::instrument(
        broker.enqueue(EnqueueRequest {
            tasks: std::mem::take(pending),
        }),
        span,
    )
    .await
    .map_err(|s| RelayError::Broker {
        call: "Enqueue",
        message: s.message().to_owned(),
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_lifecycle_core::task::Work;
    use berth_lifecycle_core::{Generation, PackageKey};

    /// A broker client that is never reached: connecting is lazy and nothing listens there.
    fn unreachable_broker() -> berth_clients::Broker {
        berth_clients::broker("http://127.0.0.1:9", None).unwrap()
    }

    crate::test_db::on_both_backends!(
        an_unknown_row_stops_the_relay_and_is_kept,
        rows_of_the_previous_version_are_delivered_with_their_payloads,
    );

    /// Outbox rows written by the lifecycle whose tasks carried JSON text are delivered to a
    /// broker after the upgrade, each task with its payload as the current contract encodes it.
    async fn rows_of_the_previous_version_are_delivered_with_their_payloads(
        db: crate::test_db::TestDb,
    ) {
        let store = Store::open(&db.url()).await.unwrap();
        // As the previous lifecycle wrote them: without a version, and as version 1.
        store
            .outbox_insert_raw(r#"{"op":"supersede","package":"default.hello","generation":2}"#)
            .await
            .unwrap();
        store
            .outbox_insert_raw(r#"{"v":1,"op":"enqueue","task":{"id":"t1","queue":"default.hello","package":"default.hello","generation":2,"kind":"Download","payload_json":"{}","traceparent":""}}"#)
            .await
            .unwrap();
        store
            .outbox_insert_raw(r#"{"v":1,"op":"enqueue","task":{"id":"t2","queue":"default.hello","package":"default.hello","generation":2,"kind":"Run","payload_json":"{\"reason\":\"values changed by a hook\"}","traceparent":""}}"#)
            .await
            .unwrap();
        // A real broker, in this process, over an in-memory database.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn({
            let stop = stop.clone();
            async move {
                berth_queue::process::serve(
                    "sqlite::memory:",
                    berth_queue::broker::BrokerConfig::default(),
                    None,
                    listener,
                    &berth_runtime::Metrics::default(),
                    stop,
                )
                .await
            }
        });
        let mut broker = berth_clients::broker(&format!("http://{addr}"), None).unwrap();
        assert!(!deliver(&store, &mut broker).await.unwrap(), "one batch");
        assert!(
            store.outbox_claim(BATCH).await.unwrap().rows.is_empty(),
            "delivered rows are deleted"
        );
        // The package's queue runs them in order: t1, then t2.
        let lease = berth_proto::queue::LeaseRequest {
            worker: "w".into(),
            max: 10,
            wait_ms: 0,
        };
        let first = broker.lease(lease).await.unwrap().into_inner().tasks;
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].id.as_str(), first[0].kind.as_str()),
            ("t1", "Download")
        );
        assert!(first[0].payload.is_empty());
        let complete = berth_proto::queue::CompleteRequest {
            lease: Some(berth_proto::queue::LeaseRef {
                task_id: first[0].id.clone(),
                fence: first[0].fence,
            }),
            worker: "w".into(),
            next: 1,
        };
        let next = broker.complete(complete).await.unwrap().into_inner().tasks;
        assert_eq!(next.len(), 1);
        assert_eq!((next[0].id.as_str(), next[0].kind.as_str()), ("t2", "Run"));
        let run: berth_proto::tasks::Run = berth_proto::tasks::payload(&next[0]).unwrap();
        assert_eq!(run.reason, "values changed by a hook");
        stop.cancel();
        server.await.unwrap().unwrap();
    }

    async fn an_unknown_row_stops_the_relay_and_is_kept(db: crate::test_db::TestDb) {
        let store = Store::open(&db.url()).await.unwrap();
        let key = PackageKey::from_issued("default.hello".into());
        store
            .outbox_insert_raw(r#"{"v":99,"op":"teleport","package":"default.hello"}"#)
            .await
            .unwrap();
        store
            .outbox_insert_raw(
                &outbox::Row::from_work(
                    &Work::Supersede {
                        key: key.clone(),
                        generation: Generation::new(2),
                    },
                    "",
                )
                .encode(),
            )
            .await
            .unwrap();
        let mut broker = unreachable_broker();
        for _ in 0..2 {
            let err = deliver(&store, &mut broker).await.unwrap_err();
            assert!(matches!(err, RelayError::Unreadable(_)), "{err}");
        }
        let kept = store.outbox_claim(BATCH).await.unwrap().rows;
        assert_eq!(kept.len(), 2, "{kept:?}");
        assert!(kept[0].1.contains("teleport"));
    }
}
