//! The gRPC adapter: parses requests at the edge, calls the [`Store`], and long-polls Lease.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use berth_proto::queue as pb;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tonic::{Request, Response, Status};
use tracing::Instrument;
use tracing::instrument;

use super::BrokerConfig;
use super::completer::Completer;
use super::convert::{self, saturate};
use super::metrics::BrokerMetrics;
use super::model::{FailOutcome, Failure, LeaseBatch, TaskId};
use super::store::CHANGE_CHANNEL;
use super::store::{self, Completion, Dialect, LeaseLimits, Store, StoreError};

/// The broker. Cheap to clone; clones share the store and the wake-up signal.
#[derive(Clone)]
pub struct BrokerService {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    config: BrokerConfig,
    /// Wakes waiting Lease calls when something may have become ready (Enqueue, Complete, Fail,
    /// Supersede, here or on another broker). A `Notify` rather than a channel: waiters only
    /// need "look again", never a payload, so nothing can pile up.
    wake: Arc<Notify>,
    metrics: BrokerMetrics,
    /// Settles Complete calls in groups; `None` without a tokio runtime at construction, when
    /// each Complete is its own transaction.
    completer: Option<Completer<Status>>,
    /// Stops the PostgreSQL LISTEN task when the last clone of the service is dropped.
    _stop_listener: DropGuard,
}

impl BrokerService {
    /// Wraps `store`. This spawns (on the current tokio runtime) the task that settles Complete
    /// calls in groups (see `completer`) and, over PostgreSQL, the task that relays other
    /// brokers' change notifications; both end when the service is dropped.
    pub fn new(store: Store, config: BrokerConfig) -> Self {
        let wake = Arc::new(Notify::new());
        let stop = CancellationToken::new();
        let runtime = tokio::runtime::Handle::try_current().ok();
        if store.dialect() == Dialect::Postgres {
            match &runtime {
                Some(runtime) => {
                    let (url, wake, stop) =
                        (store.database_url().to_owned(), wake.clone(), stop.clone());
                    // Every notice wakes the waiters, a reconnection too: notifications sent
                    // while disconnected are lost.
                    runtime.spawn(
                        async move {
                            berth_sql::listen::relay(
                                &url,
                                &[CHANGE_CHANNEL],
                                |_| wake.notify_one(),
                                stop,
                            )
                            .await
                        }
                        .instrument(tracing::info_span!("broker.listen")),
                    );
                }
                None => tracing::warn!(
                    "no tokio runtime: Lease will not wake on other brokers' changes"
                ),
            }
        }
        let completer = runtime.as_ref().map(|runtime| {
            let limits = lease_limits(&config, config.max_lease_batch as i64);
            Completer::spawn(runtime, store.clone(), limits, now_ms, status, stop.clone())
        });
        let metrics = BrokerMetrics::default();
        Self {
            inner: Arc::new(Inner {
                store,
                config,
                wake,
                metrics,
                completer,
                _stop_listener: stop.drop_guard(),
            }),
        }
    }

    /// The broker's metrics; register them once with [`BrokerMetrics::register`].
    pub fn metrics(&self) -> &BrokerMetrics {
        &self.inner.metrics
    }

