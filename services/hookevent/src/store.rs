//! Registered bindings in SQL, so a restart keeps firing them.

use berth_names::{Generation, PackageKey};
use berth_sql::Dialect;
use sqlx::{AnyPool, Row};

use crate::schedule::{Schedule, parse_crontab};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("opening the hookevent database {url}: {source}")]
    Open {
        url: String,
        source: berth_sql::ConnectError,
    },
    #[error("migrating the hookevent database: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("hookevent database: {0}")]
    Sql(#[from] sqlx::Error),
}

#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    dialect: Dialect,
}

static SQLITE_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// Pool size: writes are rare (a package's Load, a registration), reads happen at start. On
/// SQLite a second connection lets a read overlap a write.
const CONNECTIONS: u32 = 2;

impl Store {
    /// Opens (creating if needed) and migrates the database at `url`: `sqlite://PATH`,
    /// `sqlite::memory:` or `postgres://…` (see the README's "Databases").
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        let (pool, dialect) = berth_sql::connect(url, CONNECTIONS)
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
        Ok(Store { pool, dialect })
    }

    async fn begin(&self) -> Result<sqlx::Transaction<'static, sqlx::Any>, StoreError> {
        Ok(berth_sql::begin_write(&self.pool, self.dialect).await?)
    }

    /// Makes concurrent writers of `package`'s rows take turns until `tx` ends. SQLite's
    /// `BEGIN IMMEDIATE` serialises whole transactions already; on PostgreSQL two hookevents
    /// replacing one package's rows at once would otherwise both delete (nothing the other
    /// inserted) and both insert. A transaction-scoped advisory lock keyed by the package.
    async fn lock_package(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        package: &str,
    ) -> Result<(), StoreError> {
        if self.dialect == Dialect::Postgres {
            // `execute`: the function returns `void`, which no row could be decoded from.
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(package)
                .execute(&mut **tx)
                .await?;
        }
        Ok(())
    }

    /// Replaces a package's bindings in one transaction.
    pub async fn replace(&self, package: &str, schedules: &[Schedule]) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        self.lock_package(&mut tx, package).await?;
        sqlx::query("DELETE FROM schedule_bindings WHERE package = $1")
            .bind(package)
            .execute(&mut *tx)
            .await?;
        for s in schedules {
            sqlx::query(
                "INSERT INTO schedule_bindings (package, generation, hook, binding, crontab, allow_failure, queue, include_snapshots_from, grp)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
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
        let mut tx = self.begin().await?;
        self.lock_package(&mut tx, package).await?;
        sqlx::query("DELETE FROM kubernetes_registrations WHERE package = $1")
            .bind(package)
            .execute(&mut *tx)
            .await?;
        if let Some(request) = request {
            sqlx::query("INSERT INTO kubernetes_registrations (package, request) VALUES ($1, $2)")
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
        let mut tx = self.begin().await?;
        sqlx::query(
            "UPDATE schedule_bindings SET generation = $1 WHERE package = $2 AND generation < $3",
        )
        .bind(generation.get())
        .bind(package)
        .bind(generation.get())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The stored kubernetes registration of `package`, protobuf-encoded, if any.
    pub async fn registration(&self, package: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let row = sqlx::query("SELECT request FROM kubernetes_registrations WHERE package = $1")
            .bind(package)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.get("request")))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The test's database, deleted (or its server stopped) on drop.
    enum TestDb {
        Sqlite(tempfile::TempDir),
        Postgres(berth_testpg::PgServer),
    }

    impl TestDb {
        fn url(&self) -> String {
            match self {
                TestDb::Sqlite(dir) => {
                    format!("sqlite://{}", dir.path().join("hookevent.db").display())
                }
                TestDb::Postgres(server) => server.url(),
            }
        }
    }

    /// Runs each `async fn(TestDb)` on a SQLite file and on a fresh PostgreSQL server.
    macro_rules! on_both_backends {
        ($($name:ident),* $(,)?) => {
            mod sqlite {
                $(#[tokio::test]
                async fn $name() {
                    super::$name(super::TestDb::Sqlite(tempfile::tempdir().unwrap())).await
                })*
            }
            mod postgres {
                $(#[tokio::test]
                async fn $name() {
                    super::$name(super::TestDb::Postgres(berth_testpg::PgServer::start().await)).await
                })*
            }
        };
    }

    on_both_backends!(
        bindings_and_registrations_survive_a_reopen,
        concurrent_replacements_leave_one_set_of_bindings,
    );

    fn schedule(package: &str, hook: &str, crontab: &str) -> Schedule {
        Schedule {
            package: PackageKey::from_issued(package.to_owned()),
            generation: Generation::new(1),
            hook: hook.into(),
            binding: "every-minute".into(),
            crontab: crontab.into(),
            allow_failure: true,
            queue: "main".into(),
            include_snapshots_from: vec!["pods".into()],
            group: "g".into(),
            cron: parse_crontab(crontab).unwrap(),
        }
    }

    fn summary(schedules: &[Schedule]) -> Vec<String> {
        let mut out: Vec<String> = schedules
            .iter()
            .map(|s| {
                format!(
                    "{} g{} {} {} {} {} {} {:?} {}",
                    s.package.as_str(),
                    s.generation.get(),
                    s.hook,
                    s.binding,
                    s.crontab,
                    s.allow_failure,
                    s.queue,
                    s.include_snapshots_from,
                    s.group
                )
            })
            .collect();
        out.sort();
        out
    }

    /// What a hookevent stored comes back, column for column, after a restart; a replacement
    /// replaces, a generation only rises, and a registration keeps its bytes.
    async fn bindings_and_registrations_survive_a_reopen(db: TestDb) {
        let store = Store::open(&db.url()).await.unwrap();
        store
            .replace(
                "default.a",
                &[
                    schedule("default.a", "h1", "* * * * *"),
                    schedule("default.a", "h2", "*/5 * * * *"),
                ],
            )
            .await
            .unwrap();
        store
            .replace("default.b", &[schedule("default.b", "h", "0 * * * *")])
            .await
            .unwrap();
        store
            .replace("default.a", &[schedule("default.a", "h3", "* * * * *")])
            .await
            .unwrap();
        store
            .adopt_generation("default.a", Generation::new(4))
            .await
            .unwrap();
        store
            .adopt_generation("default.a", Generation::new(2))
            .await
            .unwrap();
        let request = [0u8, 1, 2, 255, 254, b'x'];
        store
            .set_registration("default.a", Some(&request))
            .await
            .unwrap();
        store
            .set_registration("default.b", Some(b"old"))
            .await
            .unwrap();
        store.set_registration("default.b", None).await.unwrap();
        drop(store);

        let store = Store::open(&db.url()).await.unwrap();
        assert_eq!(
            summary(&store.load_all().await.unwrap()),
            [
                "default.a g4 h3 every-minute * * * * * true main [\"pods\"] g",
                "default.b g1 h every-minute 0 * * * * true main [\"pods\"] g",
            ]
        );
        assert_eq!(
            store.registrations().await.unwrap(),
            [("default.a".to_owned(), request.to_vec())]
        );
        assert_eq!(
            store.registration("default.a").await.unwrap(),
            Some(request.to_vec())
        );
        assert_eq!(store.registration("default.b").await.unwrap(), None);
    }

    /// Two hookevents replacing one package's bindings at once end with one of the two sets,
    /// never both.
    async fn concurrent_replacements_leave_one_set_of_bindings(db: TestDb) {
        let one = Store::open(&db.url()).await.unwrap();
        let two = Store::open(&db.url()).await.unwrap();
        let first: Vec<Schedule> = (0..20)
            .map(|i| schedule("default.a", &format!("one-{i}"), "* * * * *"))
            .collect();
        let second: Vec<Schedule> = (0..20)
            .map(|i| schedule("default.a", &format!("two-{i}"), "* * * * *"))
            .collect();
        for _ in 0..5 {
            let (a, b) = tokio::join!(
                one.replace("default.a", &first),
                two.replace("default.a", &second)
            );
            a.unwrap();
            b.unwrap();
            let stored = summary(&one.load_all().await.unwrap());
            assert!(
                stored == summary(&first) || stored == summary(&second),
                "{} rows: {stored:?}",
                stored.len()
            );
            let (a, b) = tokio::join!(
                one.set_registration("default.a", Some(b"one")),
                two.set_registration("default.a", Some(b"two"))
            );
            a.unwrap();
            b.unwrap();
            assert_eq!(one.registrations().await.unwrap().len(), 1);
        }
    }
}
