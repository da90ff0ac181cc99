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
}

/// How often the broker refreshes its queue-depth gauges (see [`broker::run_maintenance`]).
pub const MAINTENANCE_PERIOD: Duration = Duration::from_secs(15);

/// Serves the broker on `listener` until `shutdown` (with `tls`: mutual TLS, calls authorised
/// by the caller's role; without: plain gRPC), its metrics (RPC and broker, `berth_queue_*`)
/// registered in `metrics`, and runs its maintenance (depth gauges) in the background.
pub async fn serve(
    database_url: &str,
    config: BrokerConfig,
    tls: Option<berth_runtime::Tls>,
    listener: TcpListener,
    metrics: &berth_runtime::Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let store = Store::open(database_url).await?;
    let service = BrokerService::new(store, config);
    metrics.register(|registry| service.metrics().register(registry));
    // A child token: maintenance stops with the server, whatever stopped it, without
    // cancelling the caller's other services (`berth up` shares its token).
    let stop = shutdown.child_token();
    let maintenance = berth_runtime::spawn_in(
        tracing::info_span!(parent: None, "broker.maintenance"),
        broker::run_maintenance(service.clone(), MAINTENANCE_PERIOD, stop.clone()),
    );
    let router = berth_runtime::grpc_server(
        berth_runtime::Role::Broker,
        tls.as_ref(),
        metrics,
        berth_proto::FILE_DESCRIPTOR_SET,
    )?
    .add_service(broker::server(service.clone()));
    let served = berth_runtime::serve_router(
        router,
        listener,
        berth_proto::FILE_DESCRIPTOR_SET,
        &["berth.queue.v1.Broker"],
        shutdown.clone(),
    )
    .await;
    stop.cancel();
    let _ = maintenance.await;
    Ok(served?)
}
