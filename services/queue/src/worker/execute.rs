//! Running one leased task and reporting its outcome to the broker.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use berth_proto::queue as pb;
use futures::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::client::{self, Broker};
use super::held::HeldLeases;
use super::{Handler, TaskError, WorkerConfig};

/// How often a report is tried when the broker is unreachable. After that the lease simply
/// expires and the broker redelivers the task (delivery is at-least-once).
const REPORT_ATTEMPTS: usize = 3;

/// Runs `task` on `handler` and settles its lease; then, while `leasing` is not cancelled, runs
/// the next task the broker handed out with the completion (one round trip per task under
/// load), until a completion brings none. The slot is free once this returns.
pub(crate) async fn execute<H: Handler>(
    handler: Arc<H>,
    broker: Broker,
    held: HeldLeases,
    config: WorkerConfig,
    leasing: CancellationToken,
    mut task: pb::Task,
    mut cancel: CancellationToken,
) {
    loop {
        let Some(next) =
            execute_one(&handler, &broker, &held, &config, &leasing, task, cancel).await
        else {
            return;
        };
        (task, cancel) = next;
    }
}

/// One task: run, settle, and take the next task if the completion brought one.
async fn execute_one<H: Handler>(
    handler: &Arc<H>,
    broker: &Broker,
    held: &HeldLeases,
    config: &WorkerConfig,
    leasing: &CancellationToken,
    task: pb::Task,
    cancel: CancellationToken,
) -> Option<(pb::Task, CancellationToken)> {
    let span = tracing::info_span!(
        "task",
        task.id = %task.id,
        task.kind = %task.kind,
        task.queue = %task.queue,
        task.attempts = task.attempts,
        package.key = %task.package,
    );
    let span = berth_runtime::with_traceparent(span, &task.traceparent);
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
        let want_next = !leasing.is_cancelled();
        let sent_at = Instant::now();
        let reply = report(
            broker.clone(),
            config,
            lease,
            result,
            cancel.is_cancelled(),
            want_next,
        )
        .await?;
        let ttl = Duration::from_millis(u64::try_from(reply.lease_ttl_ms).unwrap_or(0));
        let mut tasks = reply.tasks.into_iter();
        let next = tasks.next()?;
        // At most one was asked for; anything more would be a broker bug. Leave extra tasks to
        // expire and be redelivered rather than run them outside a slot.
        if tasks.len() > 0 {
            tracing::warn!(
                extra = tasks.len(),
                "broker returned more next tasks than asked for"
            );
        }
        let cancel = held.insert(next.id.clone(), next.fence, ttl, sent_at);
        Some((next, cancel))
    }
    .instrument(span)
    .await
}

/// Reports the outcome; a successful completion with `want_next` also asks for the next task
/// (only on the first attempt: a retry after a lost answer would find its lease settled, and
/// a task leased by the lost answer is redelivered after its lease expires). The completion's
/// answer, when there was one.
async fn report(
    mut broker: Broker,
    config: &WorkerConfig,
    lease: pb::LeaseRef,
    result: Result<(), TaskError>,
    cancelled: bool,
    want_next: bool,
) -> Option<pb::CompleteResponse> {
    match &result {
        Ok(()) => tracing::debug!("task done"),
        Err(err) if cancelled => {
            tracing::info!(error = %err.message, "task stopped after cancellation")
        }
        Err(TaskError {
            defer: Some(delay),
            message,
            ..
        }) => tracing::debug!(?delay, reason = %message, "task handed back for later"),
        Err(err) => tracing::warn!(error = %err.message, retry = err.retry, "task failed"),
    }
    for attempt in 1..=REPORT_ATTEMPTS {
        let call = async {
            match &result {
                Ok(()) => {
                    let next = i32::from(want_next && attempt == 1);
                    let request = pb::CompleteRequest {
                        lease: Some(lease.clone()),
                        worker: config.id.clone(),
                        next,
                    };
                    broker
                        .complete(berth_runtime::traced_request(request))
                        .await
                        .map(|r| Some(r.into_inner()))
                }
                Err(TaskError {
                    defer: Some(delay),
                    message,
                    ..
                }) if !cancelled => {
                    let request = pb::DeferRequest {
                        lease: Some(lease.clone()),
                        delay_ms: i64::try_from(delay.as_millis()).unwrap_or(i64::MAX),
                        reason: message.clone(),
                    };
                    broker
                        .defer(berth_runtime::traced_request(request))
                        .await
                        .map(|_| None)
                }
                Err(err) => {
                    let request = pb::FailRequest {
                        lease: Some(lease.clone()),
                        error: err.message.clone(),
                        retry: err.retry,
                        payload: err.progress.clone(),
                    };
                    broker
                        .fail(berth_runtime::traced_request(request))
                        .await
                        .map(|_| None)
                }
            }
        };
        match tokio::time::timeout(config.call_timeout, call).await {
            Ok(Ok(reply)) => return reply,
            Ok(Err(status)) if client::lease_lost(&status) => {
                // Someone else holds the task now (our lease expired); their result counts.
                tracing::warn!(
                    message = status.message(),
                    "lease was lost before the result was reported"
                );
                return None;
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
    None
}
