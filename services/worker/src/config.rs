//! What a worker needs to run berth's tasks: where the other services are, its local limits,
//! and the clients of those services.

use std::path::PathBuf;
use std::time::Duration;

use berth_proto::hookevent::hook_events_client::HookEventsClient;
use berth_proto::lifecycle::lifecycle_client::LifecycleClient;
use berth_proto::release::releases_client::ReleasesClient;

/// Where a worker finds the other services, and its local limits.
#[derive(Clone, Debug)]
pub struct TaskConfig {
    pub lifecycle_endpoint: String,
    pub release_endpoint: String,
    pub hookevent_endpoint: String,
    /// Package cache of this worker (`<data-dir>/packages`).
    pub cache_dir: PathBuf,
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
    pub tls: Option<berth_telemetry::Tls>,
}

/// The clients a handler needs; cheap to clone.
#[derive(Clone)]
pub struct Services {
    pub lifecycle: LifecycleClient<berth_telemetry::Channel>,
    pub release: ReleasesClient<berth_telemetry::Channel>,
    pub hookevent: HookEventsClient<berth_telemetry::Channel>,
}

impl Services {
    /// Clients of the services `config` names; they connect on first use.
    pub fn connect_lazy(config: &TaskConfig) -> Result<Services, tonic::transport::Error> {
        use berth_telemetry::{MAX_MESSAGE_BYTES as MAX, Role, connect_lazy};
        let tls = config.tls.as_ref();
        Ok(Services {
            lifecycle: LifecycleClient::new(connect_lazy(
                &config.lifecycle_endpoint,
                tls,
                Role::Lifecycle,
            )?)
            .max_decoding_message_size(MAX)
            .max_encoding_message_size(MAX),
            release: ReleasesClient::new(connect_lazy(
                &config.release_endpoint,
                tls,
                Role::Release,
            )?)
            .max_decoding_message_size(MAX)
            .max_encoding_message_size(MAX),
            hookevent: HookEventsClient::new(connect_lazy(
                &config.hookevent_endpoint,
                tls,
                Role::Hookevent,
            )?)
            .max_decoding_message_size(MAX)
            .max_encoding_message_size(MAX),
        })
    }
}
