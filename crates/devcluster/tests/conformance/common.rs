//! Test harness: a kube-rs client for the dev cluster, or for a real cluster when
//! `BERTH_TEST_KUBECONFIG` names a kubeconfig. Every test works in its own namespace,
//! so the same assertions hold against kube-apiserver.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

pub use berth_devcluster::test_namespace::{
    TEST_LABEL, TestNamespace, delete_namespace_now, real_cluster,
};
use berth_devcluster::{DevCluster, DevClusterConfig};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// How long a condition may take to become true before a test fails.
pub const DEADLINE: Duration = Duration::from_secs(20);
/// How long a namespace may take to terminate: on a real cluster the namespace controller
/// deletes its contents (and waits for pods' grace periods) first, which often takes longer
/// than [`DEADLINE`].
pub const NAMESPACE_DEADLINE: Duration = Duration::from_secs(120);

pub struct Target {
    pub client: Client,
    /// A kubeconfig file for kubectl.
    pub kubeconfig: PathBuf,
    /// The dev cluster, when the tests are not pointed at a real one.
    pub dev: Option<DevCluster>,
    _dir: tempfile::TempDir,
}

pub async fn client_for(kubeconfig_yaml: &str) -> Client {
    client_from(Kubeconfig::from_yaml(kubeconfig_yaml).expect("kubeconfig parses")).await
}

async fn client_from(kc: Kubeconfig) -> Client {
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig is usable");
    Client::try_from(config).expect("client builds")
}

/// A client for the cluster of the kubeconfig at `path` (its server and CA) that presents
/// `token` as its bearer token, or no credentials at all (None).
pub async fn client_as(path: &std::path::Path, token: Option<&str>) -> Client {
    let kc = Kubeconfig::read_from(path).expect("kubeconfig is readable");
    let mut v = serde_json::to_value(&kc).expect("kubeconfig serializes");
    let user = match token {
        Some(t) => serde_json::json!({ "token": t }),
        None => serde_json::json!({}),
    };
    for u in v["users"].as_array_mut().into_iter().flatten() {
        u["user"] = user.clone();
    }
    client_from(serde_json::from_value(v).expect("kubeconfig deserializes")).await
}

/// A client for the kubeconfig at `path` as it is (its own credentials).
pub async fn client_as_admin(path: &std::path::Path) -> Client {
    client_from(Kubeconfig::read_from(path).expect("kubeconfig is readable")).await
}

/// The cluster under test: a real one named by `BERTH_TEST_KUBECONFIG`, or a fresh dev cluster.
pub async fn target() -> Target {
    target_with(DevClusterConfig::default()).await
}

pub async fn target_with(mut config: DevClusterConfig) -> Target {
    let dir = tempfile::tempdir().expect("tempdir");
    if let Some(path) = real_cluster() {
        // Read from the file, not its text: relative certificate paths resolve against it.
        let kc = Kubeconfig::read_from(&path).expect("BERTH_TEST_KUBECONFIG is readable");
        return Target {
            client: client_from(kc).await,
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

/// Creates a uniquely named namespace for one test, labelled [`TEST_LABEL`]; deleted again
/// when the returned guard is dropped (see [`TestNamespace`]).
pub async fn namespace(client: &Client, prefix: &str) -> TestNamespace {
    TestNamespace::create(client, prefix)
        .await
        .expect("namespace created")
}

/// Polls `check` until it returns Some, failing the test after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(DEADLINE, what, check).await
}

/// Polls `check` until it returns Some, failing the test after `limit`.
pub async fn eventually_within<T, F, Fut>(limit: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what} ({limit:?})"
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
