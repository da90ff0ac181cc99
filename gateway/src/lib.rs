//! The gateway: berth's public gRPC API (`berth.v1.Packages`, health, reflection), the `berth`
//! CLI, and the all-in-one mode (`berth up`) that runs every service in one process.

pub mod cli;
mod service;
pub mod up;

use berth_proto::lifecycle::lifecycle_client::LifecycleClient;
use berth_proto::v1::packages_server::PackagesServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use service::{Auth, Gateway};

/// The address `berth up` and `berth-gateway` listen on by default, and the CLI's default server.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7070";

#[derive(Clone, Debug)]
pub struct Config {
    pub lifecycle_endpoint: String,
    /// Bearer token callers must present; `None` disables authentication.
    pub token: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("lifecycle endpoint {endpoint}: {source}")]
    Lifecycle {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("serving gRPC: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Serves the public API on `listener` until `shutdown`.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let channel = berth_telemetry::connect_lazy(&config.lifecycle_endpoint).map_err(|source| {
        Error::Lifecycle {
            endpoint: config.lifecycle_endpoint.clone(),
            source,
        }
    })?;
    let gateway = Gateway::new(LifecycleClient::new(channel));
    let api = PackagesServer::with_interceptor(gateway, Auth::new(config.token));
    let router = berth_telemetry::grpc_server().add_service(api);
    berth_telemetry::serve_router(
        router,
        listener,
        berth_proto::FILE_DESCRIPTOR_SET,
        &["berth.v1.Packages"],
        shutdown,
    )
    .await?;
    Ok(())
}
