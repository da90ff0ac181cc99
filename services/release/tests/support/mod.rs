//! Test harness: a Kubernetes API (the embedded dev cluster, or the real cluster named by
//! `BERTH_TEST_KUBECONFIG`) and the release service served in-process on a loopback port.
// Each test binary includes this module and uses a different part of it.
#![allow(dead_code)]

use anyhow::Context as _;
use berth_devcluster::test_namespace::{TestNamespace, real_cluster};
use berth_proto::release::releases_client::ReleasesClient;
use berth_release::record::{RecordKey, ReleaseStore};
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

pub struct Harness {
    pub kube: kube::Client,
    pub grpc: ReleasesClient<Channel>,
    /// A namespace unique to this test, so tests can share a real cluster. It exists before
    /// the first install, labelled `berth.io/test=true`.
    pub namespace: String,
    /// Deletes `namespace` on a real cluster when the harness is dropped.
    _cleanup: TestNamespace,
    drift_repair: bool,
    render_limits: berth_release::manager::RenderLimits,
    /// `None` only while [`Harness::restart_service`] swaps instances.
    server: Option<Server>,
    /// The in-process service's metrics (its `/metrics` page is `metrics.render()`).
    pub metrics: berth_runtime::Metrics,
    /// The key the service authenticates release records with (random per harness, kept
    /// across [`Harness::restart_service`]).
    pub key: RecordKey,
    _cluster: Option<berth_devcluster::DevCluster>,
}

