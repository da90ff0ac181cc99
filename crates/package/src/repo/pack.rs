//! Packing a package directory into a `.tar.gz` (`berth package build`, and the layer of an OCI
//! push). The archive is reproducible: entries in path order, owner root, mtime zero, modes
//! reduced to 0644/0755 (setuid, setgid and sticky bits are stripped), so the same tree always
//! gives the same bytes and digest. What it packs is checked as an unpacking repository checks
//! it: a loadable package, no links that leave it, no special files, within the size limits.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;

use super::stage::check_link_target;
use super::{Limits, RepoError};
use crate::load::load;

/// A packed package: the archive's bytes and what it holds.
#[derive(Debug, Clone)]
pub struct Packed {
    /// The `.tar.gz` bytes.
    pub bytes: Vec<u8>,
    /// `sha256:<hex>` of `bytes`.
    pub digest: String,
    pub name: String,
    pub version: String,
}

/// Packs the package in `dir` (which must load as a package) into a reproducible `.tar.gz`.
pub fn pack(dir: &Path, limits: Limits) -> Result<Packed, RepoError> {
    let package = load(dir).map_err(|e| RepoError::InvalidPackage(Box::new(e)))?;
    let mut entries = Vec::new();
    collect(dir, dir, 0, limits, &mut entries)?;
    entries.sort();
    let mut total = 0u64;
    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
    tar.mode(tar::HeaderMode::Deterministic);
    for rel in &entries {
        let path = dir.join(rel);
        let meta = fs::symlink_metadata(&path).map_err(RepoError::io("read metadata", &path))?;
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        let broken = |e: std::io::Error| RepoError::Archive {
            path: path.clone(),
            message: e.to_string(),
        };
        if meta.is_dir() {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            tar.append_data(&mut header, rel, std::io::empty())
                .map_err(broken)?;
        } else if meta.file_type().is_symlink() {
            let target = fs::read_link(&path).map_err(RepoError::io("read link", &path))?;
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_mode(0o777);
            header.set_size(0);
            tar.append_link(&mut header, rel, &target).map_err(broken)?;
        } else {
            total += meta.len();
            if total > limits.max_total_bytes {
                return Err(RepoError::LimitExceeded {
                    limit: format!("{} bytes", limits.max_total_bytes),
                });
            }
            let executable = meta.permissions().mode() & 0o111 != 0;
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(if executable { 0o755 } else { 0o644 });
            header.set_size(meta.len());
            let file = fs::File::open(&path).map_err(RepoError::io("open file", &path))?;
            tar.append_data(&mut header, rel, file).map_err(broken)?;
        }
    }
    let gz = tar.into_inner().map_err(|e| RepoError::Archive {
        path: dir.to_owned(),
        message: e.to_string(),
    })?;
    let bytes = gz.finish().map_err(|e| RepoError::Archive {
        path: dir.to_owned(),
        message: e.to_string(),
    })?;
    let digest = {
        use sha2::{Digest, Sha256};
        format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))
    };
    Ok(Packed {
        bytes,
        digest,
        name: package.definition.name.clone(),
        version: package.definition.version.to_string(),
    })
}

/// Writes `packed` to `<out_dir>/<name>-<version>.tar.gz` (the archive repository's layout)
/// and returns the path.
pub fn write_archive(packed: &Packed, out_dir: &Path) -> Result<PathBuf, RepoError> {
    fs::create_dir_all(out_dir).map_err(RepoError::io("create directory", out_dir))?;
    let path = out_dir.join(format!("{}-{}.tar.gz", packed.name, packed.version));
    let tmp = out_dir.join(format!(".{}-{}.tar.gz.tmp", packed.name, packed.version));
    let mut file = fs::File::create(&tmp).map_err(RepoError::io("create file", &tmp))?;
    file.write_all(&packed.bytes)
        .and_then(|()| file.sync_all())
        .map_err(RepoError::io("write file", &tmp))?;
    fs::rename(&tmp, &path).map_err(RepoError::io("rename", &path))?;
    Ok(path)
}

/// Relative paths of everything under `dir`, refusing what an unpacking repository refuses.
fn collect(
    root: &Path,
    dir: &Path,
    depth: usize,
    limits: Limits,
    out: &mut Vec<PathBuf>,
) -> Result<(), RepoError> {
    if depth > limits.max_depth {
        return Err(RepoError::LimitExceeded {
            limit: format!("{} nested directories", limits.max_depth),
        });
    }
    for entry in fs::read_dir(dir).map_err(RepoError::io("read directory", dir))? {
        let entry = entry.map_err(RepoError::io("read directory", dir))?;
        let path = entry.path();
        let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
        let kind = entry
            .file_type()
            .map_err(RepoError::io("read metadata", &path))?;
        if kind.is_symlink() {
            let target = fs::read_link(&path).map_err(RepoError::io("read link", &path))?;
            // The rule an unpacking repository applies to the same link.
            check_link_target(&rel, &target)?;
        } else if !kind.is_dir() && !kind.is_file() {
            return Err(RepoError::UnsupportedEntry {
                path: rel.display().to_string(),
                kind: "special file".into(),
            });
        }
        out.push(rel.clone());
        if out.len() > limits.max_entries {
            return Err(RepoError::LimitExceeded {
                limit: format!("{} entries", limits.max_entries),
            });
        }
        if kind.is_dir() {
            collect(root, &path, depth + 1, limits, out)?;
        }
    }
    Ok(())
}
