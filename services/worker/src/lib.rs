//! berth-worker: berth's package runtime, as task handlers for the queue's worker runtime
//! (`berth_queue::worker`). What a worker does for each kind of task (DESIGN.md section 4).
//! Each handler is idempotent — delivered twice, it converges to the same state:
//!
//! | task | effect | delivered twice |
//! |---|---|---|
//! | Download | copy the package version into this worker's cache (no longer queued by lifecycle: Load does it first; runs for tasks queued before) | second copy is skipped (same digest) |
//! | Load | copy the package version into this worker's cache (as Download), read it, discover hooks, apply its CRDs, report schema and hooks, register schedule, kubernetes and webhook bindings and the operators (none registered when no hook binds one and there is no operator: `bindings::event_bound`) | second copy skipped; same report, bindings replaced |
//! | ApplySettings | bindings adopt the generation (when the hooks bind events); validate settings (schema, then the package's settings check), compute values, report them | same values |
//! | Startup | Synchronization runs of kubernetes bindings, release their events, then onStartup hooks | hooks run again (hooks must be idempotent, as in shell-operator) |
//! | Run | beforeHelm hooks → release install/upgrade → afterHelm hooks → wait ready (the global package: beforeAll hooks) | server-side apply is idempotent |
//! | Start | ApplySettings → Startup → Run in one task, the values carried from step to step (queued by lifecycle when the scheduler enables a package); a failure records the steps done as the task's payload, and the retry resumes after them | as its steps; a worker that dies mid-task leaves the steps since the last recorded failure to run again |
//! | AfterAll | the global package's afterAll hooks, apply their outputs (enqueued by lifecycle once the packages waiting for it converged) | the hooks run again |
//! | HookRun | run one hook with its binding contexts, apply its outputs | the hook runs again |
//! | WebhookRun | run one hook for an admission or conversion request and hand its answer to hookevent (never retried; skipped once the request's deadline passed) | the second answer is dropped (the request was answered or gave up) |
//! | ValidateRun | check candidate settings as an Update would (values, settings check, release Plan) and hand the verdict and plan to lifecycle; one naming a version only describes that version (schema, settings version, conversions) for an Update that changes it. Never retried; skipped once lifecycle stopped waiting; run against the newest generation (a Supersede keeps ValidateRuns) | the second answer is dropped |
//! | Disable | remove the package's bindings | no-op |
//! | Uninstall | beforeDeleteHelm → release uninstall → afterDeleteHelm | uninstall of a missing release is a no-op |
//! | Cleanup | forget the package's state and cached files | no-op |
//!
//! A task of a generation older than the package's current one is skipped: it was superseded.
//!
//! Modules, each importing only the ones listed before it:
//!
//! - [`config`]: where the other services are and the worker's local limits.
//! - `client`: the clients of lifecycle, release and hookevent, and what their refusals mean
//!   to a task (the only module besides `process` that names tonic).
//! - `hook_cache` (discovered hooks and `settings` throttles per worker), [`metrics`] (the
//!   metrics hooks write) and `task_metrics` (the worker's own, task durations): per-process
//!   state, no imports from this crate.
//! - `reporter`: a task's reports to lifecycle, gathered for at most 250 ms and sent as one
//!   `ReportBatch` (flushed before the task settles).
//! - `context`: one task's context (the package spec, clients, reporting).
//! - `package` (the package in this worker's cache, and its values) and `bindings` (what the
//!   worker tells and asks hookevent): over the context.
//! - `identity`: the package's Kubernetes identity on this worker (its principal ensured once
//!   per generation, its ServiceAccount's token for hooks, kept until near its expiry).
//! - `hooks`: running a package's hooks and applying their outputs.
//! - `flows`: the task flows, one module per group of task kinds.
//! - [`runner`]: [`TaskRunner`], the queue's `Handler` that dispatches to the flows.
//! - [`process`]: the `work` role (a worker against a broker, with its metrics port), which
//!   the `berth-queue` binary (`src/main.rs`, with the broker's `serve` role) and `berth up`
//!   run.

mod bindings;
mod client;
pub mod config;
mod context;
mod flows;
mod hook_cache;
mod hooks;
mod identity;
pub mod metrics;
mod package;
pub mod process;
mod reporter;
pub mod runner;
mod task_metrics;

pub use config::{HookIsolationArgs, LimitCaps, TaskConfig};
pub use runner::TaskRunner;
