//! Release operations: install/upgrade, uninstall, status. Knows kube (through `apply` and
//! `record`) but not gRPC; `service` adapts it to the proto contract.

use crate::ReleaseInfo;
use crate::apply::kstatus::{self, Status as ObjectStatus};
use crate::apply::{Applier, ApplyError, ObjectKey};
use crate::capabilities::CapabilitiesCache;
use crate::order::install_rank;
use crate::record::format::{
    self, HelmRelease, Info, chart_record, hook_records, recorded_objects,
};
use crate::record::{ReleaseStore, Status, StoreError};
use crate::render::{self, Capabilities, RenderError, manifests};
use kube::Client;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Revisions kept per release (Helm's `--history-max` default).
pub const HISTORY_MAX: usize = 10;

/// How long one deleted object may take to disappear before uninstall/prune gives up.
const DELETE_WAIT: Duration = Duration::from_secs(60);

/// How long a CRD from `crds/` may take to become Established.
const CRD_WAIT: Duration = Duration::from_secs(60);

/// Longest release name Helm accepts (it must fit in label values and Secret names).
const MAX_NAME_LEN: usize = 53;

#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("invalid request: {0}")]
    InvalidArgument(String),
    #[error(transparent)]
    Render(#[from] RenderError),
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("rendering task failed: {0}")]
    Task(String),
}

impl ReleaseError {
    pub fn is_unavailable(&self) -> bool {
        match self {
            ReleaseError::Apply(e) => e.is_unavailable(),
            ReleaseError::Store(e) => e.is_unavailable(),
            _ => false,
        }
    }
}

/// What Install did.
#[derive(Debug, Clone)]
pub struct Installed {
    pub revision: i32,
    pub objects: Vec<ObjectKey>,
    /// True when the render matched the deployed revision and no new revision was written.
    pub unchanged: bool,
}

/// What Uninstall did.
#[derive(Debug, Clone, Default)]
pub struct Uninstalled {
    pub found: bool,
    pub deleted: Vec<ObjectKey>,
}

/// What Status saw.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub found: bool,
    pub revision: i32,
    pub objects: Vec<ObjectKey>,
    pub ready: bool,
    pub not_ready: Vec<String>,
}

/// Serializes operations on the same release; different releases proceed in parallel.
type LockMap = HashMap<(String, String), Arc<tokio::sync::Mutex<()>>>;

#[derive(Clone, Default)]
struct ReleaseLocks {
    // Std mutex: only held to look up or insert a per-release lock, never across an await.
    inner: Arc<Mutex<LockMap>>,
}

impl ReleaseLocks {
    fn get(&self, ns: &str, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        match self.inner.lock() {
            Ok(mut map) => map
                .entry((ns.to_string(), name.to_string()))
                .or_default()
                .clone(),
            Err(poisoned) => poisoned
                .into_inner()
                .entry((ns.to_string(), name.to_string()))
                .or_default()
                .clone(),
        }
    }
}

#[derive(Clone)]
pub struct ReleaseManager {
    client: Client,
    applier: Applier,
    locks: ReleaseLocks,
    capabilities: CapabilitiesCache,
}

/// Validates a release name (DNS-1123 subdomain, at most 53 characters, as Helm requires) or
/// a namespace (`dots: false`: DNS-1123 label, at most 63).
pub fn validate_name(what: &str, name: &str, max: usize, dots: bool) -> Result<(), ReleaseError> {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && l.starts_with(|c: char| c.is_ascii_alphanumeric())
            && l.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let ok = name.len() <= max
        && if dots {
            name.split('.').all(label_ok)
        } else {
            label_ok(name)
        };
    if ok {
        return Ok(());
    }
    let allowed = if dots {
        "lower-case letters, digits, '-' and '.'"
    } else {
        "lower-case letters, digits and '-'"
    };
    Err(ReleaseError::InvalidArgument(format!(
        "{what} {name:?} must be 1-{max} characters of {allowed}, each part starting and ending alphanumeric"
    )))
}

fn validate_release(name: &str, namespace: &str) -> Result<(), ReleaseError> {
    validate_name("release name", name, MAX_NAME_LEN, true)?;
    validate_name("namespace", namespace, 63, false)
}