    /// Refreshes the snapshot metrics (queue depths) from the store.
    pub async fn refresh_metrics(&self) -> Result<(), StoreError> {
        let queues = self.inner.store.dump(now_ms()).await?;
        self.inner.metrics.set_depths(&queues);
        Ok(())
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.inner.config
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Tells a waiting Lease call to look again. Also for a listener that learns of changes
    /// made by another broker (PostgreSQL NOTIFY).
    ///
    /// One waiter, not all: waking every waiting worker for one ready task makes all but one
    /// run an empty lease query, which on a shared database costs as much as a real one. The
    /// woken call passes the wake-up on when it may have left ready work behind (see
    /// `lease_waiting`), so a change that readies many tasks still reaches as many waiters as
    /// it needs. A permit stored while nobody waits makes the next call look at once.
    pub fn wake_waiters(&self) {
        self.inner.wake.notify_one();
    }

    /// Leases, waiting until `wait` has passed for a task to become ready.
    async fn lease_waiting(
        &self,
        worker: &str,
        max: i64,
        wait: Duration,
    ) -> Result<Vec<pb::Task>, StoreError> {
        let limits = lease_limits(&self.inner.config, max);
        let deadline = Instant::now() + wait;
        loop {
            // Register interest before looking, so a wake-up between the query and the wait is
            // not lost.
            let notified = self.inner.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let leased_at = now_ms();
            let leased = retrying(|| self.inner.store.lease(worker, limits, leased_at)).await;
            let LeaseBatch { tasks, next_due_ms } = match leased {
                Ok(batch) => batch,
                Err(err) => {
                    // This call may have taken a wake-up meant for ready work: hand it on.
                    self.wake_waiters();
                    return Err(err);
                }
            };
            let payload: usize = tasks.iter().map(|t| t.task.size()).sum();
            if tasks.len() as i64 >= max || payload >= limits.response_bytes / 2 {
                // Full (or nearly full) batch: more may be ready for another waiter.
                self.wake_waiters();
            }
            for task in &tasks {
                self.inner.metrics.leased(task, leased_at);
            }
            let now = Instant::now();
            if !tasks.is_empty() || now >= deadline {
                return Ok(tasks.into_iter().map(convert::leased_task).collect());
            }
            let until = match next_due_ms {
                Some(due) => deadline
                    .min(now + Duration::from_millis(due.saturating_sub(now_ms()).max(1) as u64)),
                None => deadline,
            };
            let _parked = self.inner.metrics.lease_parked();
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep_until(until) => {}
            }
        }
    }
}

/// The bounds of one lease of at most `max` tasks.
fn lease_limits(config: &BrokerConfig, max: i64) -> LeaseLimits {
    LeaseLimits {
        ttl: config.lease_ttl,
        max_tasks: max,
        response_bytes: config.max_lease_bytes,
        merged_payload_bytes: config.max_payload_bytes,
    }
}

/// Attempts of one store call when it fails with a transient error.
const TRANSIENT_ATTEMPTS: usize = 3;

/// The longest a worker may hand a task back for (Defer).
const MAX_DEFER_MS: i64 = 3_600_000;

/// Runs `call`, again when it failed transiently (see [`StoreError::is_transient`]).
async fn retrying<T, F, Fut>(call: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    store::retrying(TRANSIENT_ATTEMPTS, call).await
}

/// Milliseconds since the Unix epoch: the time base of every stored deadline.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn status(err: StoreError) -> Status {
    match err {
        StoreError::StaleLease { .. } => Status::failed_precondition(err.to_string()),
        other => {
            tracing::error!(
                error = &other as &dyn std::error::Error,
                "queue store failed"
            );
            Status::unavailable(format!("{other}: {}", source_chain(&other)))
        }
    }
}

fn source_chain(err: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut cur = err.source();
    while let Some(e) = cur {
        parts.push(e.to_string());
        cur = e.source();
    }
    parts.join(": ")
}

#[tonic::async_trait]
impl pb::broker_server::Broker for BrokerService {
    #[instrument(skip_all, fields(tasks = request.get_ref().tasks.len()))]
    async fn enqueue(
        &self,
        request: Request<pb::EnqueueRequest>,
    ) -> Result<Response<pb::EnqueueResponse>, Status> {
        let tasks = convert::new_tasks(request.into_inner().tasks, &self.inner.config)?;
        let accepted = retrying(|| self.inner.store.enqueue(&tasks, now_ms()))
            .await
            .map_err(status)?;
        if accepted > 0 {
            self.inner.metrics.enqueued(accepted);
            self.wake_waiters();
        }
        Ok(Response::new(pb::EnqueueResponse {
            accepted: saturate(accepted),
        }))
    }

