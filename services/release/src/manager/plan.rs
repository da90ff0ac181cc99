//! Plan and Render: what an install would produce, without changing the cluster. Plan asks
//! the API server for each object's would-be form (server-side apply, `dryRun=All`) and
//! compares it with the live object; objects the latest revision has and the render drops
//! would be deleted.

use super::*;
use crate::apply::dry_run::DryRun;

/// What an install would do to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanAction {
    Create,
    Update,
    Delete,
    Unchanged,
}

#[derive(Debug, Clone)]
pub struct PlannedChange {
    pub key: ObjectKey,
    pub action: PlanAction,
    /// For updates, the top-level fields that would change.
    pub changed: Vec<String>,
}

impl ReleaseManager {
    /// Renders with this cluster's capabilities (and `lookup`), as an install would; with
    /// `app`, confined as an install would be.
    pub async fn render_for_cluster(
        &self,
        release: &ReleaseId,
        files: Vec<(String, Vec<u8>)>,
        values: serde_json::Value,
        app: Option<&AppNamespace>,
    ) -> Result<render::Rendered, ReleaseError> {
        let (name, namespace) = (release.name(), release.namespace());
        let store = self.store(namespace);
        let records = store.stored(name).await?;
        let info = ReleaseInfo {
            name: name.to_string(),
            namespace: namespace.to_string(),
            revision: records.next_revision(name, namespace)?,
            is_install: records.is_empty(),
            is_upgrade: !records.is_empty(),
        };
        let caps = self.capabilities().await;
        let rendered = self.render_bounded(files, values, info, caps, app).await?;
        confine::refuse_record_writes(&rendered, namespace)?;
        if let Some(app) = app {
            self.confine(app, &rendered).await?;
        }
        Ok(rendered)
    }

    /// Each object's fate if this chart and values were installed now. `as_package`: the
    /// release is a package's (the request named it), so the dry runs are made as its
    /// principal, as its install would be, and what the API server would refuse it is refused
    /// here; otherwise (the operator's plan of any chart) as the service itself.
    pub async fn plan(
        &self,
        release: &ReleaseId,
        files: Vec<(String, Vec<u8>)>,
        values: serde_json::Value,
        app: Option<&AppNamespace>,
        as_package: bool,
    ) -> Result<Vec<PlannedChange>, ReleaseError> {
        let (name, namespace) = (release.name(), release.namespace());
        let rendered = self.render_for_cluster(release, files, values, app).await?;
        let applier = if as_package {
            self.acting_for(name, namespace)?
        } else {
            self.applier.clone()
        };
        let mut changes = Vec::new();
        let mut rendered_keys = BTreeSet::new();
        for m in &rendered.manifests {
            let run: DryRun = applier.dry_run(&m.object, name, namespace).await?;
            let (action, changed) = match &run.live {
                None => (PlanAction::Create, Vec::new()),
                Some(_) => {
                    let changed = run.changed_fields();
                    if changed.is_empty() {
                        (PlanAction::Unchanged, changed)
                    } else {
                        (PlanAction::Update, changed)
                    }
                }
            };
            rendered_keys.insert(run.key.clone());
            changes.push(PlannedChange {
                key: run.key,
                action,
                changed,
            });
        }
        let store = self.store(namespace);
        let records = store.stored(name).await?;
        if let Some(latest) = records.newest() {
            // What an install would prune: berth's newest record, as its owner may touch it.
            let recorded = confine::recorded(
                &self.applier,
                latest,
                "plan",
                recorded_objects(&latest.release.manifest),
            )
            .await?;
            for object in recorded {
                if crate::apply::object::is_kept(&object) {
                    continue;
                }
                let key = match self.applier.key_for(&object, namespace).await {
                    Ok((key, _)) => key,
                    Err(ApplyError::UnknownKind { .. }) => continue,
                    Err(e) => return Err(e.into()),
                };
                if !rendered_keys.contains(&key) {
                    changes.push(PlannedChange {
                        key,
                        action: PlanAction::Delete,
                        changed: Vec::new(),
                    });
                }
            }
        }
        Ok(changes)
    }
}
