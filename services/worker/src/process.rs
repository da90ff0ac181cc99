//! The `work` role of the `berth-queue` binary (and of `berth up`): a worker of the queue's
//! runtime, running berth's tasks, against a broker.

use std::time::Duration;

use berth_proto::queue::broker_client::BrokerClient;
use berth_queue::worker::{self, WorkerConfig};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::TaskConfig;
use crate::runner::TaskRunner;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("endpoint: {0}")]
    Endpoint(#[from] tonic::transport::Error),
    #[error("worker: {0}")]
    Worker(#[from] worker::WorkerError),
    #[error("metrics admin port: {0}")]
    Metrics(#[source] std::io::Error),
}

/// Runs a worker against the broker at `broker_endpoint` until `shutdown`.
pub async fn work(
    broker_endpoint: &str,
    tasks: TaskConfig,
    config: WorkerConfig,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    work_with_metrics(broker_endpoint, tasks, config, None, shutdown).await
}

/// Like [`work`], also serving the metrics hooks wrote on `metrics` (`GET /metrics`), with
/// their `hook` and `package` labels.
pub async fn work_with_metrics(
    broker_endpoint: &str,
    tasks: TaskConfig,
    config: WorkerConfig,
    metrics: Option<TcpListener>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let channel = berth_telemetry::endpoint(
        broker_endpoint,
        tasks.tls.as_ref(),
        berth_telemetry::Role::Broker,
    )?
    .connect_timeout(Duration::from_secs(5))
    .connect_lazy();
    let runner = TaskRunner::new(tasks)?;
    let admin = metrics.map(|listener| {
        berth_telemetry::spawn_in(
            tracing::info_span!(parent: None, "worker.metrics"),
            berth_queue::admin::serve_text_metrics(
                listener,
                shutdown.clone(),
                crate::metrics::render,
            ),
        )
    });
    let result = worker::run(BrokerClient::new(channel), runner, config, shutdown.clone()).await;
    shutdown.cancel();
    if let Some(admin) = admin
        && let Ok(Err(e)) = admin.await
    {
        return Err(Error::Metrics(e));
    }
    result?;
    Ok(())
}
