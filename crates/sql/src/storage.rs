//! Opening the database of a service that keeps SQL state.

/// Creates the parent directory of a `sqlite://PATH` database file, so a fresh data directory
/// works without a manual `mkdir`. Other URLs are left alone.
pub fn ensure_sqlite_dir(url: &str) -> std::io::Result<()> {
    let Some(path) = url.strip_prefix("sqlite://") else {
        return Ok(());
    };
    let path = path.split('?').next().unwrap_or(path);
    match std::path::Path::new(path).parent() {
        Some(parent) if !parent.as_os_str().is_empty() => std::fs::create_dir_all(parent),
        _ => Ok(()),
    }
}

/// The SQL engine behind a service's database URL: `sqlite:` (the embedded default) or
/// `postgres:`/`postgresql:` (a shared server, for services that may run as several replicas).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// A database URL whose scheme no berth service stores its state in.
#[derive(Debug, thiserror::Error)]
#[error(
    "unsupported database URL scheme {scheme:?}: expected sqlite://PATH, sqlite::memory: or postgres://…"
)]
pub struct UnsupportedUrl {
    pub scheme: String,
}

impl Dialect {
    /// Picks the engine from a database URL's scheme.
    pub fn from_url(url: &str) -> Result<Dialect, UnsupportedUrl> {
        let scheme = url.split(':').next().unwrap_or_default();
        match scheme {
            "sqlite" => Ok(Dialect::Sqlite),
            "postgres" | "postgresql" => Ok(Dialect::Postgres),
            _ => Err(UnsupportedUrl {
                scheme: scheme.to_owned(),
            }),
        }
    }

    /// How a transaction that will write starts. SQLite's default deferred transaction starts
    /// as a reader and fails with "database is locked" (without waiting) when it later needs to
    /// write while another connection wrote meanwhile; `BEGIN IMMEDIATE` takes the write lock up
    /// front and waits its turn. PostgreSQL locks rows as it goes (`FOR UPDATE`, upserts).
    pub fn begin_write(self) -> &'static str {
        match self {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN",
        }
    }

    /// Picks the statement for this engine.
    pub fn pick(self, sqlite: &'static str, postgres: &'static str) -> &'static str {
        match self {
            Dialect::Sqlite => sqlite,
            Dialect::Postgres => postgres,
        }
    }

    /// `ORDER BY` suffix that sorts text by its bytes on both engines (SQLite's default;
    /// PostgreSQL would otherwise sort by the database's locale).
    pub fn byte_order(self) -> &'static str {
        self.pick("", " COLLATE \"C\"")
    }
}

/// A pool over the database at `url`, the way every berth service keeps its state.
///
/// SQLite: the file is created when missing (`mode=rwc` unless the URL names a mode), WAL
/// journal (readers never block the writer), `synchronous = FULL` (a commit survives a power
/// loss: an accepted Update is never forgotten) and a 10 s busy timeout so concurrent writers
/// wait instead of failing. An in-memory
/// database (`sqlite::memory:`) is one connection that is never recycled: through sqlx's `Any`
/// driver every new connection would open a new, empty database.
///
/// PostgreSQL: `max_connections` connections, recycled every 30 minutes.
pub async fn connect(
    url: &str,
    max_connections: u32,
) -> Result<(sqlx::AnyPool, Dialect), ConnectError> {
    use sqlx::Executor;
    let dialect = Dialect::from_url(url)?;
    sqlx::any::install_default_drivers();
    let memory = url.contains(":memory:") || url.contains("mode=memory");
    let (max, lifetime) = match dialect {
        Dialect::Sqlite if memory => (1, None),
        Dialect::Sqlite => (max_connections, None),
        Dialect::Postgres => (
            max_connections,
            Some(std::time::Duration::from_secs(30 * 60)),
        ),
    };
    let connect_url = match dialect {
        Dialect::Sqlite if !memory && !url.contains("mode=") => {
            let separator = if url.contains('?') { '&' } else { '?' };
            format!("{url}{separator}mode=rwc")
        }
        _ => url.to_owned(),
    };
    let pool = sqlx::any::AnyPoolOptions::new()
        .max_connections(max)
        .idle_timeout(lifetime)
        .max_lifetime(lifetime)
        .acquire_timeout(CONNECT_TIMEOUT)
        .after_connect(move |conn, _meta| {
            Box::pin(async move {
                if dialect == Dialect::Sqlite {
                    for statement in [
                        "PRAGMA journal_mode = WAL",
                        "PRAGMA busy_timeout = 10000",
                        "PRAGMA synchronous = FULL",
                    ] {
                        conn.execute(statement).await?;
                    }
                }
                Ok(())
            })
        })
        .connect(&connect_url)
        .await
        .map_err(|source| ConnectError::Sql { dialect, source })?;
    Ok((pool, dialect))
}

