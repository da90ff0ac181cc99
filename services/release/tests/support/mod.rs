//! Test harness: a Kubernetes API (the embedded dev cluster, or the real cluster named by
//! `BERTH_TEST_KUBECONFIG`) and the release service served in-process on a loopback port.
// Each test binary includes this module and uses a different part of it.
#![allow(dead_code)]

use anyhow::Context as _;
use berth_proto::release::releases_client::ReleasesClient;
use kube::config::{KubeConfigOptions, Kubeconfig};
use std::time::Duration;
use tonic::transport::Channel;

pub struct Harness {
    pub kube: kube::Client,
    pub grpc: ReleasesClient<Channel>,
    /// A namespace unique to this test, so tests can share a real cluster.
    pub namespace: String,
    _cluster: Option<berth_devcluster::DevCluster>,
    _server: tokio::task::JoinHandle<()>,
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

async fn start_full(simulate_workloads: bool, drift_repair: bool) -> anyhow::Result<Harness> {
    let (kube, cluster) = match std::env::var("BERTH_TEST_KUBECONFIG") {
        Ok(path) if !path.is_empty() => {
            let kc = Kubeconfig::read_from(&path).with_context(|| format!("reading {path}"))?;
            (client_from(kc).await?, None)
        }
        _ => {
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let svc = berth_release::server(
        berth_release::ReleaseService::new(kube.clone()).with_drift_repair(drift_repair),
    );
    let server = tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        if let Err(e) = tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(incoming)
            .await
        {
            eprintln!("release server stopped: {e}");
        }
    });
    let channel = Channel::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(120))
        .connect()
        .await?;
    let namespace = format!(
        "rel-test-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    Ok(Harness {
        kube,
        grpc: ReleasesClient::new(channel),
        namespace,
        _cluster: cluster,
        _server: server,
    })
}

impl Harness {
    /// A kubeconfig for the cluster under test, for external tools such as helm.
    pub fn kubeconfig_yaml(&self) -> anyhow::Result<String> {
        match (&self._cluster, std::env::var("BERTH_TEST_KUBECONFIG")) {
            (Some(cluster), _) => Ok(cluster.kubeconfig_yaml()),
            (None, Ok(path)) => {
                Ok(std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?)
            }
            (None, Err(_)) => anyhow::bail!("no cluster"),
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