impl ReleaseManager {
    pub fn new(client: Client) -> Self {
        ReleaseManager {
            applier: Applier::new(client.clone()),
            client,
            locks: ReleaseLocks::default(),
            capabilities: CapabilitiesCache::default(),
        }
    }

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
            // Template execution is CPU-bound and recursive; keep it off the async workers.
            tokio::task::spawn_blocking(move || {
                render::render_release(&files, &values, &info, &caps)
            })
            .await
            .map_err(|e| ReleaseError::Task(e.to_string()))??
        };

        let checksum = render_checksum(&rendered);
        if let Some(prev) = &previous
            && prev.info.status == Status::Deployed.as_str()
            && previous_checksum.as_deref() == Some(checksum.as_str())
        {
            // Same render as the deployed revision: re-apply in place (heals deleted or edited
            // objects) without writing a new revision.
            let objects = self.apply_all(name, namespace, &rendered).await?;
            return Ok(Installed { revision: prev.version, objects, unchanged: true });
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
                deleted: "0001-01-01T00:00:00Z".into(),
                description: String::new(),
                status: Status::Deployed.as_str().into(),
                notes: String::new(),
            },
            chart: chart_record(&files, &rendered.chart_metadata, &chart_values(&files)),
            config: values.as_object().cloned().unwrap_or_default(),
            manifest: manifests::manifest_text(&rendered.manifests),
            hooks: hook_records(&rendered.hooks),
            version: revision,
            namespace: namespace.to_string(),
        };

        let applied = self.apply_all(name, namespace, &rendered).await;
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
        if let Some(prev) = &previous {
            self.prune(namespace, prev, &objects).await?;
        }
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
        Ok(Installed { revision, objects, unchanged: false })
    }

    /// Applies `crds/` objects and waits until each CRD is Established. CRDs are not part of
    /// the release: Helm neither records nor deletes them.
    async fn apply_crds(
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

    async fn apply_all(
        &self,
        name: &str,
        namespace: &str,
        rendered: &render::Rendered,
    ) -> Result<Vec<ObjectKey>, ReleaseError> {
        let mut keys = Vec::with_capacity(rendered.manifests.len());
        for m in &rendered.manifests {
            keys.push(self.applier.apply(&m.object, name, namespace).await?);
        }
        Ok(keys)
    }

    /// Deletes what the previous revision had and this one no longer renders, except `keep`.
    async fn prune(
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

    /// Deletes the release's objects in reverse install order, then its records.
    pub async fn uninstall(
        &self,
        name: &str,
        namespace: &str,
    ) -> Result<Uninstalled, ReleaseError> {
        validate_release(name, namespace)?;
        let lock = self.locks.get(namespace, name);
        let _held = lock.lock().await;

        let store = ReleaseStore::new(self.client.clone(), namespace);
        let history = store.history(name).await?;
        let Some(latest) = history.last() else {
            return Ok(Uninstalled::default());
        };
        store.set_status(latest, Status::Uninstalling).await?;
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
        for rev in &history {
            store.delete(name, rev.version).await?;
        }
        Ok(Uninstalled {
            found: true,
            deleted,
        })
    }

    /// The latest revision's objects, whether each exists, and whether all are ready.
    pub async fn status(&self, name: &str, namespace: &str) -> Result<Observed, ReleaseError> {
        validate_release(name, namespace)?;
        let store = ReleaseStore::new(self.client.clone(), namespace);
        let Some(latest) = store.latest(name).await? else {
            return Ok(Observed::default());
        };
        let mut out = Observed {
            found: true,
            revision: latest.version,
            ready: true,
            ..Default::default()
        };
        let mut statuses = Vec::new();
        let now = chrono::Utc::now();
        for object in recorded_objects(&latest.manifest) {
            let seen = self.applier.get(&object, namespace).await?;
            let outcome = match seen.object.as_ref().map(serde_json::to_value) {
                None => Ok(kstatus::Outcome {
                    status: ObjectStatus::NotFound,
                    reason: String::new(),
                    message: "Resource not found".into(),
                }),
                Some(Ok(live)) => kstatus::compute(&live, now),
                Some(Err(e)) => Err(e.to_string()),
            };
            let outcome = outcome.unwrap_or_else(|e| kstatus::Outcome {
                status: ObjectStatus::Unknown,
                reason: String::new(),
                message: e,
            });
            if outcome.status != ObjectStatus::Current {
                out.not_ready.push(format!(
                    "{}: {:?} {} {}",
                    seen.key, outcome.status, outcome.reason, outcome.message
                ));
            }
            statuses.push(outcome.status);
            out.objects.push(seen.key);
        }
        out.ready = kstatus::aggregate(&statuses, ObjectStatus::Current) == ObjectStatus::Current;
        Ok(out)
    }

    /// `.Capabilities` for renders, from the cluster (cached briefly); defaults for whatever
    /// the cluster does not answer.
    async fn capabilities(&self) -> Capabilities {
        self.capabilities.get(&self.client).await
    }
}

fn kind_of(o: &serde_json::Value) -> &str {
    o.get("kind").and_then(|k| k.as_str()).unwrap_or_default()
}

/// A digest of what a render would put on the cluster and in the record: chart identity,
/// manifests and hooks. 32 hex digits, so it fits a label value.
fn render_checksum(r: &render::Rendered) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for key in ["name", "version", "appVersion"] {
        h.update(r.chart_metadata.get(key).map(|v| v.to_string()).unwrap_or_default());
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

#[cfg(test)]
mod tests {
    use super::validate_release;

    #[test]
    fn names_follow_helm_rules() {
        assert!(validate_release("my-app.v2", "team-a").is_ok());
        assert!(validate_release("My_App", "ns").is_err());
        assert!(validate_release("app", "team.a").is_err());
        assert!(validate_release(&"a".repeat(54), "ns").is_err());
        assert!(validate_release("app-", "ns").is_err());
    }
}
