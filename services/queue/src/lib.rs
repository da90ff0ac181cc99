//! berth-queue: the durable task queue, generic over what its tasks do.
//!
//! - [`broker`] stores tasks (SQLite or PostgreSQL through one code path) and serves the
//!   `berth.queue.v1.Broker` gRPC contract: FIFO per queue, one leased task per queue, leases with
//!   fencing tokens, retries with backoff at the head of the failing queue only, supersession by
//!   package generation, and compaction of hook runs.
//! - [`worker`] is the generic runtime that leases tasks from a broker over gRPC, runs them on a
//!   [`worker::Handler`], heartbeats their leases and reports the outcome.
//! - [`process`] runs the broker as a server (`serve`), and [`cli`] is its command line, shared
//!   by the `berth-queue` binary (built by berth-worker, which adds the `work` role running
//!   berth's tasks) and this crate's test broker.
//!
//! Nothing here knows what a task means: berth's task handlers live in berth-worker, so the
//! queue is built and tested without berth's package, hook or release logic.

pub mod broker;
pub mod cli;
pub mod process;
pub mod worker;
