//! `berth-controller`: berth's Kubernetes front end. It installs berth's
//! CustomResourceDefinitions (`crds/`), turns `Application` and `Module` resources
//! (`berth.io/v1alpha1`) into the same lifecycle Updates and Removes the gRPC API makes — as
//! their owner, so a package belongs to one front door —, writes their status (berth's
//! conditions and kstatus's Ready, Reconciling and Stalled) and Events, runs Remove through a
//! finalizer, and validates specs at admission with lifecycle's ValidateSettings.
//!
//! - `resources`: the resource types; `crds`: their definitions, installed at start;
//! - `front`: what a resource asks of lifecycle; `status`: the status it gets (pure);
//! - `reconcile`: one reconcile; `packages`: lifecycle's Watch, the cache and the triggers;
//! - `events`: rate-limited Events; `webhook`: the validating admission webhook.
//!
//! One replica is active at a time (a Lease, `berth-controller`), as the other singletons;
//! `berth up` runs the only one and takes none. It holds no state: lifecycle is the truth of
//! the packages, the resources the truth of what is wanted.

pub mod client;
pub mod crds;
pub mod error;
pub mod events;
pub mod front;
pub mod packages;
pub mod reconcile;
pub mod repositories;
pub mod resources;
pub mod status;
pub mod webhook;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use kube::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

pub use error::Error;
use front::Front;
use reconcile::Context;
use resources::{Application, Module, PackageRepository};

/// The Lease the active replica holds.
pub const LEASE: &str = "berth-controller";
/// Reconciles running at once per kind.
const CONCURRENCY: u16 = 32;

/// How the controller runs.
#[derive(Clone, Debug)]
pub struct Config {
    pub lifecycle_endpoint: String,
    pub tls: Option<berth_runtime::Tls>,
    /// The cluster (default: in-cluster, KUBECONFIG or ~/.kube/config).
    pub kubeconfig: Option<PathBuf>,
    /// Where the admission webhook listens; `None`: no webhook (specs are checked when
    /// reconciled only).
    pub webhook: Option<webhook::WebhookListen>,
    /// The Lease to hold while active; `None`: active at once (`berth up`, the only one).
    pub lease: Option<LeaseSettings>,
    /// Apply the CRDs at start (a chart that ships them in `crds/` may turn it off).
    pub install_crds: bool,
    /// Only resources with these labels (`key=value,...`) are this controller's, as Flux's
    /// `--watch-label-selector`: several berth installations may share a cluster.
    pub selector: Option<String>,
    /// Where the credentials Secrets of PackageRepositories are watched, so a change is read
    /// at once: one namespace (the chart's: berth's own), or every one (`None`, `berth up`).
    /// Secrets elsewhere are read again every 300 s.
    pub credentials_namespace: Option<String>,
}

#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub namespace: String,
    pub config: berth_lease::LeaseConfig,
}

