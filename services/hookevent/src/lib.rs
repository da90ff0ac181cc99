//! The hookevent service: holds the bindings packages register at Load and turns them into
//! HookRun tasks on the package's queues — schedules fired from crontabs, and `kubernetes`
//! bindings served by shared watches ([`kube::KubeManager`]) with jq filters, checksum dedupe,
//! snapshots, and events held until the binding's Synchronization ran. It also executes the
//! Kubernetes object operations hooks request, since it owns the cluster connection and the kind
//! resolution for hooks.
//!
//! Layers: `schedule` (the schedule model, no I/O), `kube` (watches, registry, HookRun tasks,
//! object operations), `scheduler` (the firing loop), `store` (SQLite), `convert` (proto ⇄
//! domain), `error` (one enum, one mapping to gRPC codes), `service` (the thin gRPC adapter).

mod convert;
mod enqueue;
mod error;
pub mod kube;
mod schedule;
mod scheduler;
mod service;
pub mod shards;
mod store;
pub mod webhook;

use std::path::PathBuf;

use berth_proto::hookevent::hook_events_server::HookEventsServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The bounded jq evaluator, shared with lifecycle (`berth-jq`).
pub use berth_jq as jq;
pub use berth_jq::{JqError, JqLimits, run_if_requested as run_jq_evaluator_if_requested};
pub use enqueue::Enqueuer;
pub use error::ServiceError;
pub use schedule::parse_crontab;
pub use scheduler::Scheduler;
pub use service::HookEventService;
pub use store::{Store, StoreError};

#[derive(Clone, Debug)]
pub struct Config {
    /// `sqlite://PATH` (created when missing), `sqlite::memory:` or `postgres://…`.
    pub database_url: String,
    pub broker_endpoint: String,
    /// The cluster kubernetes bindings watch. `None`: the ambient configuration (in-cluster or
    /// `KUBECONFIG`); when there is none, kubernetes bindings are refused.
    pub kubeconfig: Option<PathBuf>,
    /// Lifecycle's endpoint, asked what a package is (apps are confined to their namespace).
    pub lifecycle_endpoint: String,
    /// This service's identity (mutual TLS, calls authorised by role); `None`: plain gRPC.
    pub tls: Option<berth_runtime::Tls>,
    /// Bounds on jq programs (jqFilters, JQPatch). They run in evaluator processes started from
    /// this executable, whose `main` must call [`run_jq_evaluator_if_requested`] first.
    pub jq: JqLimits,
    /// The webhook server for admission and conversion bindings; `None` refuses them.
    pub webhook: Option<webhook::WebhookListen>,
    /// Where the service's metrics go (RPC metrics, `berth_watches`,
    /// `berth_watch_events_total`).
    pub metrics: berth_runtime::Metrics,
    /// How packages are shared out among replicas (without Leases, or without a cluster,
    /// this replica owns them all).
    pub shards: shards::ShardConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("broker endpoint {endpoint}: {source}")]
    Broker {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("lifecycle endpoint {endpoint}: {source}")]
    Lifecycle {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("kubeconfig {path}: {reason}")]
    Kubeconfig { path: String, reason: String },
    #[error("the jq evaluator executable: {0}")]
    JqEvaluator(std::io::Error),
    #[error("the webhook server: {0}")]
    Webhook(String),
    #[error("serving gRPC: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// A client for `kubeconfig`, or the ambient cluster; `Ok(None)` when there is none.
pub async fn kube_client(
    kubeconfig: Option<&std::path::Path>,
) -> Result<Option<::kube::Client>, Error> {
    let config = match kubeconfig {
        Some(path) => {
            let error = |reason: String| Error::Kubeconfig {
                path: path.display().to_string(),
                reason,
            };
            let kc =
                ::kube::config::Kubeconfig::read_from(path).map_err(|e| error(e.to_string()))?;
            ::kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| error(e.to_string()))?
        }
        None => match ::kube::Config::infer().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "no Kubernetes configuration; kubernetes bindings are disabled");
                return Ok(None);
            }
        },
    };
    let client = ::kube::Client::try_from(config).map_err(|e| Error::Kubeconfig {
        path: "(ambient)".into(),
        reason: e.to_string(),
    })?;
    Ok(Some(client))
}

