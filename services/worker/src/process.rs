//! The `work` role of the `berth-queue` binary (and of `berth up`): a worker of the queue's
//! runtime, running berth's tasks, against a broker.

use berth_proto::queue::broker_client::BrokerClient;
use berth_queue::worker::{self, WorkerConfig};
use tokio_util::sync::CancellationToken;

use crate::config::TaskConfig;
use crate::runner::TaskRunner;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("endpoint: {0}")]
    Endpoint(#[from] tonic::transport::Error),
    #[error("worker: {0}")]
    Worker(#[from] worker::WorkerError),
}

/// Runs a worker against the broker at `broker_endpoint` until `shutdown`, its metrics (task
/// durations, and the metrics hooks write with their `hook` and `package` labels) in
/// `metrics`.
pub async fn work(
    broker_endpoint: &str,
    tasks: TaskConfig,
    config: WorkerConfig,
    metrics: &berth_runtime::Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    // Lease long-polls bound themselves; `broker_endpoint` may name several brokers.
    let channel = berth_runtime::lazy_channel(
        broker_endpoint,
        tasks.tls.as_ref(),
        berth_runtime::Role::Broker,
        None,
    )?;
    let runner = TaskRunner::new(tasks, metrics)?;
    metrics.add_text(crate::metrics::render);
    worker::run(BrokerClient::new(channel), runner, config, shutdown).await?;
    Ok(())
}
