//! Enqueue and Supersede.

use std::collections::BTreeSet;

use sqlx::AnyConnection;

use super::rows::{FORMAT, encode_merge};
use super::{Store, StoreError, query_failed};
use super::{heads, history};
use crate::broker::model::NewTask;

/// Counts of what [`Store::supersede`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Superseded {
    /// Queued (not running) tasks removed.
    pub dropped: u64,
    /// Running tasks marked cancelled; their holders learn it on the next heartbeat.
    pub cancelled: u64,
}

/// A task is running while this holds (`$N` is the current time).
macro_rules! live_lease {
    ($now:literal) => {
        concat!("(lease_holder <> '' AND lease_until > ", $now, ")")
    };
}

impl Store {
    /// Appends `tasks` in order, all or none. A task whose id is queued, running or recently
    /// finished is skipped. Returns how many were new.
    pub async fn enqueue(&self, tasks: &[NewTask], now_ms: i64) -> Result<u64, StoreError> {
        let queues: BTreeSet<&str> = tasks.iter().map(|t| t.queue.as_str()).collect();
        let mut tx = self.begin("enqueue").await?;
        if self.dialect().locks_queues() {
            let queues: Vec<&str> = queues.iter().copied().collect();
            for chunk in queues.chunks(QUEUES_PER_LOCK_STATEMENT) {
                lock_queues(&mut tx, chunk).await?;
            }
        }
        let mut accepted = 0;
        for chunk in tasks.chunks(TASKS_PER_STATEMENT) {
            accepted += insert_tasks(&mut tx, chunk, now_ms).await?;
        }
        if accepted == 0 {
            tx.commit().await.map_err(query_failed("commit enqueue"))?;
            return Ok(0);
        }
        // The brokers need telling only where a new task became its queue's head: the others
        // wait behind a head, whose settling signals in its turn.
        let look = heads::promote_and_signal(&mut tx, self.dialect(), queues).await?;
        tx.commit().await.map_err(query_failed("commit enqueue"))?;
        // The queues that had a head may have lost it meanwhile (see `heads`).
        self.look_again(look).await?;
        Ok(accepted)
    }

    /// Removes the queued tasks of `package` older than `generation` (in every queue of the
    /// package) and marks its running ones cancelled, except tasks of the kinds in `keep`.
    /// Set-based statements keep it quick however many tasks are affected.
    pub async fn supersede(
        &self,
        package: &str,
        generation: i64,
        keep: &[String],
        now_ms: i64,
    ) -> Result<Superseded, StoreError> {
        // `kind NOT IN ($4, $5, ...)`, after the three parameters every statement binds.
        let spared = if keep.is_empty() {
            String::new()
        } else {
            let params: Vec<String> = (0..keep.len()).map(|i| format!("${}", i + 4)).collect();
            format!(" AND kind NOT IN ({})", params.join(", "))
        };
        let bind = |sql: &'static str, spared: &str| {
            // Only placeholders are generated; every value is bound.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(format!("{sql}{spared}")))
                .bind(package.to_owned())
                .bind(generation)
                .bind(now_ms);
            for kind in keep {
                query = query.bind(kind.clone());
            }
            query
        };
        let mut tx = self.begin("supersede").await?;
        bind(
            concat!(
                "INSERT INTO task_history (id, queue, package, kind, outcome, attempts, error, finished_at) \
                 SELECT id, queue, package, kind, 'superseded', attempts, last_error, $3 FROM tasks \
                 WHERE package = $1 AND generation < $2 AND NOT ",
                live_lease!("$3")
            ),
            &spared,
        )
        .execute(&mut *tx)
        .await
        .map_err(query_failed("record superseded tasks"))?;
        let removed = bind(
            concat!(
                "DELETE FROM tasks WHERE package = $1 AND generation < $2 AND NOT ",
                live_lease!("$3")
            ),
            &format!("{spared} RETURNING queue"),
        )
        .fetch_all(&mut *tx)
        .await
        .map_err(query_failed("delete superseded tasks"))?;
        let dropped = removed.len() as u64;
        let queues = heads::queue_names(&removed)?;
        let look =
            heads::promote(&mut tx, self.dialect(), queues.iter().map(String::as_str)).await?;
        let cancelled = bind(
            concat!(
                "UPDATE tasks SET cancelled = 1 WHERE package = $1 AND generation < $2 AND cancelled = 0 AND ",
                live_lease!("$3")
            ),
            &spared,
        )
        .execute(&mut *tx)
        .await
        .map_err(query_failed("cancel superseded tasks"))?
        .rows_affected();
        history::trim(&mut tx).await?;
        if dropped > 0 {
            self.signal_change(&mut tx).await?;
        }
        tx.commit()
            .await
            .map_err(query_failed("commit supersede"))?;
        // The queues it emptied may have got a task meanwhile (see `heads`).
        self.look_again(look).await?;
        Ok(Superseded { dropped, cancelled })
    }
}

