//! Who may call what: the one table of internal RPCs and the roles allowed to call each, and
//! the tower layer every internal server applies it with.
//!
//! The caller's role is read from its TLS client certificate (verified against the CA during
//! the handshake; see [`crate::tls`]). A call without a certificate is refused with
//! `Unauthenticated`, a call from a role the table does not list with `PermissionDenied`
//! naming the role and the RPC. Health checks are open; reflection needs any berth role; an RPC
//! the table does not know is refused (a new RPC must be added here to be callable).

use std::task::{Context, Poll};

use futures::future::{Either, Ready, ready};
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};

use crate::tls::{Role, der_role};

/// What a path requires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Anyone, even without a certificate.
    Open,
    /// Any caller with a berth certificate.
    AnyRole,
    /// Only these roles.
    Roles(&'static [Role]),
}

use Role::{Controller, Gateway, Hookevent, Lifecycle, Operator, Release, Worker};

/// Every internal RPC and who may call it. Lifecycle serves the gateway (the public API's
/// calls), workers (their reports) and release and hookevent (what a package is); the broker takes work from lifecycle and hookevent and
/// hands it to workers; release and hookevent serve workers (and release the operator's
/// `berth release` commands).
const TABLE: &[(&str, &[Role])] = &[
    // berth.queue.v1.Broker
    ("/berth.queue.v1.Broker/Enqueue", &[Lifecycle, Hookevent]),
    ("/berth.queue.v1.Broker/Supersede", &[Lifecycle]),
    ("/berth.queue.v1.Broker/Lease", &[Worker]),
    ("/berth.queue.v1.Broker/Heartbeat", &[Worker]),
    ("/berth.queue.v1.Broker/Complete", &[Worker]),
    ("/berth.queue.v1.Broker/Fail", &[Worker]),
    ("/berth.queue.v1.Broker/Defer", &[Worker]),
    ("/berth.queue.v1.Broker/Dump", &[Lifecycle, Operator]),
    // berth.lifecycle.v1.Lifecycle
    ("/berth.lifecycle.v1.Lifecycle/Update", &[Gateway]),
    ("/berth.lifecycle.v1.Lifecycle/Remove", &[Gateway]),
    ("/berth.lifecycle.v1.Lifecycle/Suspend", &[Gateway]),
    ("/berth.lifecycle.v1.Lifecycle/Dump", &[Gateway]),
    // The controller validates settings at admission and follows the packages it made.
    (
        "/berth.lifecycle.v1.Lifecycle/ValidateSettings",
        &[Gateway, Controller],
    ),
    ("/berth.lifecycle.v1.Lifecycle/Get", &[Gateway, Controller]),
    ("/berth.lifecycle.v1.Lifecycle/List", &[Gateway, Controller]),
    (
        "/berth.lifecycle.v1.Lifecycle/Watch",
        &[Gateway, Controller],
    ),
    // Only the controller speaks for berth.io resources (the owner it names).
    ("/berth.lifecycle.v1.Lifecycle/UpdateOwned", &[Controller]),
    ("/berth.lifecycle.v1.Lifecycle/RemoveOwned", &[Controller]),
    ("/berth.lifecycle.v1.Lifecycle/SuspendOwned", &[Controller]),
    // ... and for PackageRepository resources.
    ("/berth.lifecycle.v1.Lifecycle/PutRepository", &[Controller]),
    (
        "/berth.lifecycle.v1.Lifecycle/DeleteRepository",
        &[Controller],
    ),
    // Release and hookevent look a package's kind and namespace up themselves (`scope`).
    (
        "/berth.lifecycle.v1.Lifecycle/GetSpec",
        &[Worker, Release, Hookevent],
    ),
    ("/berth.lifecycle.v1.Lifecycle/Report", &[Worker]),
    ("/berth.lifecycle.v1.Lifecycle/ReportBatch", &[Worker]),
    ("/berth.lifecycle.v1.Lifecycle/AnswerValidation", &[Worker]),
    (
        "/berth.lifecycle.v1.Lifecycle/ReportClusterVersion",
        &[Release],
    ),
    (
        "/berth.lifecycle.v1.Lifecycle/ReportReleaseHealth",
        &[Release],
    ),
    (
        "/berth.lifecycle.v1.Lifecycle/ReportOperatorsHealth",
        &[Hookevent],
    ),
    // berth.hookevent.v1.HookEvents. A hookevent replica forwards a package's calls to the
    // replica owning the package's shard (not ApplyObjectOperations: any replica runs it).
    (
        "/berth.hookevent.v1.HookEvents/SetBindings",
        &[Worker, Hookevent],
    ),
    (
        "/berth.hookevent.v1.HookEvents/RemoveBindings",
        &[Worker, Hookevent],
    ),
    (
        "/berth.hookevent.v1.HookEvents/GetSnapshots",
        &[Worker, Hookevent],
    ),
    (
        "/berth.hookevent.v1.HookEvents/SynchronizationDone",
        &[Worker, Hookevent],
    ),
    (
        "/berth.hookevent.v1.HookEvents/AdoptGeneration",
        &[Worker, Hookevent],
    ),
    (
        "/berth.hookevent.v1.HookEvents/StartOperators",
        &[Worker, Hookevent],
    ),
    (
        "/berth.hookevent.v1.HookEvents/GetViews",
        &[Gateway, Hookevent],
    ),
    (
        "/berth.hookevent.v1.HookEvents/WatchViews",
        &[Gateway, Hookevent],
    ),
    (
        "/berth.hookevent.v1.HookEvents/ApplyObjectOperations",
        &[Worker],
    ),
    (
        "/berth.hookevent.v1.HookEvents/AnswerWebhook",
        &[Worker, Hookevent],
    ),
    // berth.release.v1.Releases
    ("/berth.release.v1.Releases/Install", &[Worker]),
    ("/berth.release.v1.Releases/Uninstall", &[Worker]),
    ("/berth.release.v1.Releases/Status", &[Worker, Operator]),
    // Not workers: a Render without a package is not confined (the operator's `berth release
    // render`). A worker's Plan (a ValidateRun's dry run) must name its package, and is
    // confined as an install of it would be (`caller_role`).
    ("/berth.release.v1.Releases/Render", &[Operator]),
    ("/berth.release.v1.Releases/Plan", &[Operator, Worker]),
    ("/berth.release.v1.Releases/History", &[Worker, Operator]),
    ("/berth.release.v1.Releases/Rollback", &[Operator]),
    ("/berth.release.v1.Releases/ApplyCrds", &[Worker]),
    // A package's Kubernetes identity: only workers, for the package of their task (release
    // reads what the package is from lifecycle).
    ("/berth.release.v1.Releases/EnsurePrincipal", &[Worker]),
    ("/berth.release.v1.Releases/RemovePrincipal", &[Worker]),
    ("/berth.release.v1.Releases/MintToken", &[Worker]),
    // Lifecycle's scheduler checks `requirements.kubernetes` against it.
];

