//! Lifecycle's calls to other services (the broker's aside: the relay drives those).
//!
//! The cluster's Kubernetes version: lifecycle has no cluster access of its own, so it asks
//! the release service (`ClusterVersion`, callable by the lifecycle role only) at start and
//! then every [`POLL`], and runs a scheduling pass when the answer changes. Until
//! the first answer, packages with a Kubernetes requirement wait (the reason says the version
//! is not known yet); packages without one are not held up.

use std::time::Duration;

use berth_proto::release::ClusterVersionRequest;
use berth_proto::release::releases_client::ReleasesClient;
use tokio_util::sync::CancellationToken;

use crate::scheduler;
use crate::service::LifecycleService;

/// How often the version is asked once known: a cluster upgrade is noticed within this.
const POLL: Duration = Duration::from_secs(30);
/// First retry after a failed ask; doubled up to [`POLL`].
const RETRY: Duration = Duration::from_secs(1);
/// Longest one ask may take (release itself bounds its call to the API server).
const ASK_TIMEOUT: Duration = Duration::from_secs(15);

/// Polls until `shutdown`.
pub async fn poll_cluster_version(
    mut release: ReleasesClient<berth_telemetry::Channel>,
    service: LifecycleService,
    shutdown: CancellationToken,
) {
    let mut wait = RETRY;
    loop {
        let asked = tokio::time::timeout(
            ASK_TIMEOUT,
            release.cluster_version(ClusterVersionRequest {}),
        )
        .await;
        let version = match asked {
            Ok(Ok(answer)) => {
                let text = answer.into_inner().git_version;
                let parsed = scheduler::kubernetes_version(&text);
                if parsed.is_none() {
                    tracing::warn!(git_version = %text, "the cluster's version does not parse; Kubernetes requirements stay unmet");
                }
                parsed
            }
            Ok(Err(status)) => {
                tracing::debug!(error = %status.message(), "release ClusterVersion failed; asking again");
                None
            }
            Err(_) => {
                tracing::debug!("release ClusterVersion timed out; asking again");
                None
            }
        };
        match version {
            Some(version) => {
                wait = POLL;
                service.cluster_version(version).await;
            }
            None => wait = (wait * 2).min(POLL),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
    }
}
