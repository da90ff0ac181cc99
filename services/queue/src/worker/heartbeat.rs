//! The heartbeat loop: extends every held lease and relays cancellations to the tasks.

use std::time::Duration;

use berth_proto::queue as pb;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use super::WorkerConfig;
use super::client::Broker;
use super::held::HeldLeases;

/// Heartbeats until `stop` is cancelled.
///
/// A task is cancelled when the broker names it (superseded, or the lease was lost), and also
/// when heartbeats have failed for longer than its lease: the broker will then redeliver it, so
/// this copy must stop to keep "one running task per queue".
pub(crate) async fn run(
    mut broker: Broker,
    held: HeldLeases,
    config: WorkerConfig,
    ttl: Duration,
    stop: CancellationToken,
) {
    let mut ticker = tokio::time::interval(config.heartbeat);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let leases = held.snapshot();
        if leases.is_empty() {
            continue;
        }
        let sent_at = Instant::now();
        let request = pb::HeartbeatRequest {
            worker: config.id.clone(),
            leases: leases
                .iter()
                .map(|(task_id, fence)| pb::LeaseRef {
                    task_id: task_id.clone(),
                    fence: *fence,
                })
                .collect(),
        };
        match tokio::time::timeout(
            config.call_timeout,
            broker.heartbeat(berth_runtime::traced_request(request)),
        )
        .await
        {
            Ok(Ok(response)) => {
                let stop_ids = response.into_inner().cancelled;
                for (task_id, fence) in leases.iter().filter(|(id, _)| stop_ids.contains(id)) {
                    if held.cancel(task_id, *fence) {
                        tracing::info!(task.id = %task_id, "broker cancelled the task or its lease was lost; stopping it");
                    }
                }
                held.confirm(&leases, ttl, sent_at);
            }
            Ok(Err(status)) => {
                tracing::warn!(code = ?status.code(), message = status.message(), "heartbeat failed")
            }
            Err(_) => tracing::warn!(timeout = ?config.call_timeout, "heartbeat timed out"),
        }
        for task_id in held.cancel_expired(Instant::now()) {
            tracing::warn!(task.id = %task_id, "lease expired without a confirmed heartbeat; stopping the task");
        }
    }
}
