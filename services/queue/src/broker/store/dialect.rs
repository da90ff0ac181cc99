//! Everything that differs between the SQLite and PostgreSQL back ends, in one place.
//!
//! The queries themselves are shared: both engines accept `$n` placeholders, `RETURNING`,
//! `ON CONFLICT DO NOTHING` and partial indexes, and the schema uses only 64-bit integers and
//! text. What differs is how a writing transaction starts, how rows are locked, the pool size
//! and the DDL of the migrations.

use sqlx::migrate::Migrator;

use super::StoreError;

/// The PostgreSQL NOTIFY channel that [`Dialect::change_signal`] uses.
pub const CHANGE_CHANNEL: &str = "berth_queue";

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/postgres");

/// The SQL engine behind a [`super::Store`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// Picks the engine from a database URL's scheme.
    pub fn from_url(url: &str) -> Result<Self, StoreError> {
        let scheme = url.split(':').next().unwrap_or_default();
        match scheme {
            "sqlite" => Ok(Dialect::Sqlite),
            "postgres" | "postgresql" => Ok(Dialect::Postgres),
            _ => Err(StoreError::UnsupportedUrl {
                scheme: scheme.to_owned(),
            }),
        }
    }

    /// The URL to connect with. A SQLite URL without a `mode` gets `mode=rwc`, so the database
    /// file is created on first start instead of failing.
    pub fn connect_url(self, url: &str) -> String {
        match self {
            Dialect::Sqlite if !url.contains("mode=") && !url.contains(":memory:") => {
                let separator = if url.contains('?') { '&' } else { '?' };
                format!("{url}{separator}mode=rwc")
            }
            _ => url.to_owned(),
        }
    }

    pub fn migrator(self) -> &'static Migrator {
        match self {
            Dialect::Sqlite => &SQLITE_MIGRATIONS,
            Dialect::Postgres => &POSTGRES_MIGRATIONS,
        }
    }

    /// How a transaction that will write starts.
    ///
    /// SQLite: `BEGIN IMMEDIATE` takes the write lock up front. A plain (deferred) `BEGIN` that
    /// reads first and writes later can fail with `SQLITE_BUSY` at the upgrade without waiting.
    /// PostgreSQL: row locks (`FOR UPDATE`) do the job inside a normal transaction.
    pub fn begin_write(self) -> &'static str {
        match self {
            Dialect::Sqlite => "BEGIN IMMEDIATE",
            Dialect::Postgres => "BEGIN",
        }
    }

    /// Pool size. SQLite admits one writer at a time and nearly every broker call writes, so
    /// one connection avoids busy-wait retries (and an in-memory database must stay on a single
    /// connection to be one database). PostgreSQL serves many brokers and connections.
    pub fn max_connections(self) -> u32 {
        match self {
            Dialect::Sqlite => 1,
            Dialect::Postgres => 8,
        }
    }

    /// Write transactions worth running at once from one broker task (the grouped
    /// completions). SQLite has one writer and one connection; PostgreSQL flushes the WAL of
    /// concurrent commits together, so a few groups in flight share one disk flush instead of
    /// waiting for each other's. Kept below [`Dialect::max_connections`] so Lease and Enqueue
    /// always find a connection.
    pub fn concurrent_writes(self) -> usize {
        match self {
            Dialect::Sqlite => 1,
            Dialect::Postgres => 4,
        }
    }

    /// How long a pooled connection may live. SQLite keeps its one connection forever: an
    /// in-memory database lives exactly as long as its connection, so recycling it would
    /// silently empty the queue. PostgreSQL connections are recycled as usual.
    pub fn connection_lifetime(self) -> Option<std::time::Duration> {
        match self {
            Dialect::Sqlite => None,
            Dialect::Postgres => Some(std::time::Duration::from_secs(30 * 60)),
        }
    }

    /// The session setting of the Lease/Heartbeat connections (`Store::lease_pool`), or `None`
    /// to share the main pool. SQLite in WAL mode with `synchronous = NORMAL` does not flush on
    /// commit anyway; PostgreSQL's flush per commit is what a lease need not wait for.
    pub fn lease_session_setup(self) -> Option<&'static str> {
        match self {
            Dialect::Sqlite => None,
            Dialect::Postgres => Some("SET synchronous_commit = off"),
        }
    }

    /// How a write transaction starts whose commit may return before it is flushed to disk.
    /// For writes whose loss in a database crash only repeats work (completions: the task runs
    /// again); never for Enqueue or Supersede. On PostgreSQL the setting travels with the BEGIN,
    /// in one round trip. SQLite in WAL mode with `synchronous = NORMAL` does not flush on
    /// commit anyway.
    pub fn begin_relaxed(self) -> &'static str {
        match self {
            Dialect::Sqlite => self.begin_write(),
            Dialect::Postgres => "BEGIN; SET LOCAL synchronous_commit = off",
        }
    }

    /// Size of the separate Lease/Heartbeat pool (PostgreSQL).
    pub fn lease_connections(self) -> u32 {
        4
    }

    /// Statements run once on each new connection.
    pub fn connection_setup(self) -> &'static [&'static str] {
        match self {
            // WAL lets Dump read while a lease writes; the busy timeout covers other processes
            // (a second broker or an operator's sqlite3 shell) holding the lock briefly.
            // synchronous=NORMAL in WAL mode survives any process crash; only an OS crash or
            // power loss can drop the last commits.
            Dialect::Sqlite => &[
                "PRAGMA journal_mode = WAL",
                "PRAGMA busy_timeout = 5000",
                "PRAGMA synchronous = NORMAL",
            ],
            // The planner's statistics of a queue table are always stale (thousands of rows
            // come and go between two ANALYZE runs), and its guesses went wrong both ways: a
            // sequential scan over every dead row to find 100 heads, and bitmap scans, which
            // never mark index entries of dead rows as dead, so every Lease visited thousands of
            // dead rows through the churning `tasks_heads` index. Plain index scans mark them as
            // they pass and skip them afterwards, and every statement here has one (see
            // `settle::lease_match`), so these connections are told to prefer them.
            Dialect::Postgres => &["SET enable_bitmapscan = off", "SET enable_seqscan = off"],
        }
    }

    /// A statement that, run inside a transaction, tells every broker listening on the same
    /// database (PostgreSQL LISTEN) that tasks may have become ready once it commits. SQLite
    /// serves a single broker, whose in-process wake-up suffices.
    pub fn change_signal(self) -> Option<&'static str> {
        match self {
            Dialect::Sqlite => None,
            // The channel must be CHANGE_CHANNEL (checked by a test).
            Dialect::Postgres => Some("NOTIFY berth_queue"),
        }
    }

    /// Whether Enqueue serialises itself per queue until commit (see `write::lock_queues`).
    ///
    /// PostgreSQL hands out `seq` values when rows are inserted, not when they commit. Two
    /// concurrent Enqueues into one queue could commit out of order: the later-numbered task
    /// becomes visible first, is leased, and then the earlier one appears as the queue's head
    /// and is leased too, breaking "one running task per queue". Holding a per-queue lock from
    /// insert to commit makes `seq` order equal commit order within a queue (which the queue
    /// head marks rely on, see `heads`). SQLite writers are serialised anyway.
    pub fn locks_queues(self) -> bool {
        match self {
            Dialect::Sqlite => false,
            Dialect::Postgres => true,
        }
    }

    /// Picks the statement for this engine: `sqlite` has no row locks, `postgres` adds
    /// `FOR UPDATE [SKIP LOCKED]` so concurrent brokers never hand out the same row.
    pub fn pick(self, sqlite: &'static str, postgres: &'static str) -> &'static str {
        match self {
            Dialect::Sqlite => sqlite,
            Dialect::Postgres => postgres,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_selects_the_engine() {
        assert_eq!(
            Dialect::from_url("sqlite::memory:").ok(),
            Some(Dialect::Sqlite)
        );
        assert_eq!(
            Dialect::from_url("sqlite:///tmp/q.db?mode=rwc").ok(),
            Some(Dialect::Sqlite)
        );
        assert_eq!(
            Dialect::from_url("postgres://u@h/db").ok(),
            Some(Dialect::Postgres)
        );
        assert!(matches!(
            Dialect::from_url("mysql://x"),
            Err(StoreError::UnsupportedUrl { .. })
        ));
    }

    #[test]
    fn change_signal_uses_the_listened_channel() {
        assert_eq!(
            Dialect::Postgres.change_signal(),
            Some(format!("NOTIFY {CHANGE_CHANNEL}").as_str())
        );
        assert_eq!(Dialect::Sqlite.change_signal(), None);
    }

    #[test]
    fn sqlite_files_are_created_unless_a_mode_is_given() {
        assert_eq!(
            Dialect::Sqlite.connect_url("sqlite://q.db"),
            "sqlite://q.db?mode=rwc"
        );
        assert_eq!(
            Dialect::Sqlite.connect_url("sqlite://q.db?cache=shared"),
            "sqlite://q.db?cache=shared&mode=rwc"
        );
        assert_eq!(
            Dialect::Sqlite.connect_url("sqlite://q.db?mode=ro"),
            "sqlite://q.db?mode=ro"
        );
        assert_eq!(
            Dialect::Sqlite.connect_url("sqlite::memory:"),
            "sqlite::memory:"
        );
    }
}
