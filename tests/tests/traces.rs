//! Traces that tell the story: with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at a collector of
//! the test's own (the OTLP collector's gRPC service, served with tonic), one Update is one
//! trace from the gateway through lifecycle's outbox, the broker, the worker (its hooks among
//! them) and release, each span under its own service's name, in split mode as in `berth up`;
//! and no background loop (leases, heartbeats, the relay, watches) leaves traces of its own.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use berth_proto::v1;
use berth_tests::{AllInOne, SplitTopology, TestCluster, TestNamespace, journey};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use tonic::{Request, Response, Status};

/// One exported span, as the collector received it.
#[derive(Clone, Debug)]
struct Span {
    service: String,
    name: String,
    trace: Vec<u8>,
    id: Vec<u8>,
    parent: Vec<u8>,
    attributes: HashMap<String, String>,
}

#[derive(Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let text = |v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>| match v
            .as_ref()
            .and_then(|v| v.value.as_ref())
        {
            Some(Any::StringValue(s)) => s.clone(),
            Some(other) => format!("{other:?}"),
            None => String::new(),
        };
        let mut spans = self.spans.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .map(|kv| text(&kv.value))
                .unwrap_or_default();
            for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                spans.push(Span {
                    service: service.clone(),
                    name: span.name,
                    trace: span.trace_id,
                    id: span.span_id,
                    parent: span.parent_span_id,
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(&kv.value)))
                        .collect(),
                });
            }
        }
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

/// Starts the collector and points the processes this test starts at it.
async fn collector() -> anyhow::Result<Collector> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let collector = Collector::default();
    let service = TraceServiceServer::new(collector.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    berth_tests::process::child_env("OTEL_EXPORTER_OTLP_ENDPOINT", &format!("http://{addr}"));
    // Export often, so what a process ends with is little (it is flushed at exit anyway).
    berth_tests::process::child_env("OTEL_BSP_SCHEDULE_DELAY", "200");
    Ok(collector)
}

/// Installs hello and waits for it to run: the Update whose trace the test reads.
async fn install(endpoint: &str, kube: &kube::Client) -> anyhow::Result<TestNamespace> {
    let namespace = TestNamespace::to_be_created("traces");
    let mut client = journey::connect(endpoint).await?;
    let r = journey::hello(&namespace);
    let settings = berth_proto::json::to_struct(&serde_json::json!({"message": "traced"}));
    let accepted = client
        .update(v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: berth_tests::EXAMPLES_REPO.into(),
            version: "1.0.0".into(),
            settings: Some(settings),
            ..Default::default()
        })
        .await?
        .into_inner();
    journey::wait_running(&mut client, &r, accepted.generation).await?;
    namespace.label(kube).await?;
    Ok(namespace)
}

/// The roots hookevent opens for work the cluster or the clock started.
const WORK_ROOTS: [&str; 3] = ["hookevent.event", "hookevent.resync", "hookevent.schedule"];

/// What the processes exported (they flush when they stop) tells the story of the Update.
fn check(spans: &[Span]) -> anyhow::Result<()> {
    let update = spans
        .iter()
        .find(|s| {
            s.service == "berth-gateway"
                && s.attributes.get("rpc.path").map(String::as_str)
                    == Some("/berth.v1.Packages/Update")
        })
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no Update span from berth-gateway among {} spans",
                spans.len()
            )
        })?;
    let trace: Vec<&Span> = spans.iter().filter(|s| s.trace == update.trace).collect();
    let ids: HashSet<&[u8]> = trace.iter().map(|s| s.id.as_slice()).collect();
    let roots: Vec<&&Span> = trace.iter().filter(|s| s.parent.is_empty()).collect();
    anyhow::ensure!(
        roots.len() == 1 && roots[0].id == update.id,
        "the Update's trace has roots {:?}",
        roots
            .iter()
            .map(|s| (&s.service, &s.name))
            .collect::<Vec<_>>()
    );
    let orphans: Vec<(&String, &String, Option<&String>)> = trace
        .iter()
        .filter(|s| !s.parent.is_empty() && !ids.contains(s.parent.as_slice()))
        .map(|s| (&s.service, &s.name, s.attributes.get("rpc.path")))
        .collect();
    anyhow::ensure!(
        orphans.is_empty(),
        "spans of the Update's trace whose parent is missing: {orphans:?}"
    );
    let services: HashSet<&str> = trace.iter().map(|s| s.service.as_str()).collect();
    for service in [
        "berth-gateway",
        "berth-lifecycle",
        "berth-queue",
        "berth-worker",
        "berth-release",
        "berth-hookevent",
    ] {
        anyhow::ensure!(
            services.contains(service),
            "{service} is not in the Update's trace; services there: {services:?}"
        );
    }
    // The hooks ran inside the trace (they were handed its TRACEPARENT).
    let hooks: Vec<&&Span> = trace.iter().filter(|s| s.name == "hook").collect();
    anyhow::ensure!(
        hooks.iter().any(|s| s.service == "berth-worker"),
        "no hook span in the Update's trace"
    );
    // No background loop traced itself: every trace starts at a request to the public API or
    // at work the cluster or the clock started (a watch event, a resync, a schedule firing, a
    // drift repair, a reconcile of a berth.io resource), and every span's parent was exported too.
    let all: HashSet<&[u8]> = spans.iter().map(|s| s.id.as_slice()).collect();
    let stray: Vec<(&String, &String, Option<&String>)> = spans
        .iter()
        .filter(|s| {
            if s.parent.is_empty() {
                !(s.service == "berth-gateway" && s.name == "grpc.request"
                    || s.service == "berth-hookevent" && WORK_ROOTS.contains(&s.name.as_str())
                    || s.service == "berth-release" && s.name == "release.drift.repair"
                    || s.service == "berth-controller" && s.name == "controller.reconcile")
            } else {
                !all.contains(s.parent.as_slice())
            }
        })
        .map(|s| (&s.service, &s.name, s.attributes.get("rpc.path")))
        .collect();
    anyhow::ensure!(
        stray.is_empty(),
        "spans outside any request's trace: {stray:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_is_one_trace_across_the_split_services() -> anyhow::Result<()> {
    let collector = collector().await?;
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let installed = install(&topology.gateway.endpoint(), &cluster.client).await;
    topology.stop().await;
    cluster.stop().await;
    let _namespace = installed?;
    let spans = collector.spans.lock().unwrap().clone();
    check(&spans)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_is_one_trace_across_the_services_of_berth_up() -> anyhow::Result<()> {
    let collector = collector().await?;
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(std::path::PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let installed = install(&up.proc.endpoint(), &kube).await;
    up.proc.stop().await;
    let _namespace = installed?;
    let spans = collector.spans.lock().unwrap().clone();
    check(&spans)
}
