//! W3C trace context (`traceparent`) across process boundaries.
//!
//! gRPC calls carry it in metadata (the client interceptor below injects it, the server's
//! `trace_fn` extracts it); queued tasks store it as a string so the worker's span joins the
//! trace of the request that caused the task.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Tonic interceptor that writes the current span's trace context into the request metadata.
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceContext;

impl tonic::service::Interceptor for TraceContext {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        self.call_on(&mut req)?;
        Ok(req)
    }
}

/// A remote parent that is not sampled, with fresh ids: a span made its child is not traced,
/// nor are its descendants here or in the services it calls (they continue the context with
/// its sampled flag off).
fn unsampled() -> opentelemetry::Context {
    use opentelemetry::trace::{SpanContext, TraceContextExt, TraceFlags, TraceState};
    use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
    let ids = RandomIdGenerator::default();
    let parent = SpanContext::new(
        ids.new_trace_id(),
        ids.new_span_id(),
        TraceFlags::default(),
        true,
        TraceState::default(),
    );
    opentelemetry::Context::new().with_remote_span_context(parent)
}

/// `message` as a request carrying the current span's trace context, for clients whose
/// channel has no [`TraceContext`] interceptor.
pub fn traced_request<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let _ = TraceContext.call_on(&mut request);
    request
}

impl TraceContext {
    fn call_on<T>(&self, req: &mut tonic::Request<T>) -> Result<(), tonic::Status> {
        let mut carrier = HashMap::new();
        TraceContextPropagator::new()
            .inject_context(&tracing::Span::current().context(), &mut carrier);
        for (key, value) in carrier {
            if let (Ok(key), Ok(value)) = (
                tonic::metadata::MetadataKey::from_bytes(key.as_bytes()),
                value.parse(),
            ) {
                req.metadata_mut().insert(key, value);
            }
        }
        Ok(())
    }
}

/// Makes `span` untraced: its parent is a context that is not sampled, so neither it nor its
/// descendants (here, or in the services it calls) are traced. For background loops; see
/// [`crate::spawn_in`].
pub fn untraced(span: tracing::Span) -> tracing::Span {
    let _ = span.set_parent(unsampled());
    span
}

/// The current span's `traceparent`, or an empty string when there is no active trace.
pub fn current_traceparent() -> String {
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&tracing::Span::current().context(), &mut carrier);
    carrier.remove("traceparent").unwrap_or_default()
}

/// Makes `span` a child of the remote context in `traceparent` (no-op when it is empty or
/// malformed) and returns it.
pub fn with_traceparent(span: tracing::Span, traceparent: &str) -> tracing::Span {
    if !traceparent.is_empty() {
        let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
        let cx = TraceContextPropagator::new().extract(&carrier);
        // A span that is disabled by the filter cannot take a parent; that is fine.
        let _ = span.set_parent(cx);
    }
    span
}

/// Extracts the trace context from HTTP headers (server side).
/// `service` names the server (`berth.service`, empty when unknown): in `berth up` it tells
/// which service's spans these are.
pub(crate) fn span_for_request(req: &http::Request<()>, service: &'static str) -> tracing::Span {
    let carrier: HashMap<String, String> = req
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let cx = TraceContextPropagator::new().extract(&carrier);
    let span =
        tracing::info_span!("grpc.request", rpc.path = %req.uri().path(), berth.service = service);
    let _ = span.set_parent(cx);
    span
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use tonic::service::Interceptor;
    use tracing_subscriber::layer::SubscriberExt;

    fn with_tracing<T>(f: impl FnOnce() -> T) -> T {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, f)
    }

    fn trace_id(traceparent: &str) -> &str {
        traceparent.split('-').nth(1).unwrap_or_default()
    }

    #[test]
    fn grpc_calls_carry_the_current_trace() {
        with_tracing(|| {
            let span = tracing::info_span!("request");
            let _guard = span.enter();
            let expected = current_traceparent();
            assert_eq!(expected.split('-').count(), 4, "traceparent {expected:?}");
            let req = TraceContext.call(tonic::Request::new(())).unwrap();
            let sent = req.metadata().get("traceparent").unwrap().to_str().unwrap();
            assert_eq!(sent, expected);
        });
    }

    #[test]
    fn a_stored_traceparent_continues_its_trace() {
        with_tracing(|| {
            let stored = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
            let span = with_traceparent(tracing::info_span!("task"), stored);
            let _guard = span.enter();
            assert_eq!(
                trace_id(&current_traceparent()),
                "4bf92f3577b34da6a3ce929d0e0e4736"
            );
        });
    }

    #[test]
    fn no_trace_means_no_header() {
        let req = TraceContext.call(tonic::Request::new(())).unwrap();
        assert!(req.metadata().get("traceparent").is_none());
        assert_eq!(current_traceparent(), "");
    }
}
