//! `berth-lifecycle-core`: lifecycle's domain, and the engine that decides every change to
//! package state. Pure and synchronous: no gRPC, no SQL, no Kubernetes (the workspace's
//! layering test, `tests/tests/layers.rs`, keeps tonic, prost, sqlx and kube out of its
//! dependency tree), and the clock only where [`Timestamp::now`] is called by the service.
//!
//! The service (`berth-lifecycle`) parses requests and reports into these types at its edge,
//! runs each write as a unit of work around [`engine::Engine::apply`] (load the rows, apply,
//! save them and the work to the outbox in one transaction), and turns the results back into
//! gRPC answers.
//!
//! # Layout
//! - [`model`]: what a package is ([`Package`], its identity, conditions, typed values);
//! - [`engine`]: [`engine::Engine::apply`], a change in, the writes and the work out;
//! - [`update`]: the Update decision; [`report`]: what a worker's report changes;
//! - [`scheduler`]: when a loaded package is enabled, in which order;
//! - [`flows`]: which tasks each state change implies; [`task`]: broker work;
//! - [`conversion`]: what a settings conversion's result means for a write.

pub mod conversion;
pub mod engine;
pub mod flows;
pub mod model;
pub mod report;
pub mod scheduler;
pub mod task;
pub mod update;

pub use engine::{Change, Effects, Engine, Outcome, Refused, Rows, Write};
pub use model::{
    Generation, HookState, Kind, Owner, Package, PackageId, PackageKey, Phase, Timestamp,
    VersionRequest, condition, id, owner, time,
};
