//! Queue heads.
//!
//! Every non-empty queue has exactly one task marked `is_head`: its lowest `seq`. Lease reads the
//! ready heads in `seq` order through the partial index `tasks_heads`, so its cost follows the
//! number of queue heads, not the number of queues times an index probe each (what finding the
//! heads from the `(queue, seq)` index costs, and what bounded Lease on PostgreSQL with a hundred
//! queues).
//!
//! The writers keep the mark: Enqueue, and every transaction that removes tasks, promotes the
//! lowest `seq` of the queues it touched ([`promote`]) before it commits.
//!
//! On PostgreSQL that alone can miss. An Enqueue that does not yet see a concurrent removal of
//! the head adds its task without the mark, while the remover, not yet seeing the new task,
//! finds the queue empty and promotes nothing: the queue would have no head and never run
//! again. So after committing, each side looks again ([`Store::look_again`]) at the
//! queues where it marked no head: the Enqueue at those that had one, the remover at those it
//! found empty. Whichever of the two commits last then sees both changes and marks the right
//! task. Only the marks need this: `seq` order within a queue is already commit order
//! (Enqueue's queue locks, see [`super::Dialect::locks_queues`]), so the lowest `seq` a
//! transaction can see is always the queue's true head. SQLite serialises writers, so the
//! first promotion is enough.
//!
//! A broker that dies between a commit and its second look leaves the queue unmarked until
//! the next change to it; so Lease also marks every headless queue's lowest `seq` once a second
//! ([`Store::mark_headless_queues`]).
//!
//! Lease, Heartbeat and compaction change no mark: compaction only removes tasks behind a
//! leased head.

use std::collections::BTreeSet;

use sqlx::{AnyConnection, Executor as _, Row};

use super::{Dialect, Store, StoreError, query_failed};

/// Queue names per statement; one bound value each, within both engines' limits on bound
/// parameters.
const QUEUES_PER_STATEMENT: usize = 512;

/// Attempts of a look after commit that failed transiently (a deadlock or serialization
/// failure of PostgreSQL).
const POST_COMMIT_ATTEMPTS: usize = 5;

/// The statement marking the lowest `seq` of each of `n` queues (`$1`…`$n`) as its head where
/// it is not marked yet; it returns the queues it marked.
///
/// On PostgreSQL the rows to mark are taken `FOR UPDATE SKIP LOCKED`: promotions touch rows of
/// many queues in no particular order, alongside removals doing the same, and waiting for each
/// other's row locks deadlocks. A row another transaction holds is being changed by it: marked
/// by another promotion, or removed (superseded, or a settled head an old snapshot still showed
/// unmarked), and that transaction promotes what follows it. So skipping it loses nothing.
fn promote_sql(dialect: Dialect, n: usize) -> String {
    // One `(queue, seq)` index probe per queue for its lowest `seq` (`column1` is what both
    // engines name a VALUES column). `MIN … WHERE queue IN … GROUP BY queue` would read every
    // task of each queue instead.
    let queues: Vec<String> = (1..=n).map(|i| format!("(${i})")).collect();
    format!(
        "UPDATE tasks SET is_head = 1 WHERE seq IN \
         (SELECT t.seq FROM tasks t WHERE t.is_head = 0 AND t.seq IN \
          (SELECT (SELECT h.seq FROM tasks h WHERE h.queue = q.column1 ORDER BY h.seq LIMIT 1) \
           FROM (VALUES {}) AS q){}) \
         RETURNING queue",
        queues.join(", "),
        dialect.pick("", " FOR UPDATE OF t SKIP LOCKED")
    )
}

/// [`promote_sql`] plus a NOTIFY to the brokers (PostgreSQL) only if it marked a head; it
/// returns the queues it marked, as [`promote_sql`] does.
fn promote_and_signal_sql(dialect: Dialect, n: usize) -> String {
    // `pg_notify` runs once per marked row, only if there is one; PostgreSQL delivers identical
    // notifications of one transaction once. Its `void` is compared as text so that it stays
    // out of the rows (which could not decode it).
    format!(
        "WITH promoted AS ({}) SELECT queue FROM promoted WHERE pg_notify('{}', '')::text = ''",
        promote_sql(dialect, n),
        super::CHANGE_CHANNEL
    )
}

/// The queues a transaction touched but marked no head in: where it must look again once it
/// has committed ([`Store::look_again`]).
#[derive(Debug, Default)]
#[must_use = "the second look after commit is what keeps a racing queue from stalling"]
pub(super) struct SecondLook(BTreeSet<String>);

/// Marks the lowest `seq` of each of `queues` as its head where it is not marked yet. The queues
/// it marked nothing in (they had a head already, or looked empty) are the second look.
pub(super) async fn promote<'a>(
    conn: &mut AnyConnection,
    dialect: Dialect,
    queues: impl IntoIterator<Item = &'a str>,
) -> Result<SecondLook, StoreError> {
    promote_with(conn, dialect, queues, false).await
}

