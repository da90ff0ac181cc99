//! Heartbeat, Complete, Fail and Defer: the calls a lease holder makes, all checked against the fence.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use sqlx::{AnyConnection, Row};

use super::heads;
use super::history::{self, Finished};
use super::lease::{LeaseLimits, compact_heads, lease_heads};
use super::rows::FORMAT;
use super::{Dialect, Store, StoreError, query_failed};
use crate::broker::backoff::Backoff;
use crate::broker::model::{FailOutcome, Failure, LeasedTask, Outcome, Settled, TaskId};

/// A lease as its holder names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRef {
    pub task_id: TaskId,
    pub fence: i64,
}

/// A successful settlement as its lease holder asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub lease: LeaseRef,
    /// Who asks for `next` tasks; may be empty when `next` is 0.
    pub worker: String,
    /// Ready tasks to lease to `worker` in the same transaction (0 for none).
    pub next: i64,
}

/// What one successful [`Completion`] did.
#[derive(Debug)]
pub struct Completed {
    pub settled: Settled,
    /// The tasks leased to the worker in the same transaction, at most `next`.
    pub next: Vec<LeasedTask>,
}

/// The row a settled lease removed.
struct Removed {
    queue: String,
    package: String,
    kind: String,
    attempts: i64,
    cancelled: bool,
    leased_at: i64,
}

impl Removed {
    fn settled(&self, now_ms: i64) -> Settled {
        Settled {
            kind: self.kind.clone(),
            ran_ms: now_ms.saturating_sub(self.leased_at).max(0),
            cancelled: self.cancelled,
        }
    }
}

