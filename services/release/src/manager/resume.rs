//! Drift repair after a restart, or of a shard taken over: the watches live in memory, so the
//! owner finds the releases berth deployed from their records and watches them again.

use super::*;
use crate::record::store::CHECKSUM_LABEL;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;
use std::collections::BTreeSet;

/// Release Secrets read per list request (metadata only).
const PAGE: u32 = 500;
/// Bound on one list request.
const LIST_TIMEOUT: Duration = Duration::from_secs(30);

impl ReleaseManager {
    /// Starts drift repair for every release of the shards this replica owns whose latest
    /// revision berth deployed. Candidates are found by their Secrets' labels (status
    /// `deployed` and berth's checksum label, which anyone may write); each is then read under
    /// its lock, and only berth's newest record (its MAC checked) is watched, its objects as
    /// its owner may touch them. Releases already watched by this process are left alone; a
    /// concurrent install, rollback or uninstall wins. Returns how many releases it started
    /// watching. Does nothing with drift repair off.
    pub async fn resume_drift_repair(&self) -> Result<usize, ReleaseError> {
        let owned = self.drift.shards().owned();
        self.resume_shards(&owned).await
    }

    /// Like [`ReleaseManager::resume_drift_repair`], for the releases of `shards`.
    pub(super) async fn resume_shards(&self, shards: &[u32]) -> Result<usize, ReleaseError> {
        if !self.repair_drift || shards.is_empty() {
            return Ok(0);
        }
        let mut resumed = 0;
        for (namespace, name) in self.deployed_by_berth().await? {
            if validate_release(&name, &namespace).is_err()
                || !shards.contains(
                    &self
                        .drift
                        .shards()
                        .shard(&super::shards::key(&namespace, &name)),
                )
            {
                continue;
            }
            match self.resume_one(&name, &namespace, None).await {
                Ok(true) => resumed += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(release.name = %name, release.namespace = %namespace, error = %e, "cannot resume drift repair")
                }
            }
        }
        Ok(resumed)
    }

    /// (namespace, name) of every release with a deployed revision written by berth. Reads
    /// the Secrets' labels only: the records themselves are read per release, by the owner.
    async fn deployed_by_berth(&self) -> Result<BTreeSet<(String, String)>, ReleaseError> {
        let api: Api<Secret> = Api::all(self.client.clone());
        let selector = format!(
            "owner=helm,status={},{CHECKSUM_LABEL}",
            Status::Deployed.as_str()
        );
        let mut params = ListParams::default().labels(&selector).limit(PAGE);
        let mut found = BTreeSet::new();
        let object = || "release secrets in all namespaces".to_owned();
        loop {
            let page = match tokio::time::timeout(LIST_TIMEOUT, api.list_metadata(&params)).await {
                Ok(Ok(page)) => page,
                Ok(Err(source)) => {
                    return Err(ApplyError::Kube {
                        op: "list",
                        object: object(),
                        source,
                    }
                    .into());
                }
                Err(_) => {
                    return Err(ApplyError::Timeout {
                        op: "list",
                        object: object(),
                    }
                    .into());
                }
            };
            for secret in &page.items {
                let meta = &secret.metadata;
                let release = meta.labels.as_ref().and_then(|l| l.get("name"));
                if let (Some(ns), Some(release)) = (&meta.namespace, release) {
                    found.insert((ns.clone(), release.clone()));
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(found),
            }
        }
    }

    /// Watches one release again if its latest revision is deployed and berth's, unless its
    /// objects are watched already: at any revision (`seen` `None`), or at `seen` or newer (a
    /// record of revision `seen` was just written).
    pub(super) async fn resume_one(
        &self,
        name: &str,
        namespace: &str,
        seen: Option<i32>,
    ) -> Result<bool, ReleaseError> {
        let lock = self.locks.get(namespace, name);
        let _held = lock.lock().await;
        if let Some(watched) = self.drift.watched_revision(name, namespace)
            && seen.is_none_or(|seen| watched >= seen)
        {
            return Ok(false);
        }
        let store = self.store(namespace);
        let records = store.stored(name).await?;
        let Some(latest) = records.newest() else {
            if !records.foreign.is_empty() {
                tracing::warn!(release.name = %name, release.namespace = %namespace,
                    records = %records.describe_foreign(),
                    "not repairing drift from records berth did not write");
            }
            return Ok(false);
        };
        if latest.release.info.status != Status::Deployed.as_str() {
            return Ok(false);
        }
        let objects = confine::recorded(
            &self.applier,
            latest,
            "drift repair",
            recorded_objects(&latest.release.manifest),
        )
        .await?;
        let started = self.drift.watch(
            &self.acting_for(name, namespace)?,
            &self.key,
            name,
            namespace,
            latest.release.version,
            objects,
            Vec::new(),
        );
        if started {
            tracing::info!(release.name = %name, release.namespace = %namespace, revision = latest.release.version, "repairing drift");
        }
        Ok(started)
    }
}
