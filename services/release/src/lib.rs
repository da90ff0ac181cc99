//! berth-release: renders Helm charts (with the engine in `berth-helm`), applies them with
//! server-side apply, records each revision as a Helm release Secret, reports status and
//! uninstalls.
//!
//! The engine knows neither tonic nor kube; what it needs from the cluster is implemented
//! here: `capabilities` discovers `.Capabilities`, and `apply::lookup` answers Helm's `lookup`
//! (`berth_helm::render::Lookup`). `apply` (SSA, dry-run, watch, delete, kstatus, lookup) and
//! `record` (Helm release Secrets) are the kube adapters; `manager` runs
//! install/upgrade, uninstall, status, plan, history, rollback and drift repair over them
//! (with `helm_hooks`); `service` is the gRPC adapter that parses requests at the edge.
//! ROLLBACK.md describes rollback's semantics.

pub mod apply;
mod capabilities;
pub mod helm_hooks;
pub mod manager;
pub mod principal;
pub mod record;
pub mod service;

pub use berth_helm::ReleaseInfo;
pub use service::ReleaseService;

/// The tonic server for [`ReleaseService`].
pub fn server(
    svc: ReleaseService,
) -> berth_proto::release::releases_server::ReleasesServer<ReleaseService> {
    berth_proto::release::releases_server::ReleasesServer::new(svc)
        .max_decoding_message_size(berth_runtime::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(berth_runtime::MAX_MESSAGE_BYTES)
}
pub mod process;