/// Tasks per INSERT: nine bound values each, within both engines' limits on bound parameters.
const TASKS_PER_STATEMENT: usize = 256;

/// Inserts `tasks` in order with one statement, skipping ids that are queued, running or in the
/// history. `$1` is the enqueue time; the row number keeps `seq` in request order.
async fn insert_tasks(
    conn: &mut AnyConnection,
    tasks: &[NewTask],
    now_ms: i64,
) -> Result<u64, StoreError> {
    const COLUMNS: usize = 9;
    let rows: Vec<String> = (0..tasks.len())
        .map(|i| {
            let p = 2 + COLUMNS * i;
            let placeholders: Vec<String> = (p..p + COLUMNS).map(|n| format!("${n}")).collect();
            format!("({i}, {})", placeholders.join(", "))
        })
        .collect();
    let sql = format!(
        "WITH v(ord, id, queue, package, generation, kind, body, merge_fields, traceparent, allow_failure) AS (VALUES {}) \
         INSERT INTO tasks (id, queue, package, generation, kind, format, payload, body, merge_fields, traceparent, allow_failure, enqueued_at, not_before) \
         SELECT id, queue, package, generation, kind, {FORMAT}, '', body, merge_fields, traceparent, allow_failure, $1, $1 FROM v \
         WHERE NOT EXISTS (SELECT 1 FROM task_history h WHERE h.id = v.id) \
         ORDER BY ord ON CONFLICT (id) DO NOTHING",
        rows.join(", ")
    );
    // Only placeholders are generated; every value is bound.
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now_ms);
    for task in tasks {
        query = query
            .bind(task.id.as_str())
            .bind(&task.queue)
            .bind(&task.package)
            .bind(task.generation)
            .bind(&task.kind)
            .bind(task.payload.as_slice())
            .bind(encode_merge(task.merge.as_ref()))
            .bind(&task.traceparent)
            .bind(i64::from(task.allow_failure));
    }
    let result = query
        .execute(&mut *conn)
        .await
        .map_err(query_failed("insert tasks"))?;
    Ok(result.rows_affected())
}

/// Queues locked per statement of an Enqueue (PostgreSQL); one bound value each.
const QUEUES_PER_LOCK_STATEMENT: usize = 512;

/// Takes the per-queue transaction locks (PostgreSQL advisory locks keyed by a hash of the queue
/// name; see [`super::Dialect::locks_queues`]) for `queues` in one statement,
/// in byte order of the names (`COLLATE "C"`, the order of the caller's sorted chunks), so
/// concurrent Enqueues take shared queues' locks in one order (no deadlock). The `OFFSET 0`
/// subquery keeps the sort below the locking calls.
async fn lock_queues(conn: &mut AnyConnection, queues: &[&str]) -> Result<(), StoreError> {
    let values: Vec<String> = (1..=queues.len()).map(|i| format!("(${i})")).collect();
    let sql = format!(
        "SELECT pg_advisory_xact_lock(hashtextextended(sorted.q, 0)) FROM \
         (SELECT v.q FROM (VALUES {}) AS v(q) ORDER BY v.q COLLATE \"C\" OFFSET 0) AS sorted",
        values.join(", ")
    );
    // Only placeholders are generated; every value is bound.
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    for queue in queues {
        query = query.bind(*queue);
    }
    // `execute`: the locking function returns `void`, which rows could not be decoded from.
    query
        .execute(&mut *conn)
        .await
        .map_err(query_failed("lock queues"))?;
    Ok(())
}
