//! Release Secrets in the release namespace, read and written the way Helm's `secrets` storage
//! driver does, so `helm list` / `helm get` see berth's releases and berth sees Helm's.

use super::format::{FormatError, HelmRelease, Status};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{
    DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, VersionMatch,
};
use kube::{Api, Client};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
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
    /// Creating a revision's Secret found it there: someone else wrote that revision since
    /// the records were read.
    #[error(
        "release secret {secret} in {namespace} was written by someone else meanwhile; try again"
    )]
    Raced { secret: String, namespace: String },
}

impl StoreError {
    /// True when the API server could not be reached (as opposed to refusing the request).
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Timeout { .. } => true,
            StoreError::Kube { source, .. } => crate::apply::kube_unavailable(source),
            StoreError::Format { .. } => false,
            // Reading the records again settles it.
            StoreError::Raced { .. } => true,
        }
    }
}

/// Reads and writes one namespace's release records.
#[derive(Clone)]
pub struct ReleaseStore {
    api: Api<Secret>,
    namespace: String,
    reads: Option<RecordReads>,
}

/// Label holding a digest of the rendered release, so an unchanged render can be recognised
/// without a new revision (the name Deckhouse uses for the same purpose).
pub const CHECKSUM_LABEL: &str = "packageChecksum";

/// A decoded release record with the checksum label of its Secret.
#[derive(Debug, Clone)]
pub struct Stored {
    pub release: HelmRelease,
    pub checksum: Option<String>,
    /// The Secret's resourceVersion when read.
    pub resource_version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadLabel {
    /// `cache`: the API server's watch cache, checked; `quorum`: a consistent LIST from etcd.
    read: &'static str,
}

/// Releases whose newest write is remembered; past it, all are forgotten at once (their reads
/// then take whatever the cache has, still checked, see [`ReleaseStore::stored`]).
const MAX_REMEMBERED: usize = 16_384;

/// What the stores of one release service share: how the records were read
/// (`berth_release_record_reads_total{read}`) and, per release, the resourceVersion of the
/// last record this process wrote, so that a read right after a write waits for the watch
/// cache to hold it. Cheap to clone: clones share both.
#[derive(Clone, Debug, Default)]
pub struct RecordReads {
    counts: Family<ReadLabel, Counter>,
    written: Arc<Mutex<HashMap<(String, String), String>>>,
}

impl RecordReads {
    pub fn family(&self) -> Family<ReadLabel, Counter> {
        self.counts.clone()
    }

    fn count(&self, read: Read) {
        let read = match read {
            Read::Cache => "cache",
            Read::Quorum => "quorum",
        };
        self.counts.get_or_create(&ReadLabel { read }).inc();
    }

    /// Reads counted so far as `read` (`cache` or `quorum`).
    pub fn get(&self, read: &'static str) -> u64 {
        self.counts.get_or_create(&ReadLabel { read }).get()
    }

