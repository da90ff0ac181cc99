//! Dev cluster configuration.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How to run a [`crate::DevCluster`].
#[derive(Debug, Clone)]
pub struct DevClusterConfig {
    /// Address to listen on. Default `127.0.0.1:0` (a free loopback port).
    pub listen: SocketAddr,
    /// Where objects are persisted and the kubeconfig is written. `None` keeps
    /// everything in memory and writes no kubeconfig file.
    pub data_dir: Option<PathBuf>,
    /// Whether workload controllers are simulated (see [`crate::controllers::simulate`]).
    /// Default false: conformance tests should see exactly what a cluster without
    /// controllers would show.
    pub simulate_workloads: bool,
    /// How long after a spec change simulated workloads report ready. Default 1 s: long
    /// enough that clients observe a not-ready phase (as against a real cluster), short
    /// enough not to slow `berth up` noticeably.
    pub workload_delay: Duration,
    /// The admin token (user `admin` in `system:masters`, written into the kubeconfig). `None`:
    /// the one kept in the data directory's `auth.json`, generated at the first start (a fresh
    /// one per start without a data directory).
    pub admin_token: Option<String>,
}

/// The default workload delay; see [`DevClusterConfig::workload_delay`].
pub const DEFAULT_WORKLOAD_DELAY: Duration = Duration::from_secs(1);

impl Default for DevClusterConfig {
    fn default() -> Self {
        DevClusterConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            data_dir: None,
            simulate_workloads: false,
            workload_delay: DEFAULT_WORKLOAD_DELAY,
            admin_token: None,
        }
    }
}
