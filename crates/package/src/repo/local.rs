//! A repository that is a plain directory: `<repository>/<package>/<version>/`.
//!
//! The repository lies in a tree whose root berth trusts (the directory itself, or the
//! configured repository root it sits under), and everything below that root is opened
//! beneath the root's descriptor (`crate::tree`), never by path: whoever may write in the tree
//! cannot make berth read outside it, however they swap directories and links meanwhile.
//!
//! The way from the root to a version directory may pass through links that stay beneath the
//! root (addon-operator's modules directories link module directories stored elsewhere in the
//! same tree); a link leading out is refused, naming it. Inside the version directory nothing
//! is followed: links are copied as links, and must stay inside the package.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::digest::digest_dir;
use super::publish::{publish, staging_dir};
use super::stage::{Stager, tree_error};
use super::{Fetched, Limits, RepoError, check_segment};
use crate::constraint::parse_version;
use crate::tree::{Child, Dir, Links, TreeError};

#[derive(Debug, Clone)]
pub struct LocalRepository {
    /// The root of the tree the repository lies in: nothing outside it is ever read.
    root: PathBuf,
    /// The repository, relative to `root` (empty: the root itself).
    dir: PathBuf,
    limits: Limits,
}

impl LocalRepository {
    /// The repository in the directory `root`, which is also the root of its tree.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalRepository {
            root: root.into(),
            dir: PathBuf::new(),
            limits: Limits::default(),
        }
    }

    /// The repository in `dir` (relative, resolved beneath `root`) of the tree rooted at
    /// `root`: a directory an Update named under a configured repository root.
    pub fn under_root(root: impl Into<PathBuf>, dir: impl Into<PathBuf>) -> Self {
        LocalRepository {
            root: root.into(),
            dir: dir.into(),
            limits: Limits::default(),
        }
    }

    /// Uses `limits` instead of the defaults.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Copies `<repository>/<package>/<version>/` to `dest` through a checked staging
    /// directory and publishes it atomically. Returns the content digest. Fetching a version
    /// that `dest` already holds unchanged does nothing.
    pub fn fetch(&self, package: &str, version: &str, dest: &Path) -> Result<Fetched, RepoError> {
        check_segment("package name", package)?;
        check_segment("package version", version)?;
        let source = self.version_dir(package, version)?;
        let staging = staging_dir(dest)?;
        let staged = staging.path().join("package");
        std::fs::create_dir(&staged).map_err(RepoError::io("create directory", &staged))?;
        let mut stager = Stager::new(&staged, self.limits)?;
        copy_tree(&source, Path::new(""), &mut stager, 0)?;
        stager.verify_links()?;
        publish(&staged, dest, package, version)
    }

    /// The revision of `<repository>/<package>/<version>/` now: the content digest of the
    /// tree (as [`super::digest_tree`] computes it, beneath the root's descriptor, within the
    /// limits a fetch keeps). A directory's files can change under the same version; a cache
    /// that keeps this beside its copy knows when to fetch again.
    pub fn revision(&self, package: &str, version: &str) -> Result<String, RepoError> {
        check_segment("package name", package)?;
        check_segment("package version", version)?;
        let source = self.version_dir(package, version)?;
        digest_dir(&source, self.limits)
    }

    /// The versions present for `package`, ascending. Entries whose names are not semantic
    /// versions, or that are not directories (beneath the root), are ignored.
    pub fn versions(&self, package: &str) -> Result<Vec<semver::Version>, RepoError> {
        check_segment("package name", package)?;
        let not_found = || RepoError::PackageNotFound {
            package: package.to_owned(),
        };
        let root = self.open_root()?;
        let rel = self.dir.join(package);
        let dir = match root.dir(&rel, Links::Beneath) {
            Ok(dir) => dir,
            Err(e) if e.is_not_found() || e.is_not_a_directory() => return Err(not_found()),
            Err(e) => return Err(self.refused(e)),
        };
        let mut versions = Vec::new();
        for name in dir.names().map_err(tree_error)? {
            let version = name.to_str().map(parse_version);
            match version {
                Some(Ok(v))
                    if root
                        .is_dir(&rel.join(&name), Links::Beneath)
                        .unwrap_or(false) =>
                {
                    versions.push(v)
                }
                _ => {
                    tracing::debug!(entry = ?name, "skipping a repository entry that is not a version directory")
                }
            }
        }
        versions.sort();
        Ok(versions)
    }

    fn open_root(&self) -> Result<Dir, RepoError> {
        Dir::open(&self.root).map_err(|e| match e {
            TreeError::Io { path, source } => RepoError::Io {
                op: "open repository root",
                path,
                source,
            },
            other => tree_error(other),
        })
    }

    /// The version directory, opened beneath the root (links followed while they stay beneath
    /// it).
    fn version_dir(&self, package: &str, version: &str) -> Result<Dir, RepoError> {
        let not_found = || RepoError::VersionNotFound {
            package: package.to_owned(),
            version: version.to_owned(),
        };
        let root = self.open_root()?;
        match root.dir(&self.dir.join(package).join(version), Links::Beneath) {
            Ok(dir) => Ok(dir),
            Err(e) if e.is_not_found() || e.is_not_a_directory() => Err(not_found()),
            Err(e) => Err(self.refused(e)),
        }
    }

    /// A resolution the tree refused: a link leading out of the root, named.
    fn refused(&self, e: TreeError) -> RepoError {
        match e {
            TreeError::Escapes {
                path, link, target, ..
            } => RepoError::LeavesRoot {
                path: path.display().to_string(),
                link: link.map(|l| l.display().to_string()),
                target: target.map(|t| t.display().to_string()),
                root: self.root.display().to_string(),
            },
            other => tree_error(other),
        }
    }
}

/// Copies the tree under `dir` (at `rel` in the package) into `stager`, entry by entry, each
/// opened beneath `dir`'s descriptor without following it.
fn copy_tree(dir: &Dir, rel: &Path, stager: &mut Stager, depth: usize) -> Result<(), RepoError> {
    // The stager bounds depth as entries arrive; this bounds the walk before it.
    if depth > stager.max_depth() {
        return Err(RepoError::LimitExceeded {
            limit: format!("{depth} directory levels"),
        });
    }
    for name in dir.names().map_err(tree_error)? {
        let child = rel.join(&name);
        match dir.child(OsStr::new(&name)).map_err(tree_error)? {
            Child::Link(target) => stager.symlink(&child, &target)?,
            Child::Dir(sub) => {
                stager.dir(&child)?;
                copy_tree(&sub, &child, stager, depth + 1)?;
            }
            Child::File(file, executable) => stager.file(&child, file, executable)?,
            Child::Other(kind) => {
                return Err(RepoError::UnsupportedEntry {
                    path: child.display().to_string(),
                    kind: kind.to_owned(),
                });
            }
        }
    }
    Ok(())
}
