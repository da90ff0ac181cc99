//! The outbox as the relay reads it: claims of the oldest rows, settled once delivered.

use sqlx::Row as _;
use sqlx::any::AnyRow;

use super::{Store, StoreError};
use berth_sql::Dialect;

/// Outbox rows one relay holds until it settles them (see [`Store::outbox_claim`]).
pub struct OutboxClaim {
    /// The rows, oldest first, as stored (id, body).
    pub rows: Vec<(i64, String)>,
    /// PostgreSQL: the transaction holding the rows' locks until [`Store::outbox_settle`].
    tx: Option<sqlx::Transaction<'static, sqlx::Any>>,
}

impl Store {
    /// Takes the oldest undelivered outbox rows (at most `limit`) for delivery, oldest first;
    /// [`Store::outbox_settle`] deletes the delivered ones. Dropping the claim unsettled keeps
    /// them all for the next claim.
    ///
    /// On PostgreSQL the rows stay locked (`FOR UPDATE SKIP LOCKED`) in a transaction until
    /// they are settled, so another lifecycle relaying from the same database skips them
    /// instead of delivering them twice; and it gets nothing at all while the oldest row is
    /// taken (its claim would be no prefix of the outbox), so work is delivered in commit order
    /// by one relay at a time. SQLite serves one lifecycle, whose relay is its only reader.
    pub async fn outbox_claim(&self, limit: i64) -> Result<OutboxClaim, StoreError> {
        let select_sqlite = "SELECT id, body FROM outbox ORDER BY id LIMIT $1";
        let decode = |rows: Vec<AnyRow>| -> Vec<(i64, String)> {
            rows.iter().map(|r| (r.get("id"), r.get("body"))).collect()
        };
        match self.dialect {
            Dialect::Sqlite => {
                let rows = sqlx::query(select_sqlite)
                    .bind(limit)
                    .fetch_all(&self.pool)
                    .await?;
                Ok(OutboxClaim {
                    rows: decode(rows),
                    tx: None,
                })
            }
            Dialect::Postgres => {
                let mut tx = self.pool.begin().await?;
                let rows = decode(
                    sqlx::query(
                        "SELECT id, body FROM outbox ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED",
                    )
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await?,
                );
                let Some((first, _)) = rows.first() else {
                    return Ok(OutboxClaim { rows, tx: None });
                };
                let oldest: i64 = sqlx::query("SELECT min(id) AS oldest FROM outbox")
                    .fetch_one(&mut *tx)
                    .await?
                    .get("oldest");
                if oldest != *first {
                    // Another relay holds older rows: delivering these now would overtake them.
                    return Ok(OutboxClaim {
                        rows: Vec::new(),
                        tx: None,
                    });
                }
                Ok(OutboxClaim { rows, tx: Some(tx) })
            }
        }
    }

    /// Deletes the `delivered` rows of `claim` (by id: a row committed later with a smaller id
    /// is not one of them) and releases the rest.
    pub async fn outbox_settle(
        &self,
        claim: OutboxClaim,
        delivered: &[i64],
    ) -> Result<(), StoreError> {
        let OutboxClaim { tx, .. } = claim;
        let mut conn = match tx {
            Some(tx) => Settle::Locked(tx),
            None => Settle::Pool(self.pool.acquire().await?),
        };
        for chunk in delivered.chunks(OUTBOX_DELETE_CHUNK) {
            let placeholders: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            // Only placeholders are generated; every id is bound.
            let sql = format!(
                "DELETE FROM outbox WHERE id IN ({})",
                placeholders.join(", ")
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for id in chunk {
                query = query.bind(*id);
            }
            match &mut conn {
                Settle::Locked(tx) => query.execute(&mut **tx).await?,
                Settle::Pool(c) => query.execute(&mut **c).await?,
            };
        }
        if let Settle::Locked(tx) = conn {
            tx.commit().await?;
        }
        Ok(())
    }

    /// Writes an outbox row body as is, for tests of rows this lifecycle would not write.
    #[cfg(test)]
    pub(crate) async fn outbox_insert_raw(&self, body: &str) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO outbox (body) VALUES ($1)")
            .bind(body)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// Where [`Store::outbox_settle`] deletes.
enum Settle {
    Locked(sqlx::Transaction<'static, sqlx::Any>),
    Pool(sqlx::pool::PoolConnection<sqlx::Any>),
}

/// Ids per DELETE of [`Store::outbox_settle`]: a relay batch fits in one.
const OUTBOX_DELETE_CHUNK: usize = 256;
