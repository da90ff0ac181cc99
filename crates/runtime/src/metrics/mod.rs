//! Prometheus metrics of every berth process: one [`Metrics`] registry per process (in
//! `berth up`, one for all its services), the RED metrics of every gRPC server (`rpc`: a tower
//! layer [`crate::grpc_server`] installs), and the plain-HTTP `/metrics` endpoint (`http`)
//! that serves them.
//!
//! Services register their own metrics (`prometheus-client` families, under distinct
//! `berth_` names) with [`Metrics::register`]; metrics kept outside a registry (the metrics
//! hooks write, whose names are only known at run time) join the page with
//! [`Metrics::add_text`]. The page is the Prometheus text format 0.0.4 (see [`Metrics::render`]).

mod http;
mod rpc;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

pub use http::{CONTENT_TYPE, serve};
pub use rpc::{RpcLayer, RpcService};

/// A text source: renders series in the Prometheus text format.
type Text = Arc<dyn Fn() -> String + Send + Sync>;

/// A process's metrics. Cheap to clone: clones share the registry.
#[derive(Clone, Default)]
pub struct Metrics {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    // A std lock: held only to register (at start) or to encode (a scrape), never across an
    // await.
    registry: RwLock<Registry>,
    texts: Mutex<Vec<Text>>,
    /// The RPC families, registered with the first server that asks for them: a process
    /// without a gRPC server (a worker) shows none.
    rpc: OnceLock<rpc::RpcMetrics>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// Adds metrics to the registry (`f` registers them, e.g. `families.register(registry)`).
    pub fn register(&self, f: impl FnOnce(&mut Registry)) {
        f(&mut self
            .inner
            .registry
            .write()
            .unwrap_or_else(|p| p.into_inner()));
    }

    /// Appends what `render` returns (series in the Prometheus text format) to every page.
    pub fn add_text(&self, render: impl Fn() -> String + Send + Sync + 'static) {
        self.inner
            .texts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Arc::new(render));
    }

    /// The layer that counts and times every call of a gRPC server of `service` (a berth
    /// role's name: `lifecycle`, `broker`, ...): `berth_rpc_requests_total` and
    /// `berth_rpc_request_duration_seconds`. The method label is one of the methods
    /// `descriptor_set` (the server's services, an encoded `FileDescriptorSet`), health or
    /// reflection declare, or `other`.
    pub fn rpc_layer(&self, service: &'static str, descriptor_set: &'static [u8]) -> RpcLayer {
        let rpc = self.inner.rpc.get_or_init(|| {
            let rpc = rpc::RpcMetrics::default();
            self.register(|r| rpc.register(r));
            rpc
        });
        RpcLayer::new(rpc.clone(), service, descriptor_set)
    }

    /// The page: every registered metric, then the text sources, in the Prometheus text
    /// format 0.0.4.
    pub fn render(&self) -> String {
        let mut open = String::new();
        {
            let registry = self
                .inner
                .registry
                .read()
                .unwrap_or_else(|p| p.into_inner());
            // Encoding into a String cannot fail.
            let _ = prometheus_client::encoding::text::encode_registry(&mut open, &registry);
        }
        let mut page = to_prometheus_text(&open);
        let texts = self
            .inner
            .texts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for text in texts {
            let text = text();
            page.push_str(&text);
            if !text.is_empty() && !text.ends_with('\n') {
                page.push('\n');
            }
        }
        page
    }
}

/// `prometheus-client` writes OpenMetrics text; the page is the older Prometheus text
/// format, because the metrics hooks write (counters named as the hook names them, `_total`
/// or not) cannot be expressed as valid OpenMetrics, and one page cannot mix the two. For
/// the families `prometheus-client` writes the formats differ only in this: a counter's
/// `HELP` and `TYPE` name the family without `_total` (its samples carry it), `# UNIT` and
/// `# EOF` do not exist, and `unknown` is `untyped`. Done by hand: no crate converts the two.
fn to_prometheus_text(open: &str) -> String {
    let counters: std::collections::HashSet<&str> = open
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open.len() + counters.len() * 16);
    for line in open.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let comment = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match comment {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(prefix);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(if prefix == "# TYPE " && tail == "unknown" {
                    "untyped"
                } else {
                    tail
                });
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The `--metrics-listen` flag every berth service binary takes.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at `http://ADDR/metrics` (plain HTTP; off unless given; port
    /// 0 picks a free one). The address is printed as `metrics on ADDR`.
    #[arg(long, env = "BERTH_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
}

impl MetricsArgs {
    /// Binds the metrics port when one was asked for and prints `metrics on ADDR` (before the
    /// service's `listening on ADDR`, which harnesses wait for and may stop reading after).
    pub async fn bind(&self) -> std::io::Result<Option<TcpListener>> {
        let Some(addr) = self.metrics_listen else {
            return Ok(None);
        };
        let listener = TcpListener::bind(addr).await?;
        println!("metrics on {}", listener.local_addr()?);
        Ok(Some(listener))
    }
}

/// Serves `metrics` on `listener` (when given) in the background until `shutdown`.
pub fn spawn_server(
    metrics: &Metrics,
    listener: Option<TcpListener>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    if let Some(listener) = listener {
        crate::spawn_in(
            tracing::info_span!(parent: None, "metrics.server"),
            serve(metrics.clone(), listener, shutdown),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Unit;

    #[test]
    fn the_page_is_prometheus_text_with_the_text_sources_after() {
        let metrics = Metrics::default();
        let (counter, gauge) = (Counter::<u64>::default(), Gauge::<i64>::default());
        let histogram = Histogram::new([1.0, 2.0]);
        metrics.register(|r| {
            r.register("berth_things", "Things done", counter.clone());
            r.register("berth_open", "Things open", gauge.clone());
            r.register_with_unit("berth_wait", "Waits", Unit::Seconds, histogram.clone());
        });
        metrics.add_text(|| "hook_runs_total{hook=\"a\"} 2".into());
        counter.inc_by(3);
        gauge.set(-1);
        histogram.observe(1.5);
        let page = metrics.render();
        for line in [
            "# HELP berth_things_total Things done.",
            "# TYPE berth_things_total counter",
            "berth_things_total 3",
            "# TYPE berth_open gauge",
            "berth_open -1",
            "# TYPE berth_wait_seconds histogram",
            "berth_wait_seconds_bucket{le=\"2.0\"} 1",
            "berth_wait_seconds_count 1",
        ] {
            assert!(page.lines().any(|l| l == line), "no {line:?} in\n{page}");
        }
        assert!(
            !page.contains("# UNIT") && !page.contains("# EOF"),
            "{page}"
        );
        assert!(
            page.ends_with("hook_runs_total{hook=\"a\"} 2\n"),
            "text sources come last, one line each:\n{page}"
        );
    }
}
