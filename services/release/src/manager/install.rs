//! Install and upgrade: CRDs, render, hooks around apply and prune, record.

use super::*;

impl ReleaseManager {
    /// Installs the chart as `owner`'s release, or upgrades it when a revision already exists.
    /// For an App (`owner.app_namespace`), the whole render (hooks included) must stay in the
    /// app's namespace, or nothing is applied. A release whose records are not `owner`'s is
    /// refused (see `ownership`).
    ///
    /// Timed in `berth_release_apply_duration_seconds` (waiting for the release's lock
    /// included); a success starts the clock of its readiness.
    pub async fn install(
        &self,
        release: &ReleaseId,
        files: Vec<(String, Vec<u8>)>,
        values: serde_json::Value,
        owner: &Owner,
    ) -> Result<Installed, ReleaseError> {
        let started = std::time::Instant::now();
        let installed = self.install_timed(release, files, values, owner).await;
        if installed.is_err() {
            self.applier.forget_namespace(release.namespace());
        }
        self.metrics.applied(
            release.namespace(),
            release.name(),
            started.elapsed(),
            installed.as_ref().ok().map(|i| i.revision),
        );
        installed
    }

    async fn install_timed(
        &self,
        release: &ReleaseId,
        files: Vec<(String, Vec<u8>)>,
        values: serde_json::Value,
        owner: &Owner,
    ) -> Result<Installed, ReleaseError> {
        let (name, namespace) = (release.name(), release.namespace());
        let app = owner.app_namespace.clone().map(AppNamespace);
        let app = app.as_ref();
        let lock = self.locks.get(namespace, name);
        let _held = lock.lock().await;

        // The new revision's watches replace the old ones once it is applied.
        self.drift.pause(name, namespace);
        let store = self.store(namespace);
        // The first record written is the next revision, whose creation fails if another
        // writer got there first.
        let mut records = store.stored_for_new_revision(name).await?;
        ownership::check(release, &records, owner)?;
        if let Some(newest) = records.own.last_mut() {
            revision::fail_interrupted(&store, newest).await?;
        }
        let previous = records.newest().cloned();
        let revision = records.next_revision(name, namespace)?;
        let info = ReleaseInfo {
            name: name.to_string(),
            namespace: namespace.to_string(),
            revision,
            // Any record counts: berth's own from before records carried MACs are an upgrade
            // to the chart, whatever berth may act on.
            is_install: records.is_empty(),
            is_upgrade: !records.is_empty(),
        };
        // Like Helm: CRDs first, so the render's `.Capabilities` already lists their kinds.
        let crds = render::chart_crds(&files, &values)?;
        if let Some(app) = app
            && !crds.is_empty()
        {
            return Err(confine::crds_refusal(app, &crds));
        }
        let applier = self.acting_for(name, namespace)?;
        self.apply_crds(&applier, name, namespace, &crds).await?;
        if !crds.is_empty() {
            self.capabilities.invalidate().await;
        }
        let caps = self.capabilities().await;
        let rendered = self
            .render_bounded(files.clone(), values.clone(), info, caps, app)
            .await?;
        confine::refuse_record_writes(&rendered, namespace)?;
        if let Some(app) = app {
            self.confine(app, &rendered).await?;
        }
        self.applier
            .ensure_namespace(namespace, &self.namespace_labels(name, namespace))
            .await?;

        let checksum = render_checksum(&rendered);
        let hooks: Vec<Hook> = rendered.hooks.iter().map(Hook::from_manifest).collect();
        if let Some(prev) = &previous
            && prev.release.info.status == Status::Deployed.as_str()
            && prev.checksum.as_deref() == Some(checksum.as_str())
        {
            // Same render as the deployed revision: re-apply in place (heals deleted or edited
            // objects) without writing a new revision.
            let applied = self.apply_all(&applier, name, namespace, &rendered).await?;
            let objects = applied.iter().map(|a| a.key.clone()).collect();
            self.watch_drift(
                &applier,
                name,
                namespace,
                prev.release.version,
                &rendered,
                applied,
            );
            return Ok(Installed {
                revision: prev.release.version,
                objects,
                unchanged: true,
                manifest: prev.release.manifest.clone(),
            });
        }
        let note = ownership::foreign_note(&records, previous.is_some());
        if let Some(note) = &note {
            tracing::warn!(release = %release, "{note}");
        }

        let started = format::now();
        let first_deployed = previous
            .as_ref()
            .map_or(started.clone(), |p| p.release.info.first_deployed.clone());
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
            // As Helm records it: every document, including comment-only ones.
            manifest: manifests::documents_text(&rendered.listing.manifests),
            hooks: hooks.iter().map(Hook::to_record).collect(),
            version: revision,
            namespace: namespace.to_string(),
        };

