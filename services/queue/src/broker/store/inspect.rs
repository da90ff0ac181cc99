//! Read-only views of the queues (Dump).

use sqlx::Row;

use super::{Store, StoreError, query_failed};
use crate::broker::model::QueueSummary;

impl Store {
    /// One summary per non-empty queue, by queue name. `now_ms` decides whether the head's
    /// lease is still live (an expired lease shows no holder).
    pub async fn dump(&self, now_ms: i64) -> Result<Vec<QueueSummary>, StoreError> {
        let rows = sqlx::query(
            "SELECT t.queue, c.n, t.kind, t.id, t.attempts, t.last_error, \
                    CASE WHEN t.lease_holder <> '' AND t.lease_until > $1 THEN t.lease_holder ELSE '' END AS holder \
             FROM tasks t \
             JOIN (SELECT queue, COUNT(*) AS n, MIN(seq) AS head FROM tasks GROUP BY queue) c ON t.seq = c.head \
             ORDER BY t.queue",
        )
        .bind(now_ms)
        .fetch_all(self.pool())
        .await
        .map_err(query_failed("dump queues"))?;
        rows.iter()
            .map(|row| {
                Ok(QueueSummary {
                    name: row.try_get("queue")?,
                    length: row.try_get("n")?,
                    head_kind: row.try_get("kind")?,
                    head_id: row.try_get("id")?,
                    head_attempts: row.try_get("attempts")?,
                    head_last_error: row.try_get("last_error")?,
                    lease_holder: row.try_get("holder")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(query_failed("decode dump"))
    }
}
