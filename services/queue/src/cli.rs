//! The broker's command line (`serve`), shared by the `berth-queue` binary and the queue's own
//! test broker (`queue-test-broker`), so both take the same flags and print the same lines.

use std::time::Duration;

use crate::broker::BrokerConfig;
use tokio_util::sync::CancellationToken;

/// `serve`: the broker's flags.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[arg(long, env = "BERTH_QUEUE_LISTEN", default_value = "127.0.0.1:7071")]
    pub listen: std::net::SocketAddr,
    /// `sqlite://PATH` of the queue database.
    #[arg(
        long,
        env = "BERTH_QUEUE_DATABASE",
        default_value = "sqlite://.berth/queue.db"
    )]
    pub database: String,
    /// Lease time-to-live in milliseconds: a dead worker's task is redelivered after it.
    #[arg(long, env = "BERTH_QUEUE_LEASE_TTL_MS", default_value_t = 10_000)]
    pub lease_ttl_ms: u64,
    #[command(flatten)]
    pub metrics: berth_runtime::MetricsArgs,
    #[command(flatten)]
    pub tls: berth_runtime::TlsArgs,
}

/// Why `serve` stopped: the error as it was (the binary prints it unchanged).
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Creating the database directory or binding a port.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Tls(#[from] berth_runtime::tls::TlsError),
    #[error(transparent)]
    Serve(#[from] crate::process::Error),
}

/// Binds the ports, prints `metrics on ADDR` (when asked) and then `listening on ADDR`, and
/// serves the broker until `shutdown`.
pub async fn serve(args: ServeArgs, shutdown: CancellationToken) -> Result<(), ServeError> {
    berth_sql::ensure_sqlite_dir(&args.database)?;
    let tls = args.tls.load(Some(berth_runtime::Role::Broker))?;
    let metrics_listener = args.metrics.bind().await?;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    let config = BrokerConfig {
        lease_ttl: Duration::from_millis(args.lease_ttl_ms),
        ..Default::default()
    };
    let metrics = berth_runtime::Metrics::default();
    berth_runtime::metrics::spawn_server(&metrics, metrics_listener, shutdown.clone());
    crate::process::serve(&args.database, config, tls, listener, &metrics, shutdown).await?;
    Ok(())
}