/// What calling `path` (`/package.Service/Method`) requires; `None` for an RPC nobody may call.
pub fn access(path: &str) -> Option<Access> {
    if path.starts_with("/grpc.health.v1.Health/") {
        return Some(Access::Open);
    }
    if path.starts_with("/grpc.reflection.") {
        return Some(Access::AnyRole);
    }
    TABLE
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, roles)| Access::Roles(roles))
}

/// The RPCs the table names (`/package.Service/Method`). `berth-clients`, which knows the
/// contracts, checks them against the compiled descriptor set: the table names RPCs as text so
/// that this crate builds without berth's protos, and that test keeps the text true.
pub fn rpcs() -> impl Iterator<Item = &'static str> {
    TABLE.iter().map(|(path, _)| *path)
}

/// Decides a call to `path` by a caller of `role` (`None`: no certificate).
pub fn check(path: &str, role: Option<Role>) -> Result<(), tonic::Status> {
    let Some(access) = access(path) else {
        return Err(tonic::Status::permission_denied(format!(
            "{path} is not callable by any role"
        )));
    };
    match (access, role) {
        (Access::Open, _) => Ok(()),
        (_, None) => Err(tonic::Status::unauthenticated(format!(
            "{path} needs a client certificate from the berth CA naming a role"
        ))),
        (Access::AnyRole, Some(_)) => Ok(()),
        (Access::Roles(roles), Some(role)) if roles.contains(&role) => Ok(()),
        (Access::Roles(roles), Some(role)) => Err(tonic::Status::permission_denied(format!(
            "role {role} may not call {path} (allowed: {})",
            roles
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// The layer applying [`check`] to every request, or nothing when `enabled` is false (a
/// plain-text server has no certificates to check).
#[derive(Clone, Copy, Debug)]
pub struct Authorize {
    enabled: bool,
}

impl Authorize {
    pub fn new(enabled: bool) -> Authorize {
        Authorize { enabled }
    }
}

impl<S> tower::Layer<S> for Authorize {
    type Service = AuthorizeService<S>;
    fn layer(&self, inner: S) -> AuthorizeService<S> {
        AuthorizeService {
            inner,
            enabled: self.enabled,
        }
    }
}

#[derive(Clone, Debug)]
pub struct AuthorizeService<S> {
    inner: S,
    enabled: bool,
}

/// The role of the caller of a request a tonic handler got: the role in the verified client
/// certificate its connection presented, if any (a handler that treats roles differently).
pub fn caller_role<T>(req: &tonic::Request<T>) -> Option<Role> {
    let certs = req.peer_certs()?;
    der_role(certs.first()?)
}

/// The role in the verified client certificate the connection presented, if any.
pub fn peer_role<B>(req: &http::Request<B>) -> Option<Role> {
    let certs = req
        .extensions()
        .get::<TlsConnectInfo<TcpConnectInfo>>()?
        .peer_certs()?;
    der_role(certs.first()?)
}

impl<S, B> tower::Service<http::Request<B>> for AuthorizeService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Either<S::Future, Ready<Result<Self::Response, S::Error>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if self.enabled
            && let Err(status) = check(req.uri().path(), peer_role(&req))
        {
            tracing::warn!(rpc = %req.uri().path(), error = %status.message(), "call refused");
            return Either::Right(ready(Ok(status.into_http())));
        }
        Either::Left(self.inner.call(req))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_decides_by_role() {
        assert!(check("/berth.queue.v1.Broker/Enqueue", Some(Lifecycle)).is_ok());
        let refused = check("/berth.queue.v1.Broker/Enqueue", Some(Worker)).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert!(
            refused.message().contains("role worker")
                && refused.message().contains("/berth.queue.v1.Broker/Enqueue"),
            "{}",
            refused.message()
        );
        let anonymous = check("/berth.lifecycle.v1.Lifecycle/Report", None).unwrap_err();
        assert_eq!(anonymous.code(), tonic::Code::Unauthenticated);
        assert!(check("/grpc.health.v1.Health/Check", None).is_ok());
        assert!(
            check(
                "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                None
            )
            .is_err()
        );
        let unknown = check("/berth.queue.v1.Broker/DropAll", Some(Operator)).unwrap_err();
        assert_eq!(unknown.code(), tonic::Code::PermissionDenied);
    }

    /// A package's identity is for the workers running its tasks: the operator, hookevent and
    /// the gateway may neither mint its tokens nor change its objects.
    #[test]
    fn only_workers_touch_principals() {
        for rpc in ["EnsurePrincipal", "RemovePrincipal", "MintToken"] {
            let path = format!("/berth.release.v1.Releases/{rpc}");
            assert!(check(&path, Some(Worker)).is_ok(), "{path}");
            for role in [Operator, Hookevent, Gateway, Lifecycle, Release] {
                let refused = check(&path, Some(role)).unwrap_err();
                assert_eq!(
                    refused.code(),
                    tonic::Code::PermissionDenied,
                    "{path} {role}"
                );
            }
        }
    }
}
