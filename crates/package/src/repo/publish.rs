//! Publishing a staged package: check it, then move it into place with a rename.
//!
//! The staging directory lives beside the destination, so the final step is a same-filesystem
//! `rename`: readers see either no package or a complete one. Publishing is idempotent — when
//! the destination already holds a tree with the same digest nothing changes — and safe against a
//! concurrent fetch of the same version (the loser finds the winner's identical tree).

use std::fs;
use std::path::Path;

use tempfile::TempDir;

use super::{Fetched, RepoError, digest_tree};
use crate::constraint::parse_version;
use crate::load::load;

/// A staging directory created beside `dest` (so the final rename stays on one filesystem).
pub(crate) fn staging_dir(dest: &Path) -> Result<TempDir, RepoError> {
    let parent = dest.parent().ok_or_else(|| RepoError::UnsafePath {
        path: dest.display().to_string(),
        reason: "destination has no parent directory",
    })?;
    fs::create_dir_all(parent).map_err(RepoError::io("create directory", parent))?;
    tempfile::Builder::new()
        .prefix(".berth-fetch-")
        .tempdir_in(parent)
        .map_err(RepoError::io("create staging directory", parent))
}

/// Checks the package staged at `staged` (inside a staging dir) and publishes it at `dest`.
pub(crate) fn publish(
    staged: &Path,
    dest: &Path,
    package: &str,
    version: &str,
) -> Result<Fetched, RepoError> {
    check_identity(staged, package, version)?;
    let digest = digest_tree(staged)?;
    let fetched = Fetched {
        digest: digest.clone(),
        path: dest.to_owned(),
    };
    if dest.exists() {
        if digest_tree(dest)? == digest {
            return Ok(fetched);
        }
        tracing::warn!(package.name = package, package.version = version, dest = %dest.display(), "replacing a published package whose content changed");
        replace(staged, dest)?;
        return Ok(fetched);
    }
    match fs::rename(staged, dest) {
        Ok(()) => Ok(fetched),
        // A concurrent fetch published first; accept its tree only if it is the same one.
        Err(_) if dest.exists() && digest_tree(dest)? == digest => Ok(fetched),
        Err(source) => Err(RepoError::Io {
            op: "publish",
            path: dest.to_owned(),
            source,
        }),
    }
}

fn check_identity(staged: &Path, package: &str, version: &str) -> Result<(), RepoError> {
    let loaded = load(staged).map_err(|e| RepoError::InvalidPackage(Box::new(e)))?;
    let found = format!("{} {}", loaded.definition.name, loaded.definition.version);
    let expected_version = parse_version(version).ok();
    if loaded.definition.name != package
        || expected_version.as_ref() != Some(&loaded.definition.version)
    {
        return Err(RepoError::Mismatch {
            expected: format!("{package} {version}"),
            found,
        });
    }
    Ok(())
}

/// Swaps a new tree in for an old one: the old tree is moved aside into a scratch directory
/// beside it (removed when the scratch directory drops), then the new one is renamed in.
fn replace(staged: &Path, dest: &Path) -> Result<(), RepoError> {
    let scratch = staging_dir(dest)?;
    let aside = scratch.path().join("old");
    fs::rename(dest, &aside).map_err(RepoError::io("move old package aside", dest))?;
    if let Err(source) = fs::rename(staged, dest) {
        // Put the old tree back so the destination is never left empty.
        let _restored = fs::rename(&aside, dest);
        return Err(RepoError::Io {
            op: "publish",
            path: dest.to_owned(),
            source,
        });
    }
    Ok(())
}
