//! Uninstall: pre-delete hooks, objects in reverse install order, post-delete hooks, records.

use super::*;

impl ReleaseManager {
    /// Deletes the release's objects in reverse install order, then its records.
    pub async fn uninstall(&self, release: &ReleaseId) -> Result<Uninstalled, ReleaseError> {
        let (name, namespace) = (release.name(), release.namespace());
        let lock = self.locks.get(namespace, name);
        let _held = lock.lock().await;

        let store = self.store(namespace);
        let history = store.history(name).await?;
        let Some(latest) = history.last() else {
            return Ok(Uninstalled::default());
        };
        // Stop repairing before deleting, or the watches would bring the objects back.
        self.drift.stop(name, namespace);
        self.metrics.forget(namespace, name);
        store.set_status(latest, Status::Uninstalling).await?;
        let hooks = helm_hooks::from_record(latest);
        self.run_hooks(&hooks, HookEvent::PreDelete, name, namespace)
            .await?;
        let mut objects = recorded_objects(&latest.manifest);
        objects.sort_by_key(|o| std::cmp::Reverse(install_rank(kind_of(o))));
        let mut deleted = Vec::new();
        for object in &objects {
            if let Some((key, existed)) =
                self.applier.delete(object, namespace, DELETE_WAIT).await?
                && existed
            {
                deleted.push(key);
            }
        }
        self.run_hooks(&hooks, HookEvent::PostDelete, name, namespace)
            .await?;
        for rev in &history {
            store.delete(name, rev.version).await?;
        }
        Ok(Uninstalled {
            found: true,
            deleted,
        })
    }
}
