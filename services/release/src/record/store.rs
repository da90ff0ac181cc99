//! Release Secrets in the release namespace, read and written the way Helm's `secrets` storage
//! driver does, so `helm list` / `helm get` see berth's releases.
//!
//! Every record berth writes carries a MAC (`key`), and reads tell berth's records ([`Stored`],
//! in [`Records::own`]) from every other Secret of the release's label ([`Foreign`]): Helm's,
//! berth's from before records carried MACs, or forged by whoever may write Secrets in the
//! namespace. Foreign records are never decoded or acted on; only their names count, so a new
//! revision never takes the name of one.

use super::format::{FormatError, HelmRelease, Status};
use super::key::{APP_NAMESPACE_ANNOTATION, MAC_ANNOTATION, PACKAGE_ANNOTATION, RecordKey, Signed};
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
    /// The next revision's number would overflow (a record numbered `i32::MAX` exists).
    #[error(
        "release {name} in {namespace} has a record numbered {newest} ({secret}); no revision can follow it"
    )]
    Exhausted {
        name: String,
        namespace: String,
        newest: i32,
        secret: String,
    },
}

impl StoreError {
    /// True when the API server could not be reached (as opposed to refusing the request).
    pub fn is_unavailable(&self) -> bool {
        match self {
            StoreError::Timeout { .. } => true,
            StoreError::Kube { source, .. } => crate::apply::kube_unavailable(source),
            StoreError::Format { .. } | StoreError::Exhausted { .. } => false,
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
    key: RecordKey,
    reads: Option<RecordReads>,
}

/// Label holding a digest of the rendered release, so an unchanged render can be recognised
/// without a new revision (the name Deckhouse uses for the same purpose).
pub const CHECKSUM_LABEL: &str = "packageChecksum";

/// The package a release belongs to, as berth records it (covered by the record's MAC).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owner {
    /// The package's key (`<namespace>.<name>` for an App, the name for a Module); empty for
    /// a release installed without a package (an in-process test).
    pub package: String,
    /// The namespace an App is confined to; `None` for a Module.
    pub app_namespace: Option<String>,
}

impl Owner {
    /// Describes the owner for messages: `app team.web`, `module dns`, or `no package`.
    pub fn describe(&self) -> String {
        match (&self.app_namespace, self.package.as_str()) {
            (_, "") => "no package".to_owned(),
            (Some(_), key) => format!("app {key}"),
            (None, key) => format!("module {key}"),
        }
    }
}

/// A decoded release record berth wrote (its MAC checked), with the checksum label of its
/// Secret and the package it belongs to.
#[derive(Debug, Clone)]
pub struct Stored {
    pub release: HelmRelease,
    pub checksum: Option<String>,
    /// The Secret's resourceVersion when read.
    pub resource_version: String,
    pub owner: Owner,
}

/// A Secret labelled as one of the release's records that berth did not write: no MAC, or one
/// that does not check out under the key (Helm's own records, berth's from before records
/// carried MACs, forged ones, or berth's changed by someone else). Never decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Foreign {
    pub secret: String,
    /// The revision its name claims.
    pub version: i32,
    /// Whether it carries berth's checksum label (as berth's records did before they carried
    /// MACs; anyone may set it, so it proves nothing).
    pub berth_labelled: bool,
    /// Why it is not berth's.
    pub why: &'static str,
    /// Who last wrote the Secret, as the API server recorded it (its newest field manager:
    /// `helm` for the helm CLI); not proof either, but what the cluster says.
    pub writer: Option<String>,
}

impl std::fmt::Display for Foreign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.secret, self.why)
    }
}

/// A release's records as read: berth's own, oldest first, and the foreign ones.
#[derive(Debug, Clone, Default)]
pub struct Records {
    pub own: Vec<Stored>,
    pub foreign: Vec<Foreign>,
}

impl Records {
    /// Berth's newest record.
    pub fn newest(&self) -> Option<&Stored> {
        self.own.last()
    }

    /// Whether the release has any record, berth's or not.
    pub fn is_empty(&self) -> bool {
        self.own.is_empty() && self.foreign.is_empty()
    }

