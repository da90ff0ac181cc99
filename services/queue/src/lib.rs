//! berth-queue: the durable task queue.
//!
//! - [`broker`] stores tasks (SQLite or PostgreSQL through one code path) and serves the
//!   `berth.queue.v1.Broker` gRPC contract: FIFO per queue, one leased task per queue, leases with
//!   fencing tokens, retries with backoff at the head of the failing queue only, supersession by
//!   package generation, and compaction of hook runs.
//! - [`worker`] is the generic runtime that leases tasks from a broker over gRPC, runs them on a
//!   [`worker::Handler`], heartbeats their leases and reports the outcome.

pub mod admin;
pub mod broker;
pub mod worker;
pub mod tasks;
pub mod process;
