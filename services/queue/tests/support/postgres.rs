//! The throwaway PostgreSQL server of berth's tests (the `berth-testpg` crate).

pub use berth_testpg::PgServer;
