//! Enqueue and Supersede.

use super::history::{self, contains};
use super::{Store, StoreError, query_failed};
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
        let mut tx = self.begin("enqueue").await?;
        if let Some(lock) = self.dialect().queue_lock() {
            // Sorted, so concurrent Enqueues take shared queues' locks in one order (no deadlock).
            let queues: std::collections::BTreeSet<&str> =
                tasks.iter().map(|t| t.queue.as_str()).collect();
            for queue in queues {
                sqlx::query(lock)
                    .bind(queue)
                    .execute(&mut *tx)
                    .await
                    .map_err(query_failed("lock queue"))?;
            }
        }
        let mut accepted = 0;
        for task in tasks {
            if contains(&mut tx, &task.id).await? {
                continue;
            }
            let result = sqlx::query(
                "INSERT INTO tasks (id, queue, package, generation, kind, payload, traceparent, allow_failure, enqueued_at, not_before) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9) ON CONFLICT (id) DO NOTHING",
            )
            .bind(&task.id)
            .bind(&task.queue)
            .bind(&task.package)
            .bind(task.generation)
            .bind(&task.kind)
            .bind(&task.payload_json)
            .bind(&task.traceparent)
            .bind(i64::from(task.allow_failure))
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .map_err(query_failed("insert task"))?;
            accepted += result.rows_affected();
        }
        if accepted > 0 {
            self.signal_change(&mut tx).await?;
        }
        tx.commit().await.map_err(query_failed("commit enqueue"))?;
        Ok(accepted)
    }

    /// Removes the queued tasks of `package` older than `generation` (in every queue of the
    /// package) and marks its running ones cancelled. Set-based statements keep it quick however
    /// many tasks are affected.
    pub async fn supersede(
        &self,
        package: &str,
        generation: i64,
        now_ms: i64,
    ) -> Result<Superseded, StoreError> {
        let mut tx = self.begin("supersede").await?;
        sqlx::query(concat!(
            "INSERT INTO task_history (id, queue, package, kind, outcome, attempts, error, finished_at) \
             SELECT id, queue, package, kind, 'superseded', attempts, last_error, $3 FROM tasks \
             WHERE package = $1 AND generation < $2 AND NOT ",
            live_lease!("$3")
        ))
        .bind(package)
        .bind(generation)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(query_failed("record superseded tasks"))?;
        let dropped = sqlx::query(concat!(
            "DELETE FROM tasks WHERE package = $1 AND generation < $2 AND NOT ",
            live_lease!("$3")
        ))
        .bind(package)
        .bind(generation)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(query_failed("delete superseded tasks"))?
        .rows_affected();
        let cancelled = sqlx::query(concat!(
            "UPDATE tasks SET cancelled = 1 WHERE package = $1 AND generation < $2 AND cancelled = 0 AND ",
            live_lease!("$3")
        ))
        .bind(package)
        .bind(generation)
        .bind(now_ms)
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
        Ok(Superseded { dropped, cancelled })
    }
}
