//! Every write of package state goes through the [`Writer`]: it holds the engine (behind a
//! mutex, so the engine's index and the store change together), runs each write as a unit of
//! work (`unit`), batches workers' reports, and tells watchers and the relay what changed.

mod unit;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::Arc;

use berth_lifecycle_core::engine::{Change, Outcome};
use berth_lifecycle_core::update::UpdateSpec;
use berth_lifecycle_core::{Engine, Generation, Owner, PackageKey, Timestamp};
use tokio::sync::{Notify, broadcast};

use crate::store::Store;
#[cfg(test)]
pub(crate) use unit::write_batch;
pub use unit::{Op, WriteError, Written};

/// Most reports written in one transaction.
const MAX_REPORT_BATCH: usize = 64;
/// Most reports waiting to be written; more are refused and the worker reports again. Far
/// above what the workers' task slots can send at once.
pub const MAX_QUEUED_REPORTS: usize = 4096;
/// Status-change notifications buffered for Watch streams; a slow watcher that falls further
/// behind is resynchronised from the store instead of holding memory.
const WATCH_CHANNEL: usize = 256;

/// Who hears of written changes: Watch streams and the metrics (package keys), and the relay
/// (new outbox rows).
#[derive(Clone)]
pub struct Changes {
    /// `Some(key)`: that package changed; `None`: changes may have been missed (resend all).
    packages: broadcast::Sender<Option<PackageKey>>,
    outbox: Arc<Notify>,
    /// On PostgreSQL the database tells every replica, this one included, of every change
    /// (`LifecycleService::listen`), so nothing is sent here.
    local: bool,
}

impl Changes {
    pub fn new(outbox: Arc<Notify>, dialect: berth_sql::Dialect) -> Changes {
        let (packages, _) = broadcast::channel(WATCH_CHANNEL);
        Changes {
            packages,
            outbox,
            local: dialect == berth_sql::Dialect::Sqlite,
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Option<PackageKey>> {
        self.packages.subscribe()
    }

    /// What the replicas' database says changed (PostgreSQL's LISTEN).
    pub fn heard(&self, key: Option<PackageKey>) {
        // No receivers is fine: nobody is watching.
        let _ = self.packages.send(key);
    }

    /// A package this replica wrote.
    fn changed(&self, key: &PackageKey) {
        if self.local {
            let _ = self.packages.send(Some(key.clone()));
        }
    }

    /// New outbox rows were committed.
    fn queued(&self) {
        self.outbox.notify_one();
    }
}

/// A report waiting to be written, and where its outcome goes.
struct Pending {
    change: Change,
    span: tracing::Span,
    reply: tokio::sync::oneshot::Sender<Result<Written, WriteError>>,
}

/// Why a report was not written.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("lifecycle has {MAX_QUEUED_REPORTS} reports waiting to be written; report again later")]
    Busy,
    #[error("the report's write ended without an answer")]
    Lost,
}

/// The one writer of package state (see the module docs). Cheap to clone.
#[derive(Clone)]
pub struct Writer {
    store: Store,
    /// A tokio mutex held across each write's transaction.
    engine: Arc<tokio::sync::Mutex<Engine>>,
    changes: Changes,
    /// Reports waiting to be written ([`Writer::report`]).
    reports: Arc<std::sync::Mutex<VecDeque<Pending>>>,
}

impl Writer {
    pub fn new(store: Store, engine: Engine, changes: Changes) -> Writer {
        Writer {
            store,
            engine: Arc::new(tokio::sync::Mutex::new(engine)),
            changes,
            reports: Arc::default(),
        }
    }

    pub fn changes(&self) -> &Changes {
        &self.changes
    }

    /// Runs `f` on the engine, between writes (Dump's scheduler section).
    pub async fn with_engine<T>(&self, f: impl FnOnce(&Engine) -> T) -> T {
        f(&*self.engine.lock().await)
    }

    /// Writes an Update: the generation that answers it, and whether anything changed (an
    /// Update identical to the current spec is answered by its generation).
    pub async fn update(
        &self,
        spec: UpdateSpec,
        owner: Owner,
    ) -> Result<(Generation, bool), WriteError> {
        let key = spec.id.key();
        let written = self.write(Op::Update(Box::new(spec), owner), &key).await?;
        Ok(match written.outcome {
            Outcome::Unchanged(current) => (current, false),
            Outcome::Applied => (written.generation, true),
            // Not decided by the engine for an Update.
            Outcome::Stale => (written.generation, false),
        })
    }

    /// Writes a Remove: its generation, or `None` when there is no such package.
    pub async fn remove(
        &self,
        key: &PackageKey,
        force: bool,
        owner: Owner,
    ) -> Result<Option<Generation>, WriteError> {
        let op = Op::Remove {
            key: key.clone(),
            force,
            owner,
        };
        let written = self.write(op, key).await?;
        Ok((written.outcome == Outcome::Applied).then_some(written.generation))
    }

