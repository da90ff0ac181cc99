//! Drift repair after a restart: the watches live in memory, so a new process finds the
//! releases berth deployed from their records and watches them again.

use super::*;
use crate::record::store::{CHECKSUM_LABEL, SECRET_TYPE};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;
use std::collections::BTreeSet;

/// Release Secrets read per list request (they hold whole charts, so pages stay small).
const PAGE: u32 = 50;
/// Bound on one list request.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

impl ReleaseManager {
    /// Starts drift repair for every release whose latest revision berth deployed: a Helm
    /// release Secret with status `deployed` and berth's checksum label, which Helm does not
    /// write. Releases already watched by this process are left alone; each release is
    /// re-read under its lock, so a concurrent install, rollback or uninstall wins. Call once
    /// when the service starts. Returns how many releases it started watching. Does nothing
    /// with drift repair off.
    pub async fn resume_drift_repair(&self) -> Result<usize, ReleaseError> {
        if !self.repair_drift {
            return Ok(0);
        }
        let mut resumed = 0;
        for (namespace, name) in self.deployed_by_berth().await? {
            if validate_release(&name, &namespace).is_err() {
                continue;
            }
            match self.resume_one(&name, &namespace).await {
                Ok(true) => resumed += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(release.name = %name, release.namespace = %namespace, error = %e, "cannot resume drift repair")
                }
            }
        }
        Ok(resumed)
    }

    /// (namespace, name) of every release with a deployed revision written by berth.
    async fn deployed_by_berth(&self) -> Result<BTreeSet<(String, String)>, ReleaseError> {
        let api: Api<Secret> = Api::all(self.client.clone());
        let selector = format!(
            "owner=helm,status={},{CHECKSUM_LABEL}",
            Status::Deployed.as_str()
        );
        let mut params = ListParams::default().labels(&selector).limit(PAGE);
        let mut found = BTreeSet::new();
        loop {
            let page = match tokio::time::timeout(LIST_TIMEOUT, api.list(&params)).await {
                Ok(Ok(page)) => page,
                Ok(Err(source)) => {
                    return Err(ApplyError::Kube {
                        op: "list",
                        object: "release secrets in all namespaces".into(),
                        source,
                    }
                    .into());
                }
                Err(_) => {
                    return Err(ApplyError::Timeout {
                        op: "list",
                        object: "release secrets in all namespaces".into(),
                    }
                    .into());
                }
            };
            for secret in &page.items {
                let meta = &secret.metadata;
                let release = meta.labels.as_ref().and_then(|l| l.get("name"));
                if secret.type_.as_deref() == Some(SECRET_TYPE)
                    && let (Some(ns), Some(release)) = (&meta.namespace, release)
                {
                    found.insert((ns.clone(), release.clone()));
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(found),
            }
        }
    }

    /// Watches one release again if its latest revision is deployed and berth's.
    async fn resume_one(&self, name: &str, namespace: &str) -> Result<bool, ReleaseError> {
        let lock = self.locks.get(namespace, name);
        let _held = lock.lock().await;
        if self.drift.is_watching(name, namespace) {
            return Ok(false);
        }
        let store = ReleaseStore::new(self.client.clone(), namespace);
        let Some(latest) = store.stored(name).await?.pop() else {
            return Ok(false);
        };
        if latest.release.info.status != Status::Deployed.as_str() || latest.checksum.is_none() {
            return Ok(false);
        }
        let objects = recorded_objects(&latest.release.manifest);
        tracing::info!(release.name = %name, release.namespace = %namespace, revision = latest.release.version, "resuming drift repair");
        self.drift.watch(
            &self.applier,
            name,
            namespace,
            latest.release.version,
            objects,
            Vec::new(),
        );
        Ok(true)
    }

    /// Every renew period until `shutdown`, lists the release Leases of the cluster and
    /// becomes a candidate for each release this process does not know yet (one another
    /// replica installed), so it can take the release over when its holder dies. Does
    /// nothing with drift repair off.
    pub async fn follow_leases(&self, shutdown: tokio_util::sync::CancellationToken) {
        if !self.repair_drift {
            return;
        }
        let period = self.lease().renew;
        loop {
            match lease::list(self.client.clone()).await {
                Ok(found) => {
                    for (namespace, name) in found {
                        if validate_release(&name, &namespace).is_err() {
                            continue;
                        }
                        // An operation on the release in this process decides for itself.
                        let lock = self.locks.get(&namespace, &name);
                        let Ok(_held) = lock.try_lock() else { continue };
                        if self.drift.contend(&self.applier, &name, &namespace) {
                            tracing::debug!(release.name = %name, release.namespace = %namespace, "found a release lease; a candidate for it");
                        }
                    }
                }
                Err(e) => tracing::debug!(error = %e, "listing release leases failed"),
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
        }
    }
}
