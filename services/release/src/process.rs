//! The release service as a process: a Kubernetes client from a kubeconfig (or the ambient
//! configuration) and the gRPC server.

use std::path::Path;

use std::time::Duration;

use berth_proto::lifecycle::ClusterVersionReport;
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
    #[error("reading the API server's CA for hooks: {0}")]
    HookCa(std::io::Error),
    #[error("lifecycle endpoint: {0}")]
    Lifecycle(tonic::transport::Error),
    #[error("serving gRPC: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// A client for the cluster named by `kubeconfig`, or the ambient one (in-cluster, `KUBECONFIG`,
/// `~/.kube/config`) when `None`.
pub async fn kube_client(kubeconfig: Option<&Path>) -> Result<kube::Client, Error> {
    Ok(kube::Client::try_from(kube_config(kubeconfig).await?)?)
}

/// The cluster release manages: its client, and where hooks reach its API server.
#[derive(Clone)]
pub struct Cluster {
    pub client: kube::Client,
    pub hook_endpoint: crate::principal::HookEndpoint,
}

/// The cluster of `kubeconfig` (or the ambient one): hooks reach it where release does, or at
/// `hook_server` (a URL) when given.
pub async fn connect(
    kubeconfig: Option<&Path>,
    hook_server: Option<&str>,
) -> Result<Cluster, Error> {
    let config = kube_config(kubeconfig).await?;
    let hook_endpoint =
        crate::principal::HookEndpoint::of_config(&config, hook_server).map_err(Error::HookCa)?;
    Ok(Cluster {
        client: kube::Client::try_from(config)?,
        hook_endpoint,
    })
}

async fn kube_config(kubeconfig: Option<&Path>) -> Result<kube::Config, Error> {
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
    Ok(config)
}

/// Serves the release service on `listener` until `shutdown`, asking lifecycle at `lifecycle`
/// what each request's package is (`None`: no confinement and no principals, for tests), its
/// records authenticated with `key`; see [`run_service`]. With lifecycle it acts as packages'
/// principals, App namespaces labelled for Pod Security at the default level (baseline). The only
/// replica of its cluster (`berth up`): no shard Leases, it repairs every release.
pub async fn run(
    cluster: Cluster,
    key: crate::record::RecordKey,
    lifecycle: Option<&str>,
    tls: Option<berth_runtime::Tls>,
    listener: TcpListener,
    metrics: berth_runtime::Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let Cluster {
        client,
        hook_endpoint,
    } = cluster;
    let mut service = ReleaseService::new(client.clone(), key);
    let mut reporter = None;
    if let Some(endpoint) = lifecycle {
        service = service
            .with_package_scopes(
                berth_clients::scope::PackageScopes::connect_lazy(endpoint, tls.as_ref())
                    .map_err(Error::Lifecycle)?,
            )
            .with_principals(hook_endpoint, crate::principal::PodSecurity::default())
            .with_health(crate::manager::HealthReporter::start(
                berth_clients::lifecycle(endpoint, tls.as_ref()).map_err(Error::Lifecycle)?,
                shutdown.clone(),
            ));
        reporter = Some(spawn_version_reporter(
            client,
            endpoint,
            tls.as_ref(),
            shutdown.clone(),
        )?);
    }
    let served = run_service(service, tls, listener, metrics, shutdown).await;
    if let Some(reporter) = reporter {
        reporter.abort();
    }
    served
}

/// Starts reporting the cluster's Kubernetes version to lifecycle at `endpoint` until
/// `shutdown` (see [`report_cluster_version`]).
pub fn spawn_version_reporter(
    client: kube::Client,
    endpoint: &str,
    tls: Option<&berth_runtime::Tls>,
    shutdown: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, Error> {
    let lifecycle = berth_clients::lifecycle(endpoint, tls).map_err(Error::Lifecycle)?;
    Ok(berth_runtime::spawn_in(
        tracing::info_span!(parent: None, "release.cluster_version"),
        report_cluster_version(client, lifecycle, shutdown),
    ))
}

/// How often the cluster's version is reported to lifecycle once it was: a cluster upgrade
/// (or a restarted lifecycle, which keeps the version in memory) is noticed within this.
const VERSION_REPORT_PERIOD: Duration = Duration::from_secs(30);
/// First retry after a failed ask or report; doubled up to the period.
const VERSION_RETRY: Duration = Duration::from_secs(1);
/// Longest one ask of the API server, or one report, may take.
const VERSION_CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// Reports the cluster's Kubernetes version (`/version`) to lifecycle's scheduler at start and
/// every [`VERSION_REPORT_PERIOD`] until `shutdown`. Release pushes rather than lifecycle
/// asking: lifecycle has no cluster access, and release already calls lifecycle (package
/// scopes), so the two need not know each other's address both ways.
async fn report_cluster_version(
    client: kube::Client,
    mut lifecycle: berth_clients::Lifecycle,
    shutdown: CancellationToken,
) {
    let mut wait = VERSION_RETRY;
    loop {
        let reported = async {
            let info = tokio::time::timeout(VERSION_CALL_TIMEOUT, client.apiserver_version())
                .await
                .map_err(|_| "the API server did not answer /version in time".to_owned())?
                .map_err(|e| format!("the API server's /version: {e}"))?;
            tokio::time::timeout(
                VERSION_CALL_TIMEOUT,
                lifecycle.report_cluster_version(ClusterVersionReport {
                    git_version: info.git_version,
                }),
            )
            .await
            .map_err(|_| "lifecycle did not answer in time".to_owned())?
            .map_err(|s| format!("lifecycle ReportClusterVersion: {}", s.message()))?;
            Ok::<_, String>(())
        }
        .await;
        wait = match reported {
            Ok(()) => VERSION_REPORT_PERIOD,
            Err(error) => {
                tracing::debug!(%error, "cluster version not reported; trying again");
                (wait * 2).min(VERSION_REPORT_PERIOD)
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Longest a stopping replica waits to give its shard Leases up (each request is bounded too).
const GIVE_UP_TIMEOUT: Duration = Duration::from_secs(15);

/// Serves `service` on `listener` until `shutdown` (with `tls`: mutual TLS, calls authorised
/// by the caller's role; without: plain gRPC), which also ends its drift watches. Its metrics
/// (RPC, apply and readiness durations, drift repairs) go to `metrics`. Alongside (so a slow
/// cluster does not delay serving) the replica takes part in the shard Leases, or, without
/// them, resumes the drift repair of the releases berth deployed earlier (see
/// [`ReleaseService::run_shards`]); at shutdown it gives its shard Leases up, so another
/// replica takes over at once.
pub async fn run_service(
    service: ReleaseService,
    tls: Option<berth_runtime::Tls>,
    listener: TcpListener,
    metrics: berth_runtime::Metrics,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let service = service
        .with_metrics(&metrics)
        .with_shutdown(shutdown.clone());
    let leases = service.run_shards(shutdown.clone());
    let router = berth_runtime::grpc_server(
        berth_runtime::Role::Release,
        tls.as_ref(),
        &metrics,
        berth_proto::FILE_DESCRIPTOR_SET,
    )?
    .add_service(server(service));
    let served = berth_runtime::serve_router(
        router,
        listener,
        berth_proto::FILE_DESCRIPTOR_SET,
        &["berth.release.v1.Releases"],
        shutdown.clone(),
    )
    .await;
    shutdown.cancel();
    if let Some(leases) = leases
        && tokio::time::timeout(GIVE_UP_TIMEOUT, leases).await.is_err()
    {
        tracing::warn!("the shard Leases were not all given up in time; they expire instead");
    }
    Ok(served?)
}
