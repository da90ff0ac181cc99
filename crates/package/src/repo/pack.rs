//! Packing a package directory into a `.tar.gz` (`berth package build`, and the layer of an OCI
//! push). The archive is reproducible: entries in path order, owner root, mtime zero, modes
//! reduced to 0644/0755 (setuid, setgid and sticky bits are stripped), so the same tree always
//! gives the same bytes and digest. What it packs is checked as an unpacking repository checks
//! it: a loadable package, no links that leave it, no special files, within the size limits.

use std::fs;
use std::io::{Read as _, Write};
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;

use super::stage::{check_link_target, tree_error};
use super::{Limits, RepoError};
use crate::load::load;
use crate::tree::{Child, Dir};

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
/// The tree is walked beneath `dir`'s descriptor, each entry opened without following it
/// (`crate::tree`): what is packed is what was checked.
pub fn pack(dir: &Path, limits: Limits) -> Result<Packed, RepoError> {
    let package = load(dir).map_err(|e| RepoError::InvalidPackage(Box::new(e)))?;
    let root = Dir::open(dir).map_err(tree_error)?;
    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::default()));
    tar.mode(tar::HeaderMode::Deterministic);
    let mut walk = Walk {
        tar,
        limits,
        entries: 0,
        total: 0,
    };
    // Names sorted in each directory, depth first: the order of the sorted relative paths.
    walk.dir(&root, Path::new(""), 0)?;
    let gz = walk.tar.into_inner().map_err(|e| RepoError::Archive {
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

/// The archive being written, and what it holds so far.
struct Walk {
    tar: tar::Builder<GzEncoder<Vec<u8>>>,
    limits: Limits,
    entries: usize,
    total: u64,
}

impl Walk {
    /// Appends everything under `dir` (at `rel` in the package), refusing what an unpacking
    /// repository refuses.
    fn dir(&mut self, dir: &Dir, rel: &Path, depth: usize) -> Result<(), RepoError> {
        if depth > self.limits.max_depth {
            return Err(RepoError::LimitExceeded {
                limit: format!("{} nested directories", self.limits.max_depth),
            });
        }
        for name in dir.names().map_err(tree_error)? {
            let child = rel.join(&name);
            self.entries += 1;
            if self.entries > self.limits.max_entries {
                return Err(RepoError::LimitExceeded {
                    limit: format!("{} entries", self.limits.max_entries),
                });
            }
            let broken = |e: std::io::Error| RepoError::Archive {
                path: child.clone(),
                message: e.to_string(),
            };
            let mut header = tar::Header::new_gnu();
            header.set_mtime(0);
            header.set_uid(0);
            header.set_gid(0);
            match dir.child(&name).map_err(tree_error)? {
                Child::Link(target) => {
                    // The rule an unpacking repository applies to the same link.
                    check_link_target(&child, &target)?;
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_mode(0o777);
                    header.set_size(0);
                    self.tar
                        .append_link(&mut header, &child, &target)
                        .map_err(broken)?;
                }
                Child::Dir(sub) => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_mode(0o755);
                    header.set_size(0);
                    self.tar
                        .append_data(&mut header, &child, std::io::empty())
                        .map_err(broken)?;
                    self.dir(&sub, &child, depth + 1)?;
                }
                Child::File(file, executable) => {
                    let len = file.metadata().map_err(broken)?.len();
                    self.total += len;
                    if self.total > self.limits.max_total_bytes {
                        return Err(RepoError::LimitExceeded {
                            limit: format!("{} bytes", self.limits.max_total_bytes),
                        });
                    }
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_mode(if executable { 0o755 } else { 0o644 });
                    header.set_size(len);
                    // Bounded by the length in the header: a file growing meanwhile cannot
                    // break the archive's framing.
                    self.tar
                        .append_data(&mut header, &child, file.take(len))
                        .map_err(broken)?;
                }
                Child::Other(_) => {
                    return Err(RepoError::UnsupportedEntry {
                        path: child.display().to_string(),
                        kind: "special file".into(),
                    });
                }
            }
        }
        Ok(())
    }
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
