//! `berth up`: every service in one process — the queue broker and a worker, lifecycle,
//! hookevent, release and the gateway — with embedded SQLite databases under the data directory
//! and, unless a kubeconfig is given, the embedded dev cluster.
//!
//! The services still talk gRPC to each other over loopback ports chosen by the OS, so the
//! all-in-one mode behaves exactly like the split one.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_devcluster::{DevCluster, DevClusterConfig};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub struct UpConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// A real cluster; `None` starts the embedded dev cluster.
    pub kubeconfig: Option<PathBuf>,
    /// Workload simulation in the dev cluster (Deployments become ready without a kubelet).
    pub simulate_workloads: bool,
    /// Bearer tokens the public API accepts besides `berth up`'s own (`<data-dir>/token`,
    /// generated the first time and kept).
    pub tokens: Vec<String>,
    /// Serve the public API over TLS (always when `listen` is not a loopback address).
    pub public_tls: bool,
    /// Names and addresses the certificates are valid for besides the loopback ones and the
    /// listen address.
    pub tls_hosts: Vec<String>,
    pub limits: crate::Limits,
    pub hook_timeout: Duration,
    pub ready_timeout: Duration,
    pub worker_concurrency: usize,
    /// Where to serve every service's metrics (and the metrics hooks write); `None` for
    /// nowhere.
    pub metrics_listen: Option<SocketAddr>,
    /// Where to serve the metrics hooks write alone; `None` for nowhere.
    pub hook_metrics_listen: Option<SocketAddr>,
    /// Where to serve operators' views as a Kubernetes-style API; `None` for nowhere.
    pub views_listen: Option<SocketAddr>,
    /// Directory for hook runs' temporary files; `None` = the system temp directory.
    pub hook_tmp_dir: Option<PathBuf>,
    /// How hooks are confined (`--hook-uids`, the limit caps, `--hook-writable`).
    pub hook_isolation: berth_worker::HookIsolationArgs,
    /// The repositories an Update may name, handed to lifecycle (which checks Updates against
    /// them) and the worker (which fetches from them).
    pub repositories: berth_package::Repositories,
    /// Bounds on jq programs, hookevent's and lifecycle's settings conversions (their
    /// evaluators are this executable, see `berth_jq::run_if_requested`).
    pub jq: berth_jq::JqLimits,
    /// How long a validation waits for a worker (see `berth_lifecycle::Config`).
    pub validation_wait: Duration,
    /// hookevent's webhook server (admission and conversion bindings).
    pub webhook: Option<berth_hookevent::webhook::WebhookListen>,
    /// The berth.io resources this berth's controller acts on: those with these labels
    /// (`--watch-label-selector`); `None`: all of them.
    pub controller_selector: Option<String>,
    /// Where the controller's admission webhook listens; `None`: no webhook.
    pub controller_webhook: Option<berth_controller::webhook::WebhookListen>,
}

#[derive(Debug, thiserror::Error)]
pub enum UpError {
    #[error("data directory {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error("binding {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: String,
        source: std::io::Error,
    },
    #[error("hooks: {0}")]
    HookUser(String),
    #[error("the API token: {0}")]
    Token(#[from] crate::auth::TokenError),
    #[error("certificates: {0}")]
    Tls(#[from] berth_runtime::tls::TlsError),
    #[error("dev cluster: {0}")]
    DevCluster(String),
    #[error("{service}: {message}")]
    Service {
        service: &'static str,
        message: String,
    },
}

/// Where `berth up` is serving, printed at start and used by tests.
#[derive(Clone, Debug)]
pub struct Running {
    pub gateway: SocketAddr,
    pub kubeconfig: PathBuf,
    /// The metrics port (every service's), when asked for.
    pub metrics: Option<SocketAddr>,
    /// The hook metrics port, when asked for.
    pub hook_metrics: Option<SocketAddr>,
    /// The view API's port, when asked for.
    pub views: Option<SocketAddr>,
    /// The CA and the services' certificates (`ca.pem`, `<role>.pem`, `<role>-key.pem`).
    pub tls_dir: PathBuf,
    /// Whether the public API is served over TLS.
    pub public_tls: bool,
    /// The token every call must present (0600; the CLI reads it from here).
    pub token_file: PathBuf,
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, UpError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| UpError::Bind {
            what,
            addr: addr.to_string(),
            source,
        })
}

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Where hooks find the package cache, and what keeps a temporary one alive.
struct HookCache {
    dir: PathBuf,
    /// A cache outside the data directory, removed when `berth up` ends.
    _temporary: Option<tempfile::TempDir>,
}

