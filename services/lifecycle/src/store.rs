//! Package state in SQL. Every write that implies broker work (supersede, enqueue) writes the
//! matching outbox rows in the same transaction, so state and queued work never disagree.

use berth_sql::Dialect;
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{AnyPool, Row};

use crate::model::{Condition, ConditionType, Generation, Kind, PackageId, PackageKey, Phase};
use crate::scheduler::{self, Blocked, LoadedSpec, Node, Reason, Scheduler};
use crate::{flows, outbox};

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
}

/// One package as stored.
#[derive(Clone, Debug)]
pub struct PackageRow {
    pub id: PackageId,
    pub key: PackageKey,
    pub repository: String,
    pub package: String,
    pub version: String,
    pub generation: Generation,
    pub observed_generation: Generation,
    pub settings: Value,
    /// The settings version `settings` are written for; 0: the version of the package version
    /// they were given for, until it loads (see `conversion`).
    pub settings_version: u32,
    pub phase: Phase,
    pub conditions: Vec<Condition>,
    pub values: Value,
    pub values_patch: Vec<Value>,
    /// `None` until loaded; `Some(None)` when loaded without a settings schema.
    pub settings_schema: Option<Option<Value>>,
    pub schema_version: Option<String>,
    /// The loaded package's settings conversions; `None` until loaded (as the schema).
    pub conversions: Option<berth_package::Conversions>,
    pub hooks: Vec<HookState>,
    pub last_error: String,
    pub removing: bool,
    /// The scheduler enabled this load of the package (the tasks after Load were enqueued).
    pub enabled: bool,
    /// What the scheduler needs of the loaded package; `None` until this version is loaded.
    pub loaded: Option<LoadedSpec>,
    /// The loaded package's hook config answers (JSON, see `convert::hook_configs`); `None`
    /// until loaded, or when not kept.
    pub hook_configs: Option<String>,
    /// The global package only: its Run (beforeAll) succeeded and its AfterAll task is not
    /// enqueued yet (see [`after_all`]).
    pub after_all_due: bool,
    /// The key's principal number (≥ 1): allocated when the row is first created, kept until
    /// Cleanup deletes it (see [`free_principal`]).
    pub principal: u32,
}

impl PackageRow {
    /// Whether this is the `global` package (a module of that name; its package is of type
    /// Global, which the worker checks at Load).
    pub fn is_global(&self) -> bool {
        self.id.kind == crate::model::Kind::Module && self.id.name == GLOBAL
    }

    /// The package as the scheduler sees it.
    pub fn node(&self) -> Node {
        Node {
            id: self.id.clone(),
            generation: self.generation,
            phase: self.phase,
            removing: self.removing,
            enabled: self.enabled,
            loaded: self.loaded.clone(),
            blocked: self.blocked(),
        }
    }

    /// Why the scheduler last said this generation waits (its `RequirementsMet=False`).
    pub fn blocked(&self) -> Option<Blocked> {
        let c = self
            .conditions
            .iter()
            .find(|c| c.type_ == ConditionType::RequirementsMet.as_str())?;
        if c.status != "False" || c.observed_generation != self.generation.get() {
            return None;
        }
        Some(Blocked {
            reason: Reason::parse(&c.reason)?,
            message: c.message.clone(),
        })
    }
}

/// What an Update's plan decided, written with the new spec.
pub struct Planned {
    pub phase: Phase,
    /// The settings and their version to store, when they differ from the spec's (converted
    /// to the loaded package's settings version, or the version resolved).
    pub settings: Option<(Value, u32)>,
    pub outbox: Vec<outbox::Row>,
    /// The package starts over (a new version is downloaded and loaded): the scheduler forgets
    /// what the last load told it, and enables the new one when its requirements hold.
    pub restart: bool,
}

/// A hook as Dump shows it.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookState {
    pub name: String,
    pub bindings: Vec<String>,
    #[serde(default)]
    pub runs: i64,
    #[serde(default, alias = "last_run")]
    pub last_run: Option<String>,
    #[serde(default, alias = "last_error")]
    pub last_error: String,
}

/// The desired spec an Update asks for.
pub struct DesiredSpec {
    pub id: PackageId,
    pub repository: String,
    pub package: String,
    pub version: String,
    pub settings: Value,
    pub settings_version: u32,
}

#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    dialect: Dialect,
    url: std::sync::Arc<str>,
}

/// Outbox rows one relay holds until it settles them (see [`Store::outbox_claim`]).
pub struct OutboxClaim {
    /// The rows, oldest first, as stored (id, body).
    pub rows: Vec<(i64, String)>,
    /// PostgreSQL: the transaction holding the rows' locks until [`Store::outbox_settle`].
    tx: Option<sqlx::Transaction<'static, sqlx::Any>>,
}

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Connections to a PostgreSQL database: the relay holds one while it delivers a batch, the
/// requests share the rest.
const POSTGRES_CONNECTIONS: u32 = 8;
/// SQLite serialises writers anyway; a few connections let reads overlap.
const SQLITE_CONNECTIONS: u32 = 4;

/// What an Update did, so the caller can plan the tasks.
pub struct UpdateOutcome {
    pub key: PackageKey,
    pub generation: Generation,
    /// None for a new package; otherwise the previous row.
    pub previous: Option<PackageRow>,
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

    /// Starts a write transaction. On PostgreSQL, where other lifecycle replicas may write
    /// too, it first takes the writers' advisory lock ([`BEGIN_LOCKED`]) and brings `sched` up to
    /// date with what the others committed ([`catch_up`]), so every scheduling pass decides on
    /// the whole, current graph. End it with [`Store::commit`].
    async fn begin(
        &self,
        sched: &mut Scheduler,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        if self.dialect == Dialect::Sqlite {
            return Ok(berth_sql::begin_write(&self.pool, self.dialect).await?);
        }
        let mut tx = self.pool.begin_with(BEGIN_LOCKED).await?;
        catch_up(&mut tx, sched).await?;
        Ok(tx)
    }

    /// Commits a transaction of [`Store::begin`]. On PostgreSQL the change-log entries it
    /// wrote are already in `sched` (the write applied them), so they are marked seen, and the
    /// log is pruned now and then.
    async fn commit(
        &self,
        mut tx: sqlx::Transaction<'static, sqlx::Any>,
        sched: &mut Scheduler,
    ) -> Result<(), StoreError> {
        if self.dialect == Dialect::Sqlite {
            tx.commit().await?;
            return Ok(());
        }
        let last = last_change(&mut tx).await?;
        if last / PRUNE_EVERY != sched.changes_seen() / PRUNE_EVERY && last > CHANGES_KEPT {
            let upto = last - CHANGES_KEPT;
            sqlx::query("DELETE FROM package_changes WHERE seq <= $1")
                .bind(upto)
                .execute(&mut *tx)
                .await?;
            set_meta(&mut tx, META_PRUNED, &upto.to_string()).await?;
        }
        tx.commit().await?;
        sched.set_changes_seen(last);
        Ok(())
    }

    /// Records a new desired spec under a new generation, with the outbox rows produced by `plan`
    /// from the previous state, in one transaction.
    ///
    /// `plan` sees the current row inside the write transaction, so a check it makes (settings
    /// against the loaded schema) holds for the row it replaces; when it refuses, nothing is
    /// written and its error is returned as the inner `Err`.
    pub async fn update<E>(
        &self,
        spec: DesiredSpec,
        sched: &mut Scheduler,
        now: &str,
        plan: impl FnOnce(Option<&PackageRow>, &PackageKey, Generation) -> Result<Planned, E>,
    ) -> Result<Result<UpdateOutcome, E>, StoreError> {
        let key = spec.id.key();
        let mut tx = self.begin(sched).await?;
        // The generation first: its upsert makes a concurrent Update of the same package (another
        // lifecycle on the same PostgreSQL database) wait until this one commits, so the row
        // read next is the one this Update replaces.
        let generation = next_generation(&mut tx, &key).await?;
        let previous = fetch_for_write(&mut tx, self.dialect, &key).await?;
        // A key keeps its principal for as long as its row exists; a new row takes a free one.
        let principal = match &previous {
            Some(row) => row.principal,
            None => free_principal(&mut tx).await?,
        };
        let Planned {
            phase,
            settings,
            outbox,
            restart,
        } = match plan(previous.as_ref(), &key, generation) {
            Ok(planned) => planned,
            // Dropping the transaction rolls it back, generation counter included.
            Err(refused) => return Ok(Err(refused)),
        };
        let (settings, settings_version) = match settings {
            Some((settings, version)) => (settings.to_string(), version),
            None => (spec.settings.to_string(), spec.settings_version),
        };
        let written = sqlx::query(
            "INSERT INTO packages (key, kind, name, namespace, repository, package, version, generation, settings, phase, settings_version, principal)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
             ON CONFLICT (key) DO UPDATE SET repository = excluded.repository, package = excluded.package,
               version = excluded.version, generation = excluded.generation, settings = excluded.settings,
               phase = excluded.phase, removing = 0, last_error = '', settings_version = excluded.settings_version
             RETURNING *",
        )
        .bind(key.as_str())
        .bind(spec.id.kind.as_str())
        .bind(&spec.id.name)
        .bind(&spec.id.namespace)
        .bind(&spec.repository)
        .bind(&spec.package)
        .bind(&spec.version)
        .bind(generation.get())
        .bind(&settings)
        .bind(phase.as_str())
        .bind(i64::from(settings_version))
        .bind(i64::from(principal))
        .fetch_one(&mut *tx)
        .await?;
        // The row as written (locked by the write itself), for the restart and the scheduler's
        // index without reading it again.
        let mut row = decode(&written)?;
        if restart {
            flows::unload(&mut row, now);
            write_row(&mut tx, &row).await?;
        }
        insert_outbox(&mut tx, &outbox).await?;
        sched.upsert(key.clone(), row.node());
        apply_pass(&mut tx, self.dialect, sched, now).await?;
        // A package starting over is no longer known to wait for the global package.
        after_all(&mut tx, self.dialect, sched).await?;
        self.commit(tx, sched).await?;
        Ok(Ok(UpdateOutcome {
            key,
            generation,
            previous,
        }))
    }

