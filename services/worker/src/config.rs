//! What a worker needs to run berth's tasks: where the other services are and its local limits.

use std::path::PathBuf;
use std::time::Duration;

/// Where a worker finds the other services, and its local limits.
#[derive(Clone, Debug)]
pub struct TaskConfig {
    pub lifecycle_endpoint: String,
    pub release_endpoint: String,
    pub hookevent_endpoint: String,
    /// Package cache of this worker (`<data-dir>/packages`): `<key>/<repository id>/<version>`,
    /// so each instance has its own copy (Cleanup deletes `<key>`), and two repositories never
    /// share an entry.
    pub cache_dir: PathBuf,
    /// The repositories a spec may name (lifecycle checked the Update against the same
    /// configuration); a name this worker does not know fails the package.
    pub repositories: std::sync::Arc<berth_package::Repositories>,
    /// Longest a hook may run before its process group is killed.
    pub hook_timeout: Duration,
    /// Longest a Run waits for the release to become ready before it fails (and is retried).
    pub ready_timeout: Duration,
    /// Where each hook run's temporary files (binding context, values, output files) go;
    /// `None` = the system temp directory. Creating them is most of a hook's start overhead on
    /// a disk file system, so a tmpfs (an `emptyDir` with `medium: Memory`) is the place.
    pub hook_tmp_dir: Option<PathBuf>,
    /// The worker's identity towards the broker, lifecycle, release and hookevent (mutual
    /// TLS); `None`: plain gRPC.
    pub tls: Option<berth_runtime::Tls>,
}
