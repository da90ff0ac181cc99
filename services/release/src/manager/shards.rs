//! Who repairs a release: replicas of the release service share the releases in shards, as
//! hookevent shares packages (the shared `berth_lease::shards`). A release belongs to shard
//! `shard_of("<namespace>/<name>", N)`; each shard is owned by one replica at a time through
//! the Lease `berth-release-shard-<i>` in the `--lease-namespace`, and the owner watches and
//! repairs the drift of the shard's releases (`drift`). Install, upgrade, rollback and the
//! other operations need no Lease: any replica answers them, and the owner learns of a
//! revision another replica wrote from the release records (`follow`).
//!
//! Taking a shard over is a restart for its releases: the new owner reads their records and
//! watches every deployed one (`resume`). It also deletes the per-release Leases an earlier
//! berth left for them (`berth-release-<release>` in the release's namespace, label
//! [`OLD_LEASE_LABEL`]).

use super::*;
use berth_lease::shards::{ShardHandler, ShardNames};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{DeleteParams, ListParams};

/// The release service's shard and member Leases: `berth-release-shard-<i>` (label
/// `berth.io/release-shard`), `berth-release-replica-<digest>` (label
/// `berth.io/release-replica`).
pub const NAMES: ShardNames = ShardNames::new("release");

/// Label of the per-release Leases of berth before shards; its value is the release's name.
pub const OLD_LEASE_LABEL: &str = "berth.io/release-lease";
/// Old Leases read per list request.
const OLD_LEASE_PAGE: u32 = 500;
/// Bound on one request about the old Leases.
const OLD_LEASE_TIMEOUT: Duration = Duration::from_secs(30);

/// The key a release is sharded by: `<namespace>/<name>`.
pub fn key(namespace: &str, release: &str) -> String {
    format!("{namespace}/{release}")
}

/// The host's name and a random suffix: unique per process, readable in `kubectl get lease`.
pub fn default_identity() -> String {
    berth_lease::default_identity("berth-release")
}

impl ShardHandler for ReleaseManager {
    fn take(&self, shards: Vec<u32>) {
        let this = self.clone();
        berth_runtime::spawn_in(
            tracing::info_span!(parent: None, "release.take_shards", ?shards),
            async move { this.take_shards(&shards).await },
        );
    }

    fn drop_shards(&self, shards: &[u32]) {
        self.drift.drop_shards(shards);
        tracing::info!(?shards, "stopped repairing the releases of shards given up");
    }
}

impl ReleaseManager {
    /// What a restart does for the releases of `shards`: repair the drift of every deployed
    /// one, and delete the per-release Leases an earlier berth left for them.
    pub(super) async fn take_shards(&self, shards: &[u32]) {
        if let Err(e) = self.delete_old_leases(shards).await {
            tracing::warn!(error = %e, ?shards, "cannot delete the per-release Leases of an earlier berth");
        }
        match self.resume_shards(shards).await {
            Ok(n) => tracing::info!(releases = n, ?shards, "repairing the drift of shards taken"),
            Err(e) => {
                tracing::warn!(error = %e, ?shards, "cannot resume the drift repair of shards taken")
            }
        }
    }

    /// Deletes the Leases of the per-release scheme (label [`OLD_LEASE_LABEL`], named
    /// `berth-release-<release>`) of the releases of `shards`, whoever holds them: nothing
    /// renews them any more. Returns how many it deleted.
    async fn delete_old_leases(&self, shards: &[u32]) -> Result<usize, ApplyError> {
        let failed = |op, source| ApplyError::Kube {
            op,
            object: format!("Leases labelled {OLD_LEASE_LABEL} in all namespaces"),
            source,
        };
        let timed_out = |op| ApplyError::Timeout {
            op,
            object: format!("Leases labelled {OLD_LEASE_LABEL} in all namespaces"),
        };
        let api: Api<Lease> = Api::all(self.client.clone());
        let mut params = ListParams::default()
            .labels(OLD_LEASE_LABEL)
            .limit(OLD_LEASE_PAGE);
        let mut old = Vec::new();
        loop {
            let page = tokio::time::timeout(OLD_LEASE_TIMEOUT, api.list_metadata(&params))
                .await
                .map_err(|_| timed_out("list"))?
                .map_err(|e| failed("list", e))?;
            for lease in page.items {
                let meta = lease.metadata;
                let (Some(namespace), Some(name), Some(release)) = (
                    meta.namespace,
                    meta.name,
                    meta.labels.and_then(|mut l| l.remove(OLD_LEASE_LABEL)),
                ) else {
                    continue;
                };
                // Only what the old scheme named so: nothing else carrying the label.
                if name == format!("berth-release-{release}")
                    && shards.contains(&self.drift.shards().shard(&key(&namespace, &release)))
                {
                    old.push((namespace, name));
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        for (namespace, name) in &old {
            let api: Api<Lease> = Api::namespaced(self.client.clone(), namespace);
            match tokio::time::timeout(
                OLD_LEASE_TIMEOUT,
                api.delete(name, &DeleteParams::default()),
            )
            .await
            .map_err(|_| timed_out("delete"))?
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(failed("delete", e)),
            }
            tracing::info!(lease.namespace = %namespace, lease.name = %name, "deleted a per-release Lease of an earlier berth");
        }
        Ok(old.len())
    }
}