    /// Marks a package as being removed under a new generation, with its outbox rows. `None` when
    /// there is no such package.
    ///
    /// `plan` may refuse (the package has dependents): then nothing is written and its error
    /// is returned as the inner `Err`.
    pub async fn remove<E>(
        &self,
        key: &PackageKey,
        sched: &mut Scheduler,
        now: &str,
        plan: impl FnOnce(&PackageRow, Generation, &Scheduler) -> Result<Vec<outbox::Row>, E>,
    ) -> Result<Result<Option<Generation>, E>, StoreError> {
        let mut tx = self.begin(sched).await?;
        let Some(row) = fetch_for_write(&mut tx, self.dialect, key).await? else {
            return Ok(Ok(None));
        };
        let generation = next_generation(&mut tx, key).await?;
        let outbox = match plan(&row, generation, sched) {
            Ok(outbox) => outbox,
            Err(refused) => return Ok(Err(refused)),
        };
        sqlx::query("UPDATE packages SET generation = $1, phase = $2, removing = 1, last_error = '' WHERE key = $3")
            .bind(generation.get())
            .bind(Phase::Removing.as_str())
            .bind(key.as_str())
            .execute(&mut *tx)
            .await?;
        insert_outbox(&mut tx, &outbox).await?;
        rescheduled(&mut tx, self.dialect, key, sched, now).await?;
        // A package being removed is not waited for.
        after_all(&mut tx, self.dialect, sched).await?;
        self.commit(tx, sched).await?;
        Ok(Ok(Some(generation)))
    }

    pub async fn get(&self, key: &PackageKey) -> Result<Option<PackageRow>, StoreError> {
        let mut conn = self.pool.acquire().await?;
        fetch(&mut *conn, key).await
    }

    /// Up to `limit` packages with keys after `after` (all keys when empty), in key order.
    pub async fn list_after(
        &self,
        after: &str,
        limit: usize,
    ) -> Result<Vec<PackageRow>, StoreError> {
        let sql = self.dialect.pick(
            "SELECT * FROM packages WHERE key > $1 ORDER BY key LIMIT $2",
            "SELECT * FROM packages WHERE key > $1 COLLATE \"C\" ORDER BY key COLLATE \"C\" LIMIT $2",
        );
        let rows = sqlx::query(sql)
            .bind(after)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(decode).collect()
    }

    /// Every package, in key order (bytewise on both engines).
    pub async fn list(&self) -> Result<Vec<PackageRow>, StoreError> {
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
                Phase::parse(&phase)
                    .map(|p| (p, n))
                    .ok_or_else(|| StoreError::Corrupt {
                        key: "(packages by phase)".into(),
                        column: "phase",
                        reason: format!("unknown phase {phase:?}"),
                    })
            })
            .collect()
    }

    /// Applies `change` to the stored row if its generation is still `generation`, writing the
    /// outbox rows it returns in the same transaction. When the change matters to the
    /// scheduler (a new phase, a load), a scheduling pass runs in the same transaction too.
    /// Returns false when the row is gone or newer (a stale report).
    pub async fn modify(
        &self,
        key: &PackageKey,
        generation: Generation,
        sched: &mut Scheduler,
        now: &str,
        change: impl FnOnce(&mut PackageRow) -> Vec<outbox::Row> + Send,
    ) -> Result<bool, StoreError> {
        let mut change = Some(change);
        let op = WriteOp::Modify(Box::new(move |row| change.take().map(|c| c(row))));
        self.write_one(key, generation, op, sched, now).await
    }

    /// Deletes the package if it is still at `generation` (the Cleanup of a Remove that no Update
    /// overtook).
    pub async fn delete_if(
        &self,
        key: &PackageKey,
        generation: Generation,
        sched: &mut Scheduler,
        now: &str,
    ) -> Result<bool, StoreError> {
        self.write_one(key, generation, WriteOp::Delete, sched, now)
            .await
    }

    /// One write as a batch of its own, in the current span: whether it was applied.
    async fn write_one(
        &self,
        key: &PackageKey,
        generation: Generation,
        op: WriteOp<'_>,
        sched: &mut Scheduler,
        now: &str,
    ) -> Result<bool, StoreError> {
        let mut writes = [Write {
            key: key.clone(),
            generation,
            op,
            span: tracing::Span::current(),
        }];
        let [outcome] = <[_; 1]>::try_from(self.write_batch(sched, now, &mut writes).await)
            .unwrap_or_else(|_| unreachable!("one write, one outcome"));
        Ok(outcome? == Outcome::Applied)
    }

    /// Applies `writes` (workers' reports) in order, in one transaction: each as
    /// [`Store::modify`] or [`Store::delete_if`] would alone, with its own scheduling pass, in
    /// its own tracing span (the tasks a pass enqueues carry that span's trace). Writers
    /// serialise (the scheduler's mutex, and on PostgreSQL the replicas' advisory lock), so
    /// what each write costs on its own — the transaction, the lock, catching up with the
    /// other replicas, the commit — is paid once per batch.
    ///
    /// When the transaction fails, `sched` is rebuilt from what is committed and each write is
    /// tried again alone, so one that cannot be written does not fail the others: the result
    /// has one entry per write, in order.
    pub async fn write_batch(
        &self,
        sched: &mut Scheduler,
        now: &str,
        writes: &mut [Write<'_>],
    ) -> Vec<Result<Outcome, StoreError>> {
        let failed = match self.try_batch(sched, now, writes).await {
            Ok(outcomes) => return outcomes.into_iter().map(Ok).collect(),
            Err(e) => e,
        };
        self.reindex(sched).await;
        if writes.len() == 1 {
            return vec![Err(failed)];
        }
        tracing::warn!(error = %failed, writes = writes.len(), "a batch of writes failed; writing each alone");
        let mut each = Vec::with_capacity(writes.len());
        for write in writes.iter_mut() {
            match self
                .try_batch(sched, now, std::slice::from_mut(write))
                .await
            {
                Ok(outcome) => each.push(Ok(outcome[0])),
                Err(e) => {
                    self.reindex(sched).await;
                    each.push(Err(e));
                }
            }
        }
        each
    }

    async fn try_batch(
        &self,
        sched: &mut Scheduler,
        now: &str,
        writes: &mut [Write<'_>],
    ) -> Result<Vec<Outcome>, StoreError> {
        use tracing::Instrument as _;
        let mut tx = self.begin(sched).await?;
        let mut outcomes = Vec::with_capacity(writes.len());
        for w in writes.iter_mut() {
            let span = w.span.clone();
            let outcome = match &mut w.op {
                WriteOp::Modify(change) => {
                    modify_in(
                        &mut tx,
                        self.dialect,
                        &w.key,
                        w.generation,
                        sched,
                        now,
                        change,
                    )
                    .instrument(span)
                    .await?
                }
                WriteOp::Delete => {
                    delete_in(&mut tx, self.dialect, &w.key, w.generation, sched, now)
                        .instrument(span)
                        .await?
                }
            };
            outcomes.push(outcome);
        }
        self.commit(tx, sched).await?;
        Ok(outcomes)
    }

    /// After a failed write (perhaps half-way through a pass): `sched` rebuilt from what is
    /// committed, keeping the cluster version it knew.
    async fn reindex(&self, sched: &mut Scheduler) {
        match self.scheduler(sched.platform().clone()).await {
            Ok(mut fresh) => {
                if fresh.kubernetes().is_none()
                    && let Some(v) = sched.kubernetes()
                {
                    fresh.set_kubernetes(v.clone());
                }
                *sched = fresh;
            }
            Err(e) => tracing::error!(error = %e, "rebuilding the scheduler's index failed"),
        }
    }

    /// `key`'s row and the `global` package's (see [`Store::global`]), read in one statement:
    /// what a worker's GetSpec needs, once per task.
    pub async fn get_with_global(
        &self,
        key: &PackageKey,
    ) -> Result<(Option<PackageRow>, Option<PackageRow>), StoreError> {
        let mut conn = self.pool.acquire().await?;
        // Two primary-key lookups: PostgreSQL plans `key IN ($1, $2)` anew at every call
        // (twice the time of one lookup, measured with pgbench), these once.
        let rows = sqlx::query(
            "SELECT * FROM packages WHERE key = $1 UNION ALL SELECT * FROM packages WHERE key = $2",
        )
        .bind(key.as_str())
        .bind(GLOBAL)
        .fetch_all(&mut *conn)
        .await?;
        let (mut own, mut global) = (None, None);
        for row in rows.iter().map(decode) {
            let row = row?;
            if row.key.as_str() == GLOBAL && row.is_global() {
                global = Some(row.clone());
            }
            if row.key == *key {
                own = Some(row);
            }
        }
        Ok((own, global))
    }

    /// The `global` package (whose values every nested package sees), if there is one.
    pub async fn global(&self) -> Result<Option<PackageRow>, StoreError> {
        let row = self
            .get(&PackageKey::from_issued(GLOBAL.to_owned()))
            .await?;
        Ok(row.filter(PackageRow::is_global))
    }

    /// Records the cluster's Kubernetes version and, when it changed, runs a scheduling pass
    /// and writes what it decided. Returns whether it changed.
    pub async fn reschedule(
        &self,
        sched: &mut Scheduler,
        kubernetes: semver::Version,
        now: &str,
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin(sched).await?;
        if !sched.set_kubernetes(kubernetes.clone()) {
            return Ok(false);
        }
        set_meta(&mut tx, META_KUBERNETES, &kubernetes.to_string()).await?;
        apply_pass(&mut tx, self.dialect, sched, now).await?;
        self.commit(tx, sched).await?;
        Ok(true)
    }

    /// The scheduler's index, rebuilt from every stored package (at start, and after a write
    /// failed half-way through a pass). On PostgreSQL it starts from the cluster version the
    /// replicas recorded, and knows how far the change log it reflects goes.
    pub async fn scheduler(&self, platform: semver::Version) -> Result<Scheduler, StoreError> {
        let mut conn = self.pool.acquire().await?;
        rebuild(&mut conn, self.dialect, platform).await
    }

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

    /// The URL the store was opened with (LISTEN connections open their own).
    pub fn database_url(&self) -> &str {
        &self.url
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

/// A change a [`Write`] makes to a package's row: its outbox rows, or `None` to leave the row
/// as it is ([`Outcome::Refused`]). Called at most once per write; again only if a batch failed
/// and its writes are retried.
pub type Change<'a> = Box<dyn FnMut(&mut PackageRow) -> Option<Vec<outbox::Row>> + Send + 'a>;

/// One write of [`Store::write_batch`].
pub struct Write<'a> {
    pub key: PackageKey,
    /// Applied only while the package is still at this generation.
    pub generation: Generation,
    pub op: WriteOp<'a>,
    /// The span the write runs in (the report's request).
    pub span: tracing::Span,
}

pub enum WriteOp<'a> {
    /// [`Store::modify`].
    Modify(Change<'a>),
    /// [`Store::delete_if`].
    Delete,
}

/// What became of one [`Write`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    /// The package is gone or at another generation (or, for a delete, not being removed).
    Stale,
    /// The change declined to apply (returned `None`).
    Refused,
}

/// [`Store::modify`] inside a write transaction.
async fn modify_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    dialect: Dialect,
    key: &PackageKey,
    generation: Generation,
    sched: &mut Scheduler,
    now: &str,
    change: &mut Change<'_>,
) -> Result<Outcome, StoreError> {
    let Some(mut row) = fetch_for_write(tx, dialect, key).await? else {
        return Ok(Outcome::Stale);
    };
    if row.generation != generation {
        return Ok(Outcome::Stale);
    }
    let (phase, loaded, observed) = (row.phase, row.loaded.clone(), row.observed_generation);
    let global_before = row.is_global().then(|| row.values.get(GLOBAL).cloned());
    let Some(mut outbox) = change(&mut row) else {
        return Ok(Outcome::Refused);
    };
    if let Some(before) = global_before
        && row.values.get(GLOBAL) != before.as_ref()
    {
        outbox.extend(global_readers(tx).await?);
    }
    if row.phase != phase || row.loaded != loaded {
        sched.upsert(key.clone(), row.node());
        // The pass's verdict on this package applies to the row in hand, written once below.
        let own = pass(tx, dialect, sched, now, Some(&mut row)).await?;
        outbox.extend(own);
    }
    write_row(tx, &row).await?;
    insert_outbox(tx, &outbox).await?;
    // After the pass: the packages it enabled are waited for too.
    if row.is_global()
        || row.phase != phase
        || row.loaded != loaded
        || row.observed_generation != observed
    {
        after_all(tx, dialect, sched).await?;
    }
    Ok(Outcome::Applied)
}

