//! Running one leased task and reporting its outcome to the broker.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use berth_proto::queue as pb;
use berth_proto::queue::broker_client::BrokerClient;
use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tracing::Instrument;

use super::held::HeldLeases;
use super::{Handler, TaskError, WorkerConfig};

/// How often a report is tried when the broker is unreachable. After that the lease simply
/// expires and the broker redelivers the task (delivery is at-least-once).
const REPORT_ATTEMPTS: usize = 3;

/// Runs `task` on `handler` and settles its lease.
pub(crate) async fn execute<H: Handler>(
    handler: Arc<H>,
    broker: BrokerClient<Channel>,
    held: HeldLeases,
    config: WorkerConfig,
    task: pb::Task,
    cancel: CancellationToken,
) {
    let span = tracing::info_span!(
        "task",
        task.id = %task.id,
        task.kind = %task.kind,
        task.queue = %task.queue,
        task.attempts = task.attempts,
        package.key = %task.package,
    );
    let span = berth_telemetry::with_traceparent(span, &task.traceparent);
    async move {
        let lease = pb::LeaseRef {
            task_id: task.id.clone(),
            fence: task.fence,
        };
        // A panicking handler must not leave the lease dangling until it expires: report it as
        // a retryable failure like any other error.
        let result = AssertUnwindSafe(handler.handle(task, cancel.clone()))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| Err(TaskError::retry("task handler panicked")));
        held.remove(&lease.task_id, lease.fence);
        report(broker, &config, lease, result, cancel.is_cancelled()).await;
    }
    .instrument(span)
    .await
}

async fn report(
    mut broker: BrokerClient<Channel>,
    config: &WorkerConfig,
    lease: pb::LeaseRef,
    result: Result<(), TaskError>,
    cancelled: bool,
) {
    match &result {
        Ok(()) => tracing::debug!("task done"),
        Err(err) if cancelled => {
            tracing::info!(error = %err.message, "task stopped after cancellation")
        }
        Err(err) => tracing::warn!(error = %err.message, retry = err.retry, "task failed"),
    }
    for attempt in 1..=REPORT_ATTEMPTS {
        let call = async {
            match &result {
                Ok(()) => broker
                    .complete(pb::CompleteRequest {
                        lease: Some(lease.clone()),
                    })
                    .await
                    .map(|_| ()),
                Err(err) => {
                    let request = pb::FailRequest {
                        lease: Some(lease.clone()),
                        error: err.message.clone(),
                        retry: err.retry,
                    };
                    broker.fail(request).await.map(|_| ())
                }
            }
        };
        match tokio::time::timeout(config.call_timeout, call).await {
            Ok(Ok(())) => return,
            Ok(Err(status)) if status.code() == tonic::Code::FailedPrecondition => {
                // Someone else holds the task now (our lease expired); their result counts.
                tracing::warn!(
                    message = status.message(),
                    "lease was lost before the result was reported"
                );
                return;
            }
            Ok(Err(status)) => {
                tracing::warn!(attempt, code = ?status.code(), message = status.message(), "reporting the task result failed")
            }
            Err(_) => {
                tracing::warn!(attempt, timeout = ?config.call_timeout, "reporting the task result timed out")
            }
        }
        tokio::time::sleep(config.heartbeat).await;
    }
    tracing::error!(
        "could not report the task result; the broker will redeliver the task after its lease expires"
    );
}
