//! Writing an untrusted package tree into a staging directory.
//!
//! Each entry is checked as it arrives: relative paths only, no `..`, bounded depth, count and
//! bytes, only files, directories and relative symlinks whose target stays inside the package.
//! Everything is written beneath the staging directory's descriptor (`crate::tree`): each
//! parent directory is opened without following links, so an entry can never be written
//! through a link an earlier entry planted (`l -> ..`, then `l/file`), and files are created
//! exclusively (never over an existing entry). Link targets are checked lexically on arrival and
//! again once the whole tree exists ([`Stager::verify_links`], each resolved beneath the staged
//! root by the kernel), because a lexically harmless target can pass through another link. File
//! modes are normalised to 0644, or 0755 when any execute bit was set, so hooks stay executable
//! while setuid bits and umask noise never reach the published tree.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};

use super::{Limits, RepoError};
use crate::tree::{Child, Dir, Links, TreeError};

const FILE_MODE: u32 = 0o644;
const EXEC_MODE: u32 = 0o755;

pub(crate) struct Stager {
    root: Dir,
    limits: Limits,
    entries: usize,
    bytes: u64,
}

impl Stager {
    /// Stages into `root`, which must exist and be empty (a directory berth just made).
    pub(crate) fn new(root: &Path, limits: Limits) -> Result<Self, RepoError> {
        Ok(Stager {
            root: Dir::open(root).map_err(tree_error)?,
            limits,
            entries: 0,
            bytes: 0,
        })
    }

    pub(crate) fn dir(&mut self, rel: &Path) -> Result<(), RepoError> {
        let (rel, parent) = self.admit(rel)?;
        match parent.create_dir(entry_name(&rel)) {
            Ok(_) => Ok(()),
            // A link or a file is there already: a directory may be announced twice, nothing
            // else.
            Err(e) if matches!(e, TreeError::Link { .. }) || e.is_not_a_directory() => {
                Err(unsafe_path(&rel, "appears twice"))
            }
            Err(e) => Err(tree_error(e)),
        }
    }

    pub(crate) fn file(
        &mut self,
        rel: &Path,
        contents: impl Read,
        executable: bool,
    ) -> Result<(), RepoError> {
        let (rel, parent) = self.admit(rel)?;
        let mode = if executable { EXEC_MODE } else { FILE_MODE };
        let mut out = parent
            .create_file(entry_name(&rel), mode)
            .map_err(|e| created(e, &rel))?;
        let remaining = self.limits.max_total_bytes - self.bytes;
        let written = io::copy(&mut contents.take(remaining + 1), &mut out)
            .map_err(RepoError::io("write file", self.root.path().join(&rel)))?;
        self.bytes += written;
        if self.bytes > self.limits.max_total_bytes {
            return Err(RepoError::LimitExceeded {
                limit: format!("{} bytes", self.limits.max_total_bytes),
            });
        }
        Ok(())
    }

    pub(crate) fn symlink(&mut self, rel: &Path, target: &Path) -> Result<(), RepoError> {
        let (rel, parent) = self.admit(rel)?;
        check_link_target(&rel, target)?;
        parent
            .create_link(entry_name(&rel), target)
            .map_err(|e| created(e, &rel))
    }

    /// The deepest nesting an entry may have.
    pub(crate) fn max_depth(&self) -> usize {
        self.limits.max_depth
    }

    /// Second line of defence for links: every link must resolve, and beneath the staged
    /// root (resolved by the kernel, following every link on the way).
    pub(crate) fn verify_links(&self) -> Result<(), RepoError> {
        verify_links_under(&self.root, &self.root, Path::new(""), 0)
    }

    /// Checks an entry before anything is written for it, counts it, and opens its parent
    /// directory beneath the staging root (made as needed, never through a link). Returns the
    /// normalised path and the parent.
    fn admit(&mut self, rel: &Path) -> Result<(PathBuf, Dir), RepoError> {
        let rel = safe_relative(rel, self.limits.max_depth)?;
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(RepoError::LimitExceeded {
                limit: format!("{} entries", self.limits.max_entries),
            });
        }
        let mut parent = self
            .root
            .dir(Path::new(""), Links::Refuse)
            .map_err(tree_error)?;
        for part in rel.parent().into_iter().flat_map(Path::components) {
            parent = match parent.create_dir(part.as_os_str()) {
                Ok((dir, _)) => dir,
                Err(TreeError::Link { .. }) => {
                    return Err(unsafe_path(&rel, "passes through a symlink"));
                }
                Err(e) if e.is_not_a_directory() => {
                    return Err(unsafe_path(&rel, "passes through a file"));
                }
                Err(e) => return Err(tree_error(e)),
            };
        }
        Ok((rel, parent))
    }
}

/// The last component of a path [`safe_relative`] returned (never empty).
fn entry_name(rel: &Path) -> &OsStr {
    rel.file_name().unwrap_or(rel.as_os_str())
}

fn unsafe_path(rel: &Path, reason: &'static str) -> RepoError {
    RepoError::UnsafePath {
        path: rel.display().to_string(),
        reason,
    }
}

