//! `.Capabilities` from the cluster: its version and every served group-version and
//! group-version/Kind, as Helm gathers them. Discovery costs one request per API group, so
//! the answer is cached for a short time and shared by concurrent installs.

use crate::render::Capabilities;
use kube::Client;
use kube::discovery::Discovery;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Mutex;

/// How long discovered capabilities are reused. CRDs applied by an install are visible to
/// renders after at most this long.
const TTL: Duration = Duration::from_secs(30);
/// Bound on the whole discovery pass.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(20);

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
    let run = Discovery::new(client.clone()).run();
    match tokio::time::timeout(DISCOVERY_TIMEOUT, run).await {
        Ok(Ok(discovery)) => {
            let mut versions = Vec::new();
            for group in discovery.groups() {
                for version in group.versions() {
                    let gv = if group.name().is_empty() {
                        version.to_string()
                    } else {
                        format!("{}/{version}", group.name())
                    };
                    for (ar, _) in group.versioned_resources(version) {
                        versions.push(format!("{gv}/{}", ar.kind));
                    }
                    versions.push(gv);
                }
            }
            versions.sort();
            versions.dedup();
            caps.api_versions = versions;
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "API discovery failed; using default capabilities")
        }
        Err(_) => tracing::warn!("API discovery timed out; using default capabilities"),
    }
    caps
}
