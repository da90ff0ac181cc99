//! Test harness: a kube-rs client for the dev cluster, or for a real cluster when
//! `BERTH_TEST_KUBECONFIG` names a kubeconfig. Every test works in its own namespace,
//! so the same assertions hold against kube-apiserver.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use berth_devcluster::{DevCluster, DevClusterConfig};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// How long a condition may take to become true before a test fails.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub struct Target {
    pub client: Client,
    /// A kubeconfig file for kubectl.
    pub kubeconfig: PathBuf,
    /// The dev cluster, when the tests are not pointed at a real one.
    pub dev: Option<DevCluster>,
    _dir: tempfile::TempDir,
}

pub fn real_cluster() -> Option<PathBuf> {
    std::env::var_os("BERTH_TEST_KUBECONFIG").map(PathBuf::from)
}

pub async fn client_for(kubeconfig_yaml: &str) -> Client {
    let kc = Kubeconfig::from_yaml(kubeconfig_yaml).expect("kubeconfig parses");
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig is usable");
    Client::try_from(config).expect("client builds")
}

/// The cluster under test: a real one named by `BERTH_TEST_KUBECONFIG`, or a fresh dev cluster.
pub async fn target() -> Target {
    target_with(DevClusterConfig::default()).await
}

pub async fn target_with(mut config: DevClusterConfig) -> Target {
    let dir = tempfile::tempdir().expect("tempdir");
    if let Some(path) = real_cluster() {
        let yaml = std::fs::read_to_string(&path).expect("BERTH_TEST_KUBECONFIG is readable");
        return Target {
            client: client_for(&yaml).await,
            kubeconfig: path,
            dev: None,
            _dir: dir,
        };
    }
    if config.data_dir.is_none() {
        config.data_dir = Some(dir.path().join("data"));
    }
    let dev = DevCluster::start(config).await.expect("dev cluster starts");
    let kubeconfig = dev.kubeconfig_path().expect("kubeconfig written");
    let client = client_for(&dev.kubeconfig_yaml()).await;
    Target {
        client,
        kubeconfig,
        dev: Some(dev),
        _dir: dir,
    }
}

/// A dev-cluster-only target; None (test skipped) against a real cluster.
pub async fn dev_only(reason: &str, config: DevClusterConfig) -> Option<Target> {
    if real_cluster().is_some() {
        eprintln!("skipped against a real cluster: {reason}");
        return None;
    }
    Some(target_with(config).await)
}

/// Creates a uniquely named namespace for one test.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    let name = format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let ns: Namespace = serde_json::from_value(serde_json::json!({ "metadata": { "name": name } }))
        .expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
    name
}

/// Polls `check` until it returns Some, failing the test after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The HTTP status code of a kube error, for asserting on Status responses.
pub fn code(err: &kube::Error) -> u16 {
    match err {
        kube::Error::Api(s) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub fn reason(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(s) => s.reason.clone(),
        other => panic!("expected an API error, got {other:?}"),
    }
}