/// [`Store::delete_if`] inside a write transaction.
async fn delete_in(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    dialect: Dialect,
    key: &PackageKey,
    generation: Generation,
    sched: &mut Scheduler,
    now: &str,
) -> Result<Outcome, StoreError> {
    let done =
        sqlx::query("DELETE FROM packages WHERE key = $1 AND generation = $2 AND removing = 1")
            .bind(key.as_str())
            .bind(generation.get())
            .execute(&mut **tx)
            .await?;
    if done.rows_affected() == 0 {
        return Ok(Outcome::Stale);
    }
    if key.as_str() == GLOBAL {
        // The global values are gone: their readers render again without them.
        let reruns = global_readers(tx).await?;
        insert_outbox(tx, &reruns).await?;
    }
    sched.remove(key);
    apply_pass(tx, dialect, sched, now).await?;
    after_all(tx, dialect, sched).await?;
    Ok(Outcome::Applied)
}

/// Refreshes `key`'s node from its row as written so far, then runs a pass.
async fn rescheduled(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    dialect: Dialect,
    key: &PackageKey,
    sched: &mut Scheduler,
    now: &str,
) -> Result<(), StoreError> {
    match fetch(&mut **tx, key).await? {
        Some(row) => sched.upsert(key.clone(), row.node()),
        None => sched.remove(key),
    }
    apply_pass(tx, dialect, sched, now).await
}

/// One scheduling pass: each package whose verdict changed gets its condition, phase and (once
/// enabled) its remaining tasks, in the pass's order. Only the packages whose verdict changed
/// are read and written.
async fn apply_pass(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    dialect: Dialect,
    sched: &mut Scheduler,
    now: &str,
) -> Result<(), StoreError> {
    pass(tx, dialect, sched, now, None).await.map(drop)
}

/// [`apply_pass`], except that a verdict on `held` (a row the caller writes itself, after the
/// pass) changes that row in memory: its outbox rows are returned, not inserted. So a write
/// whose own package the pass enables (a Loaded report) reads and writes the row once.
async fn pass(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    dialect: Dialect,
    sched: &mut Scheduler,
    now: &str,
    mut held: Option<&mut PackageRow>,
) -> Result<Vec<outbox::Row>, StoreError> {
    let mut own = vec![];
    for (key, verdict) in sched.pass() {
        match held.as_deref_mut().filter(|row| row.key == key) {
            Some(row) => own.extend(flows::schedule(row, &verdict, now)),
            None => {
                let Some(mut row) = fetch_for_write(tx, dialect, &key).await? else {
                    continue;
                };
                let outbox = flows::schedule(&mut row, &verdict, now);
                write_row(tx, &row).await?;
                insert_outbox(tx, &outbox).await?;
            }
        }
        sched.settle(&key, &verdict);
        if let scheduler::Verdict::Enable = verdict {
            tracing::info!(package.key = %key, "requirements met: package enabled");
        }
    }
    Ok(own)
}

/// The package that holds the global values and the global hooks: the module `global`.
const GLOBAL: &str = berth_package::GLOBAL_NAME;

/// Enqueues the global package's AfterAll (its afterAll hooks) when it is due and every package
/// ordered after it has converged, clearing the due flag in the same transaction, so a due
/// afterAll survives a restart and is enqueued once.
///
/// Due: the global package's Run (its beforeAll hooks) succeeded at its current generation and
/// the package is Running. Converged: every package ordered after it
/// ([`Scheduler::ordered_after`]: its nested packages' implied conditional dependency, and any
/// other dependency on it or on them) that is enabled and not being removed is Running at its
/// current generation, or Failed. Without such packages, the AfterAll follows the Run at once.
async fn after_all(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    dialect: Dialect,
    sched: &Scheduler,
) -> Result<(), StoreError> {
    let key = PackageKey::from_issued(GLOBAL.to_owned());
    // The scheduler's index holds every stored package (brought up to date at the write's
    // start, and by the write itself): without a global package nothing can be due.
    if sched.node(&key).is_none() {
        return Ok(());
    }
    // Most writes find nothing due: ask before taking the global package's row lock.
    let due = sqlx::query("SELECT after_all_due FROM packages WHERE key = $1")
        .bind(key.as_str())
        .fetch_optional(&mut **tx)
        .await?
        .is_some_and(|r| r.get::<i64, _>("after_all_due") != 0);
    if !due {
        return Ok(());
    }
    let Some(mut global) = fetch_for_write(tx, dialect, &key).await? else {
        return Ok(());
    };
    let running = global.phase == Phase::Running && global.observed_generation == global.generation;
    if !global.is_global() || !global.after_all_due || global.removing || !running {
        return Ok(());
    }
    for follower in sched.ordered_after(&key) {
        let Some(row) = fetch(&mut **tx, &follower).await? else {
            continue;
        };
        if !converged(&row) {
            return Ok(());
        }
    }
    global.after_all_due = false;
    write_row(tx, &global).await?;
    insert_outbox(tx, &[flows::after_all(&key, global.generation)]).await?;
    tracing::info!(
        generation = global.generation.get(),
        "the packages waiting for the global package converged: afterAll enqueued"
    );
    Ok(())
}

/// Whether a package ordered after the global package no longer holds its afterAll back.
fn converged(row: &PackageRow) -> bool {
    row.removing
        || !row.enabled
        || row.phase == Phase::Failed
        || (row.phase == Phase::Running && row.observed_generation == row.generation)
}

/// A Run for every package whose chart reads the global values, when they changed: running
/// (a package on its way there renders with the new ones anyway), enabled, not being removed.
/// Packages that do not read them are left alone.
async fn global_readers(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
) -> Result<Vec<outbox::Row>, StoreError> {
    let rows = sqlx::query(
        "SELECT key, generation FROM packages
         WHERE reads_global = 1 AND phase = 'Running' AND removing = 0 AND enabled = 1 AND key <> $1",
    )
    .bind(GLOBAL)
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows
        .iter()
        .flat_map(|r| {
            flows::rerun_for(
                &PackageKey::from_issued(r.get("key")),
                Generation::new(r.get("generation")),
                "the global values changed",
            )
        })
        .collect())
}