/// [`promote`], and on PostgreSQL also a NOTIFY to the brokers when it marked a head, in the
/// same statement: for Enqueue and Complete, after which there is something new to lease only
/// where a head was marked. One round trip less than a separate NOTIFY, on the path from
/// Enqueue to a task's start. (Where a row was skipped, [`Store::look_again`] signals.)
pub(super) async fn promote_and_signal<'a>(
    conn: &mut AnyConnection,
    dialect: Dialect,
    queues: impl IntoIterator<Item = &'a str>,
) -> Result<SecondLook, StoreError> {
    promote_with(conn, dialect, queues, dialect.change_signal().is_some()).await
}

async fn promote_with<'a>(
    conn: &mut AnyConnection,
    dialect: Dialect,
    queues: impl IntoIterator<Item = &'a str>,
    signal: bool,
) -> Result<SecondLook, StoreError> {
    let touched: BTreeSet<&str> = queues.into_iter().collect();
    let touched: Vec<&str> = touched.into_iter().collect();
    let mut promoted = BTreeSet::new();
    for chunk in touched.chunks(QUEUES_PER_STATEMENT) {
        let sql = if signal {
            promote_and_signal_sql(dialect, chunk.len())
        } else {
            promote_sql(dialect, chunk.len())
        };
        // Only placeholders and a constant are generated; every value is bound.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for queue in chunk {
            query = query.bind(*queue);
        }
        let rows = query
            .fetch_all(&mut *conn)
            .await
            .map_err(query_failed("promote queue heads"))?;
        promoted.extend(queue_names(&rows)?);
    }
    Ok(SecondLook(
        touched
            .into_iter()
            .filter(|q| !promoted.contains(*q))
            .map(str::to_owned)
            .collect(),
    ))
}

/// The `queue` column of `rows` (what a removal's `RETURNING queue` gave).
pub(super) fn queue_names(rows: &[sqlx::any::AnyRow]) -> Result<BTreeSet<String>, StoreError> {
    rows.iter()
        .map(|row| row.try_get::<String, _>("queue"))
        .collect::<Result<_, _>>()
        .map_err(query_failed("decode queue"))
}

/// Marks the lowest `seq` of every queue that has none marked, walking the queue names through
/// the `(queue, seq)` index (a loose index scan: one probe per queue, however long the queues).
/// Locking as [`promote_sql`] does.
macro_rules! mark_headless {
    ($lock:literal) => {
        concat!(
            "WITH RECURSIVE queues(name) AS ( \
                 SELECT MIN(queue) FROM tasks \
                 UNION ALL \
                 SELECT (SELECT MIN(n.queue) FROM tasks n WHERE n.queue > queues.name) \
                 FROM queues WHERE queues.name IS NOT NULL) \
             UPDATE tasks SET is_head = 1 WHERE seq IN \
             (SELECT t.seq FROM queues JOIN tasks t ON t.seq = \
                (SELECT h.seq FROM tasks h WHERE h.queue = queues.name ORDER BY h.seq LIMIT 1) \
              WHERE t.is_head = 0",
            $lock,
            ") RETURNING queue"
        )
    };
}

impl Store {
    /// The safety net behind [`Store::look_again`]: marks the head of every queue that
    /// has none, and tells the brokers when it did. Returns how many queues it marked. (On
    /// SQLite every change marks its heads atomically, so this finds nothing there.)
    pub(super) async fn mark_headless_queues(&self) -> Result<usize, StoreError> {
        let rows = sqlx::query(self.dialect().pick(
            mark_headless!(""),
            mark_headless!(" FOR UPDATE OF t SKIP LOCKED"),
        ))
        .fetch_all(self.pool())
        .await
        .map_err(query_failed("mark headless queues"))?;
        if !rows.is_empty() {
            // Also right after a commit whose second look is still on its way.
            tracing::info!(queues = ?queue_names(&rows)?, "marked missing queue heads");
            if let Some(signal) = self.dialect().change_signal() {
                self.pool()
                    .execute(signal)
                    .await
                    .map_err(query_failed("signal change"))?;
            }
        }
        Ok(rows.len())
    }

    /// The second look of a transaction that has committed (see the module docs): promotes
    /// the lowest `seq` of the queues in `look` where it is not marked, and tells the brokers
    /// when it did. Nothing to do on SQLite.
    pub(super) async fn look_again(&self, look: SecondLook) -> Result<(), StoreError> {
        if !self.dialect().locks_queues() || look.0.is_empty() {
            return Ok(());
        }
        let queues: Vec<&str> = look.0.iter().map(String::as_str).collect();
        for chunk in queues.chunks(QUEUES_PER_STATEMENT) {
            // One statement: the promotion and, only if it marked anything, the NOTIFY that wakes
            // the brokers' waiting Leases (the commit's own NOTIFY came before the mark).
            let sql = promote_and_signal_sql(self.dialect(), chunk.len());
            // The caller's own change is committed already: this look must not be lost to a
            // deadlock with some other transaction.
            super::retrying(POST_COMMIT_ATTEMPTS, || {
                // Only placeholders and a constant are generated; every value is bound.
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.as_str()));
                for queue in chunk {
                    query = query.bind(*queue);
                }
                let pool = self.pool();
                async move {
                    pool.execute(query)
                        .await
                        .map_err(query_failed("promote queue heads after commit"))
                }
            })
            .await?;
        }
        Ok(())
    }
}
