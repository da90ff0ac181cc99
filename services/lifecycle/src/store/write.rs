//! The store as a repository over one write transaction: [`Store::begin_write`] takes the
//! writers' lock and brings the engine's index up to date, then the unit of work loads rows
//! for write, saves what the engine decided and appends the outbox, and [`WriteTx::commit`]s.

use berth_lifecycle_core::{Engine, Generation, Package, PackageKey, Write};
use berth_sql::Dialect;
use sqlx::Row as _;

use super::{Store, StoreError, rows};
use crate::outbox;

/// The advisory lock (PostgreSQL) every lifecycle write transaction takes first: writes of
/// all replicas are serialised, as they are within one replica by its engine's mutex, so
/// each pass sees the whole graph, the change log's order is commit order, and row locks are
/// always taken under it (no deadlock between replicas). Its key, 0x6265_7274_686c_6331, spells
/// "berthlc1". It is taken in the BEGIN's round trip (two statements of one simple query):
/// round trips are most of what a write costs PostgreSQL.
pub(super) const BEGIN_LOCKED: &str = "BEGIN; SELECT pg_advisory_xact_lock(7090199032658420529)";
/// Change-log entries kept behind the newest; a replica further behind rebuilds its index.
const CHANGES_KEPT: i64 = 10_000;
/// The log is pruned whenever its newest entry crosses a multiple of this.
const PRUNE_EVERY: i64 = 1_000;
/// `lifecycle_meta` names.
pub(super) const META_KUBERNETES: &str = "kubernetes_version";
pub(super) const META_PRUNED: &str = "changes_pruned_upto";
/// Outbox rows per INSERT: one bound value each, within both engines' limits.
const OUTBOX_ROWS_PER_STATEMENT: usize = 256;

/// One write transaction. Dropped without [`WriteTx::commit`], it rolls back.
pub struct WriteTx {
    tx: sqlx::Transaction<'static, sqlx::Any>,
    dialect: Dialect,
}

impl Store {
    /// Starts a write transaction. On PostgreSQL, where other lifecycle replicas may write
    /// too, it first takes the writers' advisory lock ([`BEGIN_LOCKED`]) and brings `engine`'s
    /// index up to date with what the others committed ([`catch_up`]), so every decision is
    /// made on the whole, current graph.
    pub async fn begin_write(&self, engine: &mut Engine) -> Result<WriteTx, StoreError> {
        let tx = match self.dialect {
            Dialect::Sqlite => berth_sql::begin_write(&self.pool, self.dialect).await?,
            Dialect::Postgres => {
                let mut tx = self.pool.begin_with(BEGIN_LOCKED).await?;
                catch_up(&mut tx, engine).await?;
                tx
            }
        };
        Ok(WriteTx {
            tx,
            dialect: self.dialect,
        })
    }

    /// The engine, its index rebuilt from every stored package (at start, and after a write
    /// failed). On PostgreSQL it starts from the cluster version the replicas recorded, and
    /// knows how far the change log it reflects goes.
    pub async fn engine(&self, platform: semver::Version) -> Result<Engine, StoreError> {
        let mut conn = self.pool.acquire().await?;
        rebuild(&mut conn, self.dialect, platform).await
    }
}

impl WriteTx {
    /// The next generation of `key` (generations only grow, across Remove and re-create).
    /// Its upsert makes a concurrent Update of the same package (another lifecycle on the
    /// same PostgreSQL database) wait until this write commits.
    pub async fn next_generation(&mut self, key: &PackageKey) -> Result<Generation, StoreError> {
        let row = sqlx::query(
            "INSERT INTO generations (key, generation) VALUES ($1, 1)
             ON CONFLICT (key) DO UPDATE SET generation = generations.generation + 1
             RETURNING generation",
        )
        .bind(key.as_str())
        .fetch_one(&mut *self.tx)
        .await?;
        Ok(Generation::new(row.get("generation")))
    }

