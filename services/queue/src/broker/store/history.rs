//! The bounded `task_history` table: what finished, how, and with which error.

use sqlx::{AnyConnection, Row};

use super::{HISTORY_LIMIT, Store, StoreError, query_failed};
use crate::broker::model::{HistoryEntry, Outcome};

/// One row to record; `error` is the last error (empty when none).
pub(crate) struct Finished<'a> {
    pub id: &'a str,
    pub queue: &'a str,
    pub package: &'a str,
    pub kind: &'a str,
    pub outcome: Outcome,
    pub attempts: i64,
    pub error: &'a str,
}

/// Trim the history on every this-many-th record: trimming on each insert would double the
/// statements of every Complete, and the table may exceed the limit by this much at most.
pub(crate) const TRIM_EVERY: i64 = 128;

/// Records a finished task (and now and then trims the table).
pub(crate) async fn record(
    conn: &mut AnyConnection,
    row: Finished<'_>,
    now_ms: i64,
) -> Result<(), StoreError> {
    record_many(conn, std::slice::from_ref(&row), now_ms).await
}

/// Records several finished tasks with one statement (and trims the table when the new rows
/// crossed a multiple of [`TRIM_EVERY`]).
pub(crate) async fn record_many(
    conn: &mut AnyConnection,
    rows: &[Finished<'_>],
    now_ms: i64,
) -> Result<(), StoreError> {
    // Eight values per row: within both engines' limits on bound parameters.
    const ROWS_PER_STATEMENT: usize = 512;
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let values: Vec<String> = (0..chunk.len())
            .map(|i| {
                let p = 8 * i;
                format!(
                    "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
                    p + 1,
                    p + 2,
                    p + 3,
                    p + 4,
                    p + 5,
                    p + 6,
                    p + 7,
                    p + 8
                )
            })
            .collect();
        let sql = format!(
            "INSERT INTO task_history (id, queue, package, kind, outcome, attempts, error, finished_at) \
             VALUES {} RETURNING seq",
            values.join(", ")
        );
        // Only placeholders are generated; every value is bound.
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for row in chunk {
            query = query
                .bind(row.id)
                .bind(row.queue)
                .bind(row.package)
                .bind(row.kind)
                .bind(row.outcome.as_str())
                .bind(row.attempts)
                .bind(row.error)
                .bind(now_ms);
        }
        let inserted = query
            .fetch_all(&mut *conn)
            .await
            .map_err(query_failed("record history"))?;
        let crossed = inserted.iter().any(|row| {
            row.try_get::<i64, _>("seq")
                .is_ok_and(|seq| seq % TRIM_EVERY == 0)
        });
        if crossed {
            trim(conn).await?;
        }
    }
    Ok(())
}

/// Drops the oldest rows beyond [`HISTORY_LIMIT`]. Cheap: `seq` is the primary key.
pub(crate) async fn trim(conn: &mut AnyConnection) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM task_history WHERE seq <= (SELECT MAX(seq) FROM task_history) - $1")
        .bind(HISTORY_LIMIT)
        .execute(&mut *conn)
        .await
        .map_err(query_failed("trim history"))?;
    Ok(())
}

impl Store {
    /// The most recent finished tasks, newest first.
    pub async fn history(&self, limit: i64) -> Result<Vec<HistoryEntry>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, queue, package, kind, outcome, attempts, error, finished_at \
             FROM task_history ORDER BY seq DESC LIMIT $1",
        )
        .bind(limit)
        .fetch_all(self.pool())
        .await
        .map_err(query_failed("read history"))?;
        rows.iter()
            .map(|row| {
                Ok(HistoryEntry {
                    id: row.try_get("id")?,
                    queue: row.try_get("queue")?,
                    package: row.try_get("package")?,
                    kind: row.try_get("kind")?,
                    outcome: row.try_get("outcome")?,
                    attempts: row.try_get("attempts")?,
                    error: row.try_get("error")?,
                    finished_at_ms: row.try_get("finished_at")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(query_failed("decode history"))
    }
}
