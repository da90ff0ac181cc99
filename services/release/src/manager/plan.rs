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
        let previous = store.latest(name).await?;
        let info = ReleaseInfo {
            name: name.to_string(),
            namespace: namespace.to_string(),
            revision: previous.as_ref().map_or(1, |p| p.version + 1),
            is_install: previous.is_none(),
            is_upgrade: previous.is_some(),
        };
        let caps = self.capabilities().await;
        let rendered = self.render_bounded(files, values, info, caps, app).await?;
        if let Some(app) = app {
            self.confine(app, &rendered).await?;
        }
        Ok(rendered)
    }

    /// Each object's fate if this chart and values were installed now.
    pub async fn plan(
        &self,
        release: &ReleaseId,
        files: Vec<(String, Vec<u8>)>,
        values: serde_json::Value,
        app: Option<&AppNamespace>,
    ) -> Result<Vec<PlannedChange>, ReleaseError> {
        let (name, namespace) = (release.name(), release.namespace());
        let rendered = self.render_for_cluster(release, files, values, app).await?;
        let mut changes = Vec::new();
        let mut rendered_keys = BTreeSet::new();
        for m in &rendered.manifests {
            let run: DryRun = self.applier.dry_run(&m.object, name, namespace).await?;
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
        if let Some(latest) = store.latest(name).await? {
            for object in recorded_objects(&latest.manifest) {
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
