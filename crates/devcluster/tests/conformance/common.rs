//! Test harness: a kube-rs client for the dev cluster, or for a real cluster when
//! `BERTH_TEST_KUBECONFIG` names a kubeconfig. Every test works in its own namespace,
//! so the same assertions hold against kube-apiserver.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_devcluster::{DevCluster, DevClusterConfig};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// How long a condition may take to become true before a test fails.
pub const DEADLINE: Duration = Duration::from_secs(20);
/// How long a namespace may take to terminate: on a real cluster the namespace controller
/// deletes its contents (and waits for pods' grace periods) first, which often takes longer
/// than [`DEADLINE`].
pub const NAMESPACE_DEADLINE: Duration = Duration::from_secs(120);
/// The label on every namespace a test creates, so leftovers on a real cluster can be found
/// (`kubectl get ns -l berth.io/test=true`).
pub const TEST_LABEL: (&str, &str) = ("berth.io/test", "true");
/// Bound on the best-effort namespace deletion when a [`TestNamespace`] is dropped.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(15);

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
    client_from(Kubeconfig::from_yaml(kubeconfig_yaml).expect("kubeconfig parses")).await
}

async fn client_from(kc: Kubeconfig) -> Client {
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

/// A namespace created for one test (see [`namespace`]); it reads as its name.
///
/// Dropping it deletes the namespace when the tests run against a real cluster, whatever the
/// test's outcome, without waiting for it to terminate. A dev cluster is started fresh for
/// each test and discarded with it, so there it is left alone.
pub struct TestNamespace {
    name: String,
}

impl std::ops::Deref for TestNamespace {
    type Target = str;
    fn deref(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Display for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if let Some(kubeconfig) = real_cluster() {
            delete_namespace_now(&kubeconfig, &self.name);
        }
    }
}

/// Asks the cluster of `kubeconfig` to delete namespace `name`, best effort: waits (bounded)
/// for the API server to accept the deletion, never for the namespace to terminate.
///
/// It runs on a thread of its own with its own client and runtime, so it can be called from
/// `Drop` anywhere: a `#[tokio::test]` runtime drops tasks spawned on it as soon as the test
/// returns, and blocking the test's thread would also block the connection task of the test's
/// own client (and an in-process dev cluster), which live on that runtime.
pub fn delete_namespace_now(kubeconfig: &Path, name: &str) {
    let (kubeconfig, owned) = (kubeconfig.to_owned(), name.to_owned());
    let worker = std::thread::spawn(move || -> Result<(), String> {
        let name = owned;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime.block_on(async {
            let delete = async {
                let kc = Kubeconfig::read_from(&kubeconfig).map_err(|e| e.to_string())?;
                let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                    .await
                    .map_err(|e| e.to_string())?;
                let client = Client::try_from(config).map_err(|e| e.to_string())?;
                match Api::<Namespace>::all(client)
                    .delete(&name, &DeleteParams::background())
                    .await
                {
                    // Gone already, or already terminating: nothing left to do.
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
                    Err(e) => Err(e.to_string()),
                    Ok(_) => Ok(()),
                }
            };
            tokio::time::timeout(CLEANUP_TIMEOUT, delete)
                .await
                .map_err(|_| format!("no answer within {CLEANUP_TIMEOUT:?}"))?
        })
    });
    let outcome = worker
        .join()
        .unwrap_or_else(|_| Err("the cleanup thread panicked".into()));
    if let Err(e) = outcome {
        eprintln!(
            "could not delete test namespace {name}: {e} (it is labelled berth.io/test=true)"
        );
    }
}

/// Creates a uniquely named namespace for one test, labelled [`TEST_LABEL`]; deleted again
/// when the returned guard is dropped (see [`TestNamespace`]).
pub async fn namespace(client: &Client, prefix: &str) -> TestNamespace {
    let name = format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let (key, value) = TEST_LABEL;
    let ns: Namespace = serde_json::from_value(
        serde_json::json!({ "metadata": { "name": name, "labels": { key: value } } }),
    )
    .expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace created");
    TestNamespace { name }
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