/// The error of creating an entry exclusively: one that exists already appeared twice.
fn created(e: TreeError, rel: &Path) -> RepoError {
    if e.is_already_there() {
        unsafe_path(rel, "appears twice")
    } else {
        tree_error(e)
    }
}

/// A tree error as the repository's: a link where none may be is an unsafe path, one leaving
/// the tree escapes it.
pub(crate) fn tree_error(e: TreeError) -> RepoError {
    match e {
        TreeError::Link { path, .. } => RepoError::UnsafePath {
            path: path.display().to_string(),
            reason: "passes through a symlink",
        },
        TreeError::Escapes { path, link, .. } => RepoError::LinkEscapes {
            path: link.unwrap_or(path).display().to_string(),
            target: String::new(),
        },
        TreeError::Changed { path } => RepoError::UnsafePath {
            path: path.display().to_string(),
            reason: "changed while it was read",
        },
        TreeError::Kind { path, found, .. } => RepoError::UnsupportedEntry {
            path: path.display().to_string(),
            kind: found.to_owned(),
        },
        TreeError::Io { path, source } => RepoError::Io {
            op: "read",
            path,
            source,
        },
    }
}

/// Normalises an entry path, rejecting anything that is not a plain relative path.
pub(crate) fn safe_relative(rel: &Path, max_depth: usize) -> Result<PathBuf, RepoError> {
    let unsafe_path = |reason| RepoError::UnsafePath {
        path: rel.display().to_string(),
        reason,
    };
    let mut out = PathBuf::new();
    for component in rel.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err(unsafe_path("contains '..'")),
            Component::RootDir | Component::Prefix(_) => return Err(unsafe_path("is absolute")),
        }
    }
    if out.as_os_str().is_empty() {
        return Err(unsafe_path("is empty"));
    }
    if out.components().count() > max_depth {
        return Err(RepoError::LimitExceeded {
            limit: format!("{max_depth} directory levels"),
        });
    }
    Ok(out)
}

/// Resolves `target` relative to the link's directory without touching the filesystem.
pub(super) fn check_link_target(rel: &Path, target: &Path) -> Result<(), RepoError> {
    let escapes = || RepoError::LinkEscapes {
        path: rel.display().to_string(),
        target: target.display().to_string(),
    };
    let mut depth: usize = rel
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count()
        .saturating_sub(1);
    for component in target.components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => depth = depth.checked_sub(1).ok_or_else(escapes)?,
            Component::RootDir | Component::Prefix(_) => return Err(escapes()),
        }
    }
    Ok(())
}

/// Resolves every link of the staged tree beneath its root (`root`; `dir` is `rel` in it).
/// The tree is finite and depth-bounded, and directory links are not walked into here.
fn verify_links_under(root: &Dir, dir: &Dir, rel: &Path, depth: usize) -> Result<(), RepoError> {
    if depth > 64 {
        return Err(RepoError::LimitExceeded {
            limit: "64 directory levels".into(),
        });
    }
    for name in dir.names().map_err(tree_error)? {
        let child_rel = rel.join(&name);
        match dir.child(&name).map_err(tree_error)? {
            Child::Link(target) => {
                let escapes = || RepoError::LinkEscapes {
                    path: child_rel.display().to_string(),
                    target: target.display().to_string(),
                };
                // Any kind will do: the link must resolve, and stay beneath the root.
                match root.kind(&child_rel, Links::Beneath) {
                    Ok(Some(_)) => {}
                    Ok(None) | Err(TreeError::Escapes { .. } | TreeError::Io { .. }) => {
                        return Err(escapes());
                    }
                    Err(e) => return Err(tree_error(e)),
                }
            }
            Child::Dir(sub) => verify_links_under(root, &sub, &child_rel, depth + 1)?,
            Child::File(..) | Child::Other(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_only() {
        assert_eq!(
            safe_relative(Path::new("./a/b"), 8).expect("ok"),
            PathBuf::from("a/b")
        );
        assert!(matches!(
            safe_relative(Path::new("/etc/passwd"), 8),
            Err(RepoError::UnsafePath { .. })
        ));
        assert!(matches!(
            safe_relative(Path::new("a/../../b"), 8),
            Err(RepoError::UnsafePath { .. })
        ));
        assert!(matches!(
            safe_relative(Path::new("."), 8),
            Err(RepoError::UnsafePath { .. })
        ));
        assert!(matches!(
            safe_relative(Path::new("a/b/c"), 2),
            Err(RepoError::LimitExceeded { .. })
        ));
    }

    #[test]
    fn link_targets_resolved_lexically() {
        assert!(check_link_target(Path::new("hooks/lib"), Path::new("../common/lib")).is_ok());
        assert!(check_link_target(Path::new("a"), Path::new("b/c")).is_ok());
        assert!(check_link_target(Path::new("hooks/x"), Path::new("../../etc")).is_err());
        assert!(check_link_target(Path::new("x"), Path::new("/etc/passwd")).is_err());
        assert!(check_link_target(Path::new("x"), Path::new("..")).is_err());
    }
}
