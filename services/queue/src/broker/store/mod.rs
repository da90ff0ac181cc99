//! Durable task storage over sqlx, one code path for SQLite and PostgreSQL.
//!
//! Every operation is one transaction, so a crash leaves either all or none of its changes.
//! Times are milliseconds since the Unix epoch, passed in by the caller so the rules here do
//! not read a clock.

mod dialect;
mod heads;
mod history;
mod inspect;
mod lease;
mod legacy;
mod rows;
mod settle;
mod write;

use std::time::Duration;

use sqlx::any::{AnyPoolOptions, install_default_drivers};
use sqlx::{AnyPool, Executor};

pub use dialect::{CHANGE_CHANNEL, Dialect};
pub use lease::LeaseLimits;
pub use settle::{Completed, Completion, LeaseRef};
pub use write::Superseded;

/// Finished tasks kept in `task_history` (give or take a trimming interval); it is also the
/// window in which a re-sent Enqueue of an already finished task id is recognised and ignored.
pub const HISTORY_LIMIT: i64 = 10_000;

/// How long opening the database may take before we give up (covers a PostgreSQL server that
/// does not answer).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unsupported database URL scheme {scheme:?}: expected sqlite: or postgres:")]
    UnsupportedUrl { scheme: String },
    #[error("cannot open the queue database ({dialect:?})")]
    Connect {
        dialect: Dialect,
        #[source]
        source: sqlx::Error,
    },
    #[error("cannot migrate the queue database schema")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    #[error("queue database operation {op} failed")]
    Query {
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },
    /// The caller's lease is gone: another worker holds the task now, it finished, or it was
    /// never leased with this fence.
    #[error(
        "task {task_id:?}: no lease with fence {fence} (stale, expired and re-leased, or already settled)"
    )]
    StaleLease { task_id: String, fence: i64 },
}

impl StoreError {
    /// A failure that the same call, retried at once, would likely not hit: PostgreSQL aborted
    /// the transaction to break a deadlock (40P01) or a serialization conflict (40001). The
    /// transaction was rolled back entirely, so retrying is safe.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Query {
                source: sqlx::Error::Database(db),
                ..
            } => {
                matches!(db.code().as_deref(), Some("40P01" | "40001"))
            }
            _ => false,
        }
    }
}