/// A client of the cluster `kubeconfig` names.
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<kube::Client, Error> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| Error::Config(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| Error::Config(e.to_string()))?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// Runs the controller until `shutdown`; `on_ready` once the CRDs are established and the
/// webhook registered.
pub async fn run(
    config: Config,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(),
) -> Result<(), Error> {
    let client = client(config.kubeconfig.as_deref()).await?;
    if config.install_crds {
        crds::install(&client, Duration::from_secs(60)).await?;
    }
    let lifecycle = client::Lifecycle::new(
        berth_clients::lifecycle(&config.lifecycle_endpoint, config.tls.as_ref())
            .map_err(|e| Error::Config(format!("lifecycle endpoint: {e}")))?,
    );
    let packages = packages::Packages::default();
    let identity = config.lease.as_ref().map_or_else(
        || berth_lease::default_identity("berth-controller"),
        |l| l.config.identity.clone(),
    );
    let cx = Arc::new(Context {
        client: client.clone(),
        lifecycle: lifecycle.clone(),
        packages: packages.clone(),
        recorder: events::Recorder::new(client.clone(), identity),
        accepted: Default::default(),
    });
    let admission = webhook::Admission {
        lifecycle: lifecycle.clone(),
        packages: packages.clone(),
    };
    // Only the active replica serves (and registers) the webhook: a standby's pod is not
    // Ready, so the Service in front of the replicas reaches the active one.
    let serve_webhook = |term: CancellationToken| {
        let (client, admission) = (client.clone(), admission.clone());
        let (listen, selector) = (config.webhook.clone(), config.selector.clone());
        async move {
            match listen {
                Some(listen) => {
                    webhook::start(&listen, &client, admission, selector.as_deref(), term).await
                }
                None => Ok(()),
            }
        }
    };
    match &config.lease {
        None => {
            serve_webhook(shutdown.clone()).await?;
            on_ready();
            tracing::Instrument::instrument(
                active(
                    cx,
                    config.selector.clone(),
                    config.credentials_namespace.clone(),
                    shutdown,
                ),
                berth_runtime::untraced(tracing::info_span!(parent: None, "controller.active")),
            )
            .await;
        }
        Some(lease) => {
            on_ready();
            let mut elector = berth_lease::Elector::new(
                client.clone(),
                &lease.namespace,
                LEASE,
                [("app.kubernetes.io/part-of".to_owned(), "berth".to_owned())].into(),
                lease.config.clone(),
            );
            while !shutdown.is_cancelled() {
                match elector.acquire(true).await {
                    Ok(berth_lease::Claim::Held) => {
                        tracing::info!(lease = LEASE, "holding the controller Lease: active");
                        let term = shutdown.child_token();
                        if let Err(e) = serve_webhook(term.clone()).await {
                            tracing::error!(error = %e, "the admission webhook did not start; specs are checked when reconciled");
                        }
                        // Following lifecycle and waiting for triggers traces nothing;
                        // each reconcile opens a root of its own.
                        let running = berth_runtime::spawn_in(
                            tracing::info_span!(parent: None, "controller.active"),
                            active(
                                cx.clone(),
                                config.selector.clone(),
                                config.credentials_namespace.clone(),
                                term.clone(),
                            ),
                        );
                        // Renew until lost (or shut down), then stop at once.
                        loop {
                            tokio::select! {
                                () = tokio::time::sleep(lease.config.renew) => {}
                                () = shutdown.cancelled() => break,
                            }
                            let held =
                                matches!(elector.acquire(true).await, Ok(berth_lease::Claim::Held));
                            if !held && !elector.still_held() {
                                tracing::warn!(
                                    lease = LEASE,
                                    "lost the controller Lease: standing by"
                                );
                                break;
                            }
                        }
                        term.cancel();
                        let _ = running.await;
                        if shutdown.is_cancelled() {
                            elector.release().await;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "the controller Lease: request failed"),
                }
                tokio::select! {
                    () = tokio::time::sleep(lease.config.renew) => {}
                    () = shutdown.cancelled() => {}
                }
            }
        }
    }
    Ok(())
}

/// The active replica: lifecycle's Watch and the three controllers, until `term`.
async fn active(
    cx: Arc<Context>,
    selector: Option<String>,
    credentials_namespace: Option<String>,
    term: CancellationToken,
) {
    let (apps_tx, apps_rx) = tokio::sync::mpsc::channel(packages::MAX_TRIGGERS);
    let (modules_tx, modules_rx) = tokio::sync::mpsc::channel(packages::MAX_TRIGGERS);
    // Lifecycle's Watch is a background loop: untraced, like every other.
    let follow = berth_runtime::spawn_in(
        tracing::info_span!(parent: None, "controller.follow"),
        cx.packages
            .clone()
            .follow(cx.lifecycle.clone(), apps_tx, modules_tx, term.clone()),
    );
    let watched = match &selector {
        Some(s) => watcher::Config::default().labels(s),
        None => watcher::Config::default(),
    };
    let watched_repositories = watched.clone();
    let apps = controller(
        Api::<Application>::all(cx.client.clone()),
        watched.clone(),
        tokio_stream::wrappers::ReceiverStream::new(apps_rx),
        cx.clone(),
        term.clone(),
    );
    let modules = controller(
        Api::<Module>::all(cx.client.clone()),
        watched,
        tokio_stream::wrappers::ReceiverStream::new(modules_rx),
        cx.clone(),
        term.clone(),
    );
    let repositories = Controller::new(
        Api::<PackageRepository>::all(cx.client.clone()),
        watched_repositories,
    );
    let secrets = repositories::credential_changes(
        &cx.client,
        credentials_namespace.as_deref(),
        repositories.store(),
    );
    let repositories = repositories
        .watches_stream(secrets.0, secrets.1)
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY))
        .graceful_shutdown_on(term.clone().cancelled_owned())
        .run(repositories::reconcile, repository_error, cx.clone())
        .for_each(|_| async {});
    tokio::join!(apps, modules, repositories);
    term.cancel();
    let _ = follow.await;
}

async fn controller<K: Front>(
    api: Api<K>,
    watched: watcher::Config,
    triggers: impl futures::Stream<Item = kube::runtime::reflector::ObjectRef<K>> + Send + 'static,
    cx: Arc<Context>,
    term: CancellationToken,
) where
    K::DynamicType: Default,
{
    let config = kube::runtime::controller::Config::default().concurrency(CONCURRENCY);
    Controller::new(api, watched)
        .with_config(config)
        .reconcile_on(triggers)
        .graceful_shutdown_on(term.cancelled_owned())
        .run(reconcile::reconcile::<K>, error_policy::<K>, cx)
        .for_each(|_| async {})
        .await;
}

fn error_policy<K: Front>(obj: Arc<K>, error: &Error, _cx: Arc<Context>) -> Action {
    tracing::warn!(kind = K::KIND, name = %kube::ResourceExt::name_any(obj.as_ref()), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

fn repository_error(obj: Arc<PackageRepository>, error: &Error, _cx: Arc<Context>) -> Action {
    tracing::warn!(kind = "PackageRepository", name = %kube::ResourceExt::name_any(obj.as_ref()), %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}
