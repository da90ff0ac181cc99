//! `.Capabilities` from the cluster: its version and every served group-version and
//! group-version/Kind, as Helm gathers them. Discovery costs one request per group-version, so
//! the answer is cached for a short time and shared by concurrent installs.
//!
//! Group-versions are discovered one by one (a few at a time): a group that does not answer,
//! typically an aggregated API whose backend is down (metrics-server answering 503), is left
//! out with a warning and the rest is kept, as Helm does. kube's `Discovery::run` would fail
//! the whole pass instead, and every render would fall back to the default capabilities.

use berth_helm::render::Capabilities;
use futures::StreamExt as _;
use kube::Client;
use kube::core::GroupVersion;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// How long discovered capabilities are reused. CRDs applied by an install are visible to
/// renders after at most this long.
const TTL: Duration = Duration::from_secs(30);
/// Bound on each step of a discovery pass: the server version, the list of group-versions,
/// and the resources of all of them (group-versions that have not answered by then are left
/// out, with a warning).
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(20);
/// Group-versions asked at once.
const CONCURRENCY: usize = 8;

#[derive(Clone, Default)]
pub struct CapabilitiesCache {
    // A tokio mutex: held across the discovery requests so concurrent installs share one pass.
    inner: Arc<Mutex<Option<(Instant, Capabilities)>>>,
}

impl CapabilitiesCache {
    /// Forgets the cached answer, e.g. after CRDs were installed.
    pub async fn invalidate(&self) {
        *self.inner.lock().await = None;
    }

    pub async fn get(&self, client: &Client) -> Capabilities {
        let mut slot = self.inner.lock().await;
        if let Some((at, caps)) = slot.as_ref()
            && at.elapsed() < TTL
        {
            return caps.clone();
        }
        let caps = discover(client).await;
        *slot = Some((Instant::now(), caps.clone()));
        caps
    }
}

async fn discover(client: &Client) -> Capabilities {
    let mut caps = Capabilities::default();
    if let Ok(Ok(v)) = tokio::time::timeout(DISCOVERY_TIMEOUT, client.apiserver_version()).await
        && !v.git_version.is_empty()
    {
        caps.kube_version = v.git_version;
    }
    match tokio::time::timeout(DISCOVERY_TIMEOUT, group_versions(client)).await {
        Ok(Ok(gvs)) => caps.api_versions = api_versions(client, gvs).await,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "API discovery failed; using default capabilities")
        }
        Err(_) => tracing::warn!("API discovery timed out; using default capabilities"),
    }
    caps
}

/// Every group-version the cluster lists: the core group's (`v1`), then every group's.
async fn group_versions(client: &Client) -> Result<Vec<String>, kube::Error> {
    let mut gvs = client.list_core_api_versions().await?.versions;
    for group in client.list_api_groups().await?.groups {
        gvs.extend(group.versions.into_iter().map(|v| v.group_version));
    }
    Ok(gvs)
}

/// `gvs` and the `group/version/Kind` of each of their resources, sorted. Every listed
/// group-version is kept (Helm does the same); the kinds of one that fails or does not answer
/// within [`DISCOVERY_TIMEOUT`] are left out, with a warning naming it.
async fn api_versions(client: &Client, gvs: Vec<String>) -> Vec<String> {
    let mut versions: BTreeSet<String> = gvs.iter().cloned().collect();
    let mut unanswered = versions.clone();
    let answers = futures::stream::iter(gvs)
        .map(|gv| async move {
            let kinds = kinds_of(client, &gv).await;
            (gv, kinds)
        })
        .buffer_unordered(CONCURRENCY)
        .take_until(tokio::time::sleep(DISCOVERY_TIMEOUT))
        .collect::<Vec<_>>()
        .await;
    for (gv, kinds) in answers {
        unanswered.remove(&gv);
        match kinds {
            Ok(kinds) => versions.extend(kinds.into_iter().map(|kind| format!("{gv}/{kind}"))),
            Err(e) => tracing::warn!(
                group_version = %gv,
                error = %e,
                "API discovery of a group-version failed; its kinds are left out of .Capabilities"
            ),
        }
    }
    for gv in unanswered {
        tracing::warn!(
            group_version = %gv,
            "API discovery of a group-version did not answer within {DISCOVERY_TIMEOUT:?}; its kinds are left out of .Capabilities"
        );
    }
    versions.into_iter().collect()
}

/// The kinds `gv` serves (subresources excluded), through kube's per-group-version discovery.
async fn kinds_of(client: &Client, gv: &str) -> Result<Vec<String>, kube::Error> {
    let parsed: GroupVersion = gv.parse().map_err(|e| {
        kube::Error::Discovery(kube::error::DiscoveryError::InvalidGroupVersion(format!(
            "{gv}: {e}"
        )))
    })?;
    let group = kube::discovery::pinned_group(client, &parsed).await?;
    Ok(group
        .versioned_resources(&parsed.version)
        .into_iter()
        .map(|(ar, _)| ar.kind)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_devcluster::fake_api::client_with_an_unavailable_aggregated_api;

    #[tokio::test]
    async fn an_unavailable_group_costs_only_its_own_kinds() {
        let caps = discover(&client_with_an_unavailable_aggregated_api()).await;
        assert_eq!(caps.kube_version, "v1.31.4");
        assert_eq!(
            caps.api_versions,
            [
                "apps/v1",
                "apps/v1/Deployment",
                "metrics.k8s.io/v1beta1",
                "v1",
                "v1/ConfigMap",
                "v1/Pod",
            ],
            "the broken group is listed without kinds; the others are complete"
        );
    }
}
