//! RED metrics of gRPC servers: `berth_rpc_requests_total{service,method,code}` and
//! `berth_rpc_request_duration_seconds{service,method}`, kept by a tower layer around the
//! whole server, so calls the authorisation layer refuses are counted too.
//!
//! The code is the response's `grpc-status`: from its headers when the call failed at once
//! (a trailers-only response), else from its trailers when the body ends. A server-streaming
//! call (Watch) is counted when its stream opens, with the time it took to open: a stream may
//! run for hours, and a duration of "until the client left" says nothing about the server.
//! A unary response that never reached its trailers (the client went away) counts as
//! `Canceled`.
//!
//! Labels are bounded: `service` is the server's role, `method` one of the methods the
//! compiled descriptor sets declare (the server's own, given to [`crate::grpc_server`], health,
//! reflection) or `other`, never a caller's path as it came, and `code` one of the 17 gRPC
//! codes.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use http_body::{Frame, SizeHint};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use tonic::Code;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    service: &'static str,
    method: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    service: &'static str,
    method: &'static str,
    code: &'static str,
}

/// 1 ms … ~33 s in 16 doubling steps: most calls take milliseconds; Status with `wait_ms` and
/// a release Install take seconds.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The RPC families of one process. Cheap to clone: clones share the values.
#[derive(Clone, Debug)]
pub(super) struct RpcMetrics {
    requests: Family<CodeLabels, Counter>,
    duration: Family<CallLabels, Histogram, fn() -> Histogram>,
}

impl Default for RpcMetrics {
    fn default() -> Self {
        RpcMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(duration_histogram),
        }
    }
}

impl RpcMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "berth_rpc_requests",
            "gRPC calls served, by service, method and gRPC status code (a server stream when it opened)",
            self.requests.clone(),
        );
        registry.register_with_unit(
            "berth_rpc_request_duration",
            "Time from a gRPC call's arrival to its status (a server stream: to its opening)",
            Unit::Seconds,
            self.duration.clone(),
        );
    }

    fn observe(&self, labels: CallLabels, code: Code, elapsed: f64) {
        self.duration.get_or_create(&labels).observe(elapsed);
        self.requests
            .get_or_create(&CodeLabels {
                service: labels.service,
                method: labels.method,
                code: code_name(code),
            })
            .inc();
    }
}

/// The gRPC code's name as gRPC's other implementations (and their Prometheus metrics) spell
/// it.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "Canceled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// What the method label says about a path, and whether the method streams its responses.
#[derive(Debug)]
struct Method {
    label: String,
    server_streaming: bool,
}

/// Every method a server declares, by path (`/package.Service/Method`).
type Methods = HashMap<String, Method>;

/// The methods of `descriptor_set` (the server's own services, encoded
/// `FileDescriptorSet`) and of the health and reflection services every server adds.
///
/// Built once per set and kept for the life of the process: the sets are compiled into the
/// binary (`'static`), so there are as many tables as distinct sets, a handful at most; and the
/// labels they hold must be `'static` to be label values.
fn methods(descriptor_set: &'static [u8]) -> &'static Methods {
    // A std mutex: taken once per server built, never across an await.
    static BY_SET: OnceLock<Mutex<HashMap<(usize, usize), &'static Methods>>> = OnceLock::new();
    let key = (descriptor_set.as_ptr() as usize, descriptor_set.len());
    let mut tables = BY_SET
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    tables.entry(key).or_insert_with(|| {
        Box::leak(Box::new(read_methods(&[
            descriptor_set,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET,
            tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
        ])))
    })
}

fn read_methods(sets: &[&[u8]]) -> Methods {
    use prost::Message as _;
    let mut methods = HashMap::new();
    for set in sets {
        let set = prost_types::FileDescriptorSet::decode(*set)
            .expect("compiled-in descriptor sets decode");
        for file in &set.file {
            for service in &file.service {
                for method in &service.method {
                    let label = format!("{}.{}/{}", file.package(), service.name(), method.name());
                    methods.insert(
                        format!("/{label}"),
                        Method {
                            label,
                            server_streaming: method.server_streaming(),
                        },
                    );
                }
            }
        }
    }
    methods
}

/// The method label of `path` (`other` for a path no descriptor declares) and whether its
/// responses stream.
fn method_of(methods: &'static Methods, path: &str) -> (&'static str, bool) {
    match methods.get(path) {
        Some(m) => (m.label.as_str(), m.server_streaming),
        None => ("other", false),
    }
}

/// The layer [`super::Metrics::rpc_layer`] makes.
#[derive(Clone, Debug)]
pub struct RpcLayer {
    metrics: RpcMetrics,
    service: &'static str,
    methods: &'static Methods,
}

impl RpcLayer {
    pub(super) fn new(
        metrics: RpcMetrics,
        service: &'static str,
        descriptor_set: &'static [u8],
    ) -> RpcLayer {
        RpcLayer {
            metrics,
            service,
            methods: methods(descriptor_set),
        }
    }
}

impl<S> tower::Layer<S> for RpcLayer {
    type Service = RpcService<S>;
    fn layer(&self, inner: S) -> RpcService<S> {
        RpcService {
            inner,
            metrics: self.metrics.clone(),
            service: self.service,
            methods: self.methods,
        }
    }
}

#[derive(Clone, Debug)]
pub struct RpcService<S> {
    inner: S,
    metrics: RpcMetrics,
    service: &'static str,
    methods: &'static Methods,
}

/// One call whose status is not known yet; dropped unrecorded, it counts as `Canceled`.
struct Pending {
    metrics: RpcMetrics,
    labels: CallLabels,
    started: Instant,
    recorded: bool,
}

impl Pending {
    fn record(&mut self, code: Code) {
        if std::mem::replace(&mut self.recorded, true) {
            return;
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        self.metrics.observe(self.labels.clone(), code, elapsed);
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.record(Code::Cancelled);
    }
}

/// The `grpc-status` in `headers` (a trailers-only response's headers, or trailers).
fn status_in(headers: &http::HeaderMap) -> Option<Code> {
    headers
        .get("grpc-status")
        .map(|v| Code::from_bytes(v.as_bytes()))
}

impl<S, B> tower::Service<http::Request<B>> for RpcService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let (method, streaming) = method_of(self.methods, req.uri().path());
        let mut pending = Pending {
            metrics: self.metrics.clone(),
            labels: CallLabels {
                service: self.service,
                method,
            },
            started: Instant::now(),
            recorded: false,
        };
        let call = self.inner.call(req);
        Box::pin(async move {
            let response = match call.await {
                Ok(response) => response,
                Err(e) => {
                    pending.record(Code::Unknown);
                    return Err(e);
                }
            };
            if let Some(code) = status_in(response.headers()) {
                pending.record(code);
                return Ok(response);
            }
            if streaming {
                pending.record(Code::Ok);
                return Ok(response);
            }
            Ok(response.map(|body| {
                tonic::body::Body::new(Recording {
                    inner: body,
                    pending,
                })
            }))
        })
    }
}

