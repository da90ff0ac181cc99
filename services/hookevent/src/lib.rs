//! The hookevent service: holds the schedule bindings packages register at Load and turns their
//! fires into HookRun tasks on the package's queue. (Kubernetes watch bindings come next; see
//! ARCHITECTURE.md.)

mod schedule;
mod service;
mod store;

use berth_proto::hookevent::hook_events_server::HookEventsServer;
use berth_proto::queue::broker_client::BrokerClient;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use schedule::parse_crontab;
pub use service::HookEventService;
pub use store::{Store, StoreError};

#[derive(Clone, Debug)]
pub struct Config {
    /// `sqlite://PATH` or `sqlite::memory:`.
    pub database_url: String,
    pub broker_endpoint: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("broker endpoint {endpoint}: {source}")]
    Broker { endpoint: String, source: tonic::transport::Error },
    #[error("serving gRPC: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Runs the service on `listener` until `shutdown` fires.
pub async fn run(config: Config, listener: TcpListener, shutdown: CancellationToken) -> Result<(), Error> {
    let store = Store::open(&config.database_url).await?;
    let channel = berth_telemetry::connect_lazy(&config.broker_endpoint)
        .map_err(|source| Error::Broker { endpoint: config.broker_endpoint.clone(), source })?;
    let service = HookEventService::new(store).await?;
    let scheduler = tokio::spawn(service.clone().run_scheduler(BrokerClient::new(channel), shutdown.clone()));
    let router = berth_telemetry::grpc_server().add_service(HookEventsServer::new(service));
    let served = berth_telemetry::serve_router(
        router,
        listener,
        berth_proto::FILE_DESCRIPTOR_SET,
        &["berth.hookevent.v1.HookEvents"],
        shutdown.clone(),
    )
    .await;
    shutdown.cancel();
    let _ = scheduler.await;
    Ok(served?)
}
