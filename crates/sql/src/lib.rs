//! SQL plumbing of the services that keep state (the broker, lifecycle, hookevent): which
//! engine a database URL names ([`Dialect`]), opening a pool the way every service does
//! ([`connect`]), write transactions ([`begin_write`]), and PostgreSQL LISTEN for replicas that
//! share one database ([`listen`]). Tables and queries stay in each service's store.

pub mod listen;
mod storage;

pub use storage::{
    ConnectError, Dialect, UnsupportedUrl, begin_write, connect, ensure_sqlite_dir, redacted,
};