    #[instrument(skip_all, fields(package.key = %request.get_ref().package, package.generation = request.get_ref().generation))]
    async fn supersede(
        &self,
        request: Request<pb::SupersedeRequest>,
    ) -> Result<Response<pb::SupersedeResponse>, Status> {
        let pb::SupersedeRequest {
            package,
            generation,
            keep_kinds,
        } = request.into_inner();
        if package.is_empty() {
            return Err(convert::InvalidTask::Missing("package").into());
        }
        convert::keep_kinds(&keep_kinds)?;
        let done = retrying(|| {
            self.inner
                .store
                .supersede(&package, generation, &keep_kinds, now_ms())
        })
        .await
        .map_err(status)?;
        self.inner.metrics.superseded(done.dropped, done.cancelled);
        if done.dropped > 0 {
            self.wake_waiters();
        }
        Ok(Response::new(pb::SupersedeResponse {
            dropped: saturate(done.dropped),
            cancelled: saturate(done.cancelled),
        }))
    }

    #[instrument(skip_all, fields(worker = %request.get_ref().worker))]
    async fn lease(
        &self,
        request: Request<pb::LeaseRequest>,
    ) -> Result<Response<pb::LeaseResponse>, Status> {
        let pb::LeaseRequest {
            worker,
            max,
            wait_ms,
        } = request.into_inner();
        if worker.is_empty() {
            return Err(convert::InvalidTask::Missing("worker").into());
        }
        let config = &self.inner.config;
        let max = (max.max(1) as usize).min(config.max_lease_batch) as i64;
        let wait = Duration::from_millis(wait_ms.max(0) as u64).min(config.max_lease_wait);
        let tasks = self
            .lease_waiting(&worker, max, wait)
            .await
            .map_err(status)?;
        let lease_ttl_ms = saturate(config.lease_ttl.as_millis() as i64);
        Ok(Response::new(pb::LeaseResponse {
            tasks,
            lease_ttl_ms,
        }))
    }

