//! Writing an untrusted package tree into a staging directory.
//!
//! Each entry is checked as it arrives: relative paths only, no `..`, bounded depth, count and
//! bytes, only files, directories and relative symlinks whose target stays inside the package.
//! Link targets are checked lexically on arrival and again with `canonicalize` once the whole tree
//! exists ([`Stager::verify_links`]), because a lexically harmless target can pass through another
//! link. File modes are normalised to 0644, or 0755 when any execute bit was set, so hooks stay
//! executable while setuid bits and umask noise never reach the published tree.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

use super::{Limits, RepoError};

const FILE_MODE: u32 = 0o644;
const EXEC_MODE: u32 = 0o755;

pub(crate) struct Stager {
    root: PathBuf,
    limits: Limits,
    entries: usize,
    bytes: u64,
}

impl Stager {
    /// Stages into `root`, which must exist and be empty.
    pub(crate) fn new(root: PathBuf, limits: Limits) -> Self {
        Stager {
            root,
            limits,
            entries: 0,
            bytes: 0,
        }
    }

    pub(crate) fn dir(&mut self, rel: &Path) -> Result<(), RepoError> {
        let path = self.admit(rel, true)?;
        fs::create_dir_all(&path).map_err(RepoError::io("create directory", &path))?;
        Ok(())
    }

    pub(crate) fn file(
        &mut self,
        rel: &Path,
        contents: impl Read,
        executable: bool,
    ) -> Result<(), RepoError> {
        let path = self.admit(rel, false)?;
        self.parent(&path)?;
        let mut out = fs::File::create(&path).map_err(RepoError::io("create file", &path))?;
        let remaining = self.limits.max_total_bytes - self.bytes;
        let written = io::copy(&mut contents.take(remaining + 1), &mut out)
            .map_err(RepoError::io("write file", &path))?;
        self.bytes += written;
        if self.bytes > self.limits.max_total_bytes {
            return Err(RepoError::LimitExceeded {
                limit: format!("{} bytes", self.limits.max_total_bytes),
            });
        }
        let mode = if executable { EXEC_MODE } else { FILE_MODE };
        fs::set_permissions(&path, fs::Permissions::from_mode(mode))
            .map_err(RepoError::io("set permissions", &path))
    }

    pub(crate) fn symlink(&mut self, rel: &Path, target: &Path) -> Result<(), RepoError> {
        let path = self.admit(rel, false)?;
        check_link_target(rel, target)?;
        self.parent(&path)?;
        symlink(target, &path).map_err(RepoError::io("create symlink", &path))
    }

    /// Second line of defence for links: every link must resolve, and inside the tree.
    pub(crate) fn verify_links(&self) -> Result<(), RepoError> {
        let root = self
            .root
            .canonicalize()
            .map_err(RepoError::io("resolve", &self.root))?;
        verify_links_under(&root, &root)
    }

    /// Checks an entry before anything is written for it. Besides the path rules, no ancestor may
    /// be a symlink (an archive could otherwise plant `l -> ..`-style links and then write
    /// `l/file` outside the tree before the links are verified) and an existing entry is never
    /// overwritten, except that a directory may be announced twice.
    fn admit(&mut self, rel: &Path, is_dir: bool) -> Result<PathBuf, RepoError> {
        let rel = safe_relative(rel, self.limits.max_depth)?;
        self.entries += 1;
        if self.entries > self.limits.max_entries {
            return Err(RepoError::LimitExceeded {
                limit: format!("{} entries", self.limits.max_entries),
            });
        }
        let unsafe_path = |reason| RepoError::UnsafePath {
            path: rel.display().to_string(),
            reason,
        };
        let mut ancestor = self.root.clone();
        for part in rel.parent().into_iter().flat_map(Path::components) {
            ancestor.push(part);
            if fs::symlink_metadata(&ancestor).is_ok_and(|m| m.is_symlink()) {
                return Err(unsafe_path("passes through a symlink"));
            }
        }
        let path = self.root.join(&rel);
        if let Ok(existing) = fs::symlink_metadata(&path)
            && !(is_dir && existing.is_dir())
        {
            return Err(unsafe_path("appears twice"));
        }
        Ok(path)
    }

    fn parent(&self, path: &Path) -> Result<(), RepoError> {
        match path.parent() {
            Some(parent) => {
                fs::create_dir_all(parent).map_err(RepoError::io("create directory", parent))
            }
            None => Ok(()),
        }
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

/// The staged tree is finite and depth-bounded, and directory links are not followed here.
fn verify_links_under(root: &Path, dir: &Path) -> Result<(), RepoError> {
    for entry in fs::read_dir(dir).map_err(RepoError::io("read directory", dir))? {
        let entry = entry.map_err(RepoError::io("read directory", dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(RepoError::io("stat", &path))?;
        if kind.is_symlink() {
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .display()
                .to_string();
            let target = fs::read_link(&path)
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            match path.canonicalize() {
                Ok(real) if real.starts_with(root) => {}
                _ => return Err(RepoError::LinkEscapes { path: rel, target }),
            }
        } else if kind.is_dir() {
            verify_links_under(root, &path)?;
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
