//! A content digest of a published package tree.
//!
//! The walk is canonical: entries sorted by their byte-wise relative path, each encoded with a
//! type tag and length-prefixed fields so no two different trees share an encoding. Only what the
//! runtime depends on is covered: paths, file contents, whether a file is executable and link
//! targets. Timestamps, owners and other mode bits are not (they are normalised on publish).

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::stage::tree_error;
use super::{Limits, RepoError};
use crate::tree::{Child, Dir};

/// Deepest nesting walked (a published tree is bounded far below it when staged).
const MAX_DEPTH: usize = 256;

/// Returns `sha256:<hex>` for the tree under `root` (opened once; everything below it beneath
/// its descriptor, links never followed).
pub fn digest_tree(root: &Path) -> Result<String, RepoError> {
    let dir = Dir::open(root).map_err(tree_error)?;
    digest(
        &dir,
        Limits {
            max_total_bytes: u64::MAX,
            max_entries: usize::MAX,
            max_depth: MAX_DEPTH,
        },
    )
}

/// [`digest_tree`] of an opened directory (a source's version directory, opened beneath its
/// repository root), within `limits`: the same bounds a fetch of it keeps, so digesting an
/// oversized tree stops as copying it would.
pub(crate) fn digest_dir(dir: &Dir, limits: Limits) -> Result<String, RepoError> {
    digest(
        dir,
        Limits {
            max_depth: limits.max_depth.min(MAX_DEPTH),
            ..limits
        },
    )
}

/// What a walk may still read, of `limits`.
struct Budget {
    entries: usize,
    bytes: u64,
    limits: Limits,
}

fn digest(dir: &Dir, limits: Limits) -> Result<String, RepoError> {
    let mut hasher = Sha256::new();
    let mut budget = Budget {
        entries: limits.max_entries,
        bytes: limits.max_total_bytes,
        limits,
    };
    walk(dir, &mut Vec::new(), &mut hasher, &mut budget, 0)?;
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

fn walk(
    dir: &Dir,
    rel: &mut Vec<u8>,
    hasher: &mut Sha256,
    budget: &mut Budget,
    depth: usize,
) -> Result<(), RepoError> {
    if depth > budget.limits.max_depth {
        return Err(RepoError::LimitExceeded {
            limit: format!("{} directory levels", budget.limits.max_depth),
        });
    }
    for name in dir.names().map_err(tree_error)? {
        budget.entries = budget
            .entries
            .checked_sub(1)
            .ok_or_else(|| RepoError::LimitExceeded {
                limit: format!("{} entries", budget.limits.max_entries),
            })?;
        let base = rel.len();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name.as_bytes());
        match dir.child(&name).map_err(tree_error)? {
            Child::Link(target) => {
                field(hasher, b"l", rel);
                field(hasher, b"", target.as_os_str().as_bytes());
            }
            Child::Dir(sub) => {
                field(hasher, b"d", rel);
                walk(&sub, rel, hasher, budget, depth + 1)?;
            }
            Child::File(file, executable) => {
                let len = file
                    .metadata()
                    .map_err(RepoError::io("stat", dir.path().join(&name)))?
                    .len();
                budget.bytes =
                    budget
                        .bytes
                        .checked_sub(len)
                        .ok_or_else(|| RepoError::LimitExceeded {
                            limit: format!("{} bytes", budget.limits.max_total_bytes),
                        })?;
                field(hasher, if executable { b"x" } else { b"f" }, rel);
                hasher.update(len.to_be_bytes());
                // Bounded by the length hashed just above, so a growing file cannot change the
                // framing.
                let mut reader = file.take(len);
                std::io::copy(&mut reader, hasher)
                    .map_err(RepoError::io("read", dir.path().join(&name)))?;
            }
            Child::Other(kind) => {
                return Err(RepoError::UnsupportedEntry {
                    path: String::from_utf8_lossy(rel).into_owned(),
                    kind: kind.to_owned(),
                });
            }
        }
        rel.truncate(base);
    }
    Ok(())
}

fn field(hasher: &mut Sha256, tag: &[u8], bytes: &[u8]) {
    hasher.update(tag);
    hasher.update((bytes.len() as u64).to_be_bytes());
    hasher.update(bytes);
}
