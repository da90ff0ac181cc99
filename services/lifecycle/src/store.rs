//! Package state in SQL. Every write that implies broker work (supersede, enqueue) writes the
//! matching outbox rows in the same transaction, so state and queued work never disagree.

use serde_json::Value;
use sqlx::Row;
use sqlx::sqlite::SqlitePool;

use crate::model::{Condition, ConditionType, Generation, Kind, PackageId, PackageKey, Phase};
use crate::scheduler::{self, Blocked, LoadedSpec, Node, Reason, Scheduler};
use crate::{flows, outbox};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("opening the lifecycle database {url}: {source}")]
    Open { url: String, source: sqlx::Error },
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
    pub phase: Phase,
    pub conditions: Vec<Condition>,
    pub values: Value,
    pub values_patch: Vec<Value>,
    /// `None` until loaded; `Some(None)` when loaded without a settings schema.
    pub settings_schema: Option<Option<Value>>,
    pub schema_version: Option<String>,
    pub hooks: Vec<HookState>,
    pub last_error: String,
    pub removing: bool,
    /// The scheduler enabled this load of the package (the tasks after Load were enqueued).
    pub enabled: bool,
    /// What the scheduler needs of the loaded package; `None` until this version is loaded.
    pub loaded: Option<LoadedSpec>,
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
}

#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
}

/// What an Update did, so the caller can plan the tasks.
pub struct UpdateOutcome {
    pub key: PackageKey,
    pub generation: Generation,
    /// None for a new package; otherwise the previous row.
    pub previous: Option<PackageRow>,
}

