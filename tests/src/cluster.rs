//! The Kubernetes API a test talks to.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use berth_devcluster::{DevCluster, DevClusterConfig};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};

/// Either the embedded dev cluster (started for this test, with workload simulation so readiness
/// is reachable without a kubelet) or the real cluster named by `BERTH_TEST_KUBECONFIG`.
pub struct TestCluster {
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
    dev: Option<DevCluster>,
    _dir: tempfile::TempDir,
}

impl TestCluster {
    pub fn is_real() -> bool {
        std::env::var_os("BERTH_TEST_KUBECONFIG").is_some()
    }

    pub async fn start() -> anyhow::Result<TestCluster> {
        let dir = tempfile::tempdir()?;
        let (kubeconfig, dev) = match std::env::var_os("BERTH_TEST_KUBECONFIG") {
            Some(path) => (PathBuf::from(path), None),
            None => {
                let dev = DevCluster::start(DevClusterConfig {
                    simulate_workloads: true,
                    ..Default::default()
                })
                .await?;
                let path = dir.path().join("kubeconfig");
                std::fs::write(&path, dev.kubeconfig_yaml())?;
                (path, Some(dev))
            }
        };
        let client = client_for(&kubeconfig).await?;
        Ok(TestCluster {
            kubeconfig,
            client,
            dev,
            _dir: dir,
        })
    }

    pub async fn stop(self) {
        if let Some(dev) = self.dev {
            dev.shutdown().await;
        }
    }
}

/// A kube client for a kubeconfig file.
pub async fn client_for(kubeconfig: &std::path::Path) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// The label on every namespace a test uses, so leftovers on a real cluster can be found
/// (`kubectl get ns -l berth.io/test=true`).
pub const TEST_LABEL: (&str, &str) = ("berth.io/test", "true");
/// Bound on the best-effort namespace deletion when a [`TestNamespace`] is dropped.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(15);

/// A namespace one test uses; it reads as its name.
///
/// Dropping it deletes the namespace when the tests run against a real cluster, whatever the
/// test's outcome, without waiting for it to terminate. A dev cluster is started for each
/// test and discarded with it, so there it is left alone.
pub struct TestNamespace {
    name: String,
}

impl TestNamespace {
    /// Creates a uniquely named namespace `<prefix>-<random>`, labelled [`TEST_LABEL`].
    pub async fn create(kube: &kube::Client, prefix: &str) -> anyhow::Result<TestNamespace> {
        let name = format!(
            "{prefix}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let (key, value) = TEST_LABEL;
        let ns: Namespace = serde_json::from_value(
            serde_json::json!({"metadata": {"name": name, "labels": {key: value}}}),
        )?;
        Api::<Namespace>::all(kube.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        Ok(TestNamespace { name })
    }

    /// Guards a uniquely named namespace `<prefix>-<random>` that the system under test is to
    /// create (berth creates an app's namespace); label it with [`TestNamespace::label`] once
    /// it exists.
    pub fn to_be_created(prefix: &str) -> TestNamespace {
        TestNamespace {
            name: format!(
                "{prefix}-{}",
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            ),
        }
    }

    /// Labels the (existing) namespace [`TEST_LABEL`].
    pub async fn label(&self, kube: &kube::Client) -> anyhow::Result<()> {
        let (key, value) = TEST_LABEL;
        let patch = Patch::Merge(serde_json::json!({"metadata": {"labels": {key: value}}}));
        Api::<Namespace>::all(kube.clone())
            .patch(&self.name, &PatchParams::default(), &patch)
            .await
            .with_context(|| format!("labelling namespace {}", self.name))?;
        Ok(())
    }
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
        if let Some(kubeconfig) = std::env::var_os("BERTH_TEST_KUBECONFIG") {
            delete_namespace_now(Path::new(&kubeconfig), &self.name);
        }
    }
}

/// Asks the cluster of `kubeconfig` to delete namespace `name`, best effort: waits (bounded)
/// for the API server to accept the deletion, never for the namespace to terminate.
///
/// It runs on a thread of its own with its own client and runtime, so it can be called from
/// `Drop` anywhere: a test's runtime drops tasks spawned on it as soon as the test returns,
/// and blocking a runtime thread could also block the connection task of the test's own
/// client (and an in-process dev cluster), which live on that runtime.
pub fn delete_namespace_now(kubeconfig: &Path, name: &str) {
    let (kubeconfig, owned) = (kubeconfig.to_owned(), name.to_owned());
    let worker = std::thread::spawn(move || -> anyhow::Result<()> {
        let name = owned;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let delete = async {
                let client = client_for(&kubeconfig).await?;
                match Api::<Namespace>::all(client)
                    .delete(&name, &DeleteParams::background())
                    .await
                {
                    // Gone already, or already terminating.
                    Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
                    Err(e) => Err(e.into()),
                    Ok(_) => Ok(()),
                }
            };
            tokio::time::timeout(CLEANUP_TIMEOUT, delete)
                .await
                .with_context(|| format!("no answer within {CLEANUP_TIMEOUT:?}"))?
        })
    });
    match worker.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!(
            "could not delete test namespace {name}: {e:#} (it is labelled berth.io/test=true)"
        ),
        Err(_) => eprintln!("deleting test namespace {name}: the thread panicked"),
    }
}
