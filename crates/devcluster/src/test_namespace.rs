//! Namespaces for tests that may run against a real cluster (`BERTH_TEST_KUBECONFIG`): each
//! test gets its own, labelled [`TEST_LABEL`], and it is deleted when the test ends, whatever
//! its outcome. Shared by every test harness of the workspace (the conformance suite, the
//! release tests, the end-to-end journeys).
//!
//! A dev cluster is started for one test and discarded with it, so on the dev cluster the
//! namespace is left alone.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// The label on every namespace a test uses, so leftovers of a killed run can be found and
/// removed (`kubectl delete ns -l berth.io/test=true`).
pub const TEST_LABEL: (&str, &str) = ("berth.io/test", "true");

/// The environment variable naming the real cluster tests run against instead of a dev
/// cluster.
pub const REAL_CLUSTER_ENV: &str = "BERTH_TEST_KUBECONFIG";

/// Bound on the deletion when a [`TestNamespace`] is dropped.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(15);

/// The kubeconfig of the real cluster the tests run against, if one is named.
pub fn real_cluster() -> Option<PathBuf> {
    std::env::var_os(REAL_CLUSTER_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// A namespace one test uses; it reads as its name. Dropping it deletes the namespace on a
/// real cluster (without waiting for it to terminate).
pub struct TestNamespace {
    name: String,
}

impl TestNamespace {
    /// Creates a uniquely named namespace `<prefix>-<random>`, labelled [`TEST_LABEL`].
    pub async fn create(client: &Client, prefix: &str) -> Result<TestNamespace, kube::Error> {
        let guard = TestNamespace::to_be_created(prefix);
        let (key, value) = TEST_LABEL;
        let mut ns = Namespace::default();
        ns.metadata.name = Some(guard.name.clone());
        ns.metadata.labels = Some([(key.to_string(), value.to_string())].into());
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        Ok(guard)
    }

    /// Guards a uniquely named namespace `<prefix>-<random>` that the system under test is to
    /// create; [`TestNamespace::label`] it once it exists.
    pub fn to_be_created(prefix: &str) -> TestNamespace {
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        TestNamespace {
            name: format!("{prefix}-{}", &suffix[..8]),
        }
    }

    /// Labels the (existing) namespace [`TEST_LABEL`].
    pub async fn label(&self, client: &Client) -> Result<(), kube::Error> {
        let (key, value) = TEST_LABEL;
        let patch = Patch::Merge(serde_json::json!({"metadata": {"labels": {key: value}}}));
        Api::<Namespace>::all(client.clone())
            .patch(&self.name, &PatchParams::default(), &patch)
            .await?;
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
        if let Some(kubeconfig) = real_cluster() {
            delete_namespace_now(&kubeconfig, &self.name);
        }
    }
}

/// Asks the cluster of `kubeconfig` to delete namespace `name`, best effort: waits (bounded)
/// for the API server to accept the deletion, never for the namespace to terminate; a failure
/// is printed, not returned.
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