/// A unary response's body, recording the call when its trailers (or its end) pass.
struct Recording {
    inner: tonic::body::Body,
    pending: Pending,
}

impl http_body::Body for Recording {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(trailers) = frame.trailers_ref() {
                    this.pending
                        .record(status_in(trailers).unwrap_or(Code::Unknown));
                }
            }
            Poll::Ready(Some(Err(status))) => this.pending.record(status.code()),
            // Ended without trailers: not a gRPC answer.
            Poll::Ready(None) => this.pending.record(Code::Unknown),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;

    /// A server of the health service behind the layer, as `grpc_server` builds it.
    async fn health_server(
        metrics: &super::super::Metrics,
    ) -> (String, tokio_util::sync::CancellationToken) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let (_reporter, health) = tonic_health::server::health_reporter();
        let router = crate::grpc_server(
            crate::Role::Lifecycle,
            None,
            metrics,
            tonic_health::pb::FILE_DESCRIPTOR_SET,
        )
        .expect("a server")
        .add_service(health);
        let shutdown = tokio_util::sync::CancellationToken::new();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            router
                .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
                .await
        });
        (url, shutdown)
    }

    #[tokio::test]
    async fn calls_are_counted_by_method_and_code() {
        let metrics = super::super::Metrics::default();
        let (url, shutdown) = health_server(&metrics).await;
        let channel = tonic::transport::Endpoint::from_shared(url)
            .expect("url")
            .connect()
            .await
            .expect("connect");
        let mut client = HealthClient::new(channel.clone());
        let check = |service: &str| HealthCheckRequest {
            service: service.into(),
        };
        client.check(check("")).await.expect("serving");
        client.check(check("")).await.expect("serving");
        let unknown = client
            .check(check("nope"))
            .await
            .expect_err("unknown service");
        assert_eq!(unknown.code(), Code::NotFound);
        // A stream counts when it opens; it is still open when the page is read.
        let _stream = client.watch(check("")).await.expect("a stream");
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.expect("ready");
        let made_up = grpc
            .unary::<(), (), _>(
                tonic::Request::new(()),
                http::uri::PathAndQuery::from_static("/grpc.health.v1.Health/Secret-123"),
                tonic_prost::ProstCodec::default(),
            )
            .await
            .expect_err("no such method");
        assert_eq!(made_up.code(), Code::Unimplemented);

        let page = metrics.render();
        let health = "grpc.health.v1.Health";
        for line in [
            format!(r#"berth_rpc_requests_total{{service="lifecycle",method="{health}/Check",code="OK"}} 2"#),
            format!(r#"berth_rpc_requests_total{{service="lifecycle",method="{health}/Check",code="NotFound"}} 1"#),
            format!(r#"berth_rpc_requests_total{{service="lifecycle",method="{health}/Watch",code="OK"}} 1"#),
            r#"berth_rpc_requests_total{service="lifecycle",method="other",code="Unimplemented"} 1"#.into(),
            format!(r#"berth_rpc_request_duration_seconds_count{{service="lifecycle",method="{health}/Check"}} 3"#),
        ] {
            assert!(page.lines().any(|l| l == line), "no {line} in\n{page}");
        }
        assert!(!page.contains("Secret-123"), "{page}");
        shutdown.cancel();
    }

    #[test]
    fn methods_come_from_the_descriptor_sets() {
        let methods = methods(tonic_health::pb::FILE_DESCRIPTOR_SET);
        assert_eq!(
            method_of(methods, "/grpc.health.v1.Health/Check"),
            ("grpc.health.v1.Health/Check", false)
        );
        assert_eq!(
            method_of(methods, "/grpc.health.v1.Health/Watch"),
            ("grpc.health.v1.Health/Watch", true)
        );
        // Reflection is always there, whichever set the server serves.
        assert_eq!(
            method_of(
                methods,
                "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
            ),
            (
                "grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                true
            )
        );
        // A caller's made-up path never becomes a label of its own.
        assert_eq!(
            method_of(methods, "/x.Y/package-name-of-the-day"),
            ("other", false)
        );
        assert_eq!(
            method_of(methods, "/grpc.health.v1.Health/Check/extra"),
            ("other", false)
        );
        // One table per set: asking again gives the same one.
        assert!(std::ptr::eq(
            methods,
            super::methods(tonic_health::pb::FILE_DESCRIPTOR_SET)
        ));
    }
}
