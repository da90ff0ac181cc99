//! The release service as a process: a Kubernetes client from a kubeconfig (or the ambient
//! configuration) and the gRPC server.

use std::path::Path;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::{ReleaseService, server};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("Kubernetes client configuration: {0}")]
    Config(#[from] kube::config::InferConfigError),
    #[error("Kubernetes client: {0}")]
    Client(#[from] kube::Error),
    #[error("lifecycle endpoint: {0}")]
    Lifecycle(tonic::transport::Error),
    #[error("serving gRPC: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// A client for the cluster named by `kubeconfig`, or the ambient one (in-cluster, `KUBECONFIG`,
/// `~/.kube/config`) when `None`.
pub async fn kube_client(kubeconfig: Option<&Path>) -> Result<kube::Client, Error> {
    let config = match kubeconfig {
        Some(path) => {
            let kc =
                kube::config::Kubeconfig::read_from(path).map_err(|source| Error::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|source| Error::Kubeconfig {
                    path: path.display().to_string(),
                    source,
                })?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// Serves the release service on `listener` until `shutdown`, asking lifecycle at `lifecycle`
/// what each request's package is (`None`: no confinement, for tests); see [`run_service`].
pub async fn run(
    client: kube::Client,
    lifecycle: Option<&str>,
    tls: Option<berth_telemetry::Tls>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let mut service = ReleaseService::new(client);
    if let Some(endpoint) = lifecycle {
        service = service.with_package_scopes(
            berth_telemetry::scope::PackageScopes::connect_lazy(endpoint, tls.as_ref())
                .map_err(Error::Lifecycle)?,
        );
    }
    run_service(service, tls, listener, shutdown).await
}

/// Serves `service` on `listener` until `shutdown` (with `tls`: mutual TLS, calls authorised
/// by the caller's role; without: plain gRPC), which also ends its drift watches. Drift
/// repair of the releases berth deployed earlier resumes alongside (so a slow cluster does not
/// delay serving).
pub async fn run_service(
    service: ReleaseService,
    tls: Option<berth_telemetry::Tls>,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let service = service.with_shutdown(shutdown.clone());
    let resume = service.clone();
    let resuming = berth_telemetry::spawn_in(
        tracing::info_span!("release.resume_drift_repair"),
        async move { resume.resume_drift_repair().await },
    );
    let router = berth_telemetry::grpc_server(tls.as_ref())?.add_service(server(service));
    berth_telemetry::serve_router(
        router,
        listener,
        berth_proto::FILE_DESCRIPTOR_SET,
        &["berth.release.v1.Releases"],
        shutdown,
    )
    .await?;
    resuming.abort();
    Ok(())
}