    /// The smallest principal number no stored package holds (≥ 1). Under the write's
    /// serialisation (SQLite's `BEGIN IMMEDIATE`, PostgreSQL's writers' lock), so two Updates
    /// creating keys at once never take one number; the unique index on the column would
    /// refuse the second anyway. Numbers are freed by deleting the row (Cleanup).
    pub async fn free_principal(&mut self) -> Result<u32, StoreError> {
        let row = sqlx::query(
            "SELECT CAST(COALESCE(
               (SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM packages WHERE principal = 1)),
               (SELECT MIN(p.principal) + 1 FROM packages AS p
                  WHERE NOT EXISTS (SELECT 1 FROM packages AS q WHERE q.principal = p.principal + 1))
             ) AS BIGINT) AS free",
        )
        .fetch_one(&mut *self.tx)
        .await?;
        let free: i64 = row.get("free");
        u32::try_from(free).map_err(|_| StoreError::Corrupt {
            key: String::new(),
            column: "principal",
            reason: format!("no principal number is free below 2^32 (next would be {free})"),
        })
    }

    /// `key`'s row, read for this write. On PostgreSQL the row stays locked until the
    /// transaction ends (SQLite's `BEGIN IMMEDIATE` serialises whole transactions).
    pub async fn load_for_write(
        &mut self,
        key: &PackageKey,
    ) -> Result<Option<Package>, StoreError> {
        let sql = self.dialect.pick(
            "SELECT * FROM packages WHERE key = $1",
            "SELECT * FROM packages WHERE key = $1 FOR UPDATE",
        );
        let row = sqlx::query(sql)
            .bind(key.as_str())
            .fetch_optional(&mut *self.tx)
            .await?;
        row.as_ref().map(rows::decode).transpose()
    }

    /// Writes what the engine decided, in order.
    pub async fn save(&mut self, writes: &[Write]) -> Result<(), StoreError> {
        for write in writes {
            match write {
                Write::Insert(row) => {
                    rows::bind(sqlx::query(rows::INSERT), row)
                        .bind(row.key.as_str().to_owned())
                        .bind(row.id.kind.as_str())
                        .bind(row.id.name.clone())
                        .bind(row.id.namespace.clone())
                        .bind(i64::from(row.principal))
                        .bind(row.owner.stored().map(str::to_owned))
                        .execute(&mut *self.tx)
                        .await?;
                }
                Write::Save(row) => {
                    rows::bind(sqlx::query(rows::SAVE), row)
                        .bind(row.key.as_str().to_owned())
                        .execute(&mut *self.tx)
                        .await?;
                }
                Write::Delete { key, generation } => {
                    let done = sqlx::query(
                        "DELETE FROM packages WHERE key = $1 AND generation = $2 AND removing = 1",
                    )
                    .bind(key.as_str())
                    .bind(generation.get())
                    .execute(&mut *self.tx)
                    .await?;
                    // The engine decided on its index, which the lock keeps current.
                    if done.rows_affected() != 1 {
                        return Err(StoreError::OutOfStep { key: key.clone() });
                    }
                }
                Write::ClusterVersion(version) => {
                    set_meta(&mut self.tx, META_KUBERNETES, &version.to_string()).await?;
                }
            }
        }
        Ok(())
    }

    /// Appends `rows` to the outbox in order, one statement per [`OUTBOX_ROWS_PER_STATEMENT`]
    /// (a write typically queues two or three tasks at once). The ordinal keeps their ids in
    /// the given order, which is the order the relay delivers them in.
    pub async fn insert_outbox(&mut self, rows: &[outbox::Row]) -> Result<(), StoreError> {
        for chunk in rows.chunks(OUTBOX_ROWS_PER_STATEMENT) {
            let values: Vec<String> = (1..=chunk.len()).map(|i| format!("({i}, ${i})")).collect();
            let sql = format!(
                "WITH v(ord, body) AS (VALUES {}) \
                 INSERT INTO outbox (body) SELECT body FROM v ORDER BY ord",
                values.join(", ")
            );
            // Only placeholders are generated; every value is bound.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for row in chunk {
                query = query.bind(row.encode());
            }
            query.execute(&mut *self.tx).await?;
        }
        Ok(())
    }

    /// Commits. On PostgreSQL the change-log entries the write made are in `engine` already
    /// (it decided them), so they are marked seen, and the log is pruned now and then.
    pub async fn commit(self, engine: &mut Engine) -> Result<(), StoreError> {
        let WriteTx { mut tx, dialect } = self;
        if dialect == Dialect::Sqlite {
            tx.commit().await?;
            return Ok(());
        }
        let last = last_change(&mut tx).await?;
        if last / PRUNE_EVERY != engine.changes_seen() / PRUNE_EVERY && last > CHANGES_KEPT {
            let upto = last - CHANGES_KEPT;
            sqlx::query("DELETE FROM package_changes WHERE seq <= $1")
                .bind(upto)
                .execute(&mut *tx)
                .await?;
            set_meta(&mut tx, META_PRUNED, &upto.to_string()).await?;
        }
        tx.commit().await?;
        engine.set_changes_seen(last);
        Ok(())
    }
}