/// Runs the service on `listener` until `shutdown` fires.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let store = Store::open(&config.database_url).await?;
    let tls = config.tls.as_ref();
    let broker =
        berth_clients::broker(&config.broker_endpoint, tls).map_err(|source| Error::Broker {
            endpoint: config.broker_endpoint.clone(),
            source,
        })?;
    let enqueuer = Enqueuer::start(broker.clone(), shutdown.clone());
    let jq = jq::Jq::current_exe(config.jq).map_err(Error::JqEvaluator)?;
    let client = kube_client(config.kubeconfig.as_deref()).await?;
    let watch_metrics = kube::WatchMetrics::default();
    config.metrics.register(|r| watch_metrics.register(r));
    let lifecycle =
        berth_clients::lifecycle(&config.lifecycle_endpoint, tls).map_err(|source| {
            Error::Lifecycle {
                endpoint: config.lifecycle_endpoint.clone(),
                source,
            }
        })?;
    let kube = client.clone().map(|client| {
        kube::KubeManager::new(
            client,
            enqueuer.clone(),
            shutdown.clone(),
            jq,
            watch_metrics,
            kube::HealthReporter::start(lifecycle, shutdown.clone()),
        )
    });
    let webhooks = match &config.webhook {
        None => None,
        Some(w) => {
            let listener = TcpListener::bind(w.listen)
                .await
                .map_err(|e| Error::Webhook(format!("listening on {}: {e}", w.listen)))?;
            let addr = listener
                .local_addr()
                .map_err(|e| Error::Webhook(e.to_string()))?;
            let url = w.url.clone().unwrap_or_else(|| format!("https://{addr}"));
            let (webhooks, cert) =
                webhook::Webhooks::new(url.clone(), client.clone(), broker.clone())
                    .map_err(Error::Webhook)?;
            let tls = webhook::tls_config(&cert).map_err(Error::Webhook)?;
            tracing::info!(%addr, %url, "webhook server listening");
            berth_runtime::spawn_in(
                tracing::info_span!(parent: None, "hookevent.webhooks"),
                webhook::serve(listener, tls, webhooks.clone(), shutdown.clone()),
            );
            Some(webhooks)
        }
    };
    let scopes = berth_clients::scope::PackageScopes::connect_lazy(&config.lifecycle_endpoint, tls)
        .map_err(|source| Error::Lifecycle {
            endpoint: config.lifecycle_endpoint.clone(),
            source,
        })?;
    let leases = client.clone().zip(config.shards.leases.clone());
    let owned = match &leases {
        Some((client, leases)) => {
            shards::Shards::with_leases(config.shards.shards, client.clone(), leases)
        }
        None => shards::Shards::all_owned(config.shards.shards),
    };
    let service = HookEventService::new(
        store,
        enqueuer,
        kube,
        scopes,
        webhooks,
        owned.clone(),
        config.tls.clone(),
    )
    .await?;
    let scheduler = berth_runtime::spawn_in(
        tracing::info_span!(parent: None, "hookevent.scheduler"),
        service.scheduler().run(shutdown.clone()),
    );
    let coordinator = match leases {
        Some((client, leases)) => {
            tracing::info!(replica = %leases.lease.identity, namespace = %leases.namespace,
                shards = config.shards.shards, advertise = leases.advertise.as_deref().unwrap_or_default(), "hookevent replica");
            let mut coordinator = shards::Coordinator::new(
                client,
                leases,
                owned,
                std::sync::Arc::new(service.clone()),
            );
            // The shards free now are taken before serving: a lone replica serves every
            // package from its first call.
            coordinator.round().await;
            Some(berth_runtime::spawn_in(
                tracing::info_span!(parent: None, "hookevent.shards"),
                coordinator.run(shutdown.clone()),
            ))
        }
        None => {
            let restore = service.clone();
            berth_runtime::spawn_in(
                tracing::info_span!(parent: None, "hookevent.restore"),
                async move { restore.restore().await },
            );
            None
        }
    };
    let router = berth_runtime::grpc_server(
        berth_runtime::Role::Hookevent,
        tls,
        &config.metrics,
        berth_proto::FILE_DESCRIPTOR_SET,
    )?
    .add_service(
        HookEventsServer::new(service)
            .max_decoding_message_size(berth_runtime::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(berth_runtime::MAX_MESSAGE_BYTES),
    );
    let served = berth_runtime::serve_router(
        router,
        listener,
        berth_proto::FILE_DESCRIPTOR_SET,
        &["berth.hookevent.v1.HookEvents"],
        shutdown.clone(),
    )
    .await;
    shutdown.cancel();
    let _ = scheduler.await;
    if let Some(coordinator) = coordinator {
        // Gives the shard Leases up, so another replica takes them at once.
        let _ = coordinator.await;
    }
    Ok(served?)
}
