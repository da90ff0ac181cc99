//! Install and upgrade: CRDs, render, hooks around apply and prune, record.

use super::*;

impl ReleaseManager {
    /// Installs the chart, or upgrades the release when a revision already exists.
    pub async fn install(
        &self,
        name: &str,
        namespace: &str,
        files: Vec<(String, Vec<u8>)>,
        values: serde_json::Value,
    ) -> Result<Installed, ReleaseError> {
        validate_release(name, namespace)?;
        let lock = self.locks.get(namespace, name);
        let _held = lock.lock().await;

        // The new revision's watches replace the old ones once it is applied.
        self.drift.pause(name, namespace);
        let store = ReleaseStore::new(self.client.clone(), namespace);
        let stored = store.stored(name).await?.pop();
        let previous_checksum = stored.as_ref().and_then(|s| s.checksum.clone());
        let previous = stored.map(|s| s.release);
        let revision = previous.as_ref().map_or(1, |p| p.version + 1);
        let info = ReleaseInfo {
            name: name.to_string(),
            namespace: namespace.to_string(),
            revision,
            is_install: previous.is_none(),
            is_upgrade: previous.is_some(),
        };
        // Like Helm: CRDs first, so the render's `.Capabilities` already lists their kinds.
        self.applier.ensure_namespace(namespace).await?;
        let crds = render::chart_crds(&files, &values)?;
        self.apply_crds(name, namespace, &crds).await?;
        if !crds.is_empty() {
            self.capabilities.invalidate().await;
        }
        let caps = self.capabilities().await;
        let rendered = {
            let (files, values) = (files.clone(), values.clone());
            let lookup: Arc<dyn render::Lookup> = Arc::new(KubeLookup::new(self.applier.clone()));
            // Template execution is CPU-bound and recursive; keep it off the async workers.
            tokio::task::spawn_blocking(move || {
                render::render_release_with_lookup(&files, &values, &info, &caps, Some(lookup))
            })
            .await
            .map_err(|e| ReleaseError::Task(e.to_string()))??
        };

        let checksum = render_checksum(&rendered);
        let hooks: Vec<Hook> = rendered.hooks.iter().map(Hook::from_manifest).collect();
        if let Some(prev) = &previous
            && prev.info.status == Status::Deployed.as_str()
            && previous_checksum.as_deref() == Some(checksum.as_str())
        {
            // Same render as the deployed revision: re-apply in place (heals deleted or edited
            // objects) without writing a new revision.
            let objects = self.apply_all(name, namespace, &rendered).await?;
            self.watch_drift(name, namespace, &rendered);
            return Ok(Installed {
                revision: prev.version,
                objects,
                unchanged: true,
            });
        }

        let started = format::now();
        let first_deployed = previous
            .as_ref()
            .map_or(started.clone(), |p| p.info.first_deployed.clone());
        let mut record = HelmRelease {
            name: name.to_string(),
            info: Info {
                first_deployed,
                last_deployed: started,
                deleted: format::zero_time(),
                description: String::new(),
                status: Status::Deployed.as_str().into(),
                notes: rendered.notes.clone(),
            },
            chart: chart_record(&files, &rendered.chart_metadata, &chart_values(&files)),
            config: values.as_object().cloned().unwrap_or_default(),
            manifest: manifests::manifest_text(&rendered.manifests),
            hooks: hooks.iter().map(Hook::to_record).collect(),
            version: revision,
            namespace: namespace.to_string(),
        };

        let (pre, post) = if previous.is_none() {
            (HookEvent::PreInstall, HookEvent::PostInstall)
        } else {
            (HookEvent::PreUpgrade, HookEvent::PostUpgrade)
        };
        // Helm's order: pre hooks, apply, prune what the new revision dropped, post hooks.
        let applied = async {
            self.run_hooks(&hooks, pre, name, namespace).await?;
            let objects = self.apply_all(name, namespace, &rendered).await?;
            if let Some(prev) = &previous {
                self.prune(namespace, prev, &objects).await?;
            }
            self.run_hooks(&hooks, post, name, namespace).await?;
            Ok::<_, ReleaseError>(objects)
        }
        .await;
        let objects = match applied {
            Ok(keys) => keys,
            Err(e) => {
                record.info.status = Status::Failed.as_str().into();
                record.info.description = format!(
                    "{} failed: {e}",
                    if revision == 1 { "Install" } else { "Upgrade" }
                );
                // Best effort: the apply error is what the caller needs to see.
                if let Err(store_err) = store.create(&record, &checksum).await {
                    tracing::warn!(error = %store_err, "could not record the failed revision");
                }
                return Err(e);
            }
        };
        record.info.description = if revision == 1 {
            "Install complete".into()
        } else {
            "Upgrade complete".into()
        };
        store.create(&record, &checksum).await?;
        if let Some(prev) = &previous {
            store.set_status(prev, Status::Superseded).await?;
        }
        store.trim_history(name, HISTORY_MAX).await?;
        self.watch_drift(name, namespace, &rendered);
        Ok(Installed {
            revision,
            objects,
            unchanged: false,
        })
    }

