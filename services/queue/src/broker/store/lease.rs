//! Lease: hand out the ready head of each idle queue, and compact hook runs on the way.

use std::sync::atomic::Ordering;
use std::time::Duration;

use sqlx::{AnyConnection, Row};

use super::history::{self, Finished};
use super::rows::{FORMAT, encode_merge, leased_task, task_columns};
use super::{Dialect, Store, StoreError, heads, query_failed};
use crate::broker::compaction;
use crate::broker::model::{LeaseBatch, LeasedTask, Outcome};

/// How many queued tasks behind a mergeable head one lease looks at for compaction; bounds the work
/// of one Lease call.
const COMPACTION_WINDOW: i64 = 256;

/// Bounds of one Lease call.
#[derive(Debug, Clone, Copy)]
pub struct LeaseLimits {
    pub ttl: Duration,
    pub max_tasks: i64,
    /// Payload bytes per response: once reached, no further task is added (the first always
    /// is), so a response stays within what a client decodes.
    pub response_bytes: usize,
    /// Largest payload compaction may build; merging stops before exceeding it.
    pub merged_payload_bytes: usize,
}

/// Leases the ready heads in one statement, found through the `tasks_heads` index (see
/// `heads`). A ready head is not running, not cancelled and due; the oldest heads come first
/// (so no queue starves), at most `$2` of them, and heads stop being added once the payloads
/// before them reach `$5` bytes (the first always fits).
/// `$1` is now, `$3` the worker, `$4` the lease's end. The SET expressions read the row's
/// previous values, so `redelivered` records whether an expired lease is being replaced.
///
/// The new fence is the old one plus one, or now in milliseconds if that is larger. Fences then
/// never repeat even if a lease's write is lost (see [`Store::lease_pool`]): a task leased
/// again after a database crash gets a fence from a later clock than the lost one.
///
/// One statement instead of select-then-update-each: on SQLite every statement is a round trip
/// to the connection's thread, which is what bounds the broker's throughput.
macro_rules! lease_heads {
    ($lock:literal) => {
        concat!(
            "WITH heads AS (SELECT t.seq, LENGTH(t.payload) + LENGTH(t.body) + LENGTH(t.merge_fields) AS size \
             FROM tasks t \
             WHERE t.is_head = 1 AND t.cancelled = 0 AND t.not_before <= $1 \
               AND (t.lease_holder = '' OR t.lease_until <= $1) \
             ORDER BY t.seq LIMIT $2",
            $lock,
            "), budgeted AS (SELECT seq, SUM(size) OVER (ORDER BY seq) - size AS before FROM heads) \
             UPDATE tasks SET lease_holder = $3, lease_until = $4, leased_at = $1, \
               fence = CASE WHEN fence + 1 > $1 THEN fence + 1 ELSE $1 END, \
               redelivered = CASE WHEN lease_holder <> '' THEN 1 ELSE 0 END \
             WHERE seq IN (SELECT seq FROM budgeted WHERE before < $5) \
             RETURNING ",
            task_columns!()
        )
    };
}

/// Cancelled tasks whose holder went away without reporting (lease expired) exist; the partial
/// index `tasks_cancelled` (cancelled tasks only) makes this a short scan.
const ANY_ABANDONED_CANCELLED: &str =
    "SELECT 1 FROM tasks WHERE cancelled = 1 AND lease_until <= $1 LIMIT 1";

/// How often a Lease that found work also looks for abandoned cancelled tasks (and for queues
/// without a head mark, see `heads`). A Lease that finds nothing always looks. An abandoned
/// cancelled head blocks its queue until reaped, so this bounds that delay (on top of the lease
/// TTL that had to pass first).
const REAP_INTERVAL_MS: i64 = 1_000;