        let (pre, post) = if records.is_empty() {
            (HookEvent::PreInstall, HookEvent::PostInstall)
        } else {
            (HookEvent::PreUpgrade, HookEvent::PostUpgrade)
        };
        let (what, pending, underway) = if records.is_empty() {
            (
                "Install",
                Status::PendingInstall,
                "Initial install underway",
            )
        } else {
            ("Upgrade", Status::PendingUpgrade, "Preparing upgrade")
        };
        let mut new = revision::Pending {
            record: &mut record,
            checksum: &checksum,
            owner,
        };
        // From the first record on, its events are this process's own (see `writing`).
        let _writing = self.drift.writing(name, namespace, revision);
        revision::begin(&store, &mut new, pending, underway).await?;
        // Helm's order: pre hooks, apply, prune what the new revision dropped, post hooks.
        let applied = async {
            self.run_hooks(&applier, &hooks, pre, name, namespace)
                .await?;
            let applied = self.apply_all(&applier, name, namespace, &rendered).await?;
            if let Some(prev) = &previous {
                let keys: Vec<ObjectKey> = applied.iter().map(|a| a.key.clone()).collect();
                self.prune(&applier, namespace, prev, &keys).await?;
            }
            self.run_hooks(&applier, &hooks, post, name, namespace)
                .await?;
            Ok::<_, ReleaseError>(applied)
        }
        .await;
        let applied = match applied {
            Ok(keys) => keys,
            Err(e) => {
                revision::failed(&store, &mut new, format!("{what} failed: {e}")).await;
                return Err(e);
            }
        };
        let description = match note {
            Some(note) => format!("{what} complete; {note}"),
            None => format!("{what} complete"),
        };
        revision::deployed(&store, &mut new, description, &records.own).await?;
        let versions = records.own.iter().map(|s| s.release.version);
        store
            .trim_history(name, versions.chain([revision]), self.history_max)
            .await?;
        let objects = applied.iter().map(|a| a.key.clone()).collect();
        self.watch_drift(&applier, name, namespace, revision, &rendered, applied);
        Ok(Installed {
            revision,
            objects,
            unchanged: false,
            manifest: record.manifest,
        })
    }

    /// Watches the rendered objects for drift from now on; `applied` is how the API server
    /// stored each, so the watches' first sight of them needs no check.
    fn watch_drift(
        &self,
        applier: &Applier,
        name: &str,
        namespace: &str,
        revision: i32,
        rendered: &render::Rendered,
        applied: Vec<Applied>,
    ) {
        if !self.repair_drift {
            return;
        }
        let objects = rendered
            .manifests
            .iter()
            .map(|m| m.object.clone())
            .collect();
        self.drift.watch(
            applier, &self.key, name, namespace, revision, objects, applied,
        );
    }

    /// Applies the chart's `crds/` and waits until each is Established, ahead of the install
    /// (the package's hooks may watch the kinds they bring). Not part of the release. An app
    /// may not ship any.
    pub async fn apply_chart_crds(
        &self,
        release: &ReleaseId,
        files: Vec<(String, Vec<u8>)>,
        values: serde_json::Value,
        app: Option<&AppNamespace>,
    ) -> Result<Vec<Applied>, ReleaseError> {
        let (name, namespace) = (release.name(), release.namespace());
        let crds = render::chart_crds(&files, &values)?;
        if crds.is_empty() {
            return Ok(vec![]);
        }
        if let Some(app) = app {
            return Err(confine::crds_refusal(app, &crds));
        }
        // At Load lifecycle does not know the module's rules yet (they come with the Loaded
        // report this step precedes), so these are applied with the service's own identity;
        // every Install applies them again as the package (docs/decisions/package-identity.md).
        let objects: Vec<&serde_json::Value> = crds.iter().map(|m| &m.object).collect();
        let applied = self
            .apply_in_order(&self.applier, name, namespace, &objects)
            .await?;
        self.capabilities.invalidate().await;
        Ok(applied)
    }

    /// Applies `crds/` objects and waits until each CRD is Established. CRDs are not part of
    /// the release: Helm neither records nor deletes them.
    pub(super) async fn apply_crds(
        &self,
        applier: &Applier,
        name: &str,
        namespace: &str,
        crds: &[render::Manifest],
    ) -> Result<(), ReleaseError> {
        let objects: Vec<&serde_json::Value> = crds.iter().map(|m| &m.object).collect();
        self.apply_in_order(applier, name, namespace, &objects)
            .await?;
        Ok(())
    }

    pub(super) async fn apply_all(
        &self,
        applier: &Applier,
        name: &str,
        namespace: &str,
        rendered: &render::Rendered,
    ) -> Result<Vec<Applied>, ReleaseError> {
        let objects: Vec<&serde_json::Value> =
            rendered.manifests.iter().map(|m| &m.object).collect();
        self.apply_in_order(applier, name, namespace, &objects)
            .await
    }

    /// Applies `objects` (already in install order) kind by kind: the objects of one kind at
    /// once, up to [`APPLY_CONCURRENCY`], and the next kind only when all of them are applied
    /// (Helm's order is between kinds; within a kind the applies are independent). CRDs are
    /// awaited until Established, as their custom resources (unknown kinds sort last) can
    /// only be applied once they are served. The first error is returned after the kind's
    /// other applies have finished.
    pub(super) async fn apply_in_order(
        &self,
        applier: &Applier,
        name: &str,
        namespace: &str,
        objects: &[&serde_json::Value],
    ) -> Result<Vec<Applied>, ReleaseError> {
        use futures::StreamExt as _;
        let mut applied = Vec::with_capacity(objects.len());
        for same_kind in objects.chunk_by(|a, b| kind_of(a) == kind_of(b)) {
            // The futures are built first: a closure inside the stream combinator trips
            // rustc's higher-ranked lifetime inference when the caller must be `Send`.
            let applies: Vec<_> = same_kind
                .iter()
                .map(|o| applier.apply(o, name, namespace))
                .collect();
            let results: Vec<Result<Applied, ApplyError>> = futures::stream::iter(applies)
                .buffered(APPLY_CONCURRENCY)
                .collect()
                .await;
            for result in results {
                let done = result?;
                if done.key.kind == "CustomResourceDefinition" {
                    applier
                        .wait_crd_established(&done.key.name, CRD_WAIT)
                        .await?;
                }
                applied.push(done);
            }
        }
        Ok(applied)
    }

    /// Deletes what the previous revision (berth's record) had and this one no longer renders,
    /// except `keep`; of an App's record, only what the App may touch.
    pub(super) async fn prune(
        &self,
        applier: &Applier,
        namespace: &str,
        previous: &Stored,
        current: &[ObjectKey],
    ) -> Result<(), ReleaseError> {
        let current: BTreeSet<&ObjectKey> = current.iter().collect();
        let mut stale = Vec::new();
        let recorded = confine::recorded(
            &self.applier,
            previous,
            "prune",
            recorded_objects(&previous.release.manifest),
        )
        .await?;
        for object in recorded {
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
            if let Some((key, _)) = applier
                .delete(&object, &previous.release.name, namespace, DELETE_WAIT)
                .await?
            {
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