    /// The number of the revision to write next: after every record of the release, foreign
    /// ones included (their Secrets hold those names).
    pub fn next_revision(&self, name: &str, namespace: &str) -> Result<i32, StoreError> {
        let newest = self
            .own
            .iter()
            .map(|s| (s.release.version, s.release.secret_name()))
            .chain(self.foreign.iter().map(|f| (f.version, f.secret.clone())))
            .max_by_key(|(v, _)| *v);
        match newest {
            None => Ok(1),
            Some((v, secret)) => v.checked_add(1).ok_or(StoreError::Exhausted {
                name: name.to_owned(),
                namespace: namespace.to_owned(),
                newest: v,
                secret,
            }),
        }
    }

    /// The foreign records, named, for messages.
    pub fn describe_foreign(&self) -> String {
        self.foreign
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// One read of a release's records, and the newest Secret read (any record: its revision and
/// resourceVersion), which decides whether a read from the watch cache is current.
struct Listing {
    records: Records,
    newest: Option<(i32, String)>,
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
    /// The records of `namespace`, written and checked with `key`.
    pub fn new(client: Client, namespace: &str, key: RecordKey) -> Self {
        ReleaseStore {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            key,
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

    /// Every revision of `name` berth wrote, oldest first.
    pub async fn history(&self, name: &str) -> Result<Vec<HelmRelease>, StoreError> {
        Ok(self
            .stored(name)
            .await?
            .own
            .into_iter()
            .map(|s| s.release)
            .collect())
    }

    /// The records of `name`: berth's, oldest first, with their Secrets' checksum labels and
    /// owners, and the foreign ones (see the module docs).
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
    pub async fn stored(&self, name: &str) -> Result<Records, StoreError> {
        self.stored_checked(name, false).await
    }

    /// [`Self::stored`] for an operation whose first write is the next revision: an empty
    /// read from the watch cache is taken without the GET that would check revision 1 is
    /// absent, because creating revision 1 checks that itself (the API server refuses to create
    /// a Secret that exists: [`StoreError::Raced`], and the operation is tried again). A new
    /// release's install makes one request fewer.
    pub async fn stored_for_new_revision(&self, name: &str) -> Result<Records, StoreError> {
        self.stored_checked(name, true).await
    }

    async fn stored_checked(
        &self,
        name: &str,
        empty_checked_by_create: bool,
    ) -> Result<Records, StoreError> {
        match self.list_stored(name, Read::Cache).await {
            Ok(cached) if empty_checked_by_create && cached.newest.is_none() => {
                return Ok(cached.records);
            }
            Ok(cached) if self.is_current(name, &cached).await? => return Ok(cached.records),
            Ok(_) => {}
            // Unreachable: a consistent read would fail the same way.
            Err(e) if e.is_unavailable() => return Err(e),
            // E.g. the cache did not reach the remembered write in time (504).
            Err(e) => tracing::debug!(error = %e, "reading release records from the cache failed"),
        }
        Ok(self.list_stored(name, Read::Quorum).await?.records)
    }

    /// Whether `cached`, read from the watch cache, is what etcd holds (see [`Self::stored`]).
    /// The newest record of any writer counts: a foreign one holds a revision's name too.
    async fn is_current(&self, name: &str, cached: &Listing) -> Result<bool, StoreError> {
        let newest = cached.newest.as_ref();
        let next = super::format::secret_name(name, newest.map_or(1, |(v, _)| v.saturating_add(1)));
        let newest_now = async {
            match newest {
                Some((v, _)) => self
                    .call(
                        "get",
                        self.api
                            .get_metadata_opt(&super::format::secret_name(name, *v)),
                    )
                    .await
                    .map(|found| found.and_then(|m| m.metadata.resource_version)),
                None => Ok(None),
            }
        };
        let next_now = self.call("get", self.api.get_metadata_opt(&next));
        let (newest_now, next_now) = tokio::join!(newest_now, next_now);
        Ok(newest_now? == newest.map(|(_, rv)| rv.clone()) && next_now?.is_none())
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

    async fn list_stored(&self, name: &str, read: Read) -> Result<Listing, StoreError> {
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
        let mut listing = Listing {
            records: Records::default(),
            newest: None,
        };
        for secret in list.items {
            let secret_name = secret.metadata.name.clone().unwrap_or_default();
            // Only Secrets named as a revision of this release are its records: the name is
            // what a revision occupies.
            let Some(version) = revision_of(&secret_name, name) else {
                tracing::debug!(secret = %secret_name, "a Secret labelled as a release record is not named as one");
                continue;
            };
            let resource_version = secret.metadata.resource_version.clone().unwrap_or_default();
            if listing.newest.as_ref().is_none_or(|(v, _)| *v < version) {
                listing.newest = Some((version, resource_version.clone()));
            }
            match self.classify(&secret, name, version)? {
                Ok(mut stored) => {
                    stored.resource_version = resource_version;
                    listing.records.own.push(stored);
                }
                Err(foreign) => listing.records.foreign.push(foreign),
            }
        }
        listing.records.own.sort_by_key(|s| s.release.version);
        listing.records.foreign.sort_by_key(|f| f.version);
        Ok(listing)
    }

    /// Berth's record when `secret` (revision `version` of `name`) carries a MAC that checks
    /// out, and says what it claims to be; otherwise what it is. A foreign record is not
    /// decoded: its payload may be anything its writer wanted.
    fn classify(
        &self,
        secret: &Secret,
        name: &str,
        version: i32,
    ) -> Result<Result<Stored, Foreign>, StoreError> {
        let meta = &secret.metadata;
        let secret_name = meta.name.clone().unwrap_or_default();
        let label = |k: &str| meta.labels.as_ref().and_then(|l| l.get(k)).cloned();
        let annotation = |k: &str| meta.annotations.as_ref().and_then(|a| a.get(k)).cloned();
        let checksum = label(CHECKSUM_LABEL);
        let writer = meta
            .managed_fields
            .iter()
            .flatten()
            .max_by_key(|f| f.time.as_ref().map(|t| t.0))
            .and_then(|f| f.manager.clone());
        let foreign = |why| Foreign {
            secret: secret_name.clone(),
            version,
            berth_labelled: checksum.is_some(),
            why,
            writer: writer.clone(),
        };
        let Some(mac) = annotation(MAC_ANNOTATION) else {
            return Ok(Err(foreign("no berth MAC")));
        };
        let data = secret
            .data
            .as_ref()
            .and_then(|d| d.get("release"))
            .map(|b| b.0.as_slice())
            .unwrap_or_default();
        let owner = Owner {
            package: annotation(PACKAGE_ANNOTATION).unwrap_or_default(),
            app_namespace: annotation(APP_NAMESPACE_ANNOTATION),
        };
        let signed = Signed {
            secret: &secret_name,
            namespace: &self.namespace,
            revision: version,
            package: &owner.package,
            app_namespace: owner.app_namespace.as_deref().unwrap_or_default(),
            checksum: checksum.as_deref().unwrap_or_default(),
            release: data,
        };
        if !self.key.verify(&signed, &mac) {
            return Ok(Err(foreign("its berth MAC does not check out")));
        }
        let release = HelmRelease::decode(data).map_err(|source| StoreError::Format {
            secret: secret_name.clone(),
            source,
        })?;
        if release.name != name || release.version != version || release.namespace != self.namespace
        {
            return Ok(Err(foreign("its record names another release or revision")));
        }
        Ok(Ok(Stored {
            release,
            checksum,
            resource_version: String::new(),
            owner,
        }))
    }

    /// The newest revision berth wrote, if any.
    pub async fn latest(&self, name: &str) -> Result<Option<HelmRelease>, StoreError> {
        Ok(self.history(name).await?.pop())
    }

    /// Writes a new revision of `owner`'s release, labelled with the render's checksum, with
    /// its MAC.
    pub async fn create(
        &self,
        release: &HelmRelease,
        checksum: &str,
        owner: &Owner,
    ) -> Result<(), StoreError> {
        let secret = self.to_secret(
            release,
            Some(checksum),
            owner,
            &[("createdAt", chrono::Utc::now().timestamp().to_string())],
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

    /// Rewrites an existing revision with a new status (label, record and MAC), keeping its
    /// checksum label and owner.
    pub async fn set_status(
        &self,
        release: &HelmRelease,
        checksum: Option<&str>,
        owner: &Owner,
        status: Status,
    ) -> Result<(), StoreError> {
        let mut updated = release.clone();
        updated.info.status = status.as_str().to_string();
        let secret = self.to_secret(
            &updated,
            checksum,
            owner,
            &[("modifiedAt", chrono::Utc::now().timestamp().to_string())],
        )?;
        let patch = serde_json::json!({
            "metadata": {
                "labels": secret.metadata.labels,
                "annotations": secret.metadata.annotations,
            },
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

    /// [`Self::set_status`] of a record as read.
    pub async fn set_stored_status(
        &self,
        stored: &Stored,
        status: Status,
    ) -> Result<(), StoreError> {
        self.set_status(
            &stored.release,
            stored.checksum.as_deref(),
            &stored.owner,
            status,
        )
        .await
    }

    /// The Secret of `release`: Helm's labels and encoding, berth's checksum label, owner
    /// annotations and MAC.
    fn to_secret(
        &self,
        release: &HelmRelease,
        checksum: Option<&str>,
        owner: &Owner,
        extra_labels: &[(&str, String)],
    ) -> Result<Secret, StoreError> {
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
        if let Some(checksum) = checksum {
            labels.insert(CHECKSUM_LABEL.to_owned(), checksum.to_owned());
        }
        let secret_name = release.secret_name();
        let mac = self.key.sign(&Signed {
            secret: &secret_name,
            namespace: &self.namespace,
            revision: release.version,
            package: &owner.package,
            app_namespace: owner.app_namespace.as_deref().unwrap_or_default(),
            checksum: checksum.unwrap_or_default(),
            release: encoded.as_bytes(),
        });
        let mut annotations = BTreeMap::from([
            (MAC_ANNOTATION.to_owned(), mac),
            (PACKAGE_ANNOTATION.to_owned(), owner.package.clone()),
        ]);
        if let Some(ns) = &owner.app_namespace {
            annotations.insert(APP_NAMESPACE_ANNOTATION.to_owned(), ns.clone());
        }
        Ok(Secret {
            metadata: ObjectMeta {
                name: Some(secret_name),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels),
                annotations: Some(annotations),
                ..Default::default()
            },
            type_: Some(SECRET_TYPE.to_string()),
            data: Some([("release".to_string(), ByteString(encoded.into_bytes()))].into()),
            ..Default::default()
        })
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

/// The revision `secret` is of release `name` when it is named as one
/// (`sh.helm.release.v1.<name>.v<N>`, N ≥ 1).
fn revision_of(secret: &str, name: &str) -> Option<i32> {
    let digits = secret
        .strip_prefix("sh.helm.release.v1.")?
        .strip_prefix(name)?
        .strip_prefix(".v")?;
    if digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|v| *v >= 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_secrets_named_as_a_revision_of_the_release_are_its_records() {
        assert_eq!(revision_of("sh.helm.release.v1.web.v3", "web"), Some(3));
        assert_eq!(
            revision_of("sh.helm.release.v1.web.v2147483647", "web"),
            Some(i32::MAX)
        );
        for other in [
            "sh.helm.release.v1.web.v0",
            "sh.helm.release.v1.web.v03",
            "sh.helm.release.v1.web.v",
            "sh.helm.release.v1.web.v-1",
            "sh.helm.release.v1.web.v2147483648",
            "sh.helm.release.v1.webx.v1",
            "sh.helm.release.v1.web.v1x",
            "web-secret",
        ] {
            assert_eq!(revision_of(other, "web"), None, "{other}");
        }
    }

    fn foreign(secret: &str, version: i32) -> Foreign {
        Foreign {
            secret: secret.into(),
            version,
            berth_labelled: false,
            why: "no berth MAC",
            writer: None,
        }
    }

    #[test]
    fn the_next_revision_follows_every_record_and_never_overflows() {
        let mut records = Records::default();
        assert_eq!(records.next_revision("web", "ns").unwrap(), 1);
        records
            .foreign
            .push(foreign("sh.helm.release.v1.web.v7", 7));
        assert_eq!(records.next_revision("web", "ns").unwrap(), 8);
        records
            .foreign
            .push(foreign("sh.helm.release.v1.web.v2147483647", i32::MAX));
        let err = records.next_revision("web", "ns").unwrap_err().to_string();
        assert!(err.contains("sh.helm.release.v1.web.v2147483647"), "{err}");
        assert!(records.describe_foreign().contains("v7 (no berth MAC)"));
    }
}
