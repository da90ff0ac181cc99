//! Registered bindings in SQL, so a restart keeps firing them.

use berth_names::{Generation, PackageKey};
use sqlx::Row;
use sqlx::sqlite::SqlitePool;

use crate::schedule::{Schedule, parse_crontab};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("opening the hookevent database {url}: {source}")]
    Open { url: String, source: sqlx::Error },
    #[error("migrating the hookevent database: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("hookevent database: {0}")]
    Sql(#[from] sqlx::Error),
}

#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
}

impl Store {
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        // SQLite serialises writers anyway; a few connections let reads overlap.
        let pool = berth_telemetry::connect_sqlite(url, 2)
            .await
            .map_err(|source| StoreError::Open {
                url: url.to_owned(),
                source,
            })?;
        sqlx::migrate!("./migrations").run(&pool).await?;
        Ok(Store { pool })
    }

    /// Replaces a package's bindings in one transaction.
    pub async fn replace(&self, package: &str, schedules: &[Schedule]) -> Result<(), StoreError> {
        let mut tx = berth_telemetry::begin_write(&self.pool).await?;
        sqlx::query("DELETE FROM schedule_bindings WHERE package = ?")
            .bind(package)
            .execute(&mut *tx)
            .await?;
        for s in schedules {
            sqlx::query(
                "INSERT INTO schedule_bindings (package, generation, hook, binding, crontab, allow_failure, queue, include_snapshots_from, grp)
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            )
            .bind(s.package.as_str())
            .bind(s.generation.get())
            .bind(&s.hook)
            .bind(&s.binding)
            .bind(&s.crontab)
            .bind(s.allow_failure as i64)
            .bind(&s.queue)
            .bind(serde_json::to_string(&s.include_snapshots_from).unwrap_or_else(|_| "[]".into()))
            .bind(&s.group)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Records (or with `None`, forgets) the kubernetes registration of a package.
    pub async fn set_registration(
        &self,
        package: &str,
        request: Option<&[u8]>,
    ) -> Result<(), StoreError> {
        let mut tx = berth_telemetry::begin_write(&self.pool).await?;
        sqlx::query("DELETE FROM kubernetes_registrations WHERE package = ?")
            .bind(package)
            .execute(&mut *tx)
            .await?;
        if let Some(request) = request {
            sqlx::query("INSERT INTO kubernetes_registrations (package, request) VALUES (?, ?)")
                .bind(package)
                .bind(request)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Raises the generation of a package's stored schedules (never lowers it).
    pub async fn adopt_generation(
        &self,
        package: &str,
        generation: Generation,
    ) -> Result<(), StoreError> {
        let mut tx = berth_telemetry::begin_write(&self.pool).await?;
        sqlx::query(
            "UPDATE schedule_bindings SET generation = ? WHERE package = ? AND generation < ?",
        )
        .bind(generation.get())
        .bind(package)
        .bind(generation.get())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Every stored kubernetes registration, protobuf-encoded.
    pub async fn registrations(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let rows = sqlx::query("SELECT package, request FROM kubernetes_registrations")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get("package"), r.get("request")))
            .collect())
    }

    /// Every stored binding; rows whose crontab no longer parses are skipped with a warning.
    pub async fn load_all(&self) -> Result<Vec<Schedule>, StoreError> {
        let rows = sqlx::query("SELECT * FROM schedule_bindings")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let crontab: String = r.get("crontab");
                let cron = parse_crontab(&crontab)
                    .inspect_err(
                        |e| tracing::warn!(error = %e, "skipping a stored schedule binding"),
                    )
                    .ok()?;
                Some(Schedule {
                    package: PackageKey::from_issued(r.get("package")),
                    generation: Generation::new(r.get("generation")),
                    hook: r.get("hook"),
                    binding: r.get("binding"),
                    crontab,
                    allow_failure: r.get::<i64, _>("allow_failure") != 0,
                    queue: r.get("queue"),
                    include_snapshots_from: serde_json::from_str(
                        &r.get::<String, _>("include_snapshots_from"),
                    )
                    .unwrap_or_default(),
                    group: r.get("grp"),
                    cron,
                })
            })
            .collect())
    }
}
