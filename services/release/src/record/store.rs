//! Release Secrets in the release namespace, read and written the way Helm's `secrets` storage
//! driver does, so `helm list` / `helm get` see berth's releases and berth sees Helm's.

use super::format::{FormatError, HelmRelease, Status};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use std::collections::BTreeMap;
use std::time::Duration;

/// Secret type Helm gives release records.
pub const SECRET_TYPE: &str = "helm.sh/release.v1";

/// Bound on every call to the API server made by the store.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{op} release secrets in {namespace}: {source}")]
    Kube {
        op: &'static str,
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("{op} release secrets in {namespace} timed out after {CALL_TIMEOUT:?}")]
    Timeout { op: &'static str, namespace: String },
    #[error("release secret {secret}: {source}")]
    Format {
        secret: String,
        #[source]
        source: FormatError,
    },
}

impl StoreError {
    /// True when the API server could not be reached (as opposed to refusing the request).
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Timeout { .. } => true,
            StoreError::Kube { source, .. } => crate::apply::kube_unavailable(source),
            StoreError::Format { .. } => false,
        }
    }
}

/// Reads and writes one namespace's release records.
#[derive(Clone)]
pub struct ReleaseStore {
    api: Api<Secret>,
    namespace: String,
}

/// Label holding a digest of the rendered release, so an unchanged render can be recognised
/// without a new revision (the name Deckhouse uses for the same purpose).
pub const CHECKSUM_LABEL: &str = "packageChecksum";

/// A decoded release record with the checksum label of its Secret.
#[derive(Debug, Clone)]
pub struct Stored {
    pub release: HelmRelease,
    pub checksum: Option<String>,
}

impl ReleaseStore {
    pub fn new(client: Client, namespace: &str) -> Self {
        ReleaseStore {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
        }
    }

    async fn call<T>(
        &self,
        op: &'static str,
        fut: impl std::future::Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(CALL_TIMEOUT, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(source)) => Err(StoreError::Kube {
                op,
                namespace: self.namespace.clone(),
                source,
            }),
            Err(_) => Err(StoreError::Timeout {
                op,
                namespace: self.namespace.clone(),
            }),
        }
    }

    /// Every revision of `name`, oldest first.
    pub async fn history(&self, name: &str) -> Result<Vec<HelmRelease>, StoreError> {
        Ok(self
            .stored(name)
            .await?
            .into_iter()
            .map(|s| s.release)
            .collect())
    }

    /// Every revision of `name` with its Secret's checksum label, oldest first.
    pub async fn stored(&self, name: &str) -> Result<Vec<Stored>, StoreError> {
        let lp = ListParams::default().labels(&format!("owner=helm,name={name}"));
        let list = self.call("list", self.api.list(&lp)).await?;
        let mut out = Vec::new();
        for secret in list.items {
            let secret_name = secret.metadata.name.clone().unwrap_or_default();
            let Some(data) = secret.data.as_ref().and_then(|d| d.get("release")) else {
                continue;
            };
            let release = HelmRelease::decode(&data.0).map_err(|source| StoreError::Format {
                secret: secret_name,
                source,
            })?;
            let checksum = secret
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(CHECKSUM_LABEL))
                .cloned();
            out.push(Stored { release, checksum });
        }
        out.sort_by_key(|s| s.release.version);
        Ok(out)
    }

    /// The newest revision's number when it is `deployed`: `None` when the release is gone or
    /// its newest revision has another status. Reads only the Secrets' labels, which Helm
    /// writes the same way (fetched as metadata only).
    pub async fn deployed_version(&self, name: &str) -> Result<Option<i32>, StoreError> {
        let lp = ListParams::default().labels(&format!("owner=helm,name={name}"));
        let list = self.call("list", self.api.list_metadata(&lp)).await?;
        let newest = list
            .items
            .iter()
            .filter_map(|s| {
                let labels = s.metadata.labels.as_ref()?;
                let version: i32 = labels.get("version")?.parse().ok()?;
                Some((version, labels.get("status").map(String::as_str)))
            })
            .max_by_key(|(v, _)| *v);
        Ok(match newest {
            Some((v, Some(status))) if status == Status::Deployed.as_str() => Some(v),
            _ => None,
        })
    }

    /// The newest revision, if any.
    pub async fn latest(&self, name: &str) -> Result<Option<HelmRelease>, StoreError> {
        Ok(self.history(name).await?.pop())
    }

    /// Writes a new revision, labelled with the render's checksum.
    pub async fn create(&self, release: &HelmRelease, checksum: &str) -> Result<(), StoreError> {
        let secret = to_secret(
            release,
            &[
                ("createdAt", chrono::Utc::now().timestamp().to_string()),
                (CHECKSUM_LABEL, checksum.to_string()),
            ],
        )?;
        self.call("create", self.api.create(&PostParams::default(), &secret))
            .await?;
        Ok(())
    }

    /// Rewrites an existing revision with a new status (label and record both).
    pub async fn set_status(
        &self,
        release: &HelmRelease,
        status: Status,
    ) -> Result<(), StoreError> {
        let mut updated = release.clone();
        updated.info.status = status.as_str().to_string();
        let secret = to_secret(
            &updated,
            &[("modifiedAt", chrono::Utc::now().timestamp().to_string())],
        )?;
        let patch = serde_json::json!({
            "metadata": { "labels": secret.metadata.labels },
            "data": secret.data,
        });
        self.call(
            "update",
            self.api.patch(
                &updated.secret_name(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            ),
        )
        .await?;
        Ok(())
    }

    /// Deletes one revision's Secret; a missing one is not an error.
    pub async fn delete(&self, name: &str, version: i32) -> Result<(), StoreError> {
        let secret = super::format::secret_name(name, version);
        match self
            .call("delete", self.api.delete(&secret, &DeleteParams::default()))
            .await
        {
            Ok(_) => Ok(()),
            Err(StoreError::Kube {
                source: kube::Error::Api(s),
                ..
            }) if crate::apply::is_not_found(&s) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Keeps the newest `max` of the revisions `versions` (every revision of `name`, as the
    /// operation that just wrote the newest knows them: read at its start, under the release's
    /// lock, plus its own) and deletes older ones (Helm's `--history-max`). Knowing them saves
    /// listing the release's Secrets again after every install.
    pub async fn trim_history(
        &self,
        name: &str,
        versions: impl IntoIterator<Item = i32>,
        max: usize,
    ) -> Result<(), StoreError> {
        let mut versions: Vec<i32> = versions.into_iter().collect();
        versions.sort_unstable();
        versions.dedup();
        let excess = versions.len().saturating_sub(max);
        for old in versions.iter().take(excess) {
            self.delete(name, *old).await?;
        }
        Ok(())
    }
}

fn to_secret(release: &HelmRelease, extra_labels: &[(&str, String)]) -> Result<Secret, StoreError> {
    let encoded = release.encode().map_err(|source| StoreError::Format {
        secret: release.secret_name(),
        source,
    })?;
    let mut labels: BTreeMap<String, String> = [
        ("owner", "helm".to_string()),
        ("name", release.name.clone()),
        ("status", release.info.status.clone()),
        ("version", release.version.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    labels.extend(extra_labels.iter().map(|(k, v)| (k.to_string(), v.clone())));
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(release.secret_name()),
            namespace: Some(release.namespace.clone()),
            labels: Some(labels),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.to_string()),
        data: Some([("release".to_string(), ByteString(encoded.into_bytes()))].into()),
        ..Default::default()
    })
}
