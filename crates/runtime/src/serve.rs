//! Common gRPC server scaffolding: every berth service serves the standard health service and
//! server reflection next to its own API, extracts trace context from incoming calls, and stops
//! gracefully when its shutdown token fires.

use std::net::SocketAddr;

use crate::authz::Authorize;
use crate::metrics::{Metrics, RpcLayer};
use crate::tls::{Role, Tls};

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;
use tower::layer::util::{Identity, Stack};

/// A tonic server builder with RPC metrics, trace-context extraction and authorisation
/// installed.
pub type GrpcServer = tonic::transport::Server<Stack<Authorize, Stack<RpcLayer, Identity>>>;

/// The router a [`GrpcServer`] builds.
pub type GrpcRouter = tonic::transport::server::Router<Stack<Authorize, Stack<RpcLayer, Identity>>>;

/// A server builder for the service of `role`, whose request spans continue the caller's trace
/// (named as `role`'s service) and whose calls are counted and timed in `metrics` (labelled
/// `service=role` and by the methods `descriptor_set` declares: the encoded
/// `FileDescriptorSet` of the services it will serve, as [`serve_router`] is given). With
/// `tls`, it serves mutual TLS with that identity and authorises every call by the caller's
/// role ([`crate::authz`]); without, plain gRPC that anyone may call (the gateway's public API,
/// which authenticates by token, and tests).
///
/// The metrics layer is outermost, so calls the authorisation refuses are counted with their
/// code too.
pub fn grpc_server(
    role: Role,
    tls: Option<&Tls>,
    metrics: &Metrics,
    descriptor_set: &'static [u8],
) -> Result<GrpcServer, tonic::transport::Error> {
    let service = role.service_name();
    let server = tonic::transport::Server::builder()
        .trace_fn(move |req| crate::context::span_for_request(req, service))
        .layer(metrics.rpc_layer(role.as_str(), descriptor_set))
        .layer(Authorize::new(tls.is_some()));
    match tls {
        Some(tls) => server.tls_config(tls.server_config()),
        None => Ok(server),
    }
}

/// Adds health (reporting SERVING for `services`) and reflection (over `descriptor_set`) to
/// `router` and serves it on `listener` until `shutdown` fires.
pub async fn serve_router(
    router: GrpcRouter,
    listener: TcpListener,
    descriptor_set: &'static [u8],
    services: &[&str],
    shutdown: CancellationToken,
) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    for service in services {
        reporter
            .set_service_status(*service, tonic_health::ServingStatus::Serving)
            .await;
    }
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    // Both reflection versions: grpcurl and older tools still ask v1alpha.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(descriptor_set)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection()
        .build_v1()
        .expect("berth's own descriptor set is valid");
    let reflection_v1alpha = reflection()
        .build_v1alpha()
        .expect("berth's own descriptor set is valid");
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    tracing::debug!(?addr, "serving gRPC");
    router
        .add_service(health)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .serve_with_incoming_shutdown(nodelay(listener), shutdown.cancelled_owned())
        .await
}

/// Accepted connections with Nagle's algorithm off (what tonic's own `serve` does, but not
/// `serve_with_incoming`): gRPC writes small frames and waits for the answer, so Nagle plus
/// delayed ACKs would add up to 40 ms to a request/response on loopback. A connection whose
/// option cannot be set is still served.
fn nodelay(
    listener: TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        if let Err(err) = conn.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY on an accepted connection");
        }
        Ok(conn)
    })
}

/// Cancels `shutdown` on SIGTERM or ctrl-c, so every process stops gracefully the same way.
pub async fn shutdown_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for SIGTERM");
                    let _ = ctrl_c.await;
                    shutdown.cancel();
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
            _ = shutdown.cancelled() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    shutdown.cancel();
}
