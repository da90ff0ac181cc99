//! Rollback: re-apply an earlier revision's recorded manifest and record it as a new revision
//! (see ROLLBACK.md). The chart is not re-rendered, so revisions written by Helm work too. As
//! in Helm, the target revision's `pre-rollback` hooks run before the apply and its
//! `post-rollback` hooks after the prune.

use super::*;

impl ReleaseManager {
    /// Rolls `name` back to `revision` (0: the one before the latest).
    pub async fn rollback(
        &self,
        release: &ReleaseId,
        revision: i32,
    ) -> Result<Installed, ReleaseError> {
        let (name, namespace) = (release.name(), release.namespace());
        let lock = self.locks.get(namespace, name);
        let _held = lock.lock().await;
        let store = self.store(namespace);
        let mut stored = store.stored(name).await?;
        if let Some(newest) = stored.last_mut() {
            revision::fail_interrupted(&store, &mut newest.release).await?;
        }
        let Some(latest) = stored.last().map(|s| s.release.clone()) else {
            return Err(ReleaseError::NotFound(format!(
                "release {name:?} in namespace {namespace:?}"
            )));
        };
        let wanted = if revision == 0 {
            latest.version - 1
        } else {
            revision
        };
        if wanted == latest.version {
            return Err(ReleaseError::InvalidArgument(format!(
                "revision {wanted} is the current revision of {name:?}"
            )));
        }
        let Some(target) = stored.iter().find(|s| s.release.version == wanted) else {
            return Err(ReleaseError::InvalidArgument(format!(
                "release {name:?} has no revision {wanted}"
            )));
        };
        let checksum = target.checksum.clone().unwrap_or_default();
        let target = target.release.clone();

        self.drift.pause(name, namespace);
        let now = format::now();
        let mut record = target.clone();
        record.version = latest.version + 1;
        record.info.first_deployed = latest.info.first_deployed.clone();
        record.info.last_deployed = now;
        record.info.deleted = format::zero_time();
        let underway = format!("Rolling back to {wanted}");
        revision::begin(
            &store,
            &mut record,
            &checksum,
            Status::PendingRollback,
            &underway,
        )
        .await?;
        let mut objects = recorded_objects(&target.manifest);
        objects.sort_by_key(|o| install_rank(kind_of(o)));
        let hooks = helm_hooks::from_record(&target);
        let applied = async {
            self.applier.ensure_namespace(namespace).await?;
            self.run_hooks(&hooks, HookEvent::PreRollback, name, namespace)
                .await?;
            let refs: Vec<&serde_json::Value> = objects.iter().collect();
            let applied = self.apply_in_order(name, namespace, &refs).await?;
            let keys: Vec<ObjectKey> = applied.iter().map(|a| a.key.clone()).collect();
            self.prune(namespace, &latest, &keys).await?;
            self.run_hooks(&hooks, HookEvent::PostRollback, name, namespace)
                .await?;
            Ok::<_, ReleaseError>(applied)
        }
        .await;

        match applied {
            Ok(applied) => {
                let description = format!("Rollback to {wanted}");
                revision::deployed(&store, &mut record, description, &stored).await?;
                let versions = stored.iter().map(|s| s.release.version);
                store
                    .trim_history(name, versions.chain([record.version]), self.history_max)
                    .await?;
                let keys = applied.iter().map(|a| a.key.clone()).collect();
                if self.repair_drift {
                    self.drift.watch(
                        &self.applier,
                        name,
                        namespace,
                        record.version,
                        objects,
                        applied,
                    );
                }
                Ok(Installed {
                    revision: record.version,
                    objects: keys,
                    unchanged: false,
                    manifest: record.manifest,
                })
            }
            Err(e) => {
                let description = format!("Rollback to {wanted} failed: {e}");
                revision::failed(&store, &mut record, description).await;
                Err(e)
            }
        }
    }
}