    #[instrument(skip_all, fields(worker = %request.get_ref().worker, leases = request.get_ref().leases.len()))]
    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let pb::HeartbeatRequest { worker, leases } = request.into_inner();
        if leases.len() > self.inner.config.max_enqueue_batch {
            return Err(Status::invalid_argument(format!(
                "too many leases in one Heartbeat: {} > limit {}",
                leases.len(),
                self.inner.config.max_enqueue_batch
            )));
        }
        let leases = leases
            .into_iter()
            .map(|l| convert::lease_ref(Some(l)))
            .collect::<Result<Vec<_>, _>>()?;
        let ttl = self.inner.config.lease_ttl;
        let cancelled = retrying(|| self.inner.store.heartbeat(&worker, &leases, ttl, now_ms()))
            .await
            .map_err(status)?;
        Ok(Response::new(pb::HeartbeatResponse {
            cancelled: cancelled.into_iter().map(TaskId::into_string).collect(),
        }))
    }

    #[instrument(skip_all, fields(task.id = tracing::field::Empty, next = request.get_ref().next))]
    async fn complete(
        &self,
        request: Request<pb::CompleteRequest>,
    ) -> Result<Response<pb::CompleteResponse>, Status> {
        let pb::CompleteRequest {
            lease,
            worker,
            next,
        } = request.into_inner();
        let lease = convert::lease_ref(lease)?;
        tracing::Span::current().record("task.id", lease.task_id.as_str());
        if next > 0 && worker.is_empty() {
            return Err(convert::InvalidTask::Missing("worker").into());
        }
        let config = &self.inner.config;
        let completion = Completion {
            lease,
            worker,
            next: (next.max(0) as usize).min(config.max_lease_batch) as i64,
        };
        let completion_next = completion.next;
        let completed = match &self.inner.completer {
            Some(completer) => completer
                .complete(completion)
                .await
                .map_err(|stopped| Status::unavailable(stopped.to_string()))??,
            None => {
                let limits = lease_limits(config, completion.next);
                retrying(|| self.inner.store.complete_one(&completion, limits, now_ms()))
                    .await
                    .map_err(status)?
            }
        };
        self.inner.metrics.settled(&completed.settled, None);
        let leased_at = now_ms();
        for task in &completed.next {
            self.inner.metrics.leased(task, leased_at);
        }
        // The completed task's queue may have a next task for another worker, unless this call
        // asked for more than it got: then nothing else was ready.
        if completed.next.len() as i64 >= completion_next {
            self.wake_waiters();
        }
        let lease_ttl_ms = if completed.next.is_empty() {
            0
        } else {
            saturate(config.lease_ttl.as_millis() as i64)
        };
        Ok(Response::new(pb::CompleteResponse {
            tasks: completed
                .next
                .into_iter()
                .map(convert::leased_task)
                .collect(),
            lease_ttl_ms,
        }))
    }

    #[instrument(skip_all, fields(task.id = tracing::field::Empty))]
    async fn fail(
        &self,
        request: Request<pb::FailRequest>,
    ) -> Result<Response<pb::FailResponse>, Status> {
        let pb::FailRequest {
            lease,
            error,
            retry,
            payload,
        } = request.into_inner();
        let lease = convert::lease_ref(lease)?;
        tracing::Span::current().record("task.id", lease.task_id.as_str());
        let progress = convert::progress(payload, self.inner.config.max_payload_bytes)?;
        // The error is stored and shown in Dump; bound it like a payload.
        let error = truncate(error, self.inner.config.max_payload_bytes);
        let backoff = self.inner.config.backoff();
        let failure = Failure {
            error: &error,
            retry,
            progress: progress.as_deref(),
        };
        let (outcome, settled) =
            retrying(|| self.inner.store.fail(&lease, &failure, &backoff, now_ms()))
                .await
                .map_err(status)?;
        self.inner.metrics.settled(&settled, Some(outcome));
        // Dropping the head frees its queue; a retried head needs no wake-up (the waiters'
        // timers already cover its due time once they look again).
        self.wake_waiters();
        let retry_in_ms = match outcome {
            FailOutcome::RetryIn(ms) => ms,
            FailOutcome::Dropped => -1,
        };
        Ok(Response::new(pb::FailResponse { retry_in_ms }))
    }

    #[instrument(skip_all, fields(task.id = tracing::field::Empty))]
    async fn defer(
        &self,
        request: Request<pb::DeferRequest>,
    ) -> Result<Response<pb::DeferResponse>, Status> {
        let pb::DeferRequest {
            lease,
            delay_ms,
            reason,
        } = request.into_inner();
        let lease = convert::lease_ref(lease)?;
        tracing::Span::current().record("task.id", lease.task_id.as_str());
        if !(0..=MAX_DEFER_MS).contains(&delay_ms) {
            return Err(Status::invalid_argument(format!(
                "delay_ms: {delay_ms} is not between 0 and {MAX_DEFER_MS} (an hour)"
            )));
        }
        let reason = truncate(reason, self.inner.config.max_payload_bytes);
        let deferred = retrying(|| self.inner.store.defer(&lease, &reason, delay_ms, now_ms()))
            .await
            .map_err(status)?;
        if !deferred {
            // Cancelled while it was held: settle it as Fail would, which drops it.
            let backoff = self.inner.config.backoff();
            let failure = Failure {
                error: &reason,
                retry: false,
                progress: None,
            };
            let (outcome, settled) =
                retrying(|| self.inner.store.fail(&lease, &failure, &backoff, now_ms()))
                    .await
                    .map_err(status)?;
            self.inner.metrics.settled(&settled, Some(outcome));
        }
        // Waiters compute their timers from the heads' due times when they look again.
        self.wake_waiters();
        Ok(Response::new(pb::DeferResponse {}))
    }

    #[instrument(skip_all)]
    async fn dump(
        &self,
        _request: Request<pb::DumpRequest>,
    ) -> Result<Response<pb::DumpResponse>, Status> {
        let queues = self.inner.store.dump(now_ms()).await.map_err(status)?;
        Ok(Response::new(pb::DumpResponse {
            queues: queues.into_iter().map(convert::queue_info).collect(),
        }))
    }
}

/// Cuts `s` to at most `limit` bytes on a character boundary.
fn truncate(mut s: String, limit: usize) -> String {
    if s.len() > limit {
        let mut end = limit;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}