impl Store {
    /// Opens (creating if needed) and migrates the database at `url` (`sqlite://PATH` or
    /// `sqlite::memory:`).
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        // SQLite serialises writers anyway; a few connections let reads overlap.
        let pool = berth_telemetry::connect_sqlite(url, 4)
            .await
            .map_err(|source| StoreError::Open {
                url: url.to_owned(),
                source,
            })?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Store { pool })
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
        let mut tx = berth_telemetry::begin_write(&self.pool).await?;
        let previous = fetch(&mut *tx, &key).await?;
        let generation = next_generation(&mut tx, &key).await?;
        let Planned {
            phase,
            outbox,
            restart,
        } = match plan(previous.as_ref(), &key, generation) {
            Ok(planned) => planned,
            // Dropping the transaction rolls it back, generation counter included.
            Err(refused) => return Ok(Err(refused)),
        };
        let settings = spec.settings.to_string();
        sqlx::query(
            "INSERT INTO packages (key, kind, name, namespace, repository, package, version, generation, settings, phase)
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
             ON CONFLICT (key) DO UPDATE SET repository = excluded.repository, package = excluded.package,
               version = excluded.version, generation = excluded.generation, settings = excluded.settings,
               phase = excluded.phase, removing = 0, last_error = ''",
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
        .execute(&mut *tx)
        .await?;
        if restart && let Some(mut row) = fetch(&mut *tx, &key).await? {
            flows::unload(&mut row, now);
            write_row(&mut tx, &row).await?;
        }
        insert_outbox(&mut tx, &outbox).await?;
        rescheduled(&mut tx, &key, sched, now).await?;
        tx.commit().await?;
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
        plan: impl FnOnce(&PackageRow, Generation) -> Result<Vec<outbox::Row>, E>,
    ) -> Result<Result<Option<Generation>, E>, StoreError> {
        let mut tx = berth_telemetry::begin_write(&self.pool).await?;
        let Some(row) = fetch(&mut *tx, key).await? else {
            return Ok(Ok(None));
        };
        let generation = next_generation(&mut tx, key).await?;
        let outbox = match plan(&row, generation) {
            Ok(outbox) => outbox,
            Err(refused) => return Ok(Err(refused)),
        };
        sqlx::query("UPDATE packages SET generation = ?, phase = ?, removing = 1, last_error = '' WHERE key = ?")
            .bind(generation.get())
            .bind(Phase::Removing.as_str())
            .bind(key.as_str())
            .execute(&mut *tx)
            .await?;
        insert_outbox(&mut tx, &outbox).await?;
        rescheduled(&mut tx, key, sched, now).await?;
        tx.commit().await?;
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
        let rows = sqlx::query("SELECT * FROM packages WHERE key > ? ORDER BY key LIMIT ?")
            .bind(after)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(decode).collect()
    }

    pub async fn list(&self) -> Result<Vec<PackageRow>, StoreError> {
        let rows = sqlx::query("SELECT * FROM packages ORDER BY key")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(decode).collect()
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
        change: impl FnOnce(&mut PackageRow) -> Vec<outbox::Row>,
    ) -> Result<bool, StoreError> {
        let mut tx = berth_telemetry::begin_write(&self.pool).await?;
        let Some(mut row) = fetch(&mut *tx, key).await? else {
            return Ok(false);
        };
        if row.generation != generation {
            return Ok(false);
        }
        let (phase, loaded) = (row.phase, row.loaded.clone());
        let global_before = row.is_global().then(|| row.values.get(GLOBAL).cloned());
        let mut outbox = change(&mut row);
        if let Some(before) = global_before
            && row.values.get(GLOBAL) != before.as_ref()
        {
            outbox.extend(global_readers(&mut tx).await?);
        }
        write_row(&mut tx, &row).await?;
        insert_outbox(&mut tx, &outbox).await?;
        if row.phase != phase || row.loaded != loaded {
            sched.upsert(key.clone(), row.node());
            apply_pass(&mut tx, sched, now).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// The `global` package (whose values every nested package sees), if there is one.
    pub async fn global(&self) -> Result<Option<PackageRow>, StoreError> {
        let row = self
            .get(&PackageKey::from_issued(GLOBAL.to_owned()))
            .await?;
        Ok(row.filter(PackageRow::is_global))
    }

    /// Runs a scheduling pass (the cluster's version changed) and writes what it decided.
    pub async fn reschedule(&self, sched: &mut Scheduler, now: &str) -> Result<(), StoreError> {
        let mut tx = berth_telemetry::begin_write(&self.pool).await?;
        apply_pass(&mut tx, sched, now).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The scheduler's index, rebuilt from every stored package (at start, and after a write
    /// failed half-way through a pass).
    pub async fn scheduler(&self, platform: semver::Version) -> Result<Scheduler, StoreError> {
        let mut sched = Scheduler::new(platform);
        for row in self.list().await? {
            sched.upsert(row.key.clone(), row.node());
        }
        Ok(sched)
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
        let mut tx = berth_telemetry::begin_write(&self.pool).await?;
        let done =
            sqlx::query("DELETE FROM packages WHERE key = ? AND generation = ? AND removing = 1")
                .bind(key.as_str())
                .bind(generation.get())
                .execute(&mut *tx)
                .await?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        if key.as_str() == GLOBAL {
            // The global values are gone: their readers render again without them.
            let reruns = global_readers(&mut tx).await?;
            insert_outbox(&mut tx, &reruns).await?;
        }
        sched.remove(key);
        apply_pass(&mut tx, sched, now).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// The oldest undelivered outbox rows, as stored (id, body); the relay decodes them.
    pub async fn outbox_batch(&self, limit: i64) -> Result<Vec<(i64, String)>, StoreError> {
        let rows = sqlx::query("SELECT id, body FROM outbox ORDER BY id LIMIT ?")
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows.iter().map(|r| (r.get("id"), r.get("body"))).collect())
    }

    /// Writes an outbox row body as is, for tests of rows this lifecycle would not write.
    #[cfg(test)]
    pub(crate) async fn outbox_insert_raw(&self, body: &str) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO outbox (body) VALUES (?)")
            .bind(body)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn outbox_delete(&self, up_to: i64) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM outbox WHERE id <= ?")
            .bind(up_to)
            .execute(&self.pool)
            .await?;
        Ok(())
    }
}

/// Refreshes `key`'s node from its row as written so far, then runs a pass.
async fn rescheduled(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    key: &PackageKey,
    sched: &mut Scheduler,
    now: &str,
) -> Result<(), StoreError> {
    match fetch(&mut **tx, key).await? {
        Some(row) => sched.upsert(key.clone(), row.node()),
        None => sched.remove(key),
    }
    apply_pass(tx, sched, now).await
}

/// One scheduling pass: each package whose verdict changed gets its condition, phase and (once
/// enabled) its remaining tasks, in the pass's order. Only the packages whose verdict changed
/// are read and written.
async fn apply_pass(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    sched: &mut Scheduler,
    now: &str,
) -> Result<(), StoreError> {
    for (key, verdict) in sched.pass() {
        let Some(mut row) = fetch(&mut **tx, &key).await? else {
            continue;
        };
        let outbox = flows::schedule(&mut row, &verdict, now);
        write_row(tx, &row).await?;
        insert_outbox(tx, &outbox).await?;
        sched.settle(&key, &verdict);
        if let scheduler::Verdict::Enable = verdict {
            tracing::info!(package.key = %key, "requirements met: package enabled");
        }
    }
    Ok(())
}

/// The package that holds the global values and the global hooks: the module `global`.
const GLOBAL: &str = berth_package::GLOBAL_NAME;

/// A Run for every package whose chart reads the global values, when they changed: running
/// (a package on its way there renders with the new ones anyway), enabled, not being removed.
/// Packages that do not read them are left alone.
async fn global_readers(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
) -> Result<Vec<outbox::Row>, StoreError> {
    let rows = sqlx::query(
        "SELECT key, generation FROM packages
         WHERE reads_global = 1 AND phase = 'Running' AND removing = 0 AND enabled = 1 AND key <> ?",
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
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
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
        "UPDATE packages SET phase = ?, observed_generation = ?, conditions = ?, values_json = ?, values_patch = ?,
           settings_schema = ?, schema_version = ?, hooks = ?, last_error = ?, enabled = ?,
           loaded_version = ?, weight = ?, requirements = ?, reads_global = ?, settings = ? WHERE key = ?",
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
    .bind(row.key.as_str())
    .execute(&mut **tx)
    .await?;
    Ok(())
}

async fn next_generation(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    key: &PackageKey,
) -> Result<Generation, StoreError> {
    let row = sqlx::query(
        "INSERT INTO generations (key, generation) VALUES (?, 1)
         ON CONFLICT (key) DO UPDATE SET generation = generations.generation + 1
         RETURNING generation",
    )
    .bind(key.as_str())
    .fetch_one(&mut **tx)
    .await?;
    Ok(Generation::new(row.get("generation")))
}

async fn insert_outbox(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    rows: &[outbox::Row],
) -> Result<(), StoreError> {
    for row in rows {
        sqlx::query("INSERT INTO outbox (body) VALUES (?)")
            .bind(row.encode())
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

async fn fetch<'c, E>(executor: E, key: &PackageKey) -> Result<Option<PackageRow>, StoreError>
where
    E: sqlx::Executor<'c, Database = sqlx::Sqlite>,
{
    let row = sqlx::query("SELECT * FROM packages WHERE key = ?")
        .bind(key.as_str())
        .fetch_optional(executor)
        .await?;
    row.as_ref().map(decode).transpose()
}

fn decode(r: &sqlx::sqlite::SqliteRow) -> Result<PackageRow, StoreError> {
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
        phase: Phase::parse(&phase).ok_or_else(|| corrupt("phase", phase.clone()))?,
        conditions: serde_json::from_value(json("conditions")?)
            .map_err(|e| corrupt("conditions", e.to_string()))?,
        values: json("values_json")?,
        values_patch,
        settings_schema,
        schema_version: r.get("schema_version"),
        hooks: serde_json::from_value(json("hooks")?)
            .map_err(|e| corrupt("hooks", e.to_string()))?,
        last_error: r.get("last_error"),
        removing: r.get::<i64, _>("removing") != 0,
        enabled: r.get::<i64, _>("enabled") != 0,
        loaded,
        key: PackageKey::from_issued(key),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::Op;
    use crate::report::Change;
    use crate::scheduler::{Constraint, Dependency, Requirements};
    use crate::update::{UpdateSpec, plan};

    fn spec(name: &str) -> UpdateSpec {
        UpdateSpec {
            id: PackageId::new(Kind::App, name, "").unwrap(),
            repository: "/repo".into(),
            package: name.into(),
            version: "1.0.0".into(),
            settings: serde_json::json!({}),
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
        let rows = store.outbox_batch(1000).await.unwrap();
        if let Some((last, _)) = rows.last() {
            store.outbox_delete(*last).await.unwrap();
        }
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
    #[tokio::test]
    async fn a_change_of_the_global_values_reruns_their_readers() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("lifecycle.db").display());
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

    /// Loaded packages wait for their requirements, the cluster's version and a dependency
    /// reaching Running each enable what waited on them (tasks in the same transaction), and
    /// what the scheduler decided survives a restart.
    #[tokio::test]
    async fn the_scheduler_enables_packages_as_their_requirements_come_to_hold() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("lifecycle.db").display());
        let store = Store::open(&url).await.unwrap();
        let platform = semver::Version::new(0, 1, 0);
        let mut sched = store.scheduler(platform.clone()).await.unwrap();

        let web = install(&store, &mut sched, "web").await;
        assert_eq!(
            queued(&store).await,
            ["default.web Download", "default.web Load"]
        );
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

        sched.set_kubernetes(semver::Version::new(1, 31, 0));
        store.reschedule(&mut sched, "t").await.unwrap();
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
            [
                "default.db Download",
                "default.db Load",
                "default.db ApplySettings",
                "default.db Startup",
                "default.db Run"
            ]
        );
        assert_eq!(
            requirements_met(&store, "web").await.2,
            "requires db, which is not Running yet (default.db)"
        );
        report(&store, &mut sched, "db", db, |c| {
            c.phase = Some(Phase::Running)
        })
        .await;
        assert_eq!(
            queued(&store).await,
            [
                "default.web ApplySettings",
                "default.web Startup",
                "default.web Run"
            ]
        );
        assert_eq!(requirements_met(&store, "web").await.0, "True");
        assert_eq!(
            sched.dependents(&PackageKey::from_issued("default.db".into())),
            [PackageKey::from_issued("default.web".into())]
        );

        // A new version starts over: only Download and Load, and the scheduler decides again
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
            [
                "default.web Disable",
                "default.web Download",
                "default.web Load"
            ]
        );
        let (status, reason, _) = requirements_met(&store, "web").await;
        assert_eq!((status.as_str(), reason.as_str()), ("Unknown", "NotLoaded"));
        let key = PackageKey::from_issued("default.web".into());
        let row = store.get(&key).await.unwrap().unwrap();
        assert!(!row.enabled && row.loaded.is_none());
    }
}