/// Runs `call` up to `attempts` times while it fails transiently (see
/// [`StoreError::is_transient`]); the last result either way.
pub(crate) async fn retrying<T, F, Fut>(attempts: usize, mut call: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>>,
{
    let mut attempt = 1;
    loop {
        match call().await {
            Err(err) if err.is_transient() && attempt < attempts => {
                tracing::debug!(error = %err, attempt, "transient store failure; retrying");
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// Attaches the failed operation's name to a sqlx error.
pub(crate) fn query_failed(op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Query { op, source }
}

/// The queue database.
#[derive(Debug, Clone)]
pub struct Store {
    pool: AnyPool,
    /// Connections for Lease and Heartbeat (see [`Store::lease_pool`]); the same pool as `pool`
    /// on SQLite.
    lease_pool: AnyPool,
    dialect: Dialect,
    /// Kept for connections outside the pool (the PostgreSQL LISTEN connection).
    database_url: std::sync::Arc<str>,
    /// When Lease next looks for abandoned cancelled tasks even if it found work (ms since the
    /// epoch); see `lease::REAP_INTERVAL_MS`.
    next_reap_ms: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

impl Store {
    /// Opens (creating when the URL allows it) and migrates the database at `database_url`:
    /// `sqlite://PATH?mode=rwc`, `sqlite::memory:` or `postgres://…`.
    pub async fn open(database_url: &str) -> Result<Store, StoreError> {
        let dialect = Dialect::from_url(database_url)?;
        install_default_drivers();
        let pool = connect_pool(dialect, database_url, dialect.max_connections(), None).await?;
        dialect
            .migrator()
            .run(&pool)
            .await
            .map_err(StoreError::Migrate)?;
        let lease_pool = match dialect.lease_session_setup() {
            None => pool.clone(),
            Some(setup) => {
                connect_pool(
                    dialect,
                    database_url,
                    dialect.lease_connections(),
                    Some(setup),
                )
                .await?
            }
        };
        Ok(Store {
            pool,
            lease_pool,
            dialect,
            database_url: database_url.into(),
            next_reap_ms: Default::default(),
        })
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    pub fn database_url(&self) -> &str {
        &self.database_url
    }

    pub(crate) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// The connections Lease and Heartbeat write through. On PostgreSQL their commits do not
    /// wait for the WAL flush (`synchronous_commit = off`): a lease is a promise the broker can
    /// forget in a database crash without losing anything. The task stays queued, its lease
    /// looks expired or older, and it is leased again with a fence that cannot repeat the lost
    /// one (see `lease_heads!`), so a worker holding a lost lease cannot settle it. Everything
    /// else (Enqueue, Complete, Fail, Supersede) commits durably.
    pub(crate) fn lease_pool(&self) -> &AnyPool {
        &self.lease_pool
    }

    /// Starts a transaction that will write (see [`Dialect::begin_write`]).
    async fn begin(
        &self,
        op: &'static str,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        self.begin_with(op, self.dialect.begin_write()).await
    }

    /// Starts a write transaction whose commit need not wait for the disk (see
    /// [`Dialect::begin_relaxed`]).
    async fn begin_relaxed(
        &self,
        op: &'static str,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        self.begin_with(op, self.dialect.begin_relaxed()).await
    }

    async fn begin_with(
        &self,
        op: &'static str,
        statement: &'static str,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        self.pool
            .begin_with(statement)
            .await
            .map_err(query_failed(op))
    }

    /// Tells other brokers on the same database to look for ready tasks once `tx` commits.
    async fn signal_change(&self, tx: &mut sqlx::AnyConnection) -> Result<(), StoreError> {
        if let Some(statement) = self.dialect.change_signal() {
            tx.execute(statement)
                .await
                .map_err(query_failed("signal change"))?;
        }
        Ok(())
    }

    /// Closes the pools, waiting for connections to be returned.
    pub async fn close(&self) {
        self.lease_pool.close().await;
        self.pool.close().await;
    }
}

/// A pool of at most `max` connections to `database_url`, each set up with the dialect's
/// [`Dialect::connection_setup`] and then `extra_setup`.
async fn connect_pool(
    dialect: Dialect,
    database_url: &str,
    max: u32,
    extra_setup: Option<&'static str>,
) -> Result<AnyPool, StoreError> {
    AnyPoolOptions::new()
        .max_connections(max)
        .idle_timeout(dialect.connection_lifetime())
        .max_lifetime(dialect.connection_lifetime())
        .acquire_timeout(CONNECT_TIMEOUT)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                for statement in dialect.connection_setup().iter().chain(&extra_setup) {
                    conn.execute(*statement).await?;
                }
                Ok(())
            })
        })
        .connect(&dialect.connect_url(database_url))
        .await
        .map_err(|source| StoreError::Connect { dialect, source })
}

#[cfg(test)]
#[path = "../../../tests/support/postgres.rs"]
mod pg_server;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::broker::model::NewTask;

    /// Runs each `async fn(Store)` over a fresh in-memory SQLite database and over a fresh
    /// PostgreSQL server, as `sqlite::<name>` and `postgres::<name>`.
    macro_rules! on_both_backends {
        ($($name:ident),* $(,)?) => {
            mod sqlite {
                $(#[tokio::test]
                async fn $name() {
                    let store = super::Store::open("sqlite::memory:").await.expect("open store");
                    super::$name(store).await
                })*
            }
            mod postgres {
                $(#[tokio::test]
                async fn $name() {
                    let server = super::super::pg_server::PgServer::start().await;
                    let store = super::Store::open(&server.url()).await.expect("open store");
                    super::$name(store).await
                })*
            }
        };
    }

    on_both_backends!(
        a_stale_lease_in_a_completion_group_fails_alone,
        a_lease_lost_by_the_database_never_gets_its_fence_again,
        a_queue_whose_head_mark_was_lost_runs_again_from_its_oldest_task,
        nothing_ready_reports_when_the_next_head_becomes_due,
        a_completed_task_is_recorded_done_or_cancelled_once,
    );

    fn task(id: &str) -> NewTask {
        NewTask {
            id: id.into(),
            queue: "q".into(),
            package: "p".into(),
            generation: 1,
            kind: "Run".into(),
            payload: Vec::new(),
            merge: None,
            traceparent: String::new(),
            allow_failure: false,
        }
    }

    /// Worker `w`'s completions of `leases`, asking for no next task.
    fn completions(leases: impl IntoIterator<Item = LeaseRef>) -> Vec<Completion> {
        leases
            .into_iter()
            .map(|lease| Completion {
                lease,
                worker: "w".into(),
                next: 0,
            })
            .collect()
    }

    fn limits() -> LeaseLimits {
        LeaseLimits {
            ttl: Duration::from_secs(10),
            max_tasks: 10,
            response_bytes: 1 << 20,
            merged_payload_bytes: 1 << 20,
        }
    }

    #[tokio::test]
    async fn an_in_memory_database_keeps_its_tasks_between_calls() {
        let store = Store::open("sqlite::memory:")
            .await
            .expect("open in-memory store");
        assert_eq!(
            store
                .enqueue(&[task("a"), task("b")], 1_000)
                .await
                .expect("enqueue"),
            2
        );
        let batch = store.lease("w", limits(), 2_000).await.expect("lease");
        assert_eq!(batch.tasks.len(), 1);
        let lease = LeaseRef {
            task_id: "a".into(),
            fence: batch.tasks[0].fence,
        };
        let settled = store.complete(&lease, 2_500).await.expect("complete");
        assert_eq!((settled.kind.as_str(), settled.ran_ms), ("Run", 500));
        let next = store.lease("w", limits(), 3_000).await.expect("lease");
        assert_eq!(next.tasks[0].task.id, "b");
        assert_eq!(
            next.tasks[0].ready_since_ms, 1_000,
            "waiting since it was enqueued"
        );
    }

    /// PostgreSQL records the history in Complete's removal statement, SQLite after it: the
    /// same rows either way.
    async fn a_completed_task_is_recorded_done_or_cancelled_once(store: Store) {
        let mut old = task("old");
        old.queue = "qa".into();
        let mut other = task("other");
        (other.queue, other.package) = ("qb".into(), "p2".into());
        store.enqueue(&[old, other], 1_000).await.expect("enqueue");
        let batch = store.lease("w", limits(), 2_000).await.expect("lease");
        assert_eq!(batch.tasks.len(), 2);
        // A newer generation of `p` cancels its running task; it completes all the same.
        let superseded = store
            .supersede("p", 2, &[], 2_100)
            .await
            .expect("supersede");
        assert_eq!(superseded.cancelled, 1);
        let completions = completions(batch.tasks.iter().map(|t| LeaseRef {
            task_id: t.task.id.clone(),
            fence: t.fence,
        }));
        let answers = store
            .complete_many(&completions, limits(), 2_500)
            .await
            .expect("group commits");
        assert!(answers.iter().all(Result::is_ok), "{answers:?}");
        let mut history: Vec<(String, String, i64)> = store
            .history(10)
            .await
            .expect("history")
            .into_iter()
            .map(|h| (h.id, h.outcome.as_str().to_owned(), h.attempts))
            .collect();
        history.sort();
        assert_eq!(
            history,
            [
                ("old".to_owned(), "cancelled".to_owned(), 0),
                ("other".to_owned(), "done".to_owned(), 0)
            ]
        );
        // Completing again is stale and records nothing more.
        let again = store
            .complete_many(&completions, limits(), 2_600)
            .await
            .expect("group commits");
        assert!(again.iter().all(Result::is_err));
        assert_eq!(store.history(10).await.expect("history").len(), 2);
    }

    async fn a_stale_lease_in_a_completion_group_fails_alone(store: Store) {
        let mut a = task("a");
        a.queue = "qa".into();
        let mut b = task("b");
        b.queue = "qb".into();
        store.enqueue(&[a, b], 1_000).await.expect("enqueue");
        let batch = store.lease("w", limits(), 2_000).await.expect("lease");
        let fence = |id: &str| {
            batch
                .tasks
                .iter()
                .find(|t| t.task.id == id)
                .map(|t| t.fence)
                .expect("both queues' heads are leased")
        };
        let leases = [
            LeaseRef {
                task_id: "a".into(),
                fence: fence("a"),
            },
            LeaseRef {
                task_id: "b".into(),
                fence: fence("b") + 1,
            },
        ];
        let completions = completions(leases);
        let answers = store
            .complete_many(&completions, limits(), 2_500)
            .await
            .expect("group commits");
        assert!(answers[0].is_ok(), "{:?}", answers[0]);
        assert!(
            matches!(answers[1], Err(StoreError::StaleLease { .. })),
            "{:?}",
            answers[1]
        );
        let history = store.history(10).await.expect("history");
        let done: Vec<&str> = history.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(done, ["a"], "only the valid lease was settled");
        let queues = store.dump(3_000).await.expect("dump");
        assert_eq!(
            queues.iter().map(|q| q.name.as_str()).collect::<Vec<_>>(),
            ["qb"],
            "the stale lease's task is still there"
        );
    }

    async fn a_lease_lost_by_the_database_never_gets_its_fence_again(store: Store) {
        store.enqueue(&[task("a")], 1_000).await.expect("enqueue");
        let first = store.lease("w1", limits(), 2_000).await.expect("lease");
        let lost = LeaseRef {
            task_id: "a".into(),
            fence: first.tasks[0].fence,
        };
        // The database comes back without the lease's write (a PostgreSQL crash with
        // asynchronous lease commits): the row is as it was before the lease.
        sqlx::query(
            "UPDATE tasks SET fence = 0, lease_holder = '', lease_until = 0, leased_at = 0",
        )
        .execute(store.pool())
        .await
        .expect("rewind");
        let second = store
            .lease("w2", limits(), 2_001)
            .await
            .expect("lease again");
        assert_ne!(
            second.tasks[0].fence, lost.fence,
            "a fence is never handed out twice"
        );
        assert!(
            matches!(
                store.complete(&lost, 2_500).await,
                Err(StoreError::StaleLease { .. })
            ),
            "the holder of the lost lease cannot settle the task"
        );
        let current = LeaseRef {
            task_id: "a".into(),
            fence: second.tasks[0].fence,
        };
        store
            .complete(&current, 2_600)
            .await
            .expect("the new holder settles it");
    }

    async fn a_queue_whose_head_mark_was_lost_runs_again_from_its_oldest_task(store: Store) {
        store
            .enqueue(&[task("a"), task("b")], 1_000)
            .await
            .expect("enqueue");
        // What a PostgreSQL broker dying between a commit and its second look leaves behind.
        sqlx::query("UPDATE tasks SET is_head = 0")
            .execute(store.pool())
            .await
            .expect("drop the mark");
        let batch = store.lease("w", limits(), 2_000).await.expect("lease");
        let leased: Vec<&str> = batch.tasks.iter().map(|t| t.task.id.as_str()).collect();
        assert_eq!(leased, ["a"], "the oldest task, and only it");
        let lease = LeaseRef {
            task_id: "a".into(),
            fence: batch.tasks[0].fence,
        };
        store.complete(&lease, 2_100).await.expect("complete");
        let next = store.lease("w", limits(), 2_200).await.expect("lease");
        assert_eq!(next.tasks[0].task.id, "b");
    }

    async fn nothing_ready_reports_when_the_next_head_becomes_due(store: Store) {
        store.enqueue(&[task("a")], 1_000).await.expect("enqueue");
        let leased = store.lease("w", limits(), 1_000).await.expect("lease");
        let idle = store.lease("w", limits(), 1_001).await.expect("lease");
        assert!(idle.tasks.is_empty());
        assert_eq!(
            idle.next_due_ms,
            Some(11_000),
            "the lease expires at 1 000 + 10 000"
        );
        let expired = store.lease("w2", limits(), 11_000).await.expect("lease");
        assert_eq!(expired.tasks.len(), 1, "redelivered once the lease expired");
        assert!(expired.tasks[0].redelivered);
        assert!(expired.tasks[0].fence > leased.tasks[0].fence);
    }
}
