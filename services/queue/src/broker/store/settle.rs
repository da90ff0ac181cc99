//! Heartbeat, Complete and Fail: the calls a lease holder makes, all checked against the fence.

use std::time::Duration;

use sqlx::{AnyConnection, Row};

use super::history::{self, Finished};
use super::{Store, StoreError, query_failed};
use crate::broker::backoff::Backoff;
use crate::broker::model::{FailOutcome, Outcome, Settled};

/// A lease as its holder names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRef {
    pub task_id: String,
    pub fence: i64,
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
    pub async fn heartbeat(
        &self,
        worker: &str,
        leases: &[LeaseRef],
        ttl: Duration,
        now_ms: i64,
    ) -> Result<Vec<String>, StoreError> {
        let lease_until = now_ms.saturating_add(ttl.as_millis() as i64);
        let mut tx = self.begin("heartbeat").await?;
        let mut stop = Vec::new();
        for lease in leases {
            // A matching fence proves nobody leased the task since, so even a lapsed lease may
            // be revived; once another worker leased it, the fence differs.
            let extended = sqlx::query(
                "UPDATE tasks SET lease_until = $1 \
                 WHERE id = $2 AND fence = $3 AND lease_holder = $4 AND cancelled = 0",
            )
            .bind(lease_until)
            .bind(&lease.task_id)
            .bind(lease.fence)
            .bind(worker)
            .execute(&mut *tx)
            .await
            .map_err(query_failed("extend lease"))?;
            if extended.rows_affected() == 0 {
                stop.push(lease.task_id.clone());
            }
        }
        tx.commit()
            .await
            .map_err(query_failed("commit heartbeat"))?;
        Ok(stop)
    }

    /// Settles a lease successfully: the task is removed and the next one in its queue becomes
    /// ready.
    pub async fn complete(&self, lease: &LeaseRef, now_ms: i64) -> Result<Settled, StoreError> {
        let mut tx = self.begin("complete").await?;
        let removed = remove_leased(&mut tx, lease).await?;
        let outcome = if removed.cancelled {
            Outcome::Cancelled
        } else {
            Outcome::Done
        };
        let finished = Finished {
            id: &lease.task_id,
            queue: &removed.queue,
            package: &removed.package,
            kind: &removed.kind,
            outcome,
            attempts: removed.attempts,
            error: "",
        };
        history::record(&mut tx, finished, now_ms).await?;
        self.signal_change(&mut tx).await?;
        tx.commit().await.map_err(query_failed("commit complete"))?;
        Ok(removed.settled(now_ms))
    }

    /// Settles several leases successfully in one transaction: one commit (and on SQLite one
    /// write lock) for the whole group instead of one each, which is what bounds throughput.
    ///
    /// Each lease gets its own answer: a stale one fails alone (nothing was written for it)
    /// while the others commit. An error of the database itself fails the whole group and
    /// changes nothing, so every caller may retry.
    pub async fn complete_many(
        &self,
        leases: &[LeaseRef],
        now_ms: i64,
    ) -> Result<Vec<Result<Settled, StoreError>>, StoreError> {
        let mut tx = self.begin("complete").await?;
        let mut answers = Vec::with_capacity(leases.len());
        for lease in leases {
            let removed = match remove_leased(&mut tx, lease).await {
                Ok(removed) => removed,
                Err(err @ StoreError::StaleLease { .. }) => {
                    answers.push(Err(err));
                    continue;
                }
                Err(err) => return Err(err),
            };
            let outcome = if removed.cancelled {
                Outcome::Cancelled
            } else {
                Outcome::Done
            };
            let finished = Finished {
                id: &lease.task_id,
                queue: &removed.queue,
                package: &removed.package,
                kind: &removed.kind,
                outcome,
                attempts: removed.attempts,
                error: "",
            };
            history::record(&mut tx, finished, now_ms).await?;
            answers.push(Ok(removed.settled(now_ms)));
        }
        if answers.iter().any(Result::is_ok) {
            self.signal_change(&mut tx).await?;
        }
        tx.commit().await.map_err(query_failed("commit complete"))?;
        Ok(answers)
    }

    /// Settles a lease with an error. A task that allows failure, failed permanently
    /// (`retry == false`) or was cancelled is removed; any other stays at the head of its queue
    /// and is retried after a backoff delay.
    pub async fn fail(
        &self,
        lease: &LeaseRef,
        error: &str,
        retry: bool,
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
        let keep = retry && decode("allow_failure")? == 0 && decode("cancelled")? == 0;
        let kind: String = row
            .try_get("kind")
            .map_err(query_failed("decode failed task"))?;
        let settled = Settled {
            kind,
            ran_ms: now_ms.saturating_sub(decode("leased_at")?).max(0),
            cancelled: decode("cancelled")? != 0,
        };
        let outcome = if keep {
            let delay = backoff.delay(attempts);
            let delay_ms = delay.as_millis() as i64;
            sqlx::query(
                "UPDATE tasks SET attempts = $1, last_error = $2, not_before = $3, lease_holder = '', lease_until = 0 \
                 WHERE id = $4 AND fence = $5",
            )
            .bind(attempts)
            .bind(error)
            .bind(now_ms.saturating_add(delay_ms))
            .bind(&lease.task_id)
            .bind(lease.fence)
            .execute(&mut *tx)
            .await
            .map_err(query_failed("schedule retry"))?;
            FailOutcome::RetryIn(delay_ms)
        } else {
            let removed = remove_leased(&mut tx, lease).await?;
            let outcome = if removed.cancelled {
                Outcome::Cancelled
            } else {
                Outcome::Dropped
            };
            let finished = Finished {
                id: &lease.task_id,
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
        Ok((outcome, settled))
    }
}

fn stale(lease: &LeaseRef) -> StoreError {
    StoreError::StaleLease {
        task_id: lease.task_id.clone(),
        fence: lease.fence,
    }
}

/// Deletes the task if `lease` still holds it. The DELETE itself checks the fence, so a lease
/// taken over concurrently (PostgreSQL) makes it match nothing.
async fn remove_leased(conn: &mut AnyConnection, lease: &LeaseRef) -> Result<Removed, StoreError> {
    let row = sqlx::query(
        "DELETE FROM tasks WHERE id = $1 AND fence = $2 AND lease_holder <> '' \
         RETURNING queue, package, kind, attempts, cancelled, leased_at",
    )
    .bind(&lease.task_id)
    .bind(lease.fence)
    .fetch_optional(&mut *conn)
    .await
    .map_err(query_failed("remove settled task"))?
    .ok_or_else(|| stale(lease))?;
    let decode = || -> Result<Removed, sqlx::Error> {
        Ok(Removed {
            queue: row.try_get("queue")?,
            package: row.try_get("package")?,
            kind: row.try_get("kind")?,
            attempts: row.try_get("attempts")?,
            cancelled: row.try_get::<i64, _>("cancelled")? != 0,
            leased_at: row.try_get("leased_at")?,
        })
    };
    decode().map_err(query_failed("decode settled task"))
}
