//! Following the release records: with several replicas, a release may be installed, upgraded,
//! rolled back or uninstalled by a replica that does not own its shard. The owner learns of it
//! from one watch of the release Secrets berth writes (label `packageChecksum`, all namespaces,
//! metadata only: the labels say the revision and its status):
//! - a revision `deployed` newer than the one watched: read the records and watch it;
//! - a revision `pending-install`, `pending-upgrade` or `pending-rollback` newer than the one
//!   watched: stop repairing at once (another replica is replacing the objects; what it prunes
//!   must not come back);
//! - `uninstalling`: stop, and forget the release's drift events.
//!
//! A replica's own operations change the watch before their records are written, so their
//! events find nothing to do. The watch runs only with shard Leases (a lone replica writes
//! every record itself).
//!
//! Labels are anyone's to write (an App may create Secrets in its namespace): they only say
//! which release to look at. What is done follows berth's newest record of it, its MAC checked.

use super::*;
use crate::record::store::CHECKSUM_LABEL;
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use tokio_util::sync::CancellationToken;

/// Releases read again at once after their records changed: the watch waits while this many
/// are in flight (each takes the release's lock, which an operation may hold for long).
const CONCURRENCY: usize = 8;

/// What a release record's labels call for.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// Nothing.
    Nothing,
    /// Read the records and watch the deployed revision.
    Deployed(i32),
    /// Stop repairing, keep the events.
    Pause,
    /// Stop repairing, forget the events.
    Stop,
}

/// What a record of `version` with `status` calls for, while revision `watched` is watched.
fn decide(status: &str, version: i32, watched: Option<i32>) -> Seen {
    match status {
        "deployed" if watched.is_none_or(|w| w < version) => Seen::Deployed(version),
        "pending-install" | "pending-upgrade" | "pending-rollback"
            if watched.is_some_and(|w| w < version) =>
        {
            Seen::Pause
        }
        "uninstalling" if watched.is_some_and(|w| w <= version) => Seen::Stop,
        _ => Seen::Nothing,
    }
}

impl ReleaseManager {
    /// Follows the release records until `shutdown` (see the module docs). Does nothing with
    /// drift repair off.
    pub async fn follow_records(&self, shutdown: CancellationToken) {
        if !self.repair_drift {
            return;
        }
        // An `Api` of `PartialObjectMeta` asks for metadata only.
        let api: Api<PartialObjectMeta<Secret>> = Api::all(self.client.clone());
        let config = watcher::Config::default().labels(&format!("owner=helm,{CHECKSUM_LABEL}"));
        let mut events = watcher::watcher(api, config).default_backoff().boxed();
        let mut work = FuturesUnordered::new();
        loop {
            let event = tokio::select! {
                () = shutdown.cancelled() => return,
                Some(()) = work.next(), if !work.is_empty() => continue,
                event = events.next(), if work.len() < CONCURRENCY => event,
            };
            match event {
                None => return,
                Some(Err(e)) => tracing::debug!(error = %e, "release records watch error"),
                Some(Ok(Event::Apply(record) | Event::InitApply(record))) => {
                    if let Some(read) = self.record_changed(&record) {
                        work.push(read);
                    }
                }
                Some(Ok(Event::Delete(_) | Event::Init | Event::InitDone)) => {}
            }
        }
    }

    /// Acts on a record's labels; returns the read of the release's records when it calls
    /// for one.
    fn record_changed(
        &self,
        record: &PartialObjectMeta<Secret>,
    ) -> Option<impl Future<Output = ()> + use<>> {
        let meta = &record.metadata;
        let labels = meta.labels.as_ref()?;
        let (namespace, name) = (meta.namespace.as_deref()?, labels.get("name")?);
        let version: i32 = labels.get("version")?.parse().ok()?;
        let status = labels.get("status")?;
        if validate_release(name, namespace).is_err()
            || !self.drift.shards().owns(&shards::key(namespace, name))
        {
            return None;
        }
        if decide(
            status,
            version,
            self.drift.watched_revision(name, namespace),
        ) == Seen::Nothing
        {
            return None;
        }
        let (this, name, namespace) = (self.clone(), name.clone(), namespace.to_owned());
        Some(async move {
            if let Err(e) = this.follow_one(&name, &namespace).await {
                tracing::warn!(release.name = %name, release.namespace = %namespace, error = %e, "cannot follow a release changed elsewhere");
            }
        })
    }

    /// Acts on berth's newest record of a release whose records changed: what its status and
    /// revision call for (see [`decide`]); with no record of berth's left, the repair stops.
    async fn follow_one(&self, name: &str, namespace: &str) -> Result<(), ReleaseError> {
        let records = self.store(namespace).stored(name).await?;
        let watched = self.drift.watched_revision(name, namespace);
        let Some(newest) = records.newest() else {
            if watched.is_some() {
                tracing::info!(release.name = %name, release.namespace = %namespace, "the release has no record of berth's left; repair stopped");
                self.drift.stop(name, namespace);
            }
            return Ok(());
        };
        let (status, version) = (newest.release.info.status.as_str(), newest.release.version);
        match decide(status, version, watched) {
            Seen::Nothing => {}
            Seen::Pause => {
                tracing::info!(release.name = %name, release.namespace = %namespace, version, %status, "another replica is changing the release; repair paused");
                self.drift.pause(name, namespace);
            }
            Seen::Stop => {
                tracing::info!(release.name = %name, release.namespace = %namespace, "another replica is uninstalling the release; repair stopped");
                self.drift.stop(name, namespace);
            }
            Seen::Deployed(version) => {
                self.resume_one(name, namespace, Some(version)).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_written_elsewhere_move_the_repair() {
        // A new deployed revision is watched; one already watched (this replica's own
        // install) is not read again.
        assert_eq!(decide("deployed", 1, None), Seen::Deployed(1));
        assert_eq!(decide("deployed", 3, Some(2)), Seen::Deployed(3));
        assert_eq!(decide("deployed", 2, Some(2)), Seen::Nothing);
        // An older record (history) changes nothing.
        assert_eq!(decide("deployed", 1, Some(2)), Seen::Nothing);
        // Another replica upgrading: stop repairing the old revision at once.
        assert_eq!(decide("pending-upgrade", 3, Some(2)), Seen::Pause);
        assert_eq!(decide("pending-rollback", 3, Some(2)), Seen::Pause);
        assert_eq!(decide("pending-upgrade", 2, Some(2)), Seen::Nothing);
        assert_eq!(decide("pending-install", 1, None), Seen::Nothing);
        assert_eq!(decide("uninstalling", 2, Some(2)), Seen::Stop);
        assert_eq!(decide("uninstalling", 2, None), Seen::Nothing);
        assert_eq!(decide("superseded", 2, Some(1)), Seen::Nothing);
        assert_eq!(decide("failed", 3, Some(2)), Seen::Nothing);
    }
}
