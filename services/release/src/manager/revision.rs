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
    stored: &mut Stored,
) -> Result<(), StoreError> {
    let newest = &mut stored.release;
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
    store
        .set_status(
            newest,
            stored.checksum.as_deref(),
            &stored.owner,
            Status::Failed,
        )
        .await?;
    newest.info.status = Status::Failed.as_str().into();
    Ok(())
}

/// A revision being written: its record, its checksum label and the package it belongs to.
pub(super) struct Pending<'a> {
    pub record: &'a mut HelmRelease,
    pub checksum: &'a str,
    pub owner: &'a Owner,
}

/// Writes the new revision with status `pending`, before its objects are applied.
pub(super) async fn begin(
    store: &ReleaseStore,
    new: &mut Pending<'_>,
    pending: Status,
    description: &str,
) -> Result<(), StoreError> {
    new.record.info.status = pending.as_str().into();
    new.record.info.description = description.into();
    store.create(new.record, new.checksum, new.owner).await
}

/// Settles `record` as `deployed`, and supersedes every one of the `earlier` revisions (as
/// read before the operation, which holds the release lock) still marked deployed or pending
/// (as Helm leaves one deployed revision; after a failed upgrade the last good one is still
/// marked deployed).
pub(super) async fn deployed(
    store: &ReleaseStore,
    new: &mut Pending<'_>,
    description: String,
    earlier: &[Stored],
) -> Result<(), StoreError> {
    new.record.info.description = description;
    store
        .set_status(new.record, Some(new.checksum), new.owner, Status::Deployed)
        .await?;
    new.record.info.status = Status::Deployed.as_str().into();
    for older in earlier {
        let status = older.release.info.status.as_str();
        if older.release.version < new.record.version
            && (status == Status::Deployed.as_str() || Status::is_pending(status))
        {
            store.set_stored_status(older, Status::Superseded).await?;
        }
    }
    Ok(())
}

/// Settles `record` as `failed`. Best effort: the operation's own error is what the caller
/// needs to see.
pub(super) async fn failed(store: &ReleaseStore, new: &mut Pending<'_>, description: String) {
    new.record.info.description = description;
    if let Err(e) = store
        .set_status(new.record, Some(new.checksum), new.owner, Status::Failed)
        .await
    {
        tracing::warn!(error = %e, release.name = %new.record.name, "could not record the failed revision");
    }
    new.record.info.status = Status::Failed.as_str().into();
}
