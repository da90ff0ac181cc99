//! A new revision's record through its operation, as Helm keeps it: written `pending-*` before
//! anything is applied, then settled `deployed` (superseding every earlier revision still
//! marked deployed or pending) or `failed`.
//!
//! While a revision is pending, the previous one is no longer the newest `deployed` revision, so
//! another berth instance's drift repair of it stops (see `drift`) instead of re-applying the
//! old objects over the ones being applied, and `helm` sees an operation in progress.

use super::*;
use crate::record::store::Stored;

/// Marks `newest` (the release's newest revision) `failed` when it is still `pending-*`: the
/// operation that wrote it stopped before settling it (its process died). Operations on one
/// release are serialised (the release lock here, the package's queue across processes), so a
/// pending revision found by an operation belongs to no running one.
pub(super) async fn fail_interrupted(
    store: &ReleaseStore,
    newest: &mut HelmRelease,
) -> Result<(), StoreError> {
    if !Status::is_pending(&newest.info.status) {
        return Ok(());
    }
    tracing::warn!(
        release.name = %newest.name,
        revision = newest.version,
        status = %newest.info.status,
        "found a revision left pending by an interrupted operation; marking it failed"
    );
    newest.info.description = format!(
        "{} was interrupted before it finished",
        newest.info.status.trim_start_matches("pending-")
    );
    store.set_status(newest, Status::Failed).await?;
    newest.info.status = Status::Failed.as_str().into();
    Ok(())
}

/// Writes `record` as a new revision with status `pending`, before its objects are applied.
pub(super) async fn begin(
    store: &ReleaseStore,
    record: &mut HelmRelease,
    checksum: &str,
    pending: Status,
    description: &str,
) -> Result<(), StoreError> {
    record.info.status = pending.as_str().into();
    record.info.description = description.into();
    store.create(record, checksum).await
}

/// Settles `record` as `deployed`, and supersedes every one of the `earlier` revisions (as
/// read before the operation, which holds the release lock) still marked deployed or pending
/// (as Helm leaves one deployed revision; after a failed upgrade the last good one is still
/// marked deployed).
pub(super) async fn deployed(
    store: &ReleaseStore,
    record: &mut HelmRelease,
    description: String,
    earlier: &[Stored],
) -> Result<(), StoreError> {
    record.info.description = description;
    store.set_status(record, Status::Deployed).await?;
    record.info.status = Status::Deployed.as_str().into();
    for older in earlier.iter().map(|s| &s.release) {
        let status = older.info.status.as_str();
        if older.version < record.version
            && (status == Status::Deployed.as_str() || Status::is_pending(status))
        {
            store.set_status(older, Status::Superseded).await?;
        }
    }
    Ok(())
}

/// Settles `record` as `failed`. Best effort: the operation's own error is what the caller
/// needs to see.
pub(super) async fn failed(store: &ReleaseStore, record: &mut HelmRelease, description: String) {
    record.info.description = description;
    if let Err(e) = store.set_status(record, Status::Failed).await {
        tracing::warn!(error = %e, release.name = %record.name, "could not record the failed revision");
    }
    record.info.status = Status::Failed.as_str().into();
}