impl Store {
    /// Extends the leases `worker` still holds. Returns the task ids the worker must stop:
    /// cancelled by Supersede, or lost (finished, re-leased after expiry, or unknown fence).
    ///
    /// One statement per [`LEASES_PER_STATEMENT`] leases, each atomic on its own: a lease is
    /// either extended or reported, never half of each. Runs on [`Store::lease_pool`]: an
    /// extension lost in a database crash only shortens the lease.
    pub async fn heartbeat(
        &self,
        worker: &str,
        leases: &[LeaseRef],
        ttl: Duration,
        now_ms: i64,
    ) -> Result<Vec<TaskId>, StoreError> {
        let lease_until = now_ms.saturating_add(ttl.as_millis() as i64);
        let mut extended = HashSet::new();
        for chunk in leases.chunks(LEASES_PER_STATEMENT) {
            // A matching fence proves nobody leased the task since, so even a lapsed lease may
            // be revived; once another worker leased it, the fence differs.
            let sql = format!(
                "UPDATE tasks SET lease_until = $1 \
                 WHERE lease_holder = $2 AND cancelled = 0 AND {} RETURNING id, fence",
                lease_match(3, chunk.len())
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(lease_until)
                .bind(worker);
            for lease in chunk {
                query = query.bind(&lease.task_id).bind(lease.fence);
            }
            let rows = query
                .fetch_all(self.lease_pool())
                .await
                .map_err(query_failed("extend leases"))?;
            for row in &rows {
                let id: TaskId = row.try_get("id").map_err(query_failed("decode lease"))?;
                let fence: i64 = row.try_get("fence").map_err(query_failed("decode lease"))?;
                extended.insert((id, fence));
            }
        }
        Ok(leases
            .iter()
            .filter(|l| !extended.contains(&(l.task_id.clone(), l.fence)))
            .map(|l| l.task_id.clone())
            .collect())
    }

    /// Settles a lease successfully: the task is removed and the next one in its queue becomes
    /// ready.
    pub async fn complete(&self, lease: &LeaseRef, now_ms: i64) -> Result<Settled, StoreError> {
        let completion = Completion {
            lease: lease.clone(),
            worker: String::new(),
            next: 0,
        };
        // `limits` only bound leasing, and this completion asks for no next task.
        let limits = LeaseLimits {
            ttl: Duration::ZERO,
            max_tasks: 0,
            response_bytes: 0,
            merged_payload_bytes: 0,
        };
        self.complete_one(&completion, limits, now_ms)
            .await
            .map(|completed| completed.settled)
    }

    /// [`Store::complete_many`] for one completion, its answer as the result.
    pub async fn complete_one(
        &self,
        completion: &Completion,
        limits: LeaseLimits,
        now_ms: i64,
    ) -> Result<Completed, StoreError> {
        self.complete_many(std::slice::from_ref(completion), limits, now_ms)
            .await?
            .pop()
            .unwrap_or_else(|| Err(stale(&completion.lease)))
    }

    /// Settles several leases successfully in one transaction, and leases each completion's
    /// `next` tasks to its worker in the same transaction: remove the tasks, record them, one
    /// lease statement per worker asking for more, commit — whatever the group's size. One commit
    /// (and on SQLite one write lock) for the whole group instead of one each is what bounds
    /// throughput; leasing after the removal lets the next task of a just-freed queue go out
    /// in the same round trip.
    ///
    /// Each completion gets its own answer: a stale one fails alone (nothing was written for
    /// it, and it gets no next task) while the others commit. An error of the database itself
    /// fails the whole group and changes nothing, so every caller may retry.
    pub async fn complete_many(
        &self,
        completions: &[Completion],
        limits: LeaseLimits,
        now_ms: i64,
    ) -> Result<Vec<Result<Completed, StoreError>>, StoreError> {
        // A completion lost in a database crash only makes the task run again (delivery is
        // at-least-once and tasks are idempotent), so on PostgreSQL it need not wait for the
        // WAL flush; see `Dialect::begin_relaxed`.
        let mut tx = self.begin_relaxed("complete").await?;
        let mut removed = HashMap::new();
        // PostgreSQL records the history in the removal's statement.
        let recorded = self.dialect() == Dialect::Postgres;
        let mut trim = false;
        for chunk in completions.chunks(LEASES_PER_STATEMENT) {
            let leases: Vec<LeaseRef> = chunk.iter().map(|c| c.lease.clone()).collect();
            if recorded {
                let (settled, crossed) = remove_and_record(&mut tx, &leases, now_ms).await?;
                removed.extend(settled);
                trim |= crossed;
            } else {
                removed.extend(remove_leased(&mut tx, &leases).await?);
            }
        }
        let freed = removed.values().map(|r| r.queue.as_str());
        // Other brokers' waiting Leases have something to take only where a new head was marked.
        let look = heads::promote_and_signal(&mut tx, self.dialect(), freed).await?;
        let mut answers = Vec::with_capacity(completions.len());
        let mut finished = Vec::with_capacity(removed.len());
        // Next tasks wanted per worker, by the completions that settled.
        let mut wanted: BTreeMap<&str, i64> = BTreeMap::new();
        for completion in completions {
            let lease = &completion.lease;
            match removed.get(&(lease.task_id.clone(), lease.fence)) {
                Some(row) => {
                    if !recorded {
                        finished.push(Finished {
                            id: lease.task_id.as_str(),
                            queue: &row.queue,
                            package: &row.package,
                            kind: &row.kind,
                            outcome: if row.cancelled {
                                Outcome::Cancelled
                            } else {
                                Outcome::Done
                            },
                            attempts: row.attempts,
                            error: "",
                        });
                    }
                    if completion.next > 0 && !completion.worker.is_empty() {
                        *wanted.entry(completion.worker.as_str()).or_default() += completion.next;
                    }
                    answers.push(Ok(Completed {
                        settled: row.settled(now_ms),
                        next: Vec::new(),
                    }));
                }
                None => answers.push(Err(stale(lease))),
            }
        }
        if !finished.is_empty() {
            history::record_many(&mut tx, &finished, now_ms).await?;
        }
        if trim {
            history::trim(&mut tx).await?;
        }
        let mut leased: HashMap<&str, VecDeque<LeasedTask>> = HashMap::new();
        for (worker, want) in wanted {
            let limits = LeaseLimits {
                max_tasks: want.min(limits.max_tasks),
                ..limits
            };
            let heads = lease_heads(&mut *tx, self.dialect(), worker, limits, now_ms).await?;
            let tasks = compact_heads(&mut tx, self.dialect(), heads, limits, now_ms).await?;
            leased.insert(worker, VecDeque::from(tasks));
        }
        for (completion, answer) in completions.iter().zip(answers.iter_mut()) {
            if let (Ok(completed), Some(tasks)) =
                (answer, leased.get_mut(completion.worker.as_str()))
            {
                let take = usize::try_from(completion.next)
                    .unwrap_or(0)
                    .min(tasks.len());
                completed.next.extend(tasks.drain(..take));
            }
        }
        tx.commit().await.map_err(query_failed("commit complete"))?;
        // The queues it emptied may have got a task meanwhile (see `heads`).
        self.look_again(look).await?;
        Ok(answers)
    }

    /// Settles a lease with an error. A task that allows failure, failed permanently
    /// (`retry == false`) or was cancelled is removed; any other stays at the head of its queue
    /// and is retried after a backoff delay, with the failure's progress as its payload when
    /// it has one.
    pub async fn fail(
        &self,
        lease: &LeaseRef,
        failure: &Failure<'_>,
        backoff: &Backoff,
        now_ms: i64,
    ) -> Result<(FailOutcome, Settled), StoreError> {
        let mut tx = self.begin("fail").await?;
        let row = sqlx::query(self.dialect().pick(
            "SELECT kind, attempts, allow_failure, cancelled, leased_at FROM tasks \
             WHERE id = $1 AND fence = $2 AND lease_holder <> ''",
            "SELECT kind, attempts, allow_failure, cancelled, leased_at FROM tasks \
             WHERE id = $1 AND fence = $2 AND lease_holder <> '' FOR UPDATE",
        ))
        .bind(&lease.task_id)
        .bind(lease.fence)
        .fetch_optional(&mut *tx)
        .await
        .map_err(query_failed("read failed task"))?
        .ok_or_else(|| stale(lease))?;
        let decode = |column: &str| {
            row.try_get::<i64, _>(column)
                .map_err(query_failed("decode failed task"))
        };
        let attempts = decode("attempts")? + 1;
        let keep = failure.retry && decode("allow_failure")? == 0 && decode("cancelled")? == 0;
        let error = failure.error;
        let kind: String = row
            .try_get("kind")
            .map_err(query_failed("decode failed task"))?;
        let settled = Settled {
            kind,
            ran_ms: now_ms.saturating_sub(decode("leased_at")?).max(0),
            cancelled: decode("cancelled")? != 0,
        };
        let mut look = heads::SecondLook::default();
        let outcome = if keep {
            let delay = backoff.delay(attempts);
            let delay_ms = delay.as_millis() as i64;
            // A failure's progress is the payload from now on, in the current format. A task
            // stored in the old one (see `legacy`) loses its merge fields then: berth records
            // progress only for Start tasks, which never merge.
            let statement = match failure.progress {
                None => {
                    "UPDATE tasks SET attempts = $1, last_error = $2, not_before = $3, lease_holder = '', lease_until = 0 \
                     WHERE id = $4 AND fence = $5"
                }
                Some(_) => {
                    "UPDATE tasks SET attempts = $1, last_error = $2, not_before = $3, lease_holder = '', lease_until = 0, \
                     merge_fields = CASE WHEN format = $7 THEN merge_fields ELSE $8 END, \
                     format = $7, payload = '', body = $6 WHERE id = $4 AND fence = $5"
                }
            };
            let mut query = sqlx::query(statement)
                .bind(attempts)
                .bind(error)
                .bind(now_ms.saturating_add(delay_ms))
                .bind(&lease.task_id)
                .bind(lease.fence);
            if let Some(progress) = failure.progress {
                query = query.bind(progress).bind(FORMAT).bind(Vec::<u8>::new());
            }
            query
                .execute(&mut *tx)
                .await
                .map_err(query_failed("schedule retry"))?;
            FailOutcome::RetryIn(delay_ms)
        } else {
            let removed = remove_leased(&mut tx, std::slice::from_ref(lease))
                .await?
                .remove(&(lease.task_id.clone(), lease.fence))
                .ok_or_else(|| stale(lease))?;
            look = heads::promote(&mut tx, self.dialect(), [removed.queue.as_str()]).await?;
            let outcome = if removed.cancelled {
                Outcome::Cancelled
            } else {
                Outcome::Dropped
            };
            let finished = Finished {
                id: lease.task_id.as_str(),
                queue: &removed.queue,
                package: &removed.package,
                kind: &removed.kind,
                outcome,
                attempts,
                error,
            };
            history::record(&mut tx, finished, now_ms).await?;
            FailOutcome::Dropped
        };
        self.signal_change(&mut tx).await?;
        tx.commit().await.map_err(query_failed("commit fail"))?;
        // A queue it emptied may have got a task meanwhile (see `heads`).
        self.look_again(look).await?;
        Ok((outcome, settled))
    }
}

impl Store {
    /// Hands a leased task back without counting an attempt: it stays its queue's head, leasable
    /// again `delay_ms` from `now_ms`, with `reason` shown as its last error. `Ok(false)` when
    /// the task was cancelled meanwhile: nothing changed, and the caller settles it as a
    /// failure (which drops it).
    pub async fn defer(
        &self,
        lease: &LeaseRef,
        reason: &str,
        delay_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin("defer").await?;
        let updated = sqlx::query(
            "UPDATE tasks SET last_error = $1, not_before = $2, lease_holder = '', lease_until = 0 \
             WHERE id = $3 AND fence = $4 AND lease_holder <> '' AND cancelled = 0",
        )
        .bind(reason)
        .bind(now_ms.saturating_add(delay_ms.max(0)))
        .bind(&lease.task_id)
        .bind(lease.fence)
        .execute(&mut *tx)
        .await
        .map_err(query_failed("defer task"))?
        .rows_affected();
        if updated == 0 {
            let cancelled = sqlx::query(
                "SELECT cancelled FROM tasks WHERE id = $1 AND fence = $2 AND lease_holder <> ''",
            )
            .bind(&lease.task_id)
            .bind(lease.fence)
            .fetch_optional(&mut *tx)
            .await
            .map_err(query_failed("read deferred task"))?
            .ok_or_else(|| stale(lease))?;
            let cancelled: i64 = cancelled
                .try_get("cancelled")
                .map_err(query_failed("decode deferred task"))?;
            if cancelled != 0 {
                return Ok(false);
            }
            return Err(stale(lease));
        }
        self.signal_change(&mut tx).await?;
        tx.commit().await.map_err(query_failed("commit defer"))?;
        Ok(true)
    }
}

fn stale(lease: &LeaseRef) -> StoreError {
    StoreError::StaleLease {
        task_id: lease.task_id.to_string(),
        fence: lease.fence,
    }
}

/// Leases per statement of a Heartbeat or a completion group: two bound values each, well
/// within both engines' limits on bound parameters.
const LEASES_PER_STATEMENT: usize = 256;

/// `(id IN ($first, $first+2, …) AND ((id = $first AND fence = $first+1) OR …))` for `n`
/// (id, fence) pairs. The pairs are spelled out rather than as a row-value `IN (VALUES …)`,
/// which SQLite answers with a scan of the whole table; the leading `id IN` gives both engines
/// a plain index lookup (PostgreSQL would otherwise need a bitmap scan for the ORs, which the
/// store turns off, see `Dialect::connection_setup`).
fn lease_match(first: usize, n: usize) -> String {
    let ids: Vec<String> = (0..n).map(|i| format!("${}", first + 2 * i)).collect();
    let pairs: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "(id = ${} AND fence = ${})",
                first + 2 * i,
                first + 2 * i + 1
            )
        })
        .collect();
    format!("(id IN ({}) AND ({}))", ids.join(", "), pairs.join(" OR "))
}