    fn written(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.written.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where one LIST of a release's records is served from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    /// The API server's watch cache (`resourceVersionMatch=NotOlderThan`, at the last record
    /// this process wrote, or `0`), which may trail etcd by a moment.
    Cache,
    /// No resourceVersion: a consistent read, which an API server without watch-progress
    /// support (etcd before 3.5.13, as in `../shared/kube`) serves from etcd by reading and
    /// decoding every Secret of the namespace, however few match the label selector.
    Quorum,
}

impl ReleaseStore {
    pub fn new(client: Client, namespace: &str) -> Self {
        ReleaseStore {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            reads: None,
        }
    }

    /// Counts this store's reads of release records in `reads`.
    pub fn counted(mut self, reads: &RecordReads) -> Self {
        self.reads = Some(reads.clone());
        self
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
    ///
    /// A consistent LIST of one release's Secrets costs the API server and etcd a read of
    /// every Secret in the namespace (~30 ms of CPU with 1,000 releases in it, measured on
    /// `../shared/kube`), so two per install made installing N releases in one namespace cost
    /// O(N²). The records are read from the API server's watch cache instead — not older than
    /// the last record this process wrote for the release, when it remembers one — and that
    /// read is taken when two consistent GETs, each O(1), show it is current:
    /// - the newest revision read has the same resourceVersion in etcd (nobody changed its
    ///   status since the cache's copy);
    /// - the revision after it (revision 1 when none was read) does not exist. Revisions are
    ///   numbered one after another and the newest is never the one trimmed, so a revision
    ///   another writer (a berth replica, `helm`) added since the cache's copy would be that
    ///   one.
    ///
    /// Otherwise, or when the cache cannot answer, the records are read with a consistent LIST.
    /// Older revisions are not checked: only the writer of a newer revision changes them
    /// (superseding or trimming them), and that newer revision would have been seen.
    pub async fn stored(&self, name: &str) -> Result<Vec<Stored>, StoreError> {
        self.stored_checked(name, false).await
    }

    /// [`Self::stored`] for an operation whose first write is the next revision: an empty
    /// read from the watch cache is taken without the GET that would check revision 1 is
    /// absent, because creating revision 1 checks that itself (the API server refuses to create
    /// a Secret that exists: [`StoreError::Raced`], and the operation is tried again). A new
    /// release's install makes one request fewer.
    pub async fn stored_for_new_revision(&self, name: &str) -> Result<Vec<Stored>, StoreError> {
        self.stored_checked(name, true).await
    }

    async fn stored_checked(
        &self,
        name: &str,
        empty_checked_by_create: bool,
    ) -> Result<Vec<Stored>, StoreError> {
        match self.list_stored(name, Read::Cache).await {
            Ok(cached) if empty_checked_by_create && cached.is_empty() => return Ok(cached),
            Ok(cached) if self.is_current(name, &cached).await? => return Ok(cached),
            Ok(_) => {}
            // Unreachable: a consistent read would fail the same way.
            Err(e) if e.is_unavailable() => return Err(e),
            // E.g. the cache did not reach the remembered write in time (504).
            Err(e) => tracing::debug!(error = %e, "reading release records from the cache failed"),
        }
        self.list_stored(name, Read::Quorum).await
    }

    /// Whether `cached`, read from the watch cache, is what etcd holds (see [`Self::stored`]).
    async fn is_current(&self, name: &str, cached: &[Stored]) -> Result<bool, StoreError> {
        let newest = cached.last();
        let next = super::format::secret_name(name, newest.map_or(1, |s| s.release.version + 1));
        let newest_now = async {
            match newest {
                Some(s) => self
                    .call("get", self.api.get_metadata_opt(&s.release.secret_name()))
                    .await
                    .map(|found| found.and_then(|m| m.metadata.resource_version)),
                None => Ok(None),
            }
        };
        let next_now = self.call("get", self.api.get_metadata_opt(&next));
        let (newest_now, next_now) = tokio::join!(newest_now, next_now);
        Ok(newest_now? == newest.map(|s| s.resource_version.clone()) && next_now?.is_none())
    }

    /// Remembers `secret`'s resourceVersion as the newest this process wrote for `name`.
    fn wrote(&self, name: &str, secret: &Secret) {
        let (Some(reads), Some(rv)) = (&self.reads, secret.metadata.resource_version.clone())
        else {
            return;
        };
        let mut written = reads.written();
        if written.len() >= MAX_REMEMBERED {
            written.clear();
        }
        written.insert((self.namespace.clone(), name.to_string()), rv);
    }

    async fn list_stored(&self, name: &str, read: Read) -> Result<Vec<Stored>, StoreError> {
        let mut lp = ListParams::default().labels(&format!("owner=helm,name={name}"));
        if let Some(reads) = &self.reads {
            reads.count(read);
        }
        if read == Read::Cache {
            let at = self
                .reads
                .as_ref()
                .and_then(|r| {
                    r.written()
                        .get(&(self.namespace.clone(), name.to_string()))
                        .cloned()
                })
                .unwrap_or_else(|| "0".to_string());
            lp = lp.at(&at).matching(VersionMatch::NotOlderThan);
        }
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
            let resource_version = secret.metadata.resource_version.unwrap_or_default();
            out.push(Stored {
                release,
                checksum,
                resource_version,
            });
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
        let created = match self
            .call("create", self.api.create(&PostParams::default(), &secret))
            .await
        {
            Err(StoreError::Kube {
                source: kube::Error::Api(refused),
                ..
            }) if refused.code == 409 => {
                return Err(StoreError::Raced {
                    secret: release.secret_name(),
                    namespace: self.namespace.clone(),
                });
            }
            other => other?,
        };
        self.wrote(&release.name, &created);
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
        let patched = self
            .call(
                "update",
                self.api.patch(
                    &updated.secret_name(),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                ),
            )
            .await?;
        self.wrote(&updated.name, &patched);
        Ok(())
    }

    /// Deletes one revision's Secret; a missing one is not an error.
    pub async fn delete(&self, name: &str, version: i32) -> Result<(), StoreError> {
        // The last write remembered stays a valid lower bound for later reads: a revision
        // deleted since may still be in the cache's copy, and is then not the newest (trimming)
        // or fails the check of the newest (an uninstall), see `stored`.
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
