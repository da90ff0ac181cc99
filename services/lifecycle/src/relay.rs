//! The outbox relay: delivers committed broker work (supersede, enqueue) in commit order and
//! deletes it only once the broker accepted it, so accepted work survives a crash of lifecycle or
//! a broker outage. The broker's Enqueue is idempotent by task id, so a redelivery after a crash
//! between "broker accepted" and "row deleted" is harmless.

use std::sync::Arc;
use std::time::Duration;

use berth_proto::queue::broker_client::BrokerClient;
use berth_proto::queue::{EnqueueRequest, SupersedeRequest, Task};
use serde_json::Value;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::store::Store;

/// Outbox rows delivered per round trip.
const BATCH: i64 = 64;
/// Longest pause between retries while the broker is unreachable.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Safety net: look at the outbox this often even without a wake-up.
const IDLE_POLL: Duration = Duration::from_secs(2);

pub async fn run(
    store: Store,
    mut broker: BrokerClient<berth_telemetry::Channel>,
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

/// Delivers one batch. Ok(true) when there may be more.
async fn deliver(
    store: &Store,
    broker: &mut BrokerClient<berth_telemetry::Channel>,
) -> Result<bool, String> {
    let batch = store.outbox_batch(BATCH).await.map_err(|e| e.to_string())?;
    let Some(last) = batch.last().map(|(id, _)| *id) else {
        return Ok(false);
    };
    let mut pending: Vec<Task> = Vec::new();
    for (_, body) in &batch {
        match body["op"].as_str() {
            Some("enqueue") => pending.push(task_from_json(&body["task"])),
            Some("supersede") => {
                flush(broker, &mut pending).await?;
                broker
                    .supersede(SupersedeRequest {
                        package: body["package"].as_str().unwrap_or_default().to_owned(),
                        generation: body["generation"].as_i64().unwrap_or_default(),
                    })
                    .await
                    .map_err(|s| format!("Supersede: {}", s.message()))?;
            }
            _ => tracing::error!(%body, "dropping an outbox row of unknown shape"),
        }
    }
    flush(broker, &mut pending).await?;
    store.outbox_delete(last).await.map_err(|e| e.to_string())?;
    Ok(batch.len() as i64 == BATCH)
}

async fn flush(
    broker: &mut BrokerClient<berth_telemetry::Channel>,
    pending: &mut Vec<Task>,
) -> Result<(), String> {
    if pending.is_empty() {
        return Ok(());
    }
    broker
        .enqueue(EnqueueRequest {
            tasks: std::mem::take(pending),
        })
        .await
        .map_err(|s| format!("Enqueue: {}", s.message()))?;
    Ok(())
}

fn task_from_json(t: &Value) -> Task {
    let s = |k: &str| t[k].as_str().unwrap_or_default().to_owned();
    Task {
        id: s("id"),
        queue: s("queue"),
        package: s("package"),
        generation: t["generation"].as_i64().unwrap_or_default(),
        kind: s("kind"),
        payload_json: s("payload_json"),
        traceparent: s("traceparent"),
        ..Default::default()
    }
}