/// The release service as `process::run_service` serves it, on a loopback port.
struct Server {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Shuts the service down as a process exit would: serving and drift watches end.
    async fn stop(mut self) {
        self.shutdown.cancel();
        if tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .is_err()
        {
            self.task.abort();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn client_from(kubeconfig: Kubeconfig) -> anyhow::Result<kube::Client> {
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

pub async fn start() -> anyhow::Result<Harness> {
    start_with(false).await
}

/// Like [`start`], with drift repair off: for tests that observe objects staying deleted.
pub async fn start_without_drift_repair() -> anyhow::Result<Harness> {
    start_full(false, false).await
}

/// Like [`start`]; with `simulate_workloads` the dev cluster completes Jobs and readies
/// Deployments the way their controllers would (a real cluster does that anyway).
pub async fn start_with(simulate_workloads: bool) -> anyhow::Result<Harness> {
    start_full(simulate_workloads, true).await
}

/// Like [`start`], with the release service's renders bounded by `limits`.
pub async fn start_with_render_limits(
    limits: berth_release::manager::RenderLimits,
) -> anyhow::Result<Harness> {
    start_full_with(false, true, limits).await
}

async fn start_full(simulate_workloads: bool, drift_repair: bool) -> anyhow::Result<Harness> {
    start_full_with(simulate_workloads, drift_repair, Default::default()).await
}

async fn start_full_with(
    simulate_workloads: bool,
    drift_repair: bool,
    render_limits: berth_release::manager::RenderLimits,
) -> anyhow::Result<Harness> {
    let (kube, cluster) = match real_cluster() {
        Some(path) => {
            let kc = Kubeconfig::read_from(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            (client_from(kc).await?, None)
        }
        None => {
            let config = berth_devcluster::DevClusterConfig {
                simulate_workloads,
                workload_delay: Duration::from_millis(100),
                ..Default::default()
            };
            let cluster = berth_devcluster::DevCluster::start(config).await?;
            let kc = Kubeconfig::from_yaml(&cluster.kubeconfig_yaml())?;
            (client_from(kc).await?, Some(cluster))
        }
    };
    let metrics = berth_runtime::Metrics::default();
    let key = random_key();
    let (grpc, server) = serve(
        kube.clone(),
        key.clone(),
        drift_repair,
        false,
        render_limits,
        &metrics,
    )
    .await?;
    // Created here rather than by the first install, so that it carries the label that finds
    // leftovers on a real cluster (`kubectl get ns -l berth.io/test=true`).
    let guard = TestNamespace::create(&kube, "rel-test")
        .await
        .context("creating the test namespace")?;
    Ok(Harness {
        kube,
        grpc,
        namespace: guard.to_string(),
        _cleanup: guard,
        drift_repair,
        render_limits,
        server: Some(server),
        metrics,
        key,
        _cluster: cluster,
    })
}

/// A fresh random record key, as `berth up` generates one.
pub fn random_key() -> RecordKey {
    let dir = tempfile::tempdir().expect("temp dir");
    RecordKey::load_or_generate(&dir.path().join("record.key")).expect("record key")
}

/// Starts the release service on a fresh loopback port and connects to it. `as_process`
/// serves it the way the `berth-release` process does (`process::run_service`, which also
/// resumes drift repair of releases found in the cluster); otherwise it serves just the gRPC
/// service, so tests sharing a real cluster do not repair each other's releases.
async fn serve(
    kube: kube::Client,
    key: RecordKey,
    drift_repair: bool,
    as_process: bool,
    render_limits: berth_release::manager::RenderLimits,
    metrics: &berth_runtime::Metrics,
) -> anyhow::Result<(ReleasesClient<Channel>, Server)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let service = berth_release::ReleaseService::new(kube, key)
        .with_drift_repair(drift_repair)
        .with_render_limits(render_limits)
        .with_metrics(metrics);
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let task = tokio::spawn(async move {
        let served = if as_process {
            let metrics = berth_runtime::Metrics::default();
            berth_release::process::run_service(service, None, listener, metrics, stop)
                .await
                .map_err(|e| e.to_string())
        } else {
            let svc = berth_release::server(service.with_shutdown(stop.clone()));
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
                .await
                .map_err(|e| e.to_string())
        };
        if let Err(e) = served {
            eprintln!("release server stopped: {e}");
        }
    });
    let server = Server { shutdown, task };
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(120))
        .connect()
        .await?;
    Ok((ReleasesClient::new(channel), server))
}

impl Harness {
    /// Stops the release service (serving and drift watches end, as when its process exits)
    /// and starts a new instance against the same cluster as the `berth-release` process
    /// starts, as a restart would.
    pub async fn restart_service(&mut self) -> anyhow::Result<()> {
        if let Some(old) = self.server.take() {
            old.stop().await;
        }
        // A new process: a new metrics registry.
        self.metrics = berth_runtime::Metrics::default();
        let (grpc, server) = serve(
            self.kube.clone(),
            self.key.clone(),
            self.drift_repair,
            true,
            self.render_limits,
            &self.metrics,
        )
        .await?;
        self.server = Some(server);
        self.grpc = grpc;
        Ok(())
    }

    /// The test namespace's release records, read and written with the service's key (as
    /// another replica would).
    pub fn store(&self) -> ReleaseStore {
        ReleaseStore::new(self.kube.clone(), &self.namespace, self.key.clone())
    }

    /// A kubeconfig file for the cluster under test, for external tools such as helm: the
    /// file `BERTH_TEST_KUBECONFIG` names (so paths in it resolve as they should), or the dev
    /// cluster's kubeconfig written into `dir`.
    pub fn kubeconfig_file(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        match (&self._cluster, real_cluster()) {
            (Some(cluster), _) => {
                let path = dir.join("kubeconfig");
                std::fs::write(&path, cluster.kubeconfig_yaml())?;
                Ok(path)
            }
            (None, Some(path)) => Ok(path),
            (None, None) => anyhow::bail!("no cluster"),
        }
    }
}

/// A chart from `(path, content)` pairs plus a standard `Chart.yaml`.
pub fn chart(files: &[(&str, &str)]) -> Vec<berth_proto::release::ChartFile> {
    let mut out = vec![berth_proto::release::ChartFile {
        path: "Chart.yaml".into(),
        content: b"apiVersion: v2\nname: hello\nversion: 0.1.0\nappVersion: \"1.0\"\n".to_vec(),
    }];
    out.extend(files.iter().map(|(p, c)| berth_proto::release::ChartFile {
        path: p.to_string(),
        content: c.as_bytes().to_vec(),
    }));
    out
}

/// A ConfigMap template named `name`, optionally annotated `helm.sh/resource-policy: keep`.
pub fn config_map(name: &str, keep: bool) -> String {
    let annotations = if keep {
        "\n  annotations:\n    helm.sh/resource-policy: keep"
    } else {
        ""
    };
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}{annotations}\ndata:\n  release: {{{{ .Release.Name }}}}\n  greeting: {{{{ .Values.greeting | default \"hello\" | quote }}}}\n"
    )
}