/// Sets up how hooks are confined (`isolation`) and where the package cache is, so that the
/// hooks' users reach it.
///
/// When hooks run as their principals' uids (root, `--hook-uids` not `off`), the data
/// directory becomes searchable by others (0711, not listable) and the cache readable (0755;
/// package files are berth's, 0644/0755); everything else directly in it stays the owner's:
/// directories 0700, files 0600 (the databases are made so before they are opened). When the
/// data directory's own parents are not searchable by others (`./.berth` in a checkout under
/// `/root`), the cache is a fresh directory in the system temp directory instead (random
/// name, created by berth, removed at the end), so `berth up` works from anywhere. A
/// `--hook-tmp-dir` the hooks cannot reach refuses the start.
fn hook_cache(
    isolation: &berth_worker::HookIsolationArgs,
    data: &Path,
    hook_tmp_dir: Option<&Path>,
) -> Result<HookCache, UpError> {
    use std::os::unix::fs::PermissionsExt;
    let cache = data.join("packages");
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| UpError::DataDir { path, source }
    };
    let tmp = hook_tmp_dir.map_or_else(std::env::temp_dir, Path::to_path_buf);
    // Every uid of the range reaches a directory as "others" (none owns it).
    let stranger = match isolation.hook_uids.0 {
        Some(range) if berth_hooks::isolation::running_as_root() => Some(berth_hooks::HookUser {
            uid: range.last(),
            gid: range.last(),
        }),
        _ => None,
    };
    let Some(user) = stranger else {
        isolation.apply(&tmp, &[]).map_err(UpError::HookUser)?;
        return Ok(HookCache {
            dir: cache,
            _temporary: None,
        });
    };
    user.check_reachable(&tmp)
        .map_err(|e| UpError::HookUser(format!("--hook-tmp-dir: {e}")))?;
    let parent = data.parent().unwrap_or(Path::new("/"));
    let hooks = match user.check_reachable(parent) {
        Ok(()) => {
            std::fs::set_permissions(data, std::fs::Permissions::from_mode(0o711))
                .map_err(io(data))?;
            std::fs::create_dir_all(&cache).map_err(io(&cache))?;
            std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755))
                .map_err(io(&cache))?;
            HookCache {
                dir: cache.clone(),
                _temporary: None,
            }
        }
        Err(reason) => {
            let temporary = tempfile::Builder::new()
                .prefix("berth-packages-")
                .rand_bytes(12)
                .tempdir()
                .map_err(io(&std::env::temp_dir()))?;
            std::fs::set_permissions(temporary.path(), std::fs::Permissions::from_mode(0o711))
                .map_err(io(temporary.path()))?;
            user.check_reachable(temporary.path())
                .map_err(UpError::HookUser)?;
            tracing::warn!(
                cache = %temporary.path().display(),
                %reason,
                "the package cache is in the temp directory for this run: hooks cannot reach the data directory"
            );
            HookCache {
                dir: temporary.path().to_path_buf(),
                _temporary: Some(temporary),
            }
        }
    };
    for entry in std::fs::read_dir(data).map_err(io(data))? {
        let entry = entry.map_err(io(data))?;
        let path = entry.path();
        if path == cache {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        let mode = if meta.is_dir() {
            0o700
        } else if meta.is_file() {
            0o600
        } else {
            continue;
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(io(&path))?;
    }
    isolation
        .apply(&tmp, &[("the package cache", &hooks.dir)])
        .map_err(UpError::HookUser)?;
    tracing::info!(cache = %hooks.dir.display(), "hooks run as their package instances' uids");
    Ok(hooks)
}

/// The file in the certificates directory holding the key release records are authenticated
/// with (see `berth_release::record::key`).
pub const RECORD_KEY_FILE: &str = "record.key";

fn sqlite(dir: &Path, name: &str) -> String {
    format!("sqlite://{}", dir.join(name).display())
}

/// Runs everything until `shutdown`; calls `on_ready` once every listener is bound.
pub async fn run(
    config: UpConfig,
    shutdown: CancellationToken,
    on_ready: impl FnOnce(&Running),
) -> Result<(), UpError> {
    let data = &config.data_dir;
    // Databases, the package cache and the dev cluster's state (its Secrets among them): the
    // owner's only.
    berth_devcluster::private::create_private_dir(data).map_err(|source| UpError::DataDir {
        path: data.display().to_string(),
        source,
    })?;
    let data = data.canonicalize().map_err(|source| UpError::DataDir {
        path: data.display().to_string(),
        source,
    })?;
    // The API token: berth up's own, in the data directory (the owner's only; hooks run as
    // other uids, or under Landlock, and cannot read it), plus any configured.
    let (token_file, own_token) = crate::auth::load_or_generate(&data)?;
    let mut tokens = vec![own_token];
    tokens.extend(config.tokens.iter().cloned());
    let tokens = crate::Tokens::new(tokens)?;
    if let Some(dir) = &config.hook_tmp_dir {
        std::fs::create_dir_all(dir).map_err(|source| UpError::DataDir {
            path: dir.display().to_string(),
            source,
        })?;
    }
    let hooks = hook_cache(
        &config.hook_isolation,
        &data,
        config.hook_tmp_dir.as_deref(),
    )?;
    for db in ["queue.db", "lifecycle.db", "hookevent.db"] {
        // SQLite creates a database's -wal and -shm files with the database file's mode.
        let path = data.join(db);
        berth_devcluster::private::tighten_or_create_private(&path).map_err(|source| {
            UpError::DataDir {
                path: path.display().to_string(),
                source,
            }
        })?;
    }
    // Every service's identity (mutual TLS between them): a CA and a certificate per role,
    // generated once and kept, 0600.
    let tls_dir = data.join("tls");
    let mut hosts = vec!["localhost".to_owned(), "127.0.0.1".into(), "::1".into()];
    if !config.listen.ip().is_unspecified() {
        hosts.push(config.listen.ip().to_string());
    }
    hosts.extend(config.tls_hosts.iter().cloned());
    berth_runtime::tls::ensure_generated(&tls_dir, &hosts)?;
    // The key release records are authenticated with, beside the certificates: generated once
    // (0600) and kept, since records made with another key are not berth's.
    let record_key =
        berth_release::record::RecordKey::load_or_generate(&tls_dir.join(RECORD_KEY_FILE))
            .map_err(|e| UpError::Service {
                service: "release",
                message: e.to_string(),
            })?;
    let identity = |role| berth_runtime::Tls::from_dir(&tls_dir, role);
    use berth_runtime::Role;
    let (broker_tls, lifecycle_tls, hookevent_tls, release_tls, worker_tls, gateway_tls) = (
        identity(Role::Broker)?,
        identity(Role::Lifecycle)?,
        identity(Role::Hookevent)?,
        identity(Role::Release)?,
        identity(Role::Worker)?,
        identity(Role::Gateway)?,
    );
    let controller_tls = identity(Role::Controller)?;
    let public_tls = config.public_tls || !config.listen.ip().is_loopback();
    let gateway_cert = || {
        let files = berth_runtime::tls::CertFiles::new(&tls_dir, Role::Gateway);
        crate::PublicTls::load(&files.cert, &files.key).map_err(|source| UpError::DataDir {
            path: files.cert.display().to_string(),
            source,
        })
    };
    let public = if public_tls {
        Some(gateway_cert()?)
    } else {
        None
    };
    // The view API is always TLS (kubectl sends tokens over TLS only), with the gateway's
    // certificate (berth's CA, valid for the loopback addresses and --tls-host).
    let views_cert = if config.views_listen.is_some() {
        Some(gateway_cert()?)
    } else {
        None
    };

    let (cluster, kubeconfig) = match &config.kubeconfig {
        Some(path) => (None, path.clone()),
        None => {
            let cluster = DevCluster::start(DevClusterConfig {
                listen: loopback(),
                data_dir: Some(data.join("cluster")),
                simulate_workloads: config.simulate_workloads,
                ..Default::default()
            })
            .await
            .map_err(|e| UpError::DevCluster(e.to_string()))?;
            let path = data.join("kubeconfig");
            berth_devcluster::private::write_private(&path, cluster.kubeconfig_yaml().as_bytes())
                .map_err(|source| UpError::DataDir {
                path: path.display().to_string(),
                source,
            })?;
            (Some(cluster), path)
        }
    };

    let gateway_listener = bind("the gateway", config.listen).await?;
    let broker_listener = bind("the queue broker", loopback()).await?;
    let lifecycle_listener = bind("lifecycle", loopback()).await?;
    let hookevent_listener = bind("hookevent", loopback()).await?;
    let release_listener = bind("release", loopback()).await?;
    let endpoint = |l: &TcpListener| format!("http://{}", l.local_addr().expect("bound listener"));
    let broker = endpoint(&broker_listener);
    let lifecycle = endpoint(&lifecycle_listener);
    let hookevent = endpoint(&hookevent_listener);
    let hookevent_for_gateway = hookevent.clone();
    let release = endpoint(&release_listener);
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(bind("the metrics", addr).await?),
        None => None,
    };
    let hook_metrics_listener = match config.hook_metrics_listen {
        Some(addr) => Some(bind("the hook metrics", addr).await?),
        None => None,
    };
    let views_listener = match config.views_listen {
        Some(addr) => Some(bind("the view API", addr).await?),
        None => None,
    };
    let running = Running {
        gateway: gateway_listener.local_addr().expect("bound listener"),
        kubeconfig: kubeconfig.clone(),
        metrics: metrics_listener
            .as_ref()
            .map(|l| l.local_addr().expect("bound listener")),
        hook_metrics: hook_metrics_listener
            .as_ref()
            .map(|l| l.local_addr().expect("bound listener")),
        views: views_listener
            .as_ref()
            .map(|l| l.local_addr().expect("bound listener")),
        tls_dir: tls_dir.clone(),
        public_tls,
        token_file,
    };

    // Hooks reach the API server where release does (the same machine).
    let release_cluster = berth_release::process::connect(Some(&kubeconfig), None)
        .await
        .map_err(|e| UpError::Service {
            service: "release",
            message: e.to_string(),
        })?;

    // Stop in order, each tier once the one before it has ended: the gateway stops accepting;
    // the worker stops leasing and finishes (or hands back) its running tasks within its grace
    // period, while lifecycle, release, hookevent and the broker still answer its reports; then
    // hookevent stops its watches and schedules; lifecycle, release and the broker go last.
    let tiers = Tiers::new();
    // One registry for every service: their series differ by name (and the RPC series by
    // their `service` label). Served until the last tier stops, so a scrape sees the stop.
    let metrics = berth_runtime::Metrics::default();
    berth_runtime::metrics::spawn_server(&metrics, metrics_listener, tiers.last.clone());
    let mut services: JoinSet<(&'static str, Result<(), String>)> = JoinSet::new();
    let sd = tiers.last.clone();
    let db = sqlite(&data, "queue.db");
    let m = metrics.clone();
    services.spawn(async move {
        let served = berth_queue::process::serve(
            &db,
            Default::default(),
            Some(broker_tls),
            broker_listener,
            &m,
            sd,
        )
        .await;
        ("queue broker", served.map_err(|e| e.to_string()))
    });
    let repositories = std::sync::Arc::new(config.repositories.clone());
    let sd = tiers.last.clone();
    let lc = berth_lifecycle::Config {
        database_url: sqlite(&data, "lifecycle.db"),
        broker_endpoint: broker.clone(),
        tls: Some(lifecycle_tls),
        repositories: repositories.clone(),
        validation_wait: config.validation_wait,
        jq: config.jq,
        metrics: metrics.clone(),
    };
    services.spawn(async move {
        (
            "lifecycle",
            berth_lifecycle::run(lc, lifecycle_listener, sd)
                .await
                .map_err(|e| e.to_string()),
        )
    });
    let sd = tiers.hookevent.clone();
    let he = berth_hookevent::Config {
        database_url: sqlite(&data, "hookevent.db"),
        broker_endpoint: broker.clone(),
        kubeconfig: Some(kubeconfig.clone()),
        lifecycle_endpoint: lifecycle.clone(),
        tls: Some(hookevent_tls),
        jq: config.jq,
        webhook: config.webhook.clone(),
        metrics: metrics.clone(),
        // `berth up` is the one hookevent of its cluster and database: no shard Leases, it
        // owns every package from the start.
        shards: berth_hookevent::shards::ShardConfig::default(),
    };
    services.spawn(async move {
        (
            "hookevent",
            berth_hookevent::run(he, hookevent_listener, sd)
                .await
                .map_err(|e| e.to_string()),
        )
    });
    let sd = tiers.last.clone();
    // The one release service of its cluster, too: `process::run` takes no shard Leases, so it
    // owns every shard and repairs every release's drift from the start.
    let release_lifecycle = lifecycle.clone();
    let m = metrics.clone();
    services.spawn(async move {
        (
            "release",
            berth_release::process::run(
                release_cluster,
                record_key,
                Some(&release_lifecycle),
                Some(release_tls),
                release_listener,
                m,
                sd,
            )
            .await
            .map_err(|e| e.to_string()),
        )
    });
    let sd = tiers.worker.clone();
    let tasks = berth_worker::TaskConfig {
        lifecycle_endpoint: lifecycle.clone(),
        release_endpoint: release,
        hookevent_endpoint: hookevent,
        cache_dir: hooks.dir.clone(),
        repositories,
        hook_timeout: config.hook_timeout,
        ready_timeout: config.ready_timeout,
        hook_tmp_dir: config.hook_tmp_dir.clone(),
        tls: Some(worker_tls),
        hook_limit_caps: config.hook_isolation.caps(),
    };
    let worker = berth_queue::worker::WorkerConfig {
        concurrency: config.worker_concurrency,
        ..Default::default()
    };
    // The hook metrics alone, on a port of their own when asked (they are on the main page
    // too, with the worker's).
    if hook_metrics_listener.is_some() {
        let hook_metrics = berth_runtime::Metrics::default();
        hook_metrics.add_text(berth_worker::metrics::render);
        berth_runtime::metrics::spawn_server(&hook_metrics, hook_metrics_listener, sd.clone());
    }
    let m = metrics.clone();
    services.spawn(async move {
        let worked = berth_worker::process::work(&broker, tasks, worker, &m, sd).await;
        ("queue worker", worked.map_err(|e| e.to_string()))
    });
    // The Kubernetes front end, a client of lifecycle like the gateway (it stops with it):
    // berth's CRDs, Application and Module resources, their admission webhook. The only one
    // of its cluster, so it takes no Lease.
    let sd = tiers.gateway.clone();
    let controller = berth_controller::Config {
        lifecycle_endpoint: lifecycle.clone(),
        tls: Some(controller_tls),
        kubeconfig: Some(kubeconfig.clone()),
        webhook: config.controller_webhook.clone(),
        lease: None,
        install_crds: true,
        selector: config.controller_selector.clone(),
        credentials_namespace: None,
    };
    let (controller_ready, controller_started) = tokio::sync::oneshot::channel();
    services.spawn(async move {
        let ran = berth_controller::run(controller, sd, move || {
            let _ = controller_ready.send(());
        })
        .await;
        ("controller", ran.map_err(|e| e.to_string()))
    });
    let sd = tiers.gateway.clone();
    let gw = crate::Config {
        lifecycle_endpoint: lifecycle,
        hookevent_endpoint: Some(hookevent_for_gateway),
        tokens,
        tls: Some(gateway_tls),
        public_tls: public,
        limits: config.limits,
        metrics,
    };
    services.spawn(async move {
        (
            "gateway",
            crate::run(
                gw,
                gateway_listener,
                views_listener.map(|l| (l, views_cert)),
                sd,
            )
            .await
            .map_err(|e| e.to_string()),
        )
    });

    // Ready once berth's CRDs are served (or the controller failed: the loop below reports it).
    let _ = controller_started.await;
    on_ready(&running);

    // The first service to stop (with or without an error), or `shutdown`, stops them all, in
    // order.
    let mut failure = None;
    let mut stopping = None;
    loop {
        let joined = tokio::select! {
            joined = services.join_next() => joined,
            () = shutdown.cancelled(), if stopping.is_none() => {
                stopping = Some(tokio::spawn(tiers.clone().stop_in_order()));
                continue;
            }
        };
        let Some(joined) = joined else { break };
        let (service, result) = match joined {
            Ok(r) => r,
            Err(e) => ("a service", Err(format!("panicked: {e}"))),
        };
        tiers.ended(service);
        if let Err(message) = result {
            tracing::error!(service, error = %message, "service failed; stopping berth");
            failure.get_or_insert(UpError::Service { service, message });
        }
        shutdown.cancel();
    }
    if let Some(stopping) = stopping {
        let _ = stopping.await;
    }
    if let Some(cluster) = cluster {
        cluster.shutdown().await;
    }
    failure.map_or(Ok(()), Err)
}

/// The cancellation tokens of `berth up`'s stop order and the signals that each tier has ended.
#[derive(Clone)]
struct Tiers {
    gateway: CancellationToken,
    worker: CancellationToken,
    hookevent: CancellationToken,
    last: CancellationToken,
    /// Which services have ended (by the names they report).
    ended: std::sync::Arc<std::sync::Mutex<Vec<&'static str>>>,
    changed: std::sync::Arc<tokio::sync::Notify>,
}

impl Tiers {
    fn new() -> Tiers {
        Tiers {
            gateway: CancellationToken::new(),
            worker: CancellationToken::new(),
            hookevent: CancellationToken::new(),
            last: CancellationToken::new(),
            ended: Default::default(),
            changed: Default::default(),
        }
    }

    fn ended(&self, service: &'static str) {
        self.ended
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(service);
        self.changed.notify_waiters();
    }

    /// Waits until `service` has ended (or at most `limit`, so a stuck tier cannot keep the
    /// next ones up forever).
    async fn wait_ended(&self, service: &'static str, limit: std::time::Duration) {
        let wait = async {
            loop {
                let notified = self.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self
                    .ended
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .contains(&service)
                {
                    return;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(limit, wait).await.is_err() {
            tracing::warn!(
                service,
                ?limit,
                "did not stop in time; stopping the next services"
            );
        }
    }

    /// Cancels each tier once the one before it has ended.
    async fn stop_in_order(self) {
        // The worker's own grace period bounds its stop (twice: finish, then cancel and report).
        let worker_limit = berth_queue::worker::WorkerConfig::default().shutdown_grace * 3;
        let quick = std::time::Duration::from_secs(10);
        self.gateway.cancel();
        self.wait_ended("gateway", quick).await;
        self.wait_ended("controller", quick).await;
        self.worker.cancel();
        self.wait_ended("queue worker", worker_limit).await;
        self.hookevent.cancel();
        self.wait_ended("hookevent", quick).await;
        self.last.cancel();
    }
}