/// Writes every column a report or the scheduler may change.
async fn write_row(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    row: &PackageRow,
) -> Result<(), StoreError> {
    let schema = row.settings_schema.as_ref().map(|s| {
        s.as_ref()
            .map(Value::to_string)
            .unwrap_or_else(|| "null".to_owned())
    });
    let (loaded_version, weight, requirements, reads_global) = match &row.loaded {
        Some(l) => (
            Some(l.version.to_string()),
            l.weight,
            serde_json::to_string(&l.requirements).unwrap_or_default(),
            l.reads_global,
        ),
        None => (None, 0, "{}".to_owned(), false),
    };
    sqlx::query(
        "UPDATE packages SET phase = $1, observed_generation = $2, conditions = $3, values_json = $4, values_patch = $5,
           settings_schema = $6, schema_version = $7, hooks = $8, last_error = $9, enabled = $10,
           loaded_version = $11, weight = $12, requirements = $13, reads_global = $14, settings = $15,
           settings_version = $16, conversions = $17, after_all_due = $18, hook_configs = $19 WHERE key = $20",
    )
    .bind(row.phase.as_str())
    .bind(row.observed_generation.get())
    .bind(serde_json::to_string(&row.conditions).unwrap_or_default())
    .bind(row.values.to_string())
    .bind(Value::Array(row.values_patch.clone()).to_string())
    .bind(schema)
    .bind(&row.schema_version)
    .bind(serde_json::to_string(&row.hooks).unwrap_or_default())
    .bind(&row.last_error)
    .bind(i64::from(row.enabled))
    .bind(loaded_version)
    .bind(weight)
    .bind(requirements)
    .bind(i64::from(reads_global))
    .bind(row.settings.to_string())
    .bind(i64::from(row.settings_version))
    .bind(row.conversions.as_ref().map(crate::conversion::to_json))
    .bind(i64::from(row.after_all_due))
    .bind(row.hook_configs.as_deref())
    .bind(row.key.as_str())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The smallest principal number no stored package holds (≥ 1). Called under the write
/// transaction's serialisation (SQLite's `BEGIN IMMEDIATE`, PostgreSQL's writers' lock), so two
/// Updates creating keys at once never take one number; the unique index on the column would
/// refuse the second anyway. Numbers are freed by deleting the row (Cleanup).
async fn free_principal(tx: &mut sqlx::Transaction<'_, sqlx::Any>) -> Result<u32, StoreError> {
    let row = sqlx::query(
        "SELECT CAST(COALESCE(
           (SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM packages WHERE principal = 1)),
           (SELECT MIN(p.principal) + 1 FROM packages AS p
              WHERE NOT EXISTS (SELECT 1 FROM packages AS q WHERE q.principal = p.principal + 1))
         ) AS BIGINT) AS free",
    )
    .fetch_one(&mut **tx)
    .await?;
    let free: i64 = row.get("free");
    u32::try_from(free).map_err(|_| StoreError::Corrupt {
        key: String::new(),
        column: "principal",
        reason: format!("no principal number is free below 2^32 (next would be {free})"),
    })
}

async fn next_generation(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    key: &PackageKey,
) -> Result<Generation, StoreError> {
    let row = sqlx::query(
        "INSERT INTO generations (key, generation) VALUES ($1, 1)
         ON CONFLICT (key) DO UPDATE SET generation = generations.generation + 1
         RETURNING generation",
    )
    .bind(key.as_str())
    .fetch_one(&mut **tx)
    .await?;
    Ok(Generation::new(row.get("generation")))
}

/// Outbox rows per INSERT: one bound value each, within both engines' limits.
const OUTBOX_ROWS_PER_STATEMENT: usize = 256;

/// Appends `rows` to the outbox in order, one statement per [`OUTBOX_ROWS_PER_STATEMENT`]
/// (a write typically queues two or three tasks at once). The ordinal keeps their ids in the
/// given order, which is the order the relay delivers them in.
async fn insert_outbox(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    rows: &[outbox::Row],
) -> Result<(), StoreError> {
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
        query.execute(&mut **tx).await?;
    }
    Ok(())
}

async fn fetch<'c, E>(executor: E, key: &PackageKey) -> Result<Option<PackageRow>, StoreError>
where
    E: sqlx::Executor<'c, Database = sqlx::Any>,
{
    let row = sqlx::query("SELECT * FROM packages WHERE key = $1")
        .bind(key.as_str())
        .fetch_optional(executor)
        .await?;
    row.as_ref().map(decode).transpose()
}

/// Reads `key`'s row inside a write transaction. On PostgreSQL the row stays locked until the
/// transaction ends, so two lifecycles writing one package take turns instead of one
/// overwriting the other's change (SQLite's `BEGIN IMMEDIATE` serialises whole transactions).
/// The NOTIFY channel of package changes (written by the `packages_changed` trigger).
pub const CHANGES_CHANNEL: &str = "berth_lifecycle_changes";
/// The NOTIFY channel of stored validation answers; the payload is the request id.
pub const ANSWERS_CHANNEL: &str = "berth_lifecycle_answers";
/// How long a stored validation answer is kept for its replica.
const ANSWER_TTL_MS: i64 = 10 * 60 * 1000;
/// Most validation answers stored at once.
const MAX_STORED_ANSWERS: i64 = 10_000;

/// The advisory lock (PostgreSQL) every lifecycle write transaction takes first: writes of
/// all replicas are serialised, as they are within one replica by its scheduler's mutex, so
/// each pass sees the whole graph, the change log's order is commit order, and row locks are
/// always taken under it (no deadlock between replicas). Its key, 0x6265_7274_686c_6331, spells
/// "berthlc1". It is taken in the BEGIN's round trip (two statements of one simple query):
/// round trips are most of what a write costs PostgreSQL.
const BEGIN_LOCKED: &str = "BEGIN; SELECT pg_advisory_xact_lock(7090199032658420529)";
/// Change-log entries kept behind the newest; a replica further behind rebuilds its index.
const CHANGES_KEPT: i64 = 10_000;
/// The log is pruned whenever its newest entry crosses a multiple of this.
const PRUNE_EVERY: i64 = 1_000;
/// `lifecycle_meta` names.
const META_KUBERNETES: &str = "kubernetes_version";
const META_PRUNED: &str = "changes_pruned_upto";

async fn set_meta(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    name: &str,
    value: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO lifecycle_meta (name, value) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
    )
    .bind(name)
    .bind(value)
    .execute(&mut **tx)
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

async fn last_change(conn: &mut sqlx::AnyConnection) -> Result<i64, StoreError> {
    Ok(
        sqlx::query("SELECT COALESCE(MAX(seq), 0) AS last FROM package_changes")
            .fetch_one(&mut *conn)
            .await?
            .get("last"),
    )
}

/// The scheduler's index from every stored package. On PostgreSQL: with the recorded cluster
/// version, and marked as reflecting the change log up to its newest entry (read first: what
/// commits after it is replayed by the next [`catch_up`]; replaying a change twice is harmless).
async fn rebuild(
    conn: &mut sqlx::AnyConnection,
    dialect: Dialect,
    platform: semver::Version,
) -> Result<Scheduler, StoreError> {
    let mut sched = Scheduler::new(platform);
    if dialect == Dialect::Postgres {
        sched.set_changes_seen(last_change(conn).await?);
        if let Some(v) = meta(conn, META_KUBERNETES).await?
            && let Ok(v) = semver::Version::parse(&v)
        {
            sched.set_kubernetes(v);
        }
    }
    for row in all_rows(conn, dialect).await? {
        sched.upsert(row.key.clone(), row.node());
    }
    Ok(sched)
}

/// Every package, in key order (bytewise on both engines).
async fn all_rows(
    conn: &mut sqlx::AnyConnection,
    dialect: Dialect,
) -> Result<Vec<PackageRow>, StoreError> {
    let sql = dialect.pick(
        "SELECT * FROM packages ORDER BY key",
        "SELECT * FROM packages ORDER BY key COLLATE \"C\"",
    );
    let rows = sqlx::query(sql).fetch_all(&mut *conn).await?;
    rows.iter().map(decode).collect()
}

/// Replays into `sched` what other replicas committed since it last looked (PostgreSQL, under
/// [`BEGIN_LOCKED`]): the packages named by the change-log entries after
/// [`Scheduler::changes_seen`] are read again, and the recorded cluster version adopted. An
/// index older than the pruned part of the log is rebuilt whole.
async fn catch_up(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    sched: &mut Scheduler,
) -> Result<(), StoreError> {
    // The change-log entries and both facts in one round trip: this runs before every write.
    // The facts come first, as `seq` -1 (the log's own start at 1).
    let rows = sqlx::query(
        "SELECT seq, key, '' AS value FROM package_changes WHERE seq > $1
         UNION ALL
         SELECT -1 AS seq, name AS key, value FROM lifecycle_meta WHERE name IN ($2, $3)
         ORDER BY seq",
    )
    .bind(sched.changes_seen())
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
    if sched.changes_seen() < pruned {
        tracing::info!(
            seen = sched.changes_seen(),
            pruned,
            "scheduler index too far behind the change log; rebuilding it"
        );
        let mut fresh = rebuild(tx, Dialect::Postgres, sched.platform().clone()).await?;
        if fresh.kubernetes().is_none()
            && let Some(v) = sched.kubernetes()
        {
            fresh.set_kubernetes(v.clone());
        }
        *sched = fresh;
        return Ok(());
    }
    if let Some(v) = facts.get(META_KUBERNETES)
        && let Ok(v) = semver::Version::parse(v)
    {
        sched.set_kubernetes(v);
    }
    let Some(&(last, _)) = entries.last() else {
        return Ok(());
    };
    let keys: std::collections::BTreeSet<String> = entries.into_iter().map(|(_, k)| k).collect();
    for key in keys {
        let key = PackageKey::from_issued(key);
        match fetch(&mut **tx, &key).await? {
            Some(row) => sched.upsert(key, row.node()),
            None => sched.remove(&key),
        }
    }
    sched.set_changes_seen(last);
    Ok(())
}

async fn fetch_for_write(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    dialect: Dialect,
    key: &PackageKey,
) -> Result<Option<PackageRow>, StoreError> {
    let sql = dialect.pick(
        "SELECT * FROM packages WHERE key = $1",
        "SELECT * FROM packages WHERE key = $1 FOR UPDATE",
    );
    let row = sqlx::query(sql)
        .bind(key.as_str())
        .fetch_optional(&mut **tx)
        .await?;
    row.as_ref().map(decode).transpose()
}

