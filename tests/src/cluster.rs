//! The Kubernetes API a test talks to.

use std::path::PathBuf;

use berth_devcluster::{DevCluster, DevClusterConfig};

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