async fn set_meta(
    conn: &mut sqlx::AnyConnection,
    name: &str,
    value: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO lifecycle_meta (name, value) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
    )
    .bind(name)
    .bind(value)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

async fn meta(conn: &mut sqlx::AnyConnection, name: &str) -> Result<Option<String>, StoreError> {
    Ok(
        sqlx::query("SELECT value FROM lifecycle_meta WHERE name = $1")
            .bind(name)
            .fetch_optional(&mut *conn)
            .await?
            .map(|r| r.get("value")),
    )
}

pub(super) async fn last_change(conn: &mut sqlx::AnyConnection) -> Result<i64, StoreError> {
    Ok(
        sqlx::query("SELECT COALESCE(MAX(seq), 0) AS last FROM package_changes")
            .fetch_one(&mut *conn)
            .await?
            .get("last"),
    )
}

/// The engine with its index from every stored package. On PostgreSQL: with the recorded
/// cluster version, and marked as reflecting the change log up to its newest entry (read
/// first: what commits after it is replayed by the next [`catch_up`]; replaying a change twice
/// is harmless).
async fn rebuild(
    conn: &mut sqlx::AnyConnection,
    dialect: Dialect,
    platform: semver::Version,
) -> Result<Engine, StoreError> {
    let mut engine = Engine::new(platform);
    if dialect == Dialect::Postgres {
        engine.set_changes_seen(last_change(conn).await?);
        if let Some(v) = meta(conn, META_KUBERNETES).await?
            && let Ok(v) = semver::Version::parse(&v)
        {
            engine.adopt_kubernetes(v);
        }
    }
    for row in super::all_rows(conn, dialect).await? {
        engine.refresh(&row.key, Some(&row));
    }
    Ok(engine)
}

/// Replays into `engine` what other replicas committed since it last looked (PostgreSQL, under
/// [`BEGIN_LOCKED`]): the packages named by the change-log entries after
/// [`Engine::changes_seen`] are read again, and the recorded cluster version adopted. An index
/// older than the pruned part of the log is rebuilt whole.
async fn catch_up(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    engine: &mut Engine,
) -> Result<(), StoreError> {
    // The change-log entries and both facts in one round trip: this runs before every write.
    // The facts come first, as `seq` -1 (the log's own start at 1).
    let rows = sqlx::query(
        "SELECT seq, key, '' AS value FROM package_changes WHERE seq > $1
         UNION ALL
         SELECT -1 AS seq, name AS key, value FROM lifecycle_meta WHERE name IN ($2, $3)
         ORDER BY seq",
    )
    .bind(engine.changes_seen())
    .bind(META_PRUNED)
    .bind(META_KUBERNETES)
    .fetch_all(&mut **tx)
    .await?;
    let mut facts = std::collections::HashMap::new();
    let mut entries = Vec::with_capacity(rows.len());
    for row in &rows {
        let (seq, key): (i64, String) = (row.get("seq"), row.get("key"));
        if seq < 0 {
            facts.insert(key, row.get::<String, _>("value"));
        } else {
            entries.push((seq, key));
        }
    }
    let pruned = facts
        .get(META_PRUNED)
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0);
    if engine.changes_seen() < pruned {
        tracing::info!(
            seen = engine.changes_seen(),
            pruned,
            "scheduler index too far behind the change log; rebuilding it"
        );
        let kubernetes = engine.scheduler().kubernetes().cloned();
        let platform = engine.scheduler().platform().clone();
        *engine = rebuild(tx, Dialect::Postgres, platform).await?;
        if engine.scheduler().kubernetes().is_none()
            && let Some(v) = kubernetes
        {
            engine.adopt_kubernetes(v);
        }
        return Ok(());
    }
    if let Some(v) = facts.get(META_KUBERNETES)
        && let Ok(v) = semver::Version::parse(v)
    {
        engine.adopt_kubernetes(v);
    }
    let Some(&(last, _)) = entries.last() else {
        return Ok(());
    };
    let keys: std::collections::BTreeSet<String> = entries.into_iter().map(|(_, k)| k).collect();
    for key in keys {
        let key = PackageKey::from_issued(key);
        let row = super::fetch(&mut **tx, &key).await?;
        engine.refresh(&key, row.as_ref());
    }
    engine.set_changes_seen(last);
    Ok(())
}