/// `url` as it may be logged: the password of a `postgres://user:password@host/db` URL is
/// replaced by `***`.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}{path}")
        }
        _ => url.to_owned(),
    }
}

/// How long opening a database may take before we give up (covers a PostgreSQL server that
/// does not answer).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why [`connect`] failed.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Url(#[from] UnsupportedUrl),
    #[error("connecting ({dialect:?}): {source}")]
    Sql {
        dialect: Dialect,
        #[source]
        source: sqlx::Error,
    },
}

/// A write transaction (see [`Dialect::begin_write`]).
pub async fn begin_write(
    pool: &sqlx::AnyPool,
    dialect: Dialect,
) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
    pool.begin_with(dialect.begin_write()).await
}

#[cfg(test)]
mod tests {
    #[test]
    fn creates_the_parent_of_a_sqlite_file() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("a/b/queue.db");
        super::ensure_sqlite_dir(&format!("sqlite://{}?mode=rwc", db.display())).unwrap();
        assert!(dir.path().join("a/b").is_dir());
        super::ensure_sqlite_dir("sqlite::memory:").unwrap();
    }

    #[test]
    fn passwords_are_not_logged() {
        assert_eq!(
            super::redacted("postgres://berth:s3cret@db:5432/lifecycle"),
            "postgres://berth:***@db:5432/lifecycle"
        );
        for url in [
            "postgres://berth@db/x",
            "sqlite:///a/b.db",
            "sqlite::memory:",
        ] {
            assert_eq!(super::redacted(url), url);
        }
    }

    #[test]
    fn the_scheme_selects_the_engine() {
        use super::Dialect;
        for (url, dialect) in [
            ("sqlite::memory:", Dialect::Sqlite),
            ("sqlite:///var/lib/berth/l.db", Dialect::Sqlite),
            ("postgres://u:p@h:5432/db", Dialect::Postgres),
            ("postgresql://h/db", Dialect::Postgres),
        ] {
            assert_eq!(Dialect::from_url(url).ok(), Some(dialect), "{url}");
        }
        let err = Dialect::from_url("mysql://h/db").unwrap_err();
        assert!(err.to_string().contains("\"mysql\""), "{err}");
    }

    /// A file database is created on first open, and an in-memory one keeps what was written
    /// between calls (it is one connection, not one database per connection).
    #[tokio::test]
    async fn sqlite_databases_are_created_and_in_memory_ones_persist_between_calls() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("state.db");
        let url = format!("sqlite://{}", file.display());
        let (pool, dialect) = super::connect(&url, 2).await.unwrap();
        assert_eq!(dialect, super::Dialect::Sqlite);
        pool.close().await;
        assert!(file.exists());
        let (pool, _) = super::connect("sqlite::memory:", 4).await.unwrap();
        sqlx::query("CREATE TABLE t (x BIGINT)")
            .execute(&pool)
            .await
            .unwrap();
        for _ in 0..3 {
            sqlx::query("INSERT INTO t (x) VALUES (1)")
                .execute(&pool)
                .await
                .unwrap();
        }
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM t")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(n, 3);
    }
}
