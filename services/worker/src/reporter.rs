//! [`Reporter`]: a task's reports to lifecycle, gathered and sent together.
//!
//! Each report is a lifecycle write (the package row read and written, a scheduling pass, a
//! change-log entry) and a gRPC call; a task makes two to five of them within a few
//! milliseconds (Download: the phase, then the condition; Run: the manifests applied, the
//! values, the hooks processed, then Running). The reporter holds a report back for at most
//! [`GATHER_FOR`] and sends what gathered meanwhile as one `ReportBatch`, which lifecycle
//! applies as one write. So a person watching the package still sees progress within that
//! moment during a long task, while a short task costs one call.
//!
//! The task flows [`flush`](Reporter::flush) before their task settles (the runner does it),
//! so the broker never hands out the next task before lifecycle knows what this one reported.
//! A send that fails in the background is not lost silently: the next report or flush of the
//! task returns its error, the task fails, and its retry reports again (reports are
//! idempotent, as the tasks are).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_proto::lifecycle::report_request::Report;
use berth_proto::lifecycle::{ReportBatchRequest, ReportRequest};
use berth_queue::worker::TaskError;
use prost::Message as _;

use crate::client::{CallError, Services};

/// Longest a report waits for others to go with it.
pub const GATHER_FOR: Duration = Duration::from_millis(250);

/// Most reports in one call (lifecycle's bound of a `ReportBatch`).
const MAX_REPORTS: usize = 64;

/// Most bytes of reports in one call: a quarter of the gRPC message bound, so a batch of
/// reports that each carry values (at most `MAX_VALUES_BYTES`) always fits.
const MAX_BYTES: usize = berth_runtime::MAX_MESSAGE_BYTES / 4;

/// The reports of one task (its package's key and generation).
pub struct Reporter {
    inner: Arc<Inner>,
}

struct Inner {
    key: String,
    generation: i64,
    services: Services,
    state: Mutex<State>,
    /// Held while a batch is sent, so batches reach lifecycle in the order they were made.
    sending: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    pending: Vec<ReportRequest>,
    bytes: usize,
    /// The timer of the background send due, if any. A flush aborts it: the timer holds the
    /// task's tracing span, which must close when the task ends (an exporter shows a span
    /// only once it closed, and the task's calls are its children).
    timer: Option<tokio::task::AbortHandle>,
    /// The error of a background send nobody has seen yet.
    failed: Option<TaskError>,
}

impl Reporter {
    pub fn new(services: &Services, key: &str, generation: i64) -> Reporter {
        Reporter {
            inner: Arc::new(Inner {
                key: key.to_owned(),
                generation,
                services: services.clone(),
                state: Mutex::new(State::default()),
                sending: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Queues `report`; it is sent within [`GATHER_FOR`], with the ones made meanwhile. A
    /// `Removed` report (the package's last) is sent at once, alone, after what is queued.
    /// Returns the error of an earlier send that failed (the report is queued all the same).
    pub async fn report(&self, report: Report) -> Result<(), TaskError> {
        let alone = matches!(report, Report::Removed(_));
        let request = ReportRequest {
            key: self.inner.key.clone(),
            generation: self.inner.generation,
            report: Some(report),
        };
        if alone {
            self.flush().await?;
            self.inner.lock().pending.push(request);
            return self.flush().await;
        }
        let size = request.encoded_len();
        let full_before = {
            let state = self.inner.lock();
            !state.pending.is_empty() && state.bytes + size > MAX_BYTES
        };
        if full_before {
            // Send what is queued first; this one starts the next batch.
            self.inner.send_pending().await;
        }
        let (full, failed) = {
            let mut state = self.inner.lock();
            state.pending.push(request);
            state.bytes += size;
            let full = state.pending.len() >= MAX_REPORTS;
            if !full && state.timer.is_none() {
                let inner = self.inner.clone();
                let timer = berth_runtime::spawn_here(async move {
                    tokio::time::sleep(GATHER_FOR).await;
                    // Only while it is still the timer due: a flush that took it sends.
                    let due = {
                        let mut state = inner.lock();
                        let mine = state.timer.as_ref().map(|t| t.id()) == Some(tokio::task::id());
                        if mine {
                            state.timer = None;
                        }
                        mine
                    };
                    if due {
                        inner.send_pending().await;
                    }
                });
                state.timer = Some(timer.abort_handle());
            }
            (full, state.failed.take())
        };
        if let Some(e) = failed {
            // Queued all the same: a flush still sends it (the failure report of the task).
            return Err(e);
        }
        if full {
            return self.flush().await;
        }
        Ok(())
    }

    /// Sends what is queued now, and returns the error of any send of this task that failed
    /// unseen.
    pub async fn flush(&self) -> Result<(), TaskError> {
        let timer = self.inner.lock().timer.take();
        if let Some(timer) = timer {
            timer.abort();
        }
        self.inner.send_pending().await;
        match self.inner.lock().failed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends the queued reports, if any. A failure is kept for the task's next report or
    /// flush, recorded before the next send may start (so a flush waiting for this send sees
    /// it).
    async fn send_pending(&self) {
        let _order = self.sending.lock().await;
        let batch = {
            let mut state = self.lock();
            state.bytes = 0;
            std::mem::take(&mut state.pending)
        };
        if batch.is_empty() {
            return;
        }
        if let Err(e) = self.call(batch).await {
            tracing::warn!(error = %e.message, "reporting to lifecycle failed; the task fails");
            self.lock().failed.get_or_insert(e);
        }
    }

    /// One call: `Report` for one report, `ReportBatch` for more.
    async fn call(&self, mut batch: Vec<ReportRequest>) -> Result<(), TaskError> {
        let mut lifecycle = self.services.lifecycle.clone();
        if batch.len() == 1 {
            let one = batch.pop().unwrap_or_default();
            lifecycle
                .report(one)
                .await
                .map_err(|s| CallError::new("lifecycle Report", s))?;
        } else {
            lifecycle
                .report_batch(ReportBatchRequest { reports: batch })
                .await
                .map_err(|s| CallError::new("lifecycle ReportBatch", s))?;
        }
        Ok(())
    }
}