/// The DELETE of the tasks `n` leases still hold (`$1`..`$2n`: each lease's id, then fence),
/// returning the columns [`decode_removed`] reads. It checks the fence itself, so a lease taken
/// over concurrently (PostgreSQL) matches nothing.
fn removal(n: usize) -> String {
    format!(
        "DELETE FROM tasks WHERE lease_holder <> '' AND {} \
         RETURNING id, fence, queue, package, kind, attempts, cancelled, leased_at",
        lease_match(1, n)
    )
}

/// [`remove_leased`] and [`history::record_many`] of what it removed (outcome `cancelled` or
/// `done`) in one statement, a data-modifying CTE only PostgreSQL has: one round trip less of
/// the few every Complete costs. Also says whether a recorded row crossed a multiple of
/// [`history::TRIM_EVERY`] (the history is due for a trim).
async fn remove_and_record(
    conn: &mut AnyConnection,
    leases: &[LeaseRef],
    now_ms: i64,
) -> Result<(HashMap<(TaskId, i64), Removed>, bool), StoreError> {
    let n = 2 * leases.len();
    let sql = format!(
        "WITH removed AS ({}), \
         recorded AS (INSERT INTO task_history \
             (id, queue, package, kind, outcome, attempts, error, finished_at) \
           SELECT id, queue, package, kind, CASE WHEN cancelled <> 0 THEN ${} ELSE ${} END, \
             attempts, '', ${} FROM removed RETURNING seq) \
         SELECT removed.*, (SELECT COUNT(*) FROM recorded WHERE seq % ${} = 0) AS crossed \
         FROM removed",
        removal(leases.len()),
        n + 1,
        n + 2,
        n + 3,
        n + 4,
    );
    // Only placeholders are generated; every value is bound.
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    for lease in leases {
        query = query.bind(&lease.task_id).bind(lease.fence);
    }
    let rows = query
        .bind(Outcome::Cancelled.as_str())
        .bind(Outcome::Done.as_str())
        .bind(now_ms)
        .bind(history::TRIM_EVERY)
        .fetch_all(&mut *conn)
        .await
        .map_err(query_failed("remove and record settled tasks"))?;
    let crossed = rows
        .first()
        .map(|row| row.try_get::<i64, _>("crossed"))
        .transpose()
        .map_err(query_failed("decode settled task"))?
        .is_some_and(|n| n > 0);
    Ok((decode_removed(&rows)?, crossed))
}

