//! Process-wide logging and tracing set-up.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// How log lines are written to stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Flushes pending spans when dropped.
pub struct TelemetryGuard {
    provider: SdkTracerProvider,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// Installs the global subscriber: `RUST_LOG`-style filtering from `BERTH_LOG` (default `info`),
/// text or JSON lines on stderr, and OpenTelemetry spans. Spans are exported over OTLP/gRPC only
/// when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; otherwise
/// trace ids are still generated and propagated, so a later collector sees whole traces.
///
/// Safe to call more than once (tests, `berth up`): later calls keep the first subscriber.
pub fn init(service_name: &'static str, format: LogFormat) -> TelemetryGuard {
    let mut builder = SdkTracerProvider::builder().with_resource(resource(service_name));
    if let Some(exporter) = otlp_exporter() {
        builder = builder.with_batch_exporter(exporter);
    }
    install(builder.build(), service_name, format)
}

/// [`init`] for `berth up`, where every service runs in one process: each span is exported
/// under the `service.name` of the service it belongs to (`berth-gateway`, `berth-lifecycle`,
/// ...), as if the services ran apart (see [`routing`]).
pub fn init_all_in_one(format: LogFormat) -> TelemetryGuard {
    let mut builder = SdkTracerProvider::builder().with_resource(resource("berth"));
    if otlp_configured() {
        builder = builder.with_span_processor(routing::RoutingProcessor::new(otlp_exporter));
    }
    install(builder.build(), "berth", format)
}

fn resource(service_name: &'static str) -> opentelemetry_sdk::Resource {
    opentelemetry_sdk::Resource::builder()
        .with_service_name(service_name)
        .build()
}

fn otlp_configured() -> bool {
    std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
        || std::env::var_os("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
}

fn otlp_exporter() -> Option<opentelemetry_otlp::SpanExporter> {
    if !otlp_configured() {
        return None;
    }
    match opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()
    {
        Ok(exporter) => Some(exporter),
        Err(e) => {
            eprintln!("berth: OTLP exporter disabled: {e}");
            None
        }
    }
}

fn install(
    provider: SdkTracerProvider,
    service_name: &'static str,
    format: LogFormat,
) -> TelemetryGuard {
    let tracer = provider.tracer(service_name);
    let filter = EnvFilter::try_from_env("BERTH_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let otel = tracing_opentelemetry::layer().with_tracer(tracer);
    let registry = tracing_subscriber::registry().with(filter).with(otel);
    let _ = match format {
        LogFormat::Text => registry
            .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    opentelemetry::global::set_tracer_provider(provider.clone());
    TelemetryGuard { provider }
}

mod routing {
    //! `berth up`'s span routing: one process, several `service.name`s.
    //!
    //! A span belongs to the service whose gRPC server it runs under (the request span's
    //! `berth.service`), or whose crate created it (`code.module.name`), or else to its
    //! parent's service. The processor learns that when a span starts (parents start before
    //! their children) and, when it ends, hands it to the batch processor of that service,
    //! whose exporter carries the service's resource. Written by hand: the SDK has one
    //! resource per provider.

    use std::collections::HashMap;
    use std::sync::Mutex;
    use std::time::Duration;

    use opentelemetry::trace::{SpanId, TraceContextExt};
    use opentelemetry::{Context, Value};
    use opentelemetry_sdk::Resource;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{BatchSpanProcessor, Span, SpanData, SpanProcessor};

    /// Spans open at once that the processor remembers the service of; past it, it forgets
    /// them all (their children then fall back to their crate, or `berth`).
    const MAX_OPEN_SPANS: usize = 100_000;

    /// By module path prefix, most specific first.
    const BY_MODULE: &[(&str, &str)] = &[
        ("berth_gateway", "berth-gateway"),
        ("berth_lifecycle", "berth-lifecycle"),
        ("berth_queue::worker", "berth-worker"),
        ("berth_queue", "berth-queue"),
        ("berth_worker", "berth-worker"),
        ("berth_hookevent", "berth-hookevent"),
        ("berth_release", "berth-release"),
        ("berth_controller", "berth-controller"),
    ];
    const SERVICES: &[&str] = &[
        "berth-gateway",
        "berth-lifecycle",
        "berth-queue",
        "berth-worker",
        "berth-hookevent",
        "berth-release",
        "berth-controller",
        "berth",
    ];

    #[derive(Debug)]
    pub(super) struct RoutingProcessor {
        open: Mutex<HashMap<SpanId, &'static str>>,
        services: HashMap<&'static str, BatchSpanProcessor>,
    }

    impl RoutingProcessor {
        pub(super) fn new(
            mut exporter: impl FnMut() -> Option<opentelemetry_otlp::SpanExporter>,
        ) -> Self {
            let mut services = HashMap::new();
            for name in SERVICES {
                if let Some(e) = exporter() {
                    let mut p = BatchSpanProcessor::builder(e).build();
                    p.set_resource(&super::resource(name));
                    services.insert(*name, p);
                }
            }
            RoutingProcessor {
                open: Mutex::new(HashMap::new()),
                services,
            }
        }

        fn open(&self) -> std::sync::MutexGuard<'_, HashMap<SpanId, &'static str>> {
            self.open.lock().unwrap_or_else(|p| p.into_inner())
        }
    }

    /// The service a span names itself, by attribute or by the crate that made it.
    fn own_service(data: &SpanData) -> Option<&'static str> {
        let mut module = None;
        for kv in &data.attributes {
            match (kv.key.as_str(), &kv.value) {
                ("berth.service", Value::String(s)) => {
                    if let Some(name) = SERVICES.iter().find(|n| **n == s.as_str()) {
                        return Some(name);
                    }
                }
                ("code.module.name", Value::String(s)) => module = Some(s.as_str().to_owned()),
                _ => {}
            }
        }
        let module = module?;
        BY_MODULE
            .iter()
            .find(|(prefix, _)| module.starts_with(prefix))
            .map(|(_, name)| *name)
    }

    impl SpanProcessor for RoutingProcessor {
        fn on_start(&self, span: &mut Span, cx: &Context) {
            let Some(data) = span.exported_data() else {
                return;
            };
            if !data.span_context.is_sampled() {
                return;
            }
            let parent = cx.span().span_context().span_id();
            let mut open = self.open();
            let service = own_service(&data)
                .or_else(|| open.get(&parent).copied())
                .unwrap_or("berth");
            if open.len() >= MAX_OPEN_SPANS {
                open.clear();
            }
            open.insert(data.span_context.span_id(), service);
        }

        fn on_end(&self, span: SpanData) {
            let service = self
                .open()
                .remove(&span.span_context.span_id())
                .or_else(|| own_service(&span))
                .unwrap_or("berth");
            if let Some(p) = self.services.get(service) {
                p.on_end(span);
            }
        }

        fn force_flush(&self) -> OTelSdkResult {
            self.services.values().try_for_each(|p| p.force_flush())
        }

        fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
            self.services
                .values()
                .try_for_each(|p| p.shutdown_with_timeout(timeout))
        }

        /// Each service's processor keeps its own resource.
        fn set_resource(&mut self, _resource: &Resource) {}
    }
}
