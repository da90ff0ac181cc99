//! A content digest of a published package tree.
//!
//! The walk is canonical: entries sorted by their byte-wise relative path, each encoded with a
//! type tag and length-prefixed fields so no two different trees share an encoding. Only what the
//! runtime depends on is covered: paths, file contents, whether a file is executable and link
//! targets. Timestamps, owners and other mode bits are not (they are normalised on publish).

use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use super::RepoError;

/// Returns `sha256:<hex>` for the tree under `root`.
pub fn digest_tree(root: &Path) -> Result<String, RepoError> {
    let mut hasher = Sha256::new();
    walk(root, &mut Vec::new(), &mut hasher)?;
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

fn walk(dir: &Path, rel: &mut Vec<u8>, hasher: &mut Sha256) -> Result<(), RepoError> {
    let read_err = RepoError::io("read directory", dir);
    let mut entries = fs::read_dir(dir)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(read_err)?;
    entries.sort_by(|a, b| a.file_name().as_bytes().cmp(b.file_name().as_bytes()));
    for entry in entries {
        let path = entry.path();
        let base = rel.len();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(entry.file_name().as_bytes());
        let meta = fs::symlink_metadata(&path).map_err(RepoError::io("stat", &path))?;
        if meta.is_symlink() {
            let target = fs::read_link(&path).map_err(RepoError::io("read symlink", &path))?;
            field(hasher, b"l", rel);
            field(hasher, b"", target.as_os_str().as_bytes());
        } else if meta.is_dir() {
            field(hasher, b"d", rel);
            walk(&path, rel, hasher)?;
        } else {
            let executable = meta.permissions().mode() & 0o111 != 0;
            field(hasher, if executable { b"x" } else { b"f" }, rel);
            hasher.update(meta.len().to_be_bytes());
            let file = fs::File::open(&path).map_err(RepoError::io("open", &path))?;
            // Bounded by the length hashed just above, so a growing file cannot change the framing.
            let mut reader = file.take(meta.len());
            std::io::copy(&mut reader, hasher).map_err(RepoError::io("read", &path))?;
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
