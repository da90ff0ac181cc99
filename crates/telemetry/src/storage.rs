//! Storage plumbing shared by the services that keep SQL state.

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

/// Opens a SQLite database the way every berth service keeps its state: created when missing,
/// WAL journal (readers never block the writer), and a 10 s busy timeout so concurrent writers
/// wait instead of failing.
pub async fn connect_sqlite(
    url: &str,
    max_connections: u32,
) -> Result<sqlx::SqlitePool, sqlx::Error> {
    use std::str::FromStr;
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)?
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(std::time::Duration::from_secs(10));
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(max_connections)
        .connect_with(options)
        .await
}

/// A write transaction. SQLite's default deferred transaction starts as a reader and fails with
/// "database is locked" (without waiting) when it later needs to write while another connection
/// wrote meanwhile; taking the write lock up front makes it wait its turn instead.
pub async fn begin_write(
    pool: &sqlx::SqlitePool,
) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
    pool.begin_with("BEGIN IMMEDIATE").await
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
}
