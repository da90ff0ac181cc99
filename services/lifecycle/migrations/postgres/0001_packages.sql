-- Package state owned by the lifecycle service (the only writer). The PostgreSQL twin of
-- ../sqlite/0001_packages.sql: the same tables and columns.
CREATE TABLE IF NOT EXISTS packages (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    namespace TEXT NOT NULL,
    repository TEXT NOT NULL,
    package TEXT NOT NULL,
    version TEXT NOT NULL,
    generation BIGINT NOT NULL,
    observed_generation BIGINT NOT NULL DEFAULT 0,
    settings TEXT NOT NULL,
    phase TEXT NOT NULL,
    conditions TEXT NOT NULL DEFAULT '[]',
    values_json TEXT NOT NULL DEFAULT '{}',
    values_patch TEXT NOT NULL DEFAULT '[]',
    -- NULL until the package is loaded; the JSON of its settings schema, or 'null' when it has none.
    settings_schema TEXT,
    -- The version the settings schema belongs to.
    schema_version TEXT,
    hooks TEXT NOT NULL DEFAULT '[]',
    last_error TEXT NOT NULL DEFAULT '',
    removing BIGINT NOT NULL DEFAULT 0
);

-- Generations survive a Remove, so a re-created package always gets a newer generation and
-- supersedes whatever the old incarnation still has queued.
CREATE TABLE IF NOT EXISTS generations (
    key TEXT PRIMARY KEY,
    generation BIGINT NOT NULL
);

-- Transactional outbox: a state change and the broker calls it implies commit together; the relay
-- delivers them in order (Supersede before Enqueue) and deletes them once the broker accepted.
CREATE TABLE IF NOT EXISTS outbox (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    body TEXT NOT NULL
);