impl Store {
    /// Leases up to `limits.max_tasks` ready queue heads to `worker` until `now_ms + ttl`. When
    /// none is ready, also answers when one may become ready by itself.
    ///
    /// The lease itself is one statement (atomic without a transaction); merging queued tasks
    /// into the leased heads that have merge fields is one transaction of its own afterwards. A broker that
    /// dies between the two leaves the head leased uncompacted: it is redelivered once the
    /// lease expires and compacted then.
    pub async fn lease(
        &self,
        worker: &str,
        limits: LeaseLimits,
        now_ms: i64,
    ) -> Result<LeaseBatch, StoreError> {
        let mut reaped = false;
        if now_ms >= self.next_reap_ms.load(Ordering::Relaxed) {
            self.reap_cancelled(now_ms).await?;
            self.mark_headless_queues().await?;
            reaped = true;
        }
        let pool = self.lease_pool();
        let mut tasks = lease_heads(pool, self.dialect(), worker, limits, now_ms).await?;
        if tasks.is_empty() && !reaped && self.reap_cancelled(now_ms).await? {
            tasks = lease_heads(pool, self.dialect(), worker, limits, now_ms).await?;
        }
        let mut batch = LeaseBatch::default();
        if tasks.iter().any(|(_, t)| t.task.merge.is_some()) {
            let mut tx = self.begin("compact").await?;
            batch.tasks = compact_heads(&mut tx, self.dialect(), tasks, limits, now_ms).await?;
            tx.commit()
                .await
                .map_err(query_failed("commit compaction"))?;
        } else {
            batch.tasks = tasks.into_iter().map(|(_, t)| t).collect();
        }
        if batch.tasks.is_empty() {
            batch.next_due_ms = next_due(self.pool(), now_ms).await?;
        }
        Ok(batch)
    }

    /// Removes cancelled tasks whose holder went away without reporting (lease expired): they
    /// must not be redelivered. True when it removed any.
    async fn reap_cancelled(&self, now_ms: i64) -> Result<bool, StoreError> {
        self.next_reap_ms
            .store(now_ms.saturating_add(REAP_INTERVAL_MS), Ordering::Relaxed);
        let any = sqlx::query(ANY_ABANDONED_CANCELLED)
            .bind(now_ms)
            .fetch_optional(self.pool())
            .await
            .map_err(query_failed("look for abandoned cancelled tasks"))?;
        if any.is_none() {
            return Ok(false);
        }
        let mut tx = self.begin("reap cancelled tasks").await?;
        sqlx::query(
            "INSERT INTO task_history (id, queue, package, kind, outcome, attempts, error, finished_at) \
             SELECT id, queue, package, kind, 'cancelled', attempts, last_error, $1 FROM tasks \
             WHERE cancelled = 1 AND lease_until <= $1",
        )
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(query_failed("record cancelled tasks"))?;
        let removed = sqlx::query(
            "DELETE FROM tasks WHERE cancelled = 1 AND lease_until <= $1 RETURNING queue",
        )
        .bind(now_ms)
        .fetch_all(&mut *tx)
        .await
        .map_err(query_failed("delete cancelled tasks"))?;
        let queues = heads::queue_names(&removed)?;
        let look =
            heads::promote(&mut tx, self.dialect(), queues.iter().map(String::as_str)).await?;
        self.signal_change(&mut tx).await?;
        tx.commit().await.map_err(query_failed("commit reaping"))?;
        // The queues it emptied may have got a task meanwhile (see `heads`).
        self.look_again(look).await?;
        Ok(!removed.is_empty())
    }
}

/// The lease statement ([`lease_heads!`]) on `executor` (the pool, or a transaction that
/// settled tasks first); the leased rows in queue-head order.
pub(super) async fn lease_heads<'e, E>(
    executor: E,
    dialect: Dialect,
    worker: &str,
    limits: LeaseLimits,
    now_ms: i64,
) -> Result<Vec<(i64, LeasedTask)>, StoreError>
where
    E: sqlx::Executor<'e, Database = sqlx::Any>,
{
    let lease_until = now_ms.saturating_add(limits.ttl.as_millis() as i64);
    let rows = sqlx::query(dialect.pick(
        lease_heads!(""),
        // Concurrent brokers skip each other's candidate rows instead of waiting for them.
        lease_heads!(" FOR UPDATE OF t SKIP LOCKED"),
    ))
    .bind(now_ms)
    .bind(limits.max_tasks)
    .bind(worker)
    .bind(lease_until)
    .bind(i64::try_from(limits.response_bytes).unwrap_or(i64::MAX))
    .fetch_all(executor)
    .await
    .map_err(query_failed("lease ready heads"))?;
    let mut tasks = rows
        .iter()
        .map(leased_task)
        .collect::<Result<Vec<_>, _>>()
        .map_err(query_failed("decode task"))?;
    // RETURNING order is unspecified.
    tasks.sort_unstable_by_key(|(seq, _)| *seq);
    Ok(tasks)
}

