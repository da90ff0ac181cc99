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
    use crate::flows;
    use crate::model::{Generation, PackageKey};

    /// A broker client that is never reached: connecting is lazy and nothing listens there.
    fn unreachable_broker() -> berth_clients::Broker {
        berth_clients::broker("http://127.0.0.1:9", None).unwrap()
    }

    crate::test_db::on_both_backends!(
        an_unknown_row_stops_the_relay_and_is_kept,
        rows_of_the_previous_version_are_delivered_with_their_payloads,
    );

    /// A broker that records the tasks it is given and accepts every Supersede.
    #[derive(Clone, Default)]
    struct RecordingBroker(Arc<std::sync::Mutex<Vec<Task>>>);

    #[tonic::async_trait]
    impl berth_proto::queue::broker_server::Broker for RecordingBroker {
        async fn enqueue(
            &self,
            request: tonic::Request<EnqueueRequest>,
        ) -> Result<tonic::Response<berth_proto::queue::EnqueueResponse>, tonic::Status> {
            let tasks = request.into_inner().tasks;
            let accepted = tasks.len() as i32;
            self.0.lock().unwrap().extend(tasks);
            Ok(tonic::Response::new(berth_proto::queue::EnqueueResponse {
                accepted,
            }))
        }

        async fn supersede(
            &self,
            _: tonic::Request<SupersedeRequest>,
        ) -> Result<tonic::Response<berth_proto::queue::SupersedeResponse>, tonic::Status> {
            Ok(tonic::Response::new(Default::default()))
        }

        async fn lease(
            &self,
            _: tonic::Request<berth_proto::queue::LeaseRequest>,
        ) -> Result<tonic::Response<berth_proto::queue::LeaseResponse>, tonic::Status> {
            Err(tonic::Status::unimplemented("not in this test"))
        }

        async fn heartbeat(
            &self,
            _: tonic::Request<berth_proto::queue::HeartbeatRequest>,
        ) -> Result<tonic::Response<berth_proto::queue::HeartbeatResponse>, tonic::Status> {
            Err(tonic::Status::unimplemented("not in this test"))
        }

        async fn complete(
            &self,
            _: tonic::Request<berth_proto::queue::CompleteRequest>,
        ) -> Result<tonic::Response<berth_proto::queue::CompleteResponse>, tonic::Status> {
            Err(tonic::Status::unimplemented("not in this test"))
        }

        async fn fail(
            &self,
            _: tonic::Request<berth_proto::queue::FailRequest>,
        ) -> Result<tonic::Response<berth_proto::queue::FailResponse>, tonic::Status> {
            Err(tonic::Status::unimplemented("not in this test"))
        }

        async fn defer(
            &self,
            _: tonic::Request<berth_proto::queue::DeferRequest>,
        ) -> Result<tonic::Response<berth_proto::queue::DeferResponse>, tonic::Status> {
            Err(tonic::Status::unimplemented("not in this test"))
        }

        async fn dump(
            &self,
            _: tonic::Request<berth_proto::queue::DumpRequest>,
        ) -> Result<tonic::Response<berth_proto::queue::DumpResponse>, tonic::Status> {
            Err(tonic::Status::unimplemented("not in this test"))
        }
    }

    /// Outbox rows written by the lifecycle whose tasks carried JSON text are delivered after
    /// the upgrade, each task with its payload as the current contract encodes it.
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
        let recorder = RecordingBroker::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(berth_proto::queue::broker_server::BrokerServer::new(
                    recorder.clone(),
                ))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    stop.clone().cancelled_owned(),
                ),
        );
        let mut broker = berth_clients::broker(&format!("http://{addr}"), None).unwrap();
        assert!(!deliver(&store, &mut broker).await.unwrap(), "one batch");
        let tasks = std::mem::take(&mut *recorder.0.lock().unwrap());
        let kinds: Vec<(&str, &str)> = tasks
            .iter()
            .map(|t| (t.id.as_str(), t.kind.as_str()))
            .collect();
        assert_eq!(kinds, [("t1", "Download"), ("t2", "Run")]);
        assert!(tasks[0].payload.is_empty());
        let run: berth_proto::tasks::Run = berth_proto::tasks::payload(&tasks[1]).unwrap();
        assert_eq!(run.reason, "values changed by a hook");
        assert!(
            store.outbox_claim(BATCH).await.unwrap().rows.is_empty(),
            "delivered rows are deleted"
        );
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
            .outbox_insert_raw(&flows::supersede(&key, Generation::new(2)).encode())
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
