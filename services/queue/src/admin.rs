//! Admin ports: Prometheus metrics over plain HTTP (`GET /metrics`), the broker's own
//! ([`serve_metrics`]) and, on a worker, whatever metrics its handler keeps
//! ([`serve_text_metrics`]).
//!
//! Separate from the gRPC port so it can be exposed to a scraper (or kept on loopback) without
//! exposing the Broker API, and so a scrape never competes with the gRPC server's settings.

use std::sync::Arc;

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use prometheus_client::encoding::text::encode;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Content type of the OpenMetrics text format that `prometheus_client` writes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Content type of the Prometheus text format of [`serve_text_metrics`].
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `registry` at `/metrics` on `listener` until `shutdown`.
pub async fn serve_metrics(
    registry: Registry,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let registry = Arc::new(registry);
    serve_at_metrics(listener, shutdown, move || render(&registry)).await
}

/// Serves the Prometheus text `render` returns at `/metrics` on `listener` until `shutdown`:
/// a worker's admin port, for metrics its handler keeps outside a registry (berth's worker
/// serves the metrics hooks wrote).
pub async fn serve_text_metrics(
    listener: TcpListener,
    shutdown: CancellationToken,
    render: impl Fn() -> String + Clone + Send + Sync + 'static,
) -> std::io::Result<()> {
    serve_at_metrics(listener, shutdown, move || {
        ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], render()).into_response()
    })
    .await
}

async fn serve_at_metrics(
    listener: TcpListener,
    shutdown: CancellationToken,
    page: impl Fn() -> axum::response::Response + Clone + Send + Sync + 'static,
) -> std::io::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let page = page.clone();
            async move { page() }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

fn render(registry: &Registry) -> axum::response::Response {
    let mut body = String::new();
    match encode(&mut body, registry) {
        Ok(()) => ([(header::CONTENT_TYPE, OPENMETRICS)], body).into_response(),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot encode metrics: {err}"),
        )
            .into_response(),
    }
}
