//! Lease: hand out the ready head of each idle queue, and compact hook runs on the way.

use std::time::Duration;

use sqlx::{AnyConnection, Row};

use super::history::{self, Finished};
use super::rows::{leased_task, task_columns};
use super::{Store, StoreError, query_failed};
use crate::broker::compaction::{HOOK_RUN_KIND, HookRunPayload};
use crate::broker::model::{LeaseBatch, LeasedTask, Outcome};

/// How many queued tasks behind a HookRun one lease looks at for compaction; bounds the work
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

/// A `WITH` clause naming every queue that has tasks, found in O(queues · log tasks): the
/// recursive step jumps to the next queue name through the `(queue, seq)` index (a loose index
/// scan). Testing every task for being the head of its queue instead costs a probe per task,
/// which dominated Lease on PostgreSQL with a long backlog.
macro_rules! queue_names {
    () => {
        "WITH RECURSIVE queues(name) AS ( \
             SELECT MIN(queue) FROM tasks \
             UNION ALL \
             SELECT (SELECT MIN(n.queue) FROM tasks n WHERE n.queue > queues.name) \
             FROM queues WHERE queues.name IS NOT NULL) "
    };
}

/// Joins each queue name to its head task `t`.
macro_rules! join_heads {
    () => {
        " FROM queues JOIN tasks t ON t.seq = (SELECT MIN(h.seq) FROM tasks h WHERE h.queue = queues.name) "
    };
}

/// The head rows of queues that are ready: not running, not cancelled, due. `$1` is now, `$2`
/// the maximum. Oldest head first, so no queue starves.
macro_rules! ready_heads {
    () => {
        concat!(
            queue_names!(),
            "SELECT ",
            task_columns!(),
            join_heads!(),
            "WHERE t.cancelled = 0 AND t.not_before <= $1 \
               AND (t.lease_holder = '' OR t.lease_until <= $1) \
             ORDER BY t.seq LIMIT $2"
        )
    };
}

impl Store {
    /// Leases up to `max` ready queue heads to `worker` until `now_ms + ttl`. When none is
    /// ready, also answers when one may become ready by itself.
    pub async fn lease(
        &self,
        worker: &str,
        limits: LeaseLimits,
        now_ms: i64,
    ) -> Result<LeaseBatch, StoreError> {
        let mut tx = self.begin("lease").await?;
        reap_cancelled(&mut tx, now_ms).await?;
        let heads = sqlx::query(self.dialect().pick(
            ready_heads!(),
            concat!(ready_heads!(), " FOR UPDATE OF t SKIP LOCKED"),
        ))
        .bind(now_ms)
        .bind(limits.max_tasks)
        .fetch_all(&mut *tx)
        .await
        .map_err(query_failed("select ready heads"))?;
        let lease_until = now_ms.saturating_add(limits.ttl.as_millis() as i64);
        let mut batch = LeaseBatch::default();
        let mut bytes = 0;
        for row in &heads {
            if bytes >= limits.response_bytes {
                // The rest stay ready (on PostgreSQL their row locks end with this transaction).
                break;
            }
            let (seq, mut task) = leased_task(row).map_err(query_failed("decode task"))?;
            task.fence = take_lease(&mut tx, seq, worker, now_ms, lease_until).await?;
            if task.task.kind == HOOK_RUN_KIND {
                compact(&mut tx, seq, &mut task, limits.merged_payload_bytes, now_ms).await?;
            }
            bytes += task.task.payload_json.len();
            batch.tasks.push(task);
        }
        if batch.tasks.is_empty() {
            batch.next_due_ms = next_due(&mut tx, now_ms).await?;
        }
        tx.commit().await.map_err(query_failed("commit lease"))?;
        Ok(batch)
    }
}

async fn take_lease(
    conn: &mut AnyConnection,
    seq: i64,
    worker: &str,
    now_ms: i64,
    lease_until: i64,
) -> Result<i64, StoreError> {
    let row = sqlx::query(
        "UPDATE tasks SET lease_holder = $1, lease_until = $2, leased_at = $3, fence = fence + 1 WHERE seq = $4 RETURNING fence",
    )
        .bind(worker)
        .bind(lease_until)
        .bind(now_ms)
        .bind(seq)
        .fetch_one(&mut *conn)
        .await
        .map_err(query_failed("take lease"))?;
    row.try_get("fence").map_err(query_failed("decode fence"))
}

