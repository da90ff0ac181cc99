//! Group commit of Complete calls.
//!
//! Each Complete is a small write transaction, and the commit (plus, on SQLite, the hop to the
//! connection's thread for every statement) costs far more than the statements themselves. So
//! Complete calls are queued to one task that settles whatever has gathered in one transaction
//! ([`Store::complete_many`]), which also leases the next task each caller asked for. Nothing
//! waits for a group to fill: a lone call is settled at once, and calls that arrive while the
//! transactions in flight run form the next group, so the grouping appears exactly when load
//! makes it pay.

use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::store::{self, Completed, Completion, LeaseLimits, Store, StoreError};

/// Most Complete calls settled in one transaction; bounds the transaction's length (and so how
/// long it holds SQLite's write lock). Up to [`Dialect::concurrent_writes`] groups are settled
/// at once.
///
/// [`Dialect::concurrent_writes`]: super::store::Dialect::concurrent_writes
const MAX_GROUP: usize = 64;

/// Complete calls waiting for the settling task. Bounded: when the store is slower than the
/// callers, they wait to enqueue here, which is the backpressure we want; 1024 absorbs the burst
/// of many workers finishing at once.
const QUEUE_CAPACITY: usize = 1024;

/// Attempts of one group when the store fails transiently (as the service's other calls).
const TRANSIENT_ATTEMPTS: usize = 3;

/// One caller's answer: its settlement (and next tasks), or the error to report (`E`: what the
/// service answers with; one store failure answers every caller of its group, so `E: Clone`).
pub(super) type Answer<E> = Result<Completed, E>;

/// Maps a store error to the caller's error (the service's mapping, which also logs).
pub(super) type ToError<E> = fn(StoreError) -> E;

struct Pending<E> {
    completion: Completion,
    answer: oneshot::Sender<Answer<E>>,
}

/// The handle the service keeps; the settling task ends when it is dropped or `stop` fires.
pub(super) struct Completer<E> {
    queue: mpsc::Sender<Pending<E>>,
}

impl<E> Clone for Completer<E> {
    fn clone(&self) -> Self {
        Completer {
            queue: self.queue.clone(),
        }
    }
}

/// Why a Complete got no answer from the settling task.
#[derive(Debug, thiserror::Error)]
#[error("the broker's completion task stopped")]
pub(super) struct Stopped;

impl<E: Clone + Send + 'static> Completer<E> {
    /// Spawns the settling task on `runtime`; `limits` bound the next tasks leased with a
    /// completion.
    pub(super) fn spawn(
        runtime: &tokio::runtime::Handle,
        store: Store,
        limits: LeaseLimits,
        now_ms: fn() -> i64,
        to_error: ToError<E>,
        stop: CancellationToken,
    ) -> Completer<E> {
        let (queue, receiver) = mpsc::channel(QUEUE_CAPACITY);
        runtime.spawn(
            settle(store, limits, receiver, now_ms, to_error, stop).instrument(
                berth_runtime::untraced(tracing::info_span!(parent: None, "broker.completer")),
            ),
        );
        Completer { queue }
    }

    /// Settles `completion` (as part of whatever group is next).
    pub(super) async fn complete(&self, completion: Completion) -> Result<Answer<E>, Stopped> {
        let (answer, answered) = oneshot::channel();
        self.queue
            .send(Pending { completion, answer })
            .await
            .map_err(|_| Stopped)?;
        answered.await.map_err(|_| Stopped)
    }
}

async fn settle<E: Clone + Send + 'static>(
    store: Store,
    limits: LeaseLimits,
    mut receiver: mpsc::Receiver<Pending<E>>,
    now_ms: fn() -> i64,
    to_error: ToError<E>,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(store.dialect().concurrent_writes()));
    loop {
        // A free slot first: while every slot is busy, calls gather in the channel and form a
        // bigger group.
        let slot = tokio::select! {
            () = stop.cancelled() => return,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => return,
            },
        };
        let mut group = Vec::with_capacity(MAX_GROUP);
        let received = tokio::select! {
            () = stop.cancelled() => 0,
            n = receiver.recv_many(&mut group, MAX_GROUP) => n,
        };
        if received == 0 {
            return;
        }
        let store = store.clone();
        berth_runtime::spawn_here(async move {
            settle_group(&store, limits, group, now_ms, to_error).await;
            drop(slot);
        });
    }
}

/// Settles one group in one transaction and answers each caller.
async fn settle_group<E: Clone>(
    store: &Store,
    limits: LeaseLimits,
    group: Vec<Pending<E>>,
    now_ms: fn() -> i64,
    to_error: ToError<E>,
) {
    let completions: Vec<Completion> = group.iter().map(|p| p.completion.clone()).collect();
    let answers = store::retrying(TRANSIENT_ATTEMPTS, || {
        store.complete_many(&completions, limits, now_ms())
    })
    .await;
    match answers {
        Ok(answers) => {
            for (pending, answer) in group.into_iter().zip(answers) {
                // A caller that went away (its call was cancelled) needs no answer.
                let _ = pending.answer.send(answer.map_err(to_error));
            }
        }
        Err(err) => {
            let error = to_error(err);
            for pending in group {
                let _ = pending.answer.send(Err(error.clone()));
            }
        }
    }
}
