//! The databases the store tests run on: each test runs twice, on a SQLite file and on a fresh
//! PostgreSQL server (`berth-testpg`), as `sqlite::<name>` and `postgres::<name>`.

/// A test's database, deleted (or its server stopped) on drop.
pub enum TestDb {
    Sqlite(tempfile::TempDir),
    Postgres(berth_testpg::PgServer),
}

impl TestDb {
    pub fn sqlite() -> TestDb {
        TestDb::Sqlite(tempfile::tempdir().expect("temp dir"))
    }

    pub async fn postgres() -> TestDb {
        TestDb::Postgres(berth_testpg::PgServer::start().await)
    }

    /// The URL a store opens; the same database every time it is asked.
    pub fn url(&self) -> String {
        match self {
            TestDb::Sqlite(dir) => {
                format!("sqlite://{}", dir.path().join("lifecycle.db").display())
            }
            TestDb::Postgres(server) => server.url(),
        }
    }
}

/// Runs each `async fn(TestDb)` of the enclosing module on both engines.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test]
            async fn $name() {
                super::$name($crate::test_db::TestDb::sqlite()).await
            })*
        }
        mod postgres {
            $(#[tokio::test]
            async fn $name() {
                super::$name($crate::test_db::TestDb::postgres().await).await
            })*
        }
    };
}
pub(crate) use on_both_backends;
