//! Package state in SQL (SQLite or PostgreSQL, one code path): the reads every request makes,
//! and the repository a write runs on ([`WriteTx`]: rows loaded for write, the engine's
//! decisions saved, the outbox appended, in one transaction). It decides nothing: what a
//! write changes is the engine's (`berth_lifecycle_core`).
//!
//! - `write`: the write transaction, the writers' lock and the replicas' catch-up;
//! - `rows`: a package as a row;
//! - `outbox`: the relay's claims; `answers`: validation answers between replicas;
//! - `repositories`: the repositories PackageRepository resources define.

mod answers;
mod outbox;
mod repositories;
mod rows;
#[cfg(test)]
mod tests;
mod write;

use berth_lifecycle_core::{Package, PackageKey, Phase};
use berth_sql::Dialect;
use sqlx::{AnyPool, Row as _};

pub use answers::ANSWERS_CHANNEL;
pub use repositories::MAX_DEFINED;
pub use write::WriteTx;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("opening the lifecycle database {url}: {source}")]
    Open {
        url: String,
        source: berth_sql::ConnectError,
    },
    #[error("migrating the lifecycle database: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("lifecycle database: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("corrupt {column} of package {key}: {reason}")]
    Corrupt {
        key: String,
        column: &'static str,
        reason: String,
    },
    /// The engine's index and the store disagree about a package (the write is undone and
    /// the engine rebuilt).
    #[error("package {key}: the scheduler's index and the store disagree")]
    OutOfStep { key: PackageKey },
}

/// The NOTIFY channel of package changes (written by the `packages_changed` trigger).
pub const CHANGES_CHANNEL: &str = "berth_lifecycle_changes";

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Connections to a PostgreSQL database: the relay holds one while it delivers a batch, the
/// requests share the rest.
const POSTGRES_CONNECTIONS: u32 = 8;
/// SQLite serialises writers anyway; a few connections let reads overlap.
const SQLITE_CONNECTIONS: u32 = 4;

#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    dialect: Dialect,
    url: std::sync::Arc<str>,
}

impl Store {
    /// Opens (creating if needed) and migrates the database at `url`: `sqlite://PATH`,
    /// `sqlite::memory:` or `postgres://…` (see the README's "Databases").
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        let max = match Dialect::from_url(url) {
            Ok(Dialect::Postgres) => POSTGRES_CONNECTIONS,
            _ => SQLITE_CONNECTIONS,
        };
        let (pool, dialect) =
            berth_sql::connect(url, max)
                .await
                .map_err(|source| StoreError::Open {
                    url: berth_sql::redacted(url),
                    source,
                })?;
        let migrator = match dialect {
            Dialect::Sqlite => &SQLITE_MIGRATIONS,
            Dialect::Postgres => &POSTGRES_MIGRATIONS,
        };
        migrator.run(&pool).await?;
        Ok(Store {
            pool,
            dialect,
            url: url.into(),
        })
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The URL the store was opened with (LISTEN connections open their own).
    pub fn database_url(&self) -> &str {
        &self.url
    }

    pub async fn get(&self, key: &PackageKey) -> Result<Option<Package>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        fetch(&mut *conn, key).await
    }

    /// Up to `limit` packages with keys after `after` (all keys when empty), in key order.
    pub async fn list_after(&self, after: &str, limit: usize) -> Result<Vec<Package>, StoreError> {
        let sql = self.dialect.pick(
            "SELECT * FROM packages WHERE key > $1 ORDER BY key LIMIT $2",
            "SELECT * FROM packages WHERE key > $1 COLLATE \"C\" ORDER BY key COLLATE \"C\" LIMIT $2",
        );
        let rows = sqlx::query(sql)
            .bind(after)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(rows::decode).collect()
    }

    /// Every package, in key order (bytewise on both engines).
    pub async fn list(&self) -> Result<Vec<Package>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        all_rows(&mut conn, self.dialect).await
    }

    /// How many packages are in each phase (phases without packages are left out).
    pub async fn count_by_phase(&self) -> Result<Vec<(Phase, i64)>, StoreError> {
        let rows = sqlx::query("SELECT phase, COUNT(*) AS n FROM packages GROUP BY phase")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| {
                let phase: String = r.get("phase");
                let n: i64 = r.get("n");
                phase
                    .parse::<Phase>()
                    .map(|p| (p, n))
                    .map_err(|_| StoreError::Corrupt {
                        key: "(packages by phase)".into(),
                        column: "phase",
                        reason: format!("unknown phase {phase:?}"),
                    })
            })
            .collect()
    }

    /// `key`'s row and the `global` package's (see [`Store::global`]), read in one statement:
    /// what a worker's GetSpec needs, once per task.
    pub async fn get_with_global(
        &self,
        key: &PackageKey,
    ) -> Result<(Option<Package>, Option<Package>), StoreError> {
        let mut conn = self.pool.acquire().await?;
        // Two primary-key lookups: PostgreSQL plans `key IN ($1, $2)` anew at every call
        // (twice the time of one lookup, measured with pgbench), these once.
        let rows = sqlx::query(
            "SELECT * FROM packages WHERE key = $1 UNION ALL SELECT * FROM packages WHERE key = $2",
        )
        .bind(key.as_str())
        .bind(berth_lifecycle_core::id::GLOBAL)
        .fetch_all(&mut *conn)
        .await?;
        let (mut own, mut global) = (None, None);
        for row in rows.iter().map(rows::decode) {
            let row = row?;
            if row.is_global() {
                global = Some(row.clone());
            }
            if row.key == *key {
                own = Some(row);
            }
        }
        Ok((own, global))
    }

    /// The `global` package (whose values every nested package sees), if there is one.
    pub async fn global(&self) -> Result<Option<Package>, StoreError> {
        let row = self.get(&berth_lifecycle_core::id::global_key()).await?;
        Ok(row.filter(Package::is_global))
    }
}

async fn fetch<'c, E>(executor: E, key: &PackageKey) -> Result<Option<Package>, StoreError>
where
    E: sqlx::Executor<'c, Database = sqlx::Any>,
{
    let row = sqlx::query("SELECT * FROM packages WHERE key = $1")
        .bind(key.as_str())
        .fetch_optional(executor)
        .await?;
    row.as_ref().map(rows::decode).transpose()
}

/// Every package, in key order (bytewise on both engines).
async fn all_rows(
    conn: &mut sqlx::AnyConnection,
    dialect: Dialect,
) -> Result<Vec<Package>, StoreError> {
    let sql = dialect.pick(
        "SELECT * FROM packages ORDER BY key",
        "SELECT * FROM packages ORDER BY key COLLATE \"C\"",
    );
    let rows = sqlx::query(sql).fetch_all(&mut *conn).await?;
    rows.iter().map(rows::decode).collect()
}

/// Empties the change log of the database at `url` and records it as pruned up to its newest
/// entry, as if a replica had been away for long: that entry.
#[cfg(test)]
pub(crate) async fn prune_all_changes(url: &str) -> i64 {
    let store = Store::open(url).await.unwrap();
    let mut conn = store.pool.acquire().await.unwrap();
    let last = write::last_change(&mut conn).await.unwrap();
    sqlx::query("DELETE FROM package_changes")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO lifecycle_meta (name, value) VALUES ($1, $2)")
        .bind(write::META_PRUNED)
        .bind(last.to_string())
        .execute(&mut *conn)
        .await
        .unwrap();
    last
}
