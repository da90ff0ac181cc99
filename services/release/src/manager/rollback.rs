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
        let mut records = store.stored(name).await?;
        if let Some(newest) = records.own.last_mut() {
            revision::fail_interrupted(&store, newest).await?;
        }
        let Some(latest) = records.newest().cloned() else {
            let foreign = if records.foreign.is_empty() {
                String::new()
            } else {
                format!(
                    " (only records berth did not write: {})",
                    records.describe_foreign()
                )
            };
            return Err(ReleaseError::NotFound(format!(
                "release {name:?} in namespace {namespace:?}{foreign}"
            )));
        };
        let wanted = if revision == 0 {
            latest.release.version - 1
        } else {
            revision
        };
        if wanted == latest.release.version {
            return Err(ReleaseError::InvalidArgument(format!(
                "revision {wanted} is the current revision of {name:?}"
            )));
        }
        let Some(target) = records.own.iter().find(|s| s.release.version == wanted) else {
            return Err(ReleaseError::InvalidArgument(format!(
                "release {name:?} has no revision {wanted} written by berth"
            )));
        };
        // The release stays its owner's: the latest record says whose it is (every record of
        // it names the same package, see `ownership`).
        let owner = latest.owner.clone();
        if target.owner != owner {
            return Err(ReleaseError::NotOwned(format!(
                "revision {wanted} of {name:?} belongs to {}, the release to {}",
                target.owner.describe(),
                owner.describe()
            )));
        }
        let checksum = target.checksum.clone().unwrap_or_default();
        let target = target.clone();

        self.drift.pause(name, namespace);
        let now = format::now();
        let mut record = target.release.clone();
        record.version = records.next_revision(name, namespace)?;
        record.info.first_deployed = latest.release.info.first_deployed.clone();
        record.info.last_deployed = now;
        record.info.deleted = format::zero_time();
        let underway = format!("Rolling back to {wanted}");
        let mut new = revision::Pending {
            record: &mut record,
            checksum: &checksum,
            owner: &owner,
        };
        let _writing = self.drift.writing(name, namespace, new.record.version);
        revision::begin(&store, &mut new, Status::PendingRollback, &underway).await?;
        let mut objects = confine::recorded(
            &self.applier,
            &target,
            "rollback",
            recorded_objects(&target.release.manifest),
        )
        .await?;
        objects.sort_by_key(|o| install_rank(kind_of(o)));
        let hooks = confine::recorded_hooks(&self.applier, &target, "rollback hooks").await?;
        let applier = self.acting_for(name, namespace)?;
        let applied = async {
            self.applier
                .ensure_namespace(namespace, &self.namespace_labels(name, namespace))
                .await?;
            self.run_hooks(&applier, &hooks, HookEvent::PreRollback, name, namespace)
                .await?;
            let refs: Vec<&serde_json::Value> = objects.iter().collect();
            let applied = self
                .apply_in_order(&applier, name, namespace, &refs)
                .await?;
            let keys: Vec<ObjectKey> = applied.iter().map(|a| a.key.clone()).collect();
            self.prune(&applier, namespace, &latest, &keys).await?;
            self.run_hooks(&applier, &hooks, HookEvent::PostRollback, name, namespace)
                .await?;
            Ok::<_, ReleaseError>(applied)
        }
        .await;

        match applied {
            Ok(applied) => {
                let description = format!("Rollback to {wanted}");
                revision::deployed(&store, &mut new, description, &records.own).await?;
                let version = new.record.version;
                let versions = records.own.iter().map(|s| s.release.version);
                store
                    .trim_history(name, versions.chain([version]), self.history_max)
                    .await?;
                let keys = applied.iter().map(|a| a.key.clone()).collect();
                if self.repair_drift {
                    self.drift.watch(
                        &applier, &self.key, name, namespace, version, objects, applied,
                    );
                }
                Ok(Installed {
                    revision: version,
                    objects: keys,
                    unchanged: false,
                    manifest: record.manifest,
                })
            }
            Err(e) => {
                let description = format!("Rollback to {wanted} failed: {e}");
                revision::failed(&store, &mut new, description).await;
                Err(e)
            }
        }
    }
}