/// The leased `heads` (from [`lease_heads`]) with every one that has merge fields compacted in
/// `conn`'s transaction, in the same order.
pub(super) async fn compact_heads(
    conn: &mut AnyConnection,
    dialect: Dialect,
    heads: Vec<(i64, LeasedTask)>,
    limits: LeaseLimits,
    now_ms: i64,
) -> Result<Vec<LeasedTask>, StoreError> {
    let mut tasks = Vec::with_capacity(heads.len());
    for (seq, mut task) in heads {
        if task.task.merge.is_some() {
            compact(
                conn,
                dialect,
                seq,
                &mut task,
                limits.merged_payload_bytes,
                now_ms,
            )
            .await?;
        }
        tasks.push(task);
    }
    Ok(tasks)
}

/// Merges the consecutive tasks behind the leased head `seq` that have its kind, merge key,
/// generation and allowFailure into it (see `compaction`).
async fn compact(
    conn: &mut AnyConnection,
    dialect: Dialect,
    seq: i64,
    head: &mut LeasedTask,
    max_bytes: usize,
    now_ms: i64,
) -> Result<(), StoreError> {
    let Some(mut merged) = head.task.merge.take() else {
        return Ok(());
    };
    let candidates = dialect.pick(
        concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE queue = $1 AND seq > $2 ORDER BY seq LIMIT $3"
        ),
        // Locked, so a concurrent Supersede cannot delete a follower being merged.
        concat!(
            "SELECT ",
            task_columns!(),
            " FROM tasks WHERE queue = $1 AND seq > $2 ORDER BY seq LIMIT $3 FOR UPDATE"
        ),
    );
    let followers = sqlx::query(candidates)
        .bind(&head.task.queue)
        .bind(seq)
        .bind(COMPACTION_WINDOW)
        .fetch_all(&mut *conn)
        .await
        .map_err(query_failed("select compaction candidates"))?;
    let mut absorbed = Vec::new();
    // Upper estimate of the merged task: the items are copied, the rest dropped.
    let mut merged_bytes = head.task.payload.len() + merged.size();
    for row in &followers {
        let (follower_seq, mut follower) = leased_task(row).map_err(query_failed("decode task"))?;
        merged_bytes += follower.task.size();
        let same_run = merged_bytes <= max_bytes
            && follower.task.kind == head.task.kind
            && follower.task.generation == head.task.generation
            && follower.task.allow_failure == head.task.allow_failure;
        match follower.task.merge.take() {
            Some(later) if same_run && later.key == merged.key => {
                compaction::absorb(&mut merged, later);
                absorbed.push((follower_seq, follower));
            }
            _ => break,
        }
    }
    let Some((last_seq, _)) = absorbed.last() else {
        head.task.merge = Some(merged);
        return Ok(());
    };
    for (_, follower) in &absorbed {
        let finished = Finished {
            id: follower.task.id.as_str(),
            queue: &follower.task.queue,
            package: &follower.task.package,
            kind: &follower.task.kind,
            outcome: Outcome::Compacted,
            attempts: follower.attempts,
            error: &follower.last_error,
        };
        history::record(conn, finished, now_ms).await?;
    }
    sqlx::query("DELETE FROM tasks WHERE queue = $1 AND seq > $2 AND seq <= $3")
        .bind(&head.task.queue)
        .bind(seq)
        .bind(*last_seq)
        .execute(&mut *conn)
        .await
        .map_err(query_failed("delete compacted tasks"))?;
    merged.items = compaction::collapse_groups(merged.items);
    head.task.merge = Some(merged);
    head.compacted = absorbed.len() as u64;
    // In the current format, whichever the head was stored in.
    sqlx::query(
        "UPDATE tasks SET format = $5, payload = '', body = $1, merge_fields = $2 \
         WHERE seq = $3 AND fence = $4",
    )
    .bind(head.task.payload.as_slice())
    .bind(encode_merge(head.task.merge.as_ref()))
    .bind(seq)
    .bind(head.fence)
    .bind(FORMAT)
    .execute(&mut *conn)
    .await
    .map_err(query_failed("store compacted task"))?;
    Ok(())
}

/// The earliest moment a queue head may become ready without any call: the end of a retry
/// delay, or the expiry of a lease (redelivery).
async fn next_due(pool: &sqlx::AnyPool, now_ms: i64) -> Result<Option<i64>, StoreError> {
    let row = sqlx::query(
        "SELECT MIN(CASE WHEN t.lease_holder <> '' AND t.lease_until > $1 \
                        THEN t.lease_until ELSE t.not_before END) AS due \
         FROM tasks t WHERE t.is_head = 1",
    )
    .bind(now_ms)
    .fetch_one(pool)
    .await
    .map_err(query_failed("compute next due time"))?;
    row.try_get::<Option<i64>, _>("due")
        .map_err(query_failed("decode next due time"))
}
