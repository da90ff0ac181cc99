//! berth-release: renders Helm charts, applies them with server-side apply, records each
//! revision as a Helm release Secret, reports status and uninstalls.
//!
//! `render` knows neither tonic nor kube; `apply` (SSA, delete, kstatus, lookup) and `record`
//! (Helm release Secrets) are the kube adapters; `manager` runs install/upgrade, uninstall and
//! status over them (with `helm_hooks`); `service` is the gRPC adapter that parses requests at
//! the edge. See ROLLBACK.md for the planned Rollback RPC.

pub mod apply;
mod capabilities;
pub mod helm_hooks;
pub mod manager;
pub mod order;
pub mod record;
pub mod render;
pub mod service;

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
