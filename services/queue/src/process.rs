//! The two roles of the `berth-queue` binary (and of `berth up`): the broker and a worker.

use std::time::Duration;

use berth_proto::queue::broker_client::BrokerClient;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::broker::{self, BrokerConfig, BrokerService, Store};
use crate::tasks::{TaskConfig, TaskRunner};
use crate::worker::{self, WorkerConfig};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("queue store: {0}")]
    Store(#[from] broker::StoreError),
    #[error("endpoint: {0}")]
    Endpoint(#[from] tonic::transport::Error),
    #[error("worker: {0}")]
    Worker(#[from] worker::WorkerError),
}

/// Serves the broker on `listener` until `shutdown`.
pub async fn serve(
    database_url: &str,
    config: BrokerConfig,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let store = Store::open(database_url).await?;
    let service = BrokerService::new(store, config);
    let router = berth_telemetry::grpc_server().add_service(broker::server(service));
    berth_telemetry::serve_router(
        router,
        listener,
        berth_proto::FILE_DESCRIPTOR_SET,
        &["berth.queue.v1.Broker"],
        shutdown,
    )
    .await?;
    Ok(())
}

/// Runs a worker against the broker at `broker_endpoint` until `shutdown`.
pub async fn work(
    broker_endpoint: &str,
    tasks: TaskConfig,
    config: WorkerConfig,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let channel = tonic::transport::Endpoint::from_shared(broker_endpoint.to_owned())?
        .connect_timeout(Duration::from_secs(5))
        .connect_lazy();
    let runner = TaskRunner::new(tasks)?;
    worker::run(BrokerClient::new(channel), runner, config, shutdown).await?;
    Ok(())
}