/// Removes cancelled tasks whose holder went away without reporting (lease expired): they must
/// not be redelivered.
async fn reap_cancelled(conn: &mut AnyConnection, now_ms: i64) -> Result<(), StoreError> {
    let inserted = sqlx::query(
        "INSERT INTO task_history (id, queue, package, kind, outcome, attempts, error, finished_at) \
         SELECT id, queue, package, kind, 'cancelled', attempts, last_error, $1 FROM tasks \
         WHERE cancelled = 1 AND lease_until <= $1",
    )
    .bind(now_ms)
    .execute(&mut *conn)
    .await
    .map_err(query_failed("record cancelled tasks"))?;
    if inserted.rows_affected() > 0 {
        sqlx::query("DELETE FROM tasks WHERE cancelled = 1 AND lease_until <= $1")
            .bind(now_ms)
            .execute(&mut *conn)
            .await
            .map_err(query_failed("delete cancelled tasks"))?;
    }
    Ok(())
}

/// Merges the consecutive HookRun tasks behind the leased head `seq` that run the same hook for
/// the same binding type (and generation, and allowFailure) into it.
async fn compact(
    conn: &mut AnyConnection,
    seq: i64,
    head: &mut LeasedTask,
    max_bytes: usize,
    now_ms: i64,
) -> Result<(), StoreError> {
    let Some(mut merged) = HookRunPayload::parse(&head.task.payload_json) else {
        return Ok(());
    };
    let followers = sqlx::query(concat!(
        "SELECT ",
        task_columns!(),
        " FROM tasks WHERE queue = $1 AND seq > $2 ORDER BY seq LIMIT $3"
    ))
    .bind(&head.task.queue)
    .bind(seq)
    .bind(COMPACTION_WINDOW)
    .fetch_all(&mut *conn)
    .await
    .map_err(query_failed("select compaction candidates"))?;
    let mut absorbed = Vec::new();
    // Upper estimate of the merged payload: the contexts are copied, the envelopes dropped.
    let mut merged_bytes = head.task.payload_json.len();
    for row in &followers {
        let (follower_seq, follower) = leased_task(row).map_err(query_failed("decode task"))?;
        merged_bytes += follower.task.payload_json.len();
        let same_run = merged_bytes <= max_bytes
            && follower.task.kind == HOOK_RUN_KIND
            && follower.task.generation == head.task.generation
            && follower.task.allow_failure == head.task.allow_failure;
        let payload = same_run
            .then(|| HookRunPayload::parse(&follower.task.payload_json))
            .flatten();
        match payload {
            Some(payload) if payload.key == merged.key => {
                merged.absorb(payload);
                absorbed.push((follower_seq, follower));
            }
            _ => break,
        }
    }
    let Some((last_seq, _)) = absorbed.last() else {
        return Ok(());
    };
    for (_, follower) in &absorbed {
        let finished = Finished {
            id: &follower.task.id,
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
    head.task.payload_json = merged.into_json();
    head.compacted = absorbed.len() as u64;
    sqlx::query("UPDATE tasks SET payload = $1 WHERE seq = $2")
        .bind(&head.task.payload_json)
        .bind(seq)
        .execute(&mut *conn)
        .await
        .map_err(query_failed("store compacted payload"))?;
    Ok(())
}

/// The earliest moment a queue head may become ready without any call: the end of a retry
/// delay, or the expiry of a lease (redelivery).
async fn next_due(conn: &mut AnyConnection, now_ms: i64) -> Result<Option<i64>, StoreError> {
    let row = sqlx::query(concat!(
        queue_names!(),
        "SELECT MIN(CASE WHEN t.lease_holder <> '' AND t.lease_until > $1 \
                        THEN t.lease_until ELSE t.not_before END) AS due",
        join_heads!()
    ))
    .bind(now_ms)
    .fetch_one(&mut *conn)
    .await
    .map_err(query_failed("compute next due time"))?;
    row.try_get::<Option<i64>, _>("due")
        .map_err(query_failed("decode next due time"))
}
