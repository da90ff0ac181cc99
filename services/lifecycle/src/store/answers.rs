//! Validation answers left for the replica that waits for them (PostgreSQL).

use sqlx::Row as _;

use super::{Store, StoreError};
use berth_sql::Dialect;

/// The NOTIFY channel of stored validation answers; the payload is the request id.
pub const ANSWERS_CHANNEL: &str = "berth_lifecycle_answers";
/// How long a stored validation answer is kept for its replica.
const ANSWER_TTL_MS: i64 = 10 * 60 * 1000;
/// Most validation answers stored at once.
const MAX_STORED_ANSWERS: i64 = 10_000;

impl Store {
    /// Keeps a worker's validation answer for the replica that waits for it (PostgreSQL) and
    /// tells the replicas (NOTIFY on [`ANSWERS_CHANNEL`] with the request id). Answers older
    /// than [`ANSWER_TTL_MS`] go first; with [`MAX_STORED_ANSWERS`] kept, the answer is refused
    /// (`false`), as late answers are.
    pub async fn put_validation_answer(
        &self,
        request_id: &str,
        package: &str,
        answer: &str,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("DELETE FROM validation_answers WHERE created_ms < $1")
            .bind(now_ms - ANSWER_TTL_MS)
            .execute(&mut *tx)
            .await?;
        let kept: i64 = sqlx::query("SELECT COUNT(*) AS n FROM validation_answers")
            .fetch_one(&mut *tx)
            .await?
            .get("n");
        if kept >= MAX_STORED_ANSWERS {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO validation_answers (request_id, package, answer, created_ms)
             VALUES ($1, $2, $3, $4) ON CONFLICT (request_id) DO NOTHING",
        )
        .bind(request_id)
        .bind(package)
        .bind(answer)
        .bind(now_ms)
        .execute(&mut *tx)
        .await?;
        if self.dialect == Dialect::Postgres {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(ANSWERS_CHANNEL)
                .bind(request_id)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Takes (reads and deletes) the stored answer to `request_id`.
    pub async fn take_validation_answer(
        &self,
        request_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let row =
            sqlx::query("DELETE FROM validation_answers WHERE request_id = $1 RETURNING answer")
                .bind(request_id)
                .fetch_optional(&self.pool)
                .await?;
        Ok(row.map(|r| r.get("answer")))
    }
}