/// Deletes the tasks `leases` still hold ([`removal`]), keyed by (id, fence); a lease missing
/// from the answer was stale.
async fn remove_leased(
    conn: &mut AnyConnection,
    leases: &[LeaseRef],
) -> Result<HashMap<(TaskId, i64), Removed>, StoreError> {
    // Only placeholders are generated; every value is bound.
    let mut query = sqlx::query(sqlx::AssertSqlSafe(removal(leases.len())));
    for lease in leases {
        query = query.bind(&lease.task_id).bind(lease.fence);
    }
    let rows = query
        .fetch_all(&mut *conn)
        .await
        .map_err(query_failed("remove settled tasks"))?;
    decode_removed(&rows)
}

/// The rows [`remove_leased`] or [`remove_and_record`] removed, by (task id, fence).
fn decode_removed(
    rows: &[sqlx::any::AnyRow],
) -> Result<HashMap<(TaskId, i64), Removed>, StoreError> {
    let decode = |row: &sqlx::any::AnyRow| -> Result<((TaskId, i64), Removed), sqlx::Error> {
        Ok((
            (row.try_get("id")?, row.try_get("fence")?),
            Removed {
                queue: row.try_get("queue")?,
                package: row.try_get("package")?,
                kind: row.try_get("kind")?,
                attempts: row.try_get("attempts")?,
                cancelled: row.try_get::<i64, _>("cancelled")? != 0,
                leased_at: row.try_get("leased_at")?,
            },
        ))
    };
    rows.iter()
        .map(decode)
        .collect::<Result<_, _>>()
        .map_err(query_failed("decode settled task"))
}
