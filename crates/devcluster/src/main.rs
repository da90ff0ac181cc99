//! `berth-devcluster`: runs the embedded dev cluster as its own process.
//!
//! Prints `listening on http://ADDR` as its first stdout line (split-mode tests parse
//! it), then `kubeconfig PATH` when a data directory is set, and runs until SIGTERM or
//! ctrl-c.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use berth_devcluster::{DevCluster, DevClusterConfig};
use clap::Parser;

/// An embedded Kubernetes API server for development and tests (not for production).
#[derive(Debug, Parser)]
#[command(name = "berth-devcluster", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0", env = "BERTH_DEVCLUSTER_LISTEN")]
    listen: SocketAddr,
    /// Directory for persisted objects and the kubeconfig; in-memory when absent.
    #[arg(long, env = "BERTH_DEVCLUSTER_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Simulate workload controllers (Deployments etc. become ready after a delay).
    #[arg(long)]
    simulate_workloads: bool,
    /// Delay before simulated workloads report ready, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    workload_delay_ms: u64,
    /// A file holding the admin token (first line) to use instead of the one the dev cluster
    /// generates and keeps in its data directory. There is no flag for the token itself: a
    /// command line is readable by every local user.
    #[arg(long, env = "BERTH_DEVCLUSTER_TOKEN_FILE")]
    token_file: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let admin_token = match &args.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading --token-file {}", path.display()))?
                .lines()
                .next()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .with_context(|| format!("--token-file {}: no token in the file", path.display()))?
                .to_string(),
        ),
        None => None,
    };
    let config = DevClusterConfig {
        listen: args.listen,
        data_dir: args.data_dir,
        simulate_workloads: args.simulate_workloads,
        workload_delay: Duration::from_millis(args.workload_delay_ms),
        admin_token,
    };
    let cluster = DevCluster::start(config)
        .await
        .context("starting the dev cluster")?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", cluster.url())?;
        if let Some(path) = cluster.kubeconfig_path() {
            writeln!(out, "kubeconfig {}", path.display())?;
        }
        out.flush()?;
    }
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    cluster.shutdown().await;
    Ok(())
}
