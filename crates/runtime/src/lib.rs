//! Process plumbing shared by every berth process: logging and tracing set-up, W3C
//! trace-context propagation over gRPC and through queued tasks, spawning that keeps the span,
//! the common gRPC server scaffolding (health, reflection, graceful shutdown) and client
//! channels, service identity (mutual TLS), authorisation by role, and metrics.
//!
//! It knows no berth contract (no `berth-proto`) and no storage (no sqlx): typed clients are
//! `berth-clients`, SQL plumbing `berth-sql`. A dependency test (`tests/tests/layers.rs`)
//! keeps it so.

pub mod authz;
pub mod balance;
mod context;
mod init;
pub mod metrics;
mod serve;
mod spawn;
pub mod tls;

pub use context::{TraceContext, current_traceparent, traced_request, untraced, with_traceparent};
pub use init::{LogFormat, TelemetryGuard, init, init_all_in_one};
pub use metrics::{Metrics, MetricsArgs};
pub use serve::{GrpcRouter, GrpcServer, grpc_server, serve_router, shutdown_on_signal};
pub use spawn::{spawn_blocking_here, spawn_here, spawn_in};
pub use tls::{Role, Tls, TlsArgs};

/// The largest gRPC message any berth server or client sends or accepts (both directions, every
/// service, the public API and the CLI): what one side may send, the other can read, so an
/// oversized message fails with `OutOfRange` naming this limit (at its sender, or at a server
/// that a foreign client sent it to) rather than somewhere downstream. The queue's batches and
/// leases are budgeted below it.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Client channel type used between berth services: a tonic channel that injects the current
/// trace context into every call.
pub type Channel =
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, TraceContext>;

/// The endpoint of a berth service of role `server` at `endpoint` (`http://host:port`). With
/// `tls`, the connection is mutual TLS with that identity and the server must present a
/// certificate of role `server`; `http://` is dialled as `https://` then.
pub fn endpoint(
    endpoint: &str,
    tls: Option<&Tls>,
    server: Role,
) -> Result<tonic::transport::Endpoint, tonic::transport::Error> {
    match tls {
        Some(tls) => {
            let url = match endpoint.strip_prefix("http://") {
                Some(rest) => format!("https://{rest}"),
                None => endpoint.to_owned(),
            };
            tonic::transport::Endpoint::from_shared(url)?.tls_config(tls.client_config(server))
        }
        None => tonic::transport::Endpoint::from_shared(endpoint.to_owned()),
    }
}

/// Connects lazily to the `server` at `endpoint` (`http://host:port`; see [`endpoint`] for
/// `tls`). The first call establishes the connection, so services can start in any order;
/// every call carries the current W3C trace context.
///
/// `endpoint` may name several replicas of the server, separated by commas
/// (`http://a:7001,http://b:7001`): calls are then spread over the replicas that accept
/// connections (see [`balance`]). That form must be called inside a tokio runtime.
pub fn connect_lazy(
    endpoint: &str,
    tls: Option<&Tls>,
    server: Role,
) -> Result<Channel, tonic::transport::Error> {
    // Every outbound call is bounded; long-polls set their own shorter deadlines.
    let channel = lazy_channel(
        endpoint,
        tls,
        server,
        Some(std::time::Duration::from_secs(120)),
    )?;
    Ok(tonic::service::interceptor::InterceptedService::new(
        channel,
        TraceContext,
    ))
}

/// The channel under [`connect_lazy`], without the trace context, and with `timeout` on every
/// call (`None`: calls that bound themselves, such as the workers' long-polling Lease).
/// `endpoint` may name several replicas, as for [`connect_lazy`].
pub fn lazy_channel(
    endpoint: &str,
    tls: Option<&Tls>,
    server: Role,
    timeout: Option<std::time::Duration>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let configure = |url: &str| {
        let mut e =
            self::endpoint(url, tls, server)?.connect_timeout(std::time::Duration::from_secs(5));
        if let Some(t) = timeout {
            e = e.timeout(t);
        }
        Ok::<_, tonic::transport::Error>(e)
    };
    Ok(match balance::split(endpoint) {
        Ok(list) if list.len() > 1 => {
            balance::balanced(list.into_iter().map(configure).collect::<Result<_, _>>()?)
        }
        // One endpoint, or a list that is not one (its error comes from parsing it whole).
        _ => configure(endpoint)?.connect_lazy(),
    })
}

/// Longest gRPC status message berth sends. A status message travels in an HTTP/2 header, and a
/// header block past the peer's limit (16 KiB by default) resets the stream, so the caller would
/// see a protocol error instead of the refusal.
pub const MAX_STATUS_MESSAGE_BYTES: usize = 8 << 10;

/// `text` cut to [`MAX_STATUS_MESSAGE_BYTES`]: its start and its end (where nested errors put
/// the cause) around a marker saying how much was left out.
pub fn bounded_status_message(text: String) -> String {
    if text.len() <= MAX_STATUS_MESSAGE_BYTES {
        return text;
    }
    let keep = MAX_STATUS_MESSAGE_BYTES / 2 - 64;
    let mut head = keep;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - keep;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    format!(
        "{} … [{} bytes left out] … {}",
        &text[..head],
        tail - head,
        &text[tail..]
    )
}

#[cfg(test)]
mod status_message_tests {
    use super::*;

    #[test]
    fn long_messages_keep_their_start_and_end() {
        assert_eq!(bounded_status_message("short".into()), "short");
        let long = format!("start {} é cause", "x".repeat(100_000));
        let cut = bounded_status_message(long.clone());
        assert!(cut.len() <= MAX_STATUS_MESSAGE_BYTES, "{}", cut.len());
        assert!(
            cut.starts_with("start ") && cut.ends_with("é cause"),
            "{cut}"
        );
        assert!(cut.contains("bytes left out"), "{cut}");
    }
}
