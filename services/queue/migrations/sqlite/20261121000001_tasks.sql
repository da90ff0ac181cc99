-- The task queue of berth-queue (SQLite dialect; migrations/postgres holds the same schema).
-- Every integer is a 64-bit INTEGER and no column is NULL, so one set of runtime queries
-- decodes the same way on both back ends.

-- Queued and leased tasks. `seq` gives FIFO order per queue (insertion order, not clocks).
-- A task is leased while lease_holder <> '' AND lease_until > now (milliseconds since the epoch).
CREATE TABLE tasks (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT    NOT NULL UNIQUE,
    queue         TEXT    NOT NULL,
    package       TEXT    NOT NULL,
    generation    INTEGER NOT NULL,
    kind          TEXT    NOT NULL,
    payload       TEXT    NOT NULL,
    traceparent   TEXT    NOT NULL,
    allow_failure INTEGER NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    last_error    TEXT    NOT NULL DEFAULT '',
    enqueued_at   INTEGER NOT NULL,
    not_before    INTEGER NOT NULL,
    lease_holder  TEXT    NOT NULL DEFAULT '',
    lease_until   INTEGER NOT NULL DEFAULT 0,
    fence         INTEGER NOT NULL DEFAULT 0,
    cancelled     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX tasks_queue_seq ON tasks (queue, seq);
CREATE INDEX tasks_package_generation ON tasks (package, generation);
-- Cancelled tasks are rare; the partial index lets every Lease reap them cheaply.
CREATE INDEX tasks_cancelled ON tasks (lease_until) WHERE cancelled = 1;

-- Bounded record of finished tasks (done, dropped after failure, superseded, cancelled).
-- It also makes Enqueue idempotent for ids that already finished, within its window.
CREATE TABLE task_history (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    id          TEXT    NOT NULL,
    queue       TEXT    NOT NULL,
    package     TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    attempts    INTEGER NOT NULL,
    error       TEXT    NOT NULL,
    finished_at INTEGER NOT NULL
);
CREATE INDEX task_history_id ON task_history (id);