fn decode(r: &AnyRow) -> Result<PackageRow, StoreError> {
    let key: String = r.get("key");
    let json = |column: &'static str| -> Result<Value, StoreError> {
        let text: String = r.get(column);
        serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
            key: key.clone(),
            column,
            reason: e.to_string(),
        })
    };
    let corrupt = |column: &'static str, reason: String| StoreError::Corrupt {
        key: key.clone(),
        column,
        reason,
    };
    let kind: String = r.get("kind");
    let phase: String = r.get("phase");
    let schema: Option<String> = r.get("settings_schema");
    let settings_schema = match schema {
        None => None,
        Some(text) => {
            let v: Value = serde_json::from_str(&text)
                .map_err(|e| corrupt("settings_schema", e.to_string()))?;
            Some(if v.is_null() { None } else { Some(v) })
        }
    };
    let loaded_version: Option<String> = r.get("loaded_version");
    let loaded = match loaded_version {
        None => None,
        Some(text) => Some(LoadedSpec {
            version: berth_package::parse_version(&text)
                .map_err(|e| corrupt("loaded_version", e.to_string()))?,
            weight: r.get("weight"),
            requirements: serde_json::from_value(json("requirements")?)
                .map_err(|e| corrupt("requirements", e.to_string()))?,
            reads_global: r.get::<i64, _>("reads_global") != 0,
        }),
    };
    let conversions: Option<String> = r.get("conversions");
    let conversions = conversions
        .map(|text| crate::conversion::from_json(&text))
        .transpose()
        .map_err(|e| corrupt("conversions", e))?;
    let settings_version = u32::try_from(r.get::<i64, _>("settings_version"))
        .map_err(|e| corrupt("settings_version", e.to_string()))?;
    let principal = u32::try_from(r.get::<i64, _>("principal"))
        .ok()
        .filter(|p| *p >= 1)
        .ok_or_else(|| corrupt("principal", "not a number from 1 to 2^32-1".into()))?;
    let values_patch = match json("values_patch")? {
        Value::Array(ops) => ops,
        _ => return Err(corrupt("values_patch", "not an array".into())),
    };
    Ok(PackageRow {
        id: PackageId {
            kind: Kind::parse(&kind).ok_or_else(|| corrupt("kind", kind.clone()))?,
            name: r.get("name"),
            namespace: r.get("namespace"),
        },
        repository: r.get("repository"),
        package: r.get("package"),
        version: r.get("version"),
        generation: Generation::new(r.get("generation")),
        observed_generation: Generation::new(r.get("observed_generation")),
        settings: json("settings")?,
        settings_version,
        phase: Phase::parse(&phase).ok_or_else(|| corrupt("phase", phase.clone()))?,
        conditions: serde_json::from_value(json("conditions")?)
            .map_err(|e| corrupt("conditions", e.to_string()))?,
        values: json("values_json")?,
        values_patch,
        settings_schema,
        schema_version: r.get("schema_version"),
        conversions,
        hooks: serde_json::from_value(json("hooks")?)
            .map_err(|e| corrupt("hooks", e.to_string()))?,
        last_error: r.get("last_error"),
        removing: r.get::<i64, _>("removing") != 0,
        enabled: r.get::<i64, _>("enabled") != 0,
        loaded,
        after_all_due: r.get::<i64, _>("after_all_due") != 0,
        hook_configs: r.get("hook_configs"),
        principal,
        key: PackageKey::from_issued(key),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::Op;
    use crate::report::Change;
    use crate::scheduler::{Constraint, Dependency, Requirements};
    use crate::test_db::TestDb;
    use crate::update::{UpdateSpec, plan};

    #[test]
    fn the_write_lock_key_spells_berthlc1() {
        let key = i64::from_be_bytes(*b"berthlc1");
        assert!(BEGIN_LOCKED.ends_with(&format!("pg_advisory_xact_lock({key})")));
    }

    fn spec(name: &str) -> UpdateSpec {
        UpdateSpec {
            id: PackageId::new(Kind::App, name, "").unwrap(),
            repository: "/repo".into(),
            package: name.into(),
            version: "1.0.0".into(),
            settings: serde_json::json!({}),
            settings_version: 0,
            converted: None,
            force: false,
        }
    }

    async fn install(store: &Store, sched: &mut Scheduler, name: &str) -> Generation {
        let spec = spec(name);
        store
            .update(spec.desired(), sched, "t", |prev, key, g| {
                plan(&spec, prev, key, g)
            })
            .await
            .unwrap()
            .map_err(|_| "not planned")
            .unwrap()
            .generation
    }

    async fn report(
        store: &Store,
        sched: &mut Scheduler,
        name: &str,
        g: Generation,
        fill: impl FnOnce(&mut Change),
    ) {
        let mut change = Change::new(g);
        fill(&mut change);
        let key = PackageKey::from_issued(format!("default.{name}"));
        let accepted = store
            .modify(&key, g, sched, "t", |row| change.apply(row, "t"))
            .await
            .unwrap();
        assert!(accepted);
    }

    async fn report_to(
        store: &Store,
        sched: &mut Scheduler,
        key: &PackageKey,
        g: Generation,
        fill: impl FnOnce(&mut Change),
    ) {
        let mut change = Change::new(g);
        fill(&mut change);
        let accepted = store
            .modify(key, g, sched, "t", |row| change.apply(row, "t"))
            .await
            .unwrap();
        assert!(accepted);
    }

    fn loaded(mandatory: &[&str], kubernetes: Option<&str>) -> LoadedSpec {
        LoadedSpec {
            version: semver::Version::new(1, 0, 0),
            weight: 0,
            requirements: Requirements {
                kubernetes: kubernetes
                    .map(|c| Constraint(berth_package::VersionConstraint::parse(c).unwrap())),
                mandatory: mandatory
                    .iter()
                    .map(|n| Dependency {
                        name: (*n).into(),
                        constraint: None,
                    })
                    .collect(),
                ..Default::default()
            },
            reads_global: false,
        }
    }

    /// The task kinds queued in the outbox for `key`, in order, and empties the outbox.
    async fn queued(store: &Store) -> Vec<String> {
        let claim = store.outbox_claim(1000).await.unwrap();
        let rows = claim.rows.clone();
        let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
        store.outbox_settle(claim, &ids).await.unwrap();
        rows.iter()
            .filter_map(|(_, body)| match outbox::Row::decode(0, body).unwrap().op {
                Op::Enqueue { task } => Some(format!("{} {}", task.package, task.kind)),
                Op::Supersede { .. } => None,
            })
            .collect()
    }

    async fn requirements_met(store: &Store, name: &str) -> (String, String, String) {
        let key = PackageKey::from_issued(format!("default.{name}"));
        let row = store.get(&key).await.unwrap().unwrap();
        let c = row
            .conditions
            .iter()
            .find(|c| c.type_ == "RequirementsMet")
            .unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    /// A change of the `global` package's values re-runs the Running packages whose charts
    /// read them (in the report's transaction), not the others; which packages read them
    /// survives a restart; a report that leaves the global values as they are re-runs nothing.
    async fn a_change_of_the_global_values_reruns_their_readers(db: TestDb) {
        let url = db.url();
        let store = Store::open(&url).await.unwrap();
        let platform = semver::Version::new(0, 1, 0);
        let mut sched = store.scheduler(platform.clone()).await.unwrap();
        for (name, reads) in [("reader", true), ("plain", false)] {
            let g = install(&store, &mut sched, name).await;
            report(&store, &mut sched, name, g, |c| {
                c.phase = Some(Phase::Loaded);
                c.settings_schema = Some(None);
                c.loaded = Some(LoadedSpec {
                    reads_global: reads,
                    ..loaded(&[], None)
                });
            })
            .await;
            report(&store, &mut sched, name, g, |c| {
                c.phase = Some(Phase::Running)
            })
            .await;
        }
        let global = UpdateSpec {
            id: PackageId::new(Kind::Module, "global", "").unwrap(),
            ..spec("global")
        };
        let key = global.id.key();
        let g = store
            .update(global.desired(), &mut sched, "t", |prev, key, g| {
                plan(&global, prev, key, g)
            })
            .await
            .unwrap()
            .map_err(|_| "not planned")
            .unwrap()
            .generation;
        report_to(&store, &mut sched, &key, g, |c| {
            c.phase = Some(Phase::Loaded);
            c.settings_schema = Some(None);
            c.loaded = Some(loaded(&[], None));
        })
        .await;
        queued(&store).await;
        report_to(&store, &mut sched, &key, g, |c| {
            c.values = Some(serde_json::json!({"global": {"domain": "a"}}));
            c.patch_inside_run = true;
        })
        .await;
        assert_eq!(queued(&store).await, ["default.reader Run"]);

        drop(store);
        let store = Store::open(&url).await.unwrap();
        let mut sched = store.scheduler(platform).await.unwrap();
        report_to(&store, &mut sched, &key, g, |c| {
            c.values = Some(serde_json::json!({"global": {"domain": "a"}}));
            c.patch_inside_run = true;
        })
        .await;
        assert!(queued(&store).await.is_empty(), "unchanged");
        report_to(&store, &mut sched, &key, g, |c| {
            c.values = Some(serde_json::json!({"global": {"domain": "b"}}));
            c.patch_inside_run = true;
        })
        .await;
        assert_eq!(queued(&store).await, ["default.reader Run"]);
        assert_eq!(
            store.global().await.unwrap().map(|r| r.values),
            Some(serde_json::json!({"global": {"domain": "b"}}))
        );
    }

    /// Installs the module `name` and reports it Loaded with `conditional` dependencies.
    async fn install_module(
        store: &Store,
        sched: &mut Scheduler,
        name: &str,
        conditional: &[&str],
    ) -> (PackageKey, Generation) {
        let module = UpdateSpec {
            id: PackageId::new(Kind::Module, name, "").unwrap(),
            ..spec(name)
        };
        let key = module.id.key();
        let g = store
            .update(module.desired(), sched, "t", |prev, key, g| {
                plan(&module, prev, key, g)
            })
            .await
            .unwrap()
            .map_err(|_| "not planned")
            .unwrap()
            .generation;
        report_to(store, sched, &key, g, |c| {
            c.phase = Some(Phase::Loaded);
            c.settings_schema = Some(None);
            let mut spec = loaded(&[], None);
            spec.requirements.conditional = conditional
                .iter()
                .map(|n| Dependency {
                    name: (*n).into(),
                    constraint: None,
                })
                .collect();
            c.loaded = Some(spec);
        })
        .await;
        (key, g)
    }

    fn run_succeeded(c: &mut Change) {
        c.phase = Some(Phase::Running);
        c.run_succeeded = true;
    }

    async fn after_all_due(store: &Store) -> bool {
        store.global().await.unwrap().unwrap().after_all_due
    }

    /// The global package's afterAll is due once its Run succeeded, stays due (across a reopen
    /// of the store) while a package waiting for it has not converged, and is enqueued once,
    /// in the report that makes the last one Running, which clears it; with everything
    /// converged already, the Run's own report enqueues it.
    async fn after_all_waits_for_the_packages_ordered_after_the_global_package(db: TestDb) {
        let url = db.url();
        let store = Store::open(&url).await.unwrap();
        let platform = semver::Version::new(0, 1, 0);
        let mut sched = store.scheduler(platform.clone()).await.unwrap();
        let (global, g) = install_module(&store, &mut sched, "global", &[]).await;
        let (nested, n) = install_module(&store, &mut sched, "nested", &["global"]).await;
        let (plain, p) = install_module(&store, &mut sched, "plain", &[]).await;
        queued(&store).await;
        assert!(!after_all_due(&store).await);

        report_to(&store, &mut sched, &global, g, run_succeeded).await;
        assert_eq!(
            queued(&store).await,
            ["nested Start"],
            "the nested package starts; the afterAll waits for it"
        );
        assert!(after_all_due(&store).await);
        // A package that does not wait for the global package does not hold it back.
        report_to(&store, &mut sched, &plain, p, run_succeeded).await;
        assert!(queued(&store).await.is_empty());

        drop(store);
        let store = Store::open(&url).await.unwrap();
        let mut sched = store.scheduler(platform).await.unwrap();
        assert!(after_all_due(&store).await, "kept across a reopen");
        report_to(&store, &mut sched, &nested, n, |c| {
            c.values = Some(serde_json::json!({"nested": {}}));
        })
        .await;
        assert!(queued(&store).await.is_empty(), "not Running yet");

        report_to(&store, &mut sched, &nested, n, run_succeeded).await;
        assert_eq!(queued(&store).await, ["global AfterAll"]);
        assert!(!after_all_due(&store).await, "cleared with the enqueue");
        report_to(&store, &mut sched, &nested, n, run_succeeded).await;
        assert!(queued(&store).await.is_empty(), "once per convergence");

        // The next Run of the global package: everything has converged, so the afterAll
        // follows at once.
        report_to(&store, &mut sched, &global, g, run_succeeded).await;
        assert_eq!(queued(&store).await, ["global AfterAll"]);
        assert!(!after_all_due(&store).await);
    }

    /// Two stores on one fresh PostgreSQL database, as two lifecycle replicas have (the
    /// database lives as long as the first value).
    async fn two_replicas() -> (TestDb, Store, Store) {
        let db = TestDb::postgres().await;
        let a = Store::open(&db.url()).await.unwrap();
        let b = Store::open(&db.url()).await.unwrap();
        (db, a, b)
    }

    /// A replica's scheduler index, built from what the store holds now.
    async fn index(store: &Store) -> Scheduler {
        store
            .scheduler(semver::Version::new(0, 1, 0))
            .await
            .unwrap()
    }

    /// Two lifecycle replicas on one PostgreSQL database, each with its own scheduler index
    /// built before the other wrote anything: each pass decides on what both committed. The
    /// replica that makes the dependency Running enables the dependent it never saw written,
    /// the other learns of it and enqueues nothing twice, the cluster version one recorded is
    /// the other's, and a Remove on either sees dependents written through the other.
    #[tokio::test]
    async fn replicas_schedule_on_the_graph_both_wrote() {
        let (_db, a, b) = two_replicas().await;
        let (mut sched_a, mut sched_b) = (index(&a).await, index(&b).await);

        let web = install(&a, &mut sched_a, "web").await;
        report(&a, &mut sched_a, "web", web, |c| {
            c.phase = Some(Phase::Loaded);
            c.settings_schema = Some(None);
            c.loaded = Some(loaded(&["db"], Some(">=1.30")));
        })
        .await;
        queued(&a).await;
        // The version reported to B holds web back on the dependency now, on both.
        b.reschedule(&mut sched_b, semver::Version::new(1, 31, 0), "t")
            .await
            .unwrap();
        assert_eq!(
            requirements_met(&a, "web").await.2,
            "requires db, which is not installed"
        );

        let db_g = install(&b, &mut sched_b, "db").await;
        assert_eq!(
            bring_up_db(&b, &mut sched_b, db_g).await,
            ["default.web Start"],
            "B enabled web, which only A wrote"
        );

        // A writes next: it catches up, and enables nothing again.
        install(&a, &mut sched_a, "other").await;
        assert_eq!(queued(&a).await, ["default.other Load"]);
        assert_eq!(sched_a.kubernetes(), Some(&semver::Version::new(1, 31, 0)));
        // A Remove of db through A is refused: web depends on it (B wrote db's state).
        let refused = a
            .remove(
                &PackageKey::from_issued("default.db".into()),
                &mut sched_a,
                "t",
                |_, _, sched| {
                    let dependents =
                        sched.dependents(&PackageKey::from_issued("default.db".into()));
                    if dependents.is_empty() {
                        Ok(vec![])
                    } else {
                        Err(dependents)
                    }
                },
            )
            .await
            .unwrap();
        assert_eq!(
            refused.unwrap_err(),
            [PackageKey::from_issued("default.web".into())]
        );
    }

    /// A replica whose index is older than the pruned part of the change log rebuilds it whole
    /// before writing, and still decides on what the other replica wrote.
    #[tokio::test]
    async fn a_replica_behind_the_pruned_log_rebuilds_its_index() {
        let (_db, a, b) = two_replicas().await;
        let (mut sched_a, mut sched_b) = (index(&a).await, index(&b).await);
        let web = install(&b, &mut sched_b, "web").await;
        report(&b, &mut sched_b, "web", web, |c| {
            c.phase = Some(Phase::Loaded);
            c.settings_schema = Some(None);
            c.loaded = Some(loaded(&["db"], None));
        })
        .await;
        // As if the log had been pruned past everything A saw.
        let mut conn = a.pool.acquire().await.unwrap();
        let last = last_change(&mut conn).await.unwrap();
        sqlx::query("DELETE FROM package_changes")
            .execute(&mut *conn)
            .await
            .unwrap();
        sqlx::query("INSERT INTO lifecycle_meta (name, value) VALUES ($1, $2)")
            .bind(META_PRUNED)
            .bind(last.to_string())
            .execute(&mut *conn)
            .await
            .unwrap();
        drop(conn);
        assert!(sched_a.changes_seen() < last);
        queued(&a).await;
        let db_g = install(&a, &mut sched_a, "db").await;
        assert!(sched_a.changes_seen() >= last, "A rebuilt and moved on");
        assert_eq!(
            sched_a.dependents(&PackageKey::from_issued("default.db".into())),
            [PackageKey::from_issued("default.web".into())],
            "A's rebuilt index knows web, which only B wrote"
        );
        assert_eq!(
            bring_up_db(&a, &mut sched_a, db_g).await,
            ["default.web Start"]
        );
    }

    /// Reports the installed `db` loaded (no requirements) and then Running through `store`;
    /// the tasks that queued for `web` meanwhile (the outbox is emptied).
    async fn bring_up_db(store: &Store, sched: &mut Scheduler, g: Generation) -> Vec<String> {
        report(store, sched, "db", g, |c| {
            c.phase = Some(Phase::Loaded);
            c.settings_schema = Some(None);
            c.loaded = Some(loaded(&[], None));
        })
        .await;
        report(store, sched, "db", g, |c| c.phase = Some(Phase::Running)).await;
        queued(store)
            .await
            .into_iter()
            .filter(|t| t.starts_with("default.web"))
            .collect()
    }

    crate::test_db::on_both_backends!(
        after_all_waits_for_the_packages_ordered_after_the_global_package,
        the_scheduler_enables_packages_as_their_requirements_come_to_hold,
        settling_deletes_only_the_delivered_rows,
        a_second_relay_takes_nothing_while_the_first_holds_the_oldest_rows,
        concurrent_updates_of_one_package_from_two_stores_get_distinct_generations,
        packages_are_listed_in_byte_order_of_their_keys,
        a_change_of_the_global_values_reruns_their_readers,
        settings_versions_and_conversions_are_stored_with_the_settings,
        a_batch_of_reports_answers_each_as_it_would_alone,
        principal_numbers_are_kept_while_a_key_exists_and_the_smallest_free_one_is_reused,
        concurrent_creations_from_two_stores_never_share_a_principal,
    );

    /// The principal number of `name`'s row.
    async fn principal(store: &Store, name: &str) -> Option<u32> {
        let key = PackageKey::from_issued(format!("default.{name}"));
        store.get(&key).await.unwrap().map(|row| row.principal)
    }

    /// Removes `name` and lets Cleanup delete its state.
    async fn remove_and_clean_up(store: &Store, sched: &mut Scheduler, name: &str) {
        let key = PackageKey::from_issued(format!("default.{name}"));
        let g = store
            .remove(&key, sched, "t", |_, g, _| {
                Ok::<_, ()>(flows::remove(&key, g))
            })
            .await
            .unwrap()
            .unwrap()
            .expect("the package exists");
        assert!(store.delete_if(&key, g, sched, "t").await.unwrap());
    }

    /// A key gets the smallest free number when first created and keeps it across Updates,
    /// failures, a Remove that is overtaken by an Update, and a restart; Cleanup frees it, and
    /// the next new key takes it.
    async fn principal_numbers_are_kept_while_a_key_exists_and_the_smallest_free_one_is_reused(
        db: TestDb,
    ) {
        let url = db.url();
        let store = Store::open(&url).await.unwrap();
        let mut sched = store
            .scheduler(semver::Version::new(0, 1, 0))
            .await
            .unwrap();
        for name in ["a", "b", "c"] {
            install(&store, &mut sched, name).await;
        }
        assert_eq!(principal(&store, "a").await, Some(1));
        assert_eq!(principal(&store, "b").await, Some(2));
        assert_eq!(principal(&store, "c").await, Some(3));

        // Updates and a failed generation keep it.
        let mut spec = spec("b");
        spec.settings = serde_json::json!({"x": 1});
        let g = planned(&store, &mut sched, &spec).await.unwrap();
        report(&store, &mut sched, "b", g, |c| {
            *c = Change::failed(g, "broken".into());
        })
        .await;
        let key_b = PackageKey::from_issued("default.b".into());
        assert_eq!(
            store.get(&key_b).await.unwrap().unwrap().phase,
            Phase::Failed
        );
        assert_eq!(principal(&store, "b").await, Some(2));

        // A Remove overtaken by an Update keeps the key's state, and its number.
        store
            .remove(&key_b, &mut sched, "t", |_, g, _| {
                Ok::<_, ()>(flows::remove(&key_b, g))
            })
            .await
            .unwrap()
            .unwrap();
        install(&store, &mut sched, "b").await;
        assert_eq!(principal(&store, "b").await, Some(2));

        // Cleanup frees it; the next new key takes the smallest free number.
        remove_and_clean_up(&store, &mut sched, "b").await;
        assert_eq!(principal(&store, "b").await, None);
        install(&store, &mut sched, "d").await;
        assert_eq!(principal(&store, "d").await, Some(2), "2 was free");
        install(&store, &mut sched, "e").await;
        assert_eq!(principal(&store, "e").await, Some(4));
        remove_and_clean_up(&store, &mut sched, "a").await;

        // A restart (the store opened again) keeps every number; 1 is the free one now.
        drop(store);
        let store = Store::open(&url).await.unwrap();
        let mut sched = store
            .scheduler(semver::Version::new(0, 1, 0))
            .await
            .unwrap();
        assert_eq!(principal(&store, "c").await, Some(3));
        assert_eq!(principal(&store, "d").await, Some(2));
        install(&store, &mut sched, "b").await;
        assert_eq!(
            principal(&store, "b").await,
            Some(1),
            "re-created: a new number"
        );
    }

    /// Two stores (two lifecycles on one database) creating keys at once: every key gets its
    /// own number, and together they are 1..=N.
    async fn concurrent_creations_from_two_stores_never_share_a_principal(db: TestDb) {
        let platform = semver::Version::new(0, 1, 0);
        let one = Store::open(&db.url()).await.unwrap();
        let two = Store::open(&db.url()).await.unwrap();
        let (mut s1, mut s2) = (
            one.scheduler(platform.clone()).await.unwrap(),
            two.scheduler(platform).await.unwrap(),
        );
        for round in 0..8 {
            let (a, b) = (format!("one-{round}"), format!("two-{round}"));
            tokio::join!(install(&one, &mut s1, &a), install(&two, &mut s2, &b));
        }
        let mut numbers: Vec<u32> = one
            .list()
            .await
            .unwrap()
            .iter()
            .map(|r| r.principal)
            .collect();
        numbers.sort_unstable();
        assert_eq!(numbers, (1..=16).collect::<Vec<u32>>());
    }

    /// Plans and writes the Update `spec`: its generation, or why nothing was written.
    async fn planned(
        store: &Store,
        sched: &mut Scheduler,
        spec: &UpdateSpec,
    ) -> Result<Generation, crate::update::NotPlanned> {
        store
            .update(spec.desired(), sched, "t", |prev, key, g| {
                plan(spec, prev, key, g)
            })
            .await
            .unwrap()
            .map(|o| o.generation)
    }

    /// The settings' version is stored with them: an install's 0 is resolved when its version
    /// loads (with the conversions, which survive a reopen); a Load that converts stores the
    /// converted settings and version; a failed conversion fails the generation and leaves
    /// settings, version and the last load alone; an Update of the loaded version stores
    /// settings converted before the transaction, refuses a version too new, and re-sending the
    /// same settings converted is a no-op.
    async fn settings_versions_and_conversions_are_stored_with_the_settings(db: TestDb) {
        use crate::conversion::{AtLoad, Converted};
        use berth_package::{Conversions, Step};
        let url = db.url();
        let store = Store::open(&url).await.unwrap();
        let mut sched = store
            .scheduler(semver::Version::new(0, 1, 0))
            .await
            .unwrap();
        let key = PackageKey::from_issued("default.conv".into());
        let conversions = Conversions::from_steps(
            2,
            [Step {
                version: 2,
                expressions: vec![".replicas = .size | del(.size)".into()],
            }],
        )
        .unwrap();
        let mut spec = spec("conv");
        spec.settings = serde_json::json!({"size": 3});
        spec.settings_version = 1;
        let g = store
            .update(spec.desired(), &mut sched, "t", |prev, key, g| {
                plan(&spec, prev, key, g)
            })
            .await
            .unwrap()
            .map_err(|_| "not planned")
            .unwrap()
            .generation;
        assert_eq!(store.get(&key).await.unwrap().unwrap().settings_version, 1);
        report_to(&store, &mut sched, &key, g, |c| {
            c.phase = Some(Phase::Loaded);
            c.settings_schema = Some(Some(serde_json::json!({
                "type": "object",
                "properties": {"replicas": {"type": "integer"}},
            })));
            c.conversions = Some(conversions.clone());
            c.stored_settings = Some(AtLoad::Converted(Converted {
                settings: serde_json::json!({"replicas": 3}),
                version: 2,
                ran: true,
            }));
            c.loaded = Some(loaded(&[], None));
        })
        .await;
        let store = Store::open(&url).await.unwrap();
        let row = store.get(&key).await.unwrap().unwrap();
        assert_eq!(row.settings, serde_json::json!({"replicas": 3}));
        assert_eq!(row.settings_version, 2);
        assert_eq!(row.conversions.as_ref(), Some(&conversions));

        // The same version again with version-1 settings, converted before the transaction.
        spec.settings = serde_json::json!({"size": 4});
        spec.converted = Some((
            Converted {
                settings: serde_json::json!({"replicas": 4}),
                version: 2,
                ran: true,
            },
            conversions.clone(),
        ));
        let out = planned(&store, &mut sched, &spec).await;
        let g = match out {
            Ok(g) => g,
            Err(crate::update::NotPlanned::Refused(e)) => panic!("refused: {e}"),
            Err(crate::update::NotPlanned::Unchanged(_)) => panic!("unchanged"),
        };
        let row = store.get(&key).await.unwrap().unwrap();
        assert_eq!(
            (row.settings.clone(), row.settings_version, row.generation),
            (serde_json::json!({"replicas": 4}), 2, g)
        );
        let out = planned(&store, &mut sched, &spec).await;
        assert!(
            matches!(out, Err(crate::update::NotPlanned::Unchanged(same)) if same == g),
            "the same settings converted again change nothing"
        );
        spec.settings_version = 3;
        spec.converted = None;
        let out = planned(&store, &mut sched, &spec).await;
        assert!(matches!(
            out,
            Err(crate::update::NotPlanned::Refused(
                crate::error::LifecycleError::InvalidArgument(_)
            ))
        ));

        // A failed conversion at Load: the generation fails, nothing else changes.
        let failed = Change::failed(g, "v2.yaml: boom".into());
        store
            .modify(&key, g, &mut sched, "t", |row| failed.apply(row, "t"))
            .await
            .unwrap();
        let after = store.get(&key).await.unwrap().unwrap();
        assert_eq!(after.phase, Phase::Failed);
        assert!(
            after.last_error.contains("v2.yaml: boom"),
            "{}",
            after.last_error
        );
        assert_eq!(
            (after.settings, after.settings_version, after.conversions),
            (row.settings, row.settings_version, row.conversions)
        );
    }

    /// Loaded packages wait for their requirements, the cluster's version and a dependency
    /// reaching Running each enable what waited on them (tasks in the same transaction), and
    /// what the scheduler decided survives a restart.
    async fn the_scheduler_enables_packages_as_their_requirements_come_to_hold(db: TestDb) {
        let url = db.url();
        let store = Store::open(&url).await.unwrap();
        let platform = semver::Version::new(0, 1, 0);
        let mut sched = store.scheduler(platform.clone()).await.unwrap();

        let web = install(&store, &mut sched, "web").await;
        assert_eq!(queued(&store).await, ["default.web Load"]);
        report(&store, &mut sched, "web", web, |c| {
            c.phase = Some(Phase::Loaded);
            c.settings_schema = Some(None);
            c.loaded = Some(loaded(&["db"], Some(">=1.30")));
        })
        .await;
        assert!(queued(&store).await.is_empty());
        let (status, reason, message) = requirements_met(&store, "web").await;
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "KubernetesVersion")
        );
        assert!(message.contains("not known yet"), "{message}");

        store
            .reschedule(&mut sched, semver::Version::new(1, 31, 0), "t")
            .await
            .unwrap();
        let (_, reason, message) = requirements_met(&store, "web").await;
        assert_eq!(reason, "Dependency");
        assert_eq!(message, "requires db, which is not installed");

        // A restart rebuilds the same decisions from the store: nothing to write again.
        drop(store);
        let store = Store::open(&url).await.unwrap();
        let mut sched = store.scheduler(platform).await.unwrap();
        sched.set_kubernetes(semver::Version::new(1, 31, 0));
        assert!(sched.pass().is_empty());

        let db = install(&store, &mut sched, "db").await;
        report(&store, &mut sched, "db", db, |c| {
            c.phase = Some(Phase::Loaded);
            c.settings_schema = Some(None);
            c.loaded = Some(loaded(&[], None));
        })
        .await;
        assert_eq!(
            queued(&store).await,
            ["default.db Load", "default.db Start"]
        );
        assert_eq!(
            requirements_met(&store, "web").await.2,
            "requires db, which is not Running yet (default.db)"
        );
        report(&store, &mut sched, "db", db, |c| {
            c.phase = Some(Phase::Running)
        })
        .await;
        assert_eq!(queued(&store).await, ["default.web Start"]);
        assert_eq!(requirements_met(&store, "web").await.0, "True");
        assert_eq!(
            sched.dependents(&PackageKey::from_issued("default.db".into())),
            [PackageKey::from_issued("default.web".into())]
        );

        // A new version starts over: only Load, and the scheduler decides again
        // once it is loaded.
        let mut newer = spec("web");
        newer.version = "2.0.0".into();
        store
            .update(newer.desired(), &mut sched, "t", |prev, key, g| {
                plan(&newer, prev, key, g)
            })
            .await
            .unwrap()
            .map_err(|_| "not planned")
            .unwrap();
        assert_eq!(
            queued(&store).await,
            ["default.web Disable", "default.web Load"]
        );
        let (status, reason, _) = requirements_met(&store, "web").await;
        assert_eq!((status.as_str(), reason.as_str()), ("Unknown", "NotLoaded"));
        let key = PackageKey::from_issued("default.web".into());
        let row = store.get(&key).await.unwrap().unwrap();
        assert!(!row.enabled && row.loaded.is_none());
    }

    /// One transaction of reports: each write is applied, found stale or refused as it would be
    /// alone, in order (a later write of the batch sees an earlier one's change), and a stale
    /// or refused one changes nothing.
    async fn a_batch_of_reports_answers_each_as_it_would_alone(db: TestDb) {
        let store = Store::open(&db.url()).await.unwrap();
        let mut sched = store
            .scheduler(semver::Version::new(1, 30, 0))
            .await
            .unwrap();
        let a = install(&store, &mut sched, "a").await;
        let b = install(&store, &mut sched, "b").await;
        let key = |n: &str| PackageKey::from_issued(format!("default.{n}"));
        let modify = |name: &str, g: Generation, error: &'static str| Write {
            key: key(name),
            generation: g,
            op: WriteOp::Modify(Box::new(move |row| {
                let mut change = Change::new(g);
                change.error = Some(format!("{}{error}", row.last_error));
                Some(change.apply(row, "t"))
            })),
            span: tracing::Span::none(),
        };
        let mut writes = vec![
            modify("a", a, "first"),
            // The same package again: it sees the first write.
            modify("a", a, "-second"),
            // An older generation: stale.
            modify("b", Generation::new(b.get() - 1), "never"),
            Write {
                key: key("b"),
                generation: b,
                op: WriteOp::Modify(Box::new(|_| None)),
                span: tracing::Span::none(),
            },
            // Not being removed: nothing to delete.
            Write {
                key: key("b"),
                generation: b,
                op: WriteOp::Delete,
                span: tracing::Span::none(),
            },
            modify("missing", a, "never"),
        ];
        let outcomes: Vec<Outcome> = store
            .write_batch(&mut sched, "t", &mut writes)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            outcomes,
            [
                Outcome::Applied,
                Outcome::Applied,
                Outcome::Stale,
                Outcome::Refused,
                Outcome::Stale,
                Outcome::Stale,
            ]
        );
        let error = |n: &str| {
            let store = store.clone();
            let k = key(n);
            async move { store.get(&k).await.unwrap().unwrap().last_error }
        };
        assert_eq!(error("a").await, "first-second");
        assert_eq!(error("b").await, "");
    }

    /// A write PostgreSQL refuses (text with a NUL byte; reports are cleaned of those at the
    /// edge, see `convert::report`) fails alone: the others of its batch are written.
    #[tokio::test]
    async fn a_write_that_cannot_be_written_does_not_fail_the_rest_of_its_batch() {
        let db = TestDb::postgres().await;
        let store = Store::open(&db.url()).await.unwrap();
        let mut sched = store
            .scheduler(semver::Version::new(1, 30, 0))
            .await
            .unwrap();
        let a = install(&store, &mut sched, "a").await;
        let b = install(&store, &mut sched, "b").await;
        let write = |name: &str, g: Generation, error: &'static str| Write {
            key: PackageKey::from_issued(format!("default.{name}")),
            generation: g,
            op: WriteOp::Modify(Box::new(move |row| {
                let mut change = Change::new(g);
                change.error = Some(error.to_owned());
                change.phase = Some(Phase::Downloading);
                Some(change.apply(row, "t"))
            })),
            span: tracing::Span::none(),
        };
        let mut writes = vec![
            write("a", a, "written"),
            write("a", a, "not\0written"),
            write("b", b, "written too"),
        ];
        let results = store.write_batch(&mut sched, "t", &mut writes).await;
        let shown: Vec<String> = results
            .iter()
            .map(|r| match r {
                Ok(o) => format!("{o:?}"),
                Err(_) => "Err".to_owned(),
            })
            .collect();
        assert_eq!(shown, ["Applied", "Err", "Applied"]);
        for (name, error) in [("a", "written"), ("b", "written too")] {
            let row = store
                .get(&PackageKey::from_issued(format!("default.{name}")))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                (row.last_error.as_str(), row.phase),
                (error, Phase::Downloading)
            );
        }
        // The index matches what was committed: a fresh one agrees with it.
        let fresh = store
            .scheduler(semver::Version::new(1, 30, 0))
            .await
            .unwrap();
        assert_eq!(fresh.order(), sched.order());
    }

    /// A relay deletes what it delivered and nothing else: a row written while it delivered
    /// stays for the next batch.
    async fn settling_deletes_only_the_delivered_rows(db: TestDb) {
        let store = Store::open(&db.url()).await.unwrap();
        let mut sched = store
            .scheduler(semver::Version::new(0, 1, 0))
            .await
            .unwrap();
        install(&store, &mut sched, "a").await;
        install(&store, &mut sched, "c").await;
        let claim = store.outbox_claim(100).await.unwrap();
        let ids: Vec<i64> = claim.rows.iter().map(|(id, _)| *id).collect();
        assert_eq!(
            ids.len(),
            2,
            "a Load each (a first generation supersedes nothing)"
        );
        // Neither a SQLite claim (no lock) nor a PostgreSQL one (row locks) stops new rows.
        install(&store, &mut sched, "b").await;
        store.outbox_settle(claim, &ids[..1]).await.unwrap();
        assert_eq!(
            queued(&store).await,
            ["default.c Load", "default.b Load"],
            "the undelivered row of the batch and the new rows stay, in order"
        );
    }

    /// Two lifecycles on one PostgreSQL database never deliver the same outbox rows, nor
    /// deliver out of order: while one relay holds the oldest rows the other gets nothing, and
    /// once they are settled it gets the rest. (SQLite serves one lifecycle: its claims do not
    /// lock, and a second claim sees the same rows.)
    async fn a_second_relay_takes_nothing_while_the_first_holds_the_oldest_rows(db: TestDb) {
        let first = Store::open(&db.url()).await.unwrap();
        let second = Store::open(&db.url()).await.unwrap();
        let mut sched = first
            .scheduler(semver::Version::new(0, 1, 0))
            .await
            .unwrap();
        for name in ["a", "b"] {
            install(&first, &mut sched, name).await;
        }
        // Each install wrote its Load.
        let held = first.outbox_claim(1).await.unwrap();
        assert_eq!(held.rows.len(), 1);
        let other = second.outbox_claim(100).await.unwrap();
        match first.dialect() {
            Dialect::Postgres => assert!(
                other.rows.is_empty(),
                "the second relay would overtake the first: {:?}",
                other.rows
            ),
            Dialect::Sqlite => assert_eq!(other.rows.len(), 2),
        }
        drop(other);
        let ids: Vec<i64> = held.rows.iter().map(|(id, _)| *id).collect();
        first.outbox_settle(held, &ids).await.unwrap();
        let rest = second.outbox_claim(100).await.unwrap();
        let kinds: Vec<&str> = rest.rows.iter().map(|(_, body)| body.as_str()).collect();
        assert_eq!(kinds.len(), 1, "{kinds:?}");
        assert!(kinds.iter().all(|b| b.contains("default.b")), "{kinds:?}");
    }

    /// Two stores (two lifecycles) updating one package at once: each Update gets its own
    /// generation, and the stored row is the one of the newest.
    async fn concurrent_updates_of_one_package_from_two_stores_get_distinct_generations(
        db: TestDb,
    ) {
        let platform = semver::Version::new(0, 1, 0);
        let one = Store::open(&db.url()).await.unwrap();
        let two = Store::open(&db.url()).await.unwrap();
        let (mut s1, mut s2) = (
            one.scheduler(platform.clone()).await.unwrap(),
            two.scheduler(platform).await.unwrap(),
        );
        let mut generations = Vec::new();
        for round in 0..5 {
            let (a, b) = tokio::join!(
                set(
                    &one,
                    &mut s1,
                    serde_json::json!({"store": 1, "round": round})
                ),
                set(
                    &two,
                    &mut s2,
                    serde_json::json!({"store": 2, "round": round})
                )
            );
            generations.extend([a, b]);
        }
        let mut sorted: Vec<i64> = generations.iter().map(|(g, _)| *g).collect();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, (1..=10).collect::<Vec<i64>>(), "{generations:?}");
        let key = PackageKey::from_issued("default.web".into());
        let row = one.get(&key).await.unwrap().unwrap();
        assert_eq!(row.generation.get(), 10);
        let newest = generations.iter().find(|(g, _)| *g == 10).unwrap();
        assert_eq!(
            row.settings, newest.1,
            "the newest Update's settings are stored"
        );
    }

    /// Updates package `web` to `settings`: its generation and the settings.
    async fn set(
        store: &Store,
        sched: &mut Scheduler,
        settings: serde_json::Value,
    ) -> (i64, serde_json::Value) {
        let mut spec = spec("web");
        spec.settings = settings.clone();
        let outcome = store
            .update(spec.desired(), sched, "t", |prev, key, g| {
                plan(&spec, prev, key, g)
            })
            .await
            .unwrap()
            .map_err(|_| "not planned")
            .unwrap();
        (outcome.generation.get(), settings)
    }

    /// Keys are listed bytewise on both engines, so pages of List mean the same on both.
    async fn packages_are_listed_in_byte_order_of_their_keys(db: TestDb) {
        let store = Store::open(&db.url()).await.unwrap();
        let mut sched = store
            .scheduler(semver::Version::new(0, 1, 0))
            .await
            .unwrap();
        for name in ["b-x", "bx", "a", "b"] {
            install(&store, &mut sched, name).await;
        }
        let keys = |rows: Vec<PackageRow>| -> Vec<String> {
            rows.into_iter()
                .map(|r| r.key.as_str().to_owned())
                .collect()
        };
        assert_eq!(
            keys(store.list().await.unwrap()),
            ["default.a", "default.b", "default.b-x", "default.bx"]
        );
        assert_eq!(
            keys(store.list_after("default.b", 2).await.unwrap()),
            ["default.b-x", "default.bx"]
        );
    }
}
