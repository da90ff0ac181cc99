//! berth-release: renders Helm charts, applies them with server-side apply, records each
//! revision as a Helm release Secret, reports status and uninstalls.
//!
//! `render` knows neither tonic nor kube; `template` is the `helm template` front end over it
//! (chart from disk, `-f`/`--set`, Helm's output layout) used by `berth render` and the
//! compatibility oracle (`tests/oracle.rs`); `apply` (SSA, dry-run, watch, delete, kstatus,
//! lookup) and `record` (Helm release Secrets) are the kube adapters; `manager` runs
//! install/upgrade, uninstall, status, plan, history, rollback and drift repair over them
//! (with `helm_hooks`); `service` is the gRPC adapter that parses requests at the edge.
//! ROLLBACK.md describes rollback's semantics.

pub mod apply;
mod capabilities;
pub mod helm_binary;
pub mod helm_hooks;
pub mod manager;
pub mod order;
pub mod record;
pub mod render;
pub mod service;
pub mod template;

pub use render::{Manifest, RenderError, render_chart};
pub use service::ReleaseService;

/// The release a render is for, as templates see it in `.Release`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseInfo {
    pub name: String,
    pub namespace: String,
    pub revision: i32,
    pub is_install: bool,
    pub is_upgrade: bool,
}

/// The tonic server for [`ReleaseService`].
pub fn server(
    svc: ReleaseService,
) -> berth_proto::release::releases_server::ReleasesServer<ReleaseService> {
    berth_proto::release::releases_server::ReleasesServer::new(svc)
}
pub mod process;
