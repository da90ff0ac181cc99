//! Uninstall: pre-delete hooks, objects in reverse install order, post-delete hooks, records.
//! Only berth's records of the requesting package are acted on (see `ownership`); the
//! release's foreign records are deleted with its own, and what they name is left alone.

use super::*;

impl ReleaseManager {
    /// Deletes the release's objects in reverse install order, then its records. A release
    /// whose records are another package's, or not berth's, is left alone and answered as not
    /// found: Remove always finishes, and never at another package's expense.
    pub async fn uninstall(
        &self,
        release: &ReleaseId,
        owner: &Owner,
    ) -> Result<Uninstalled, ReleaseError> {
        let (name, namespace) = (release.name(), release.namespace());
        let lock = self.locks.get(namespace, name);
        let _held = lock.lock().await;

        let store = self.store(namespace);
        let records = store.stored(name).await?;
        if !records.foreign.is_empty() {
            tracing::warn!(release = %release, records = %records.describe_foreign(),
                "uninstall leaves alone the objects named by records berth did not write");
        }
        if let Some(theirs) = records
            .own
            .iter()
            .find(|s| s.owner.package != owner.package)
        {
            tracing::warn!(release = %release, record = %theirs.release.secret_name(),
                "not uninstalling: the release belongs to {}, not to {}",
                theirs.owner.describe(), owner.describe());
            return Ok(Uninstalled::default());
        }
        let Some(latest) = records.newest() else {
            return Ok(Uninstalled::default());
        };
        // Stop repairing before deleting, or the watches would bring the objects back.
        self.drift.stop(name, namespace);
        self.metrics.forget(namespace, name);
        store
            .set_stored_status(latest, Status::Uninstalling)
            .await?;
        let hooks = confine::recorded_hooks(&self.applier, latest, "uninstall hooks").await?;
        let applier = self.acting_for(name, namespace)?;
        self.run_hooks(&applier, &hooks, HookEvent::PreDelete, name, namespace)
            .await?;
        let mut objects = confine::recorded(
            &self.applier,
            latest,
            "uninstall",
            recorded_objects(&latest.release.manifest),
        )
        .await?;
        objects.sort_by_key(|o| std::cmp::Reverse(install_rank(kind_of(o))));
        let mut deleted = Vec::new();
        // Every other object is deleted before a held one is reported: one stuck finalizer
        // does not keep the rest of the release around.
        let mut held = Vec::new();
        for object in &objects {
            match applier.delete(object, name, namespace, DELETE_WAIT).await {
                Ok(Some((key, true))) => deleted.push(key),
                Ok(_) => {}
                Err(e @ ApplyError::HeldByFinalizers { .. }) => held.push(e.to_string()),
                Err(e) => return Err(e.into()),
            }
        }
        if !held.is_empty() {
            // Post-delete hooks wait for the objects to be gone, and the records stay, so the
            // retry (the Uninstall task's backoff) goes on from here.
            return Err(ReleaseError::RemoveBlocked(format!(
                "removing release {release} is blocked: {} (remove the finalizers, or fix \
                 the controller that should)",
                held.join("; ")
            )));
        }
        self.run_hooks(&applier, &hooks, HookEvent::PostDelete, name, namespace)
            .await?;
        for rev in &records.own {
            store.delete(name, rev.release.version).await?;
        }
        // The history goes with the release, whoever wrote a revision of it: a record helm's
        // CLI wrote (a release taken with `helm upgrade`, then taken back) would otherwise keep
        // `helm list` showing a release whose objects are gone, and the next install would
        // number its revisions after it. Only the records go, and only those named as this
        // release's revisions: the objects a foreign record names were never acted on.
        for f in &records.foreign {
            if f.secret == crate::record::format::secret_name(name, f.version) {
                store.delete(name, f.version).await?;
            }
        }
        Ok(Uninstalled {
            found: true,
            deleted,
        })
    }
}