    /// Suspends or resumes a package: `None` when there is no such package, else whether it
    /// changed.
    pub async fn suspend(
        &self,
        key: &PackageKey,
        owner: Owner,
        suspended: bool,
    ) -> Result<Option<bool>, WriteError> {
        let change = Change::Suspend {
            key: key.clone(),
            owner,
            suspended,
        };
        let written = self.write(Op::Change(change), key).await?;
        Ok(match written.outcome {
            Outcome::Applied => Some(true),
            Outcome::Unchanged(_) => Some(false),
            Outcome::Stale => None,
        })
    }

    /// Records the cluster's Kubernetes version; whether it changed (then a pass ran).
    pub async fn cluster_version(&self, version: semver::Version) -> Result<bool, WriteError> {
        let mut engine = self.engine.lock().await;
        if engine.scheduler().kubernetes() == Some(&version) {
            return Ok(false);
        }
        let op = (
            Op::Change(Change::ClusterVersion(version)),
            tracing::Span::current(),
        );
        let written = self.run(&mut engine, vec![op]).await.remove(0)?;
        Ok(written.outcome == Outcome::Applied)
    }

    /// One write alone, in the current span.
    async fn write(&self, op: Op, key: &PackageKey) -> Result<Written, WriteError> {
        let mut engine = self.engine.lock().await;
        let written = self
            .run(&mut engine, vec![(op, tracing::Span::current())])
            .await
            .remove(0)?;
        if written.outcome == Outcome::Applied {
            self.changes.changed(key);
        }
        Ok(written)
    }

    /// Writes `ops` as one batch and tells who listens about what the passes decided.
    async fn run(
        &self,
        engine: &mut Engine,
        ops: Vec<(Op, tracing::Span)>,
    ) -> Vec<Result<Written, WriteError>> {
        let (results, settled) =
            unit::write_batch(&self.store, engine, &ops, Timestamp::now()).await;
        for key in &settled {
            self.changes.changed(key);
        }
        if results
            .iter()
            .any(|r| matches!(r, Ok(w) if w.outcome == Outcome::Applied))
        {
            self.changes.queued();
        }
        results
    }

    /// Writes a worker's reports (a [`Change::Report`] or the Cleanup's [`Change::Delete`]) in
    /// the current span: whether they were applied (false: a stale generation, ignored).
    ///
    /// Reports are written in batches: the report joins a queue, and a task that takes the
    /// engine's lock writes what is queued then (at most [`MAX_REPORT_BATCH`]) in one
    /// transaction. Each report spawns one such task, so every queued report is written by
    /// its own task or an earlier one, even if its caller goes away; and each task writes one
    /// batch, so Updates waiting for the lock take their turn between batches.
    pub async fn report(&self, change: Change) -> Result<bool, ReportError> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        {
            let mut queued = self.reports.lock().unwrap_or_else(|e| e.into_inner());
            if queued.len() >= MAX_QUEUED_REPORTS {
                return Err(ReportError::Busy);
            }
            queued.push_back(Pending {
                change,
                span: tracing::Span::current(),
                reply,
            });
        }
        let writer = self.clone();
        berth_runtime::spawn_here(async move {
            let mut engine = writer.engine.lock().await;
            let batch: Vec<Pending> = {
                let mut queued = writer.reports.lock().unwrap_or_else(|e| e.into_inner());
                let n = queued.len().min(MAX_REPORT_BATCH);
                queued.drain(..n).collect()
            };
            if !batch.is_empty() {
                writer.write_reports(&mut engine, batch).await;
            }
        });
        let written = answer.await.map_err(|_| ReportError::Lost)??;
        Ok(written.outcome == Outcome::Applied)
    }

    /// Writes `batch` and answers each report.
    async fn write_reports(&self, engine: &mut Engine, batch: Vec<Pending>) {
        let mut keys = Vec::with_capacity(batch.len());
        let mut ops = Vec::with_capacity(batch.len());
        let mut replies = Vec::with_capacity(batch.len());
        for Pending {
            change,
            span,
            reply,
        } in batch
        {
            keys.push(match &change {
                Change::Report { key, .. } | Change::Delete { key, .. } => Some(key.clone()),
                Change::Update { .. }
                | Change::Remove { .. }
                | Change::Suspend { .. }
                | Change::ClusterVersion(_) => None,
            });
            ops.push((Op::Change(change), span));
            replies.push(reply);
        }
        let results = self.run(engine, ops).await;
        for ((key, reply), result) in keys.into_iter().zip(replies).zip(results) {
            if let (Ok(w), Some(key)) = (&result, &key)
                && w.outcome == Outcome::Applied
            {
                self.changes.changed(key);
            }
            // The caller may have gone: its report is written all the same.
            let _ = reply.send(result);
        }
    }
}
