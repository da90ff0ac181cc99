//! The broker as a server: the `serve` role of the `berth-queue` binary (and of `berth up`).

use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::broker::{self, BrokerConfig, BrokerService, Store};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("queue store: {0}")]
    Store(#[from] broker::StoreError),
    #[error("endpoint: {0}")]
    Endpoint(#[from] tonic::transport::Error),
    #[error("metrics admin port: {0}")]
    Metrics(#[source] std::io::Error),
}

/// How often the broker refreshes its queue-depth gauges (see [`broker::run_maintenance`]).
pub const MAINTENANCE_PERIOD: Duration = Duration::from_secs(15);

/// Serves the broker on `listener` until `shutdown`, without a metrics port.
pub async fn serve(
    database_url: &str,
    config: BrokerConfig,
    tls: Option<berth_telemetry::Tls>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    serve_with_metrics(database_url, config, tls, listener, None, shutdown).await
}

/// Serves the broker on `listener` until `shutdown` (with `tls`: mutual TLS, calls
/// authorised by the caller's role; without: plain gRPC), its Prometheus metrics at `/metrics` on
/// `metrics` (when given), and runs its maintenance (depth gauges) in the background.
///
/// If either server fails, the other is stopped too and the error returned: a broker whose
/// admin port died would otherwise run on unobserved.
pub async fn serve_with_metrics(
    database_url: &str,
    config: BrokerConfig,
    tls: Option<berth_telemetry::Tls>,
    listener: TcpListener,
    metrics: Option<TcpListener>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let store = Store::open(database_url).await?;
    let service = BrokerService::new(store, config);
    // A child token: stopping the broker because one server failed does not cancel the caller's
    // other services (`berth up` shares its token).
    let stop = shutdown.child_token();
    let maintenance = berth_telemetry::spawn_in(
        tracing::info_span!(parent: None, "broker.maintenance"),
        broker::run_maintenance(service.clone(), MAINTENANCE_PERIOD, stop.clone()),
    );
    let admin = async {
        let Some(metrics) = metrics else {
            return Ok(());
        };
        let mut registry = prometheus_client::registry::Registry::default();
        service.metrics().register(&mut registry);
        let served = crate::admin::serve_metrics(registry, metrics, stop.clone()).await;
        stop.cancel();
        served.map_err(Error::Metrics)
    };
    let router =
        berth_telemetry::grpc_server(tls.as_ref())?.add_service(broker::server(service.clone()));
    let grpc = async {
        let served = berth_telemetry::serve_router(
            router,
            listener,
            berth_proto::FILE_DESCRIPTOR_SET,
            &["berth.queue.v1.Broker"],
            stop.clone(),
        )
        .await;
        stop.cancel();
        served.map_err(Error::from)
    };
    let (grpc, admin) = tokio::join!(grpc, admin);
    stop.cancel();
    let _ = maintenance.await;
    grpc?;
    admin
}
