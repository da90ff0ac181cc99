-- The SQLite twin of ../postgres/0006_replicas.sql. A SQLite database serves one lifecycle, so
-- nothing logs package changes here (no trigger); the tables exist so both schemas match.
CREATE TABLE IF NOT EXISTS package_changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS lifecycle_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS validation_answers (
    request_id TEXT PRIMARY KEY,
    package TEXT NOT NULL,
    answer TEXT NOT NULL,
    created_ms BIGINT NOT NULL
);
