//! Storage plumbing shared by the services that keep SQL state.

/// Creates the parent directory of a `sqlite://PATH` database file, so a fresh data directory
/// works without a manual `mkdir`. Other URLs are left alone.
pub fn ensure_sqlite_dir(url: &str) -> std::io::Result<()> {
    let Some(path) = url.strip_prefix("sqlite://") else { return Ok(()) };
    let path = path.split('?').next().unwrap_or(path);
    match std::path::Path::new(path).parent() {
        Some(parent) if !parent.as_os_str().is_empty() => std::fs::create_dir_all(parent),
        _ => Ok(()),
    }
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