    /// Watches the rendered objects for drift from now on.
    fn watch_drift(&self, name: &str, namespace: &str, rendered: &render::Rendered) {
        if !self.repair_drift {
            return;
        }
        let objects = rendered
            .manifests
            .iter()
            .map(|m| m.object.clone())
            .collect();
        self.drift.watch(&self.applier, name, namespace, objects);
    }

    /// Applies `crds/` objects and waits until each CRD is Established. CRDs are not part of
    /// the release: Helm neither records nor deletes them.
    pub(super) async fn apply_crds(
        &self,
        name: &str,
        namespace: &str,
        crds: &[render::Manifest],
    ) -> Result<(), ReleaseError> {
        for crd in crds {
            let key = self.applier.apply(&crd.object, name, namespace).await?;
            if key.kind == "CustomResourceDefinition" {
                self.applier
                    .wait_crd_established(&key.name, CRD_WAIT)
                    .await?;
            }
        }
        Ok(())
    }

    pub(super) async fn apply_all(
        &self,
        name: &str,
        namespace: &str,
        rendered: &render::Rendered,
    ) -> Result<Vec<ObjectKey>, ReleaseError> {
        let mut keys = Vec::with_capacity(rendered.manifests.len());
        for m in &rendered.manifests {
            let key = self.applier.apply(&m.object, name, namespace).await?;
            // A CRD rendered from templates comes before its custom resources (unknown kinds
            // sort last); they can only be applied once it is served.
            if key.kind == "CustomResourceDefinition" {
                self.applier
                    .wait_crd_established(&key.name, CRD_WAIT)
                    .await?;
            }
            keys.push(key);
        }
        Ok(keys)
    }

    /// Deletes what the previous revision had and this one no longer renders, except `keep`.
    pub(super) async fn prune(
        &self,
        namespace: &str,
        previous: &HelmRelease,
        current: &[ObjectKey],
    ) -> Result<(), ReleaseError> {
        let current: BTreeSet<&ObjectKey> = current.iter().collect();
        let mut stale = Vec::new();
        for object in recorded_objects(&previous.manifest) {
            let key = match self.applier.key_for(&object, namespace).await {
                Ok((key, _)) => key,
                Err(ApplyError::UnknownKind { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            if !current.contains(&key) {
                stale.push(object);
            }
        }
        stale.sort_by_key(|o| std::cmp::Reverse(install_rank(kind_of(o))));
        for object in stale {
            if let Some((key, _)) = self.applier.delete(&object, namespace, DELETE_WAIT).await? {
                tracing::info!(object = %key, "pruned");
            }
        }
        Ok(())
    }
}

/// A digest of what a render would put on the cluster and in the record: chart identity,
/// manifests and hooks. 32 hex digits, so it fits a label value.
fn render_checksum(r: &render::Rendered) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for key in ["name", "version", "appVersion"] {
        h.update(
            r.chart_metadata
                .get(key)
                .map(|v| v.to_string())
                .unwrap_or_default(),
        );
        h.update([0]);
    }
    h.update(manifests::manifest_text(&r.manifests));
    h.update([0]);
    h.update(manifests::manifest_text(&r.hooks));
    let mut hex = hex::encode(h.finalize());
    hex.truncate(32);
    hex
}

/// The chart's own `values.yaml`, for the record's `chart.values`.
fn chart_values(files: &[(String, Vec<u8>)]) -> serde_json::Value {
    files
        .iter()
        .find(|(p, _)| p == "values.yaml")
        .and_then(|(_, b)| std::str::from_utf8(b).ok())
        .and_then(|t| render::funcs::encoding::parse_yaml(t).ok())
        .filter(|v| v.is_object())
        .unwrap_or_else(|| serde_json::json!({}))
}
