//! Telemetry and gRPC plumbing shared by every berth process: logging and tracing set-up, W3C
//! trace-context propagation over gRPC and through queued tasks, and the common server scaffolding
//! (health, reflection, graceful shutdown).

mod context;
mod init;
mod serve;
mod spawn;
mod storage;

pub use context::{TraceContext, current_traceparent, with_traceparent};
pub use init::{LogFormat, TelemetryGuard, init};
pub use serve::{GrpcServer, grpc_server, serve_router, shutdown_on_signal};
pub use spawn::{spawn_blocking_here, spawn_here, spawn_in};
pub use storage::{begin_write, connect_sqlite, ensure_sqlite_dir};

/// Client channel type used between berth services: a tonic channel that injects the current
/// trace context into every call.
pub type Channel =
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, TraceContext>;

/// Connects lazily to `endpoint` (`http://host:port`). The first call establishes the connection,
/// so services can start in any order; every call carries the current W3C trace context.
pub fn connect_lazy(endpoint: &str) -> Result<Channel, tonic::transport::Error> {
    let channel = tonic::transport::Endpoint::from_shared(endpoint.to_owned())?
        // Every outbound call is bounded; long-polls set their own shorter deadlines.
        .timeout(std::time::Duration::from_secs(120))
        .connect_timeout(std::time::Duration::from_secs(5))
        .connect_lazy();
    Ok(tonic::service::interceptor::InterceptedService::new(
        channel,
        TraceContext,
    ))
}
