//! A repository that is a plain directory: `<root>/<package>/<version>/`.

use std::fs;
use std::path::{Path, PathBuf};

use super::publish::{publish, staging_dir};
use super::stage::Stager;
use super::{Fetched, Limits, RepoError, check_segment};
use crate::constraint::parse_version;

#[derive(Debug, Clone)]
pub struct LocalRepository {
    root: PathBuf,
    limits: Limits,
}

impl LocalRepository {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalRepository {
            root: root.into(),
            limits: Limits::default(),
        }
    }

    /// Uses `limits` instead of the defaults.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Copies `<root>/<package>/<version>/` to `dest` through a checked staging directory and
    /// publishes it atomically. Returns the content digest. Fetching a version that `dest` already
    /// holds unchanged does nothing.
    pub fn fetch(&self, package: &str, version: &str, dest: &Path) -> Result<Fetched, RepoError> {
        check_segment("package name", package)?;
        check_segment("package version", version)?;
        let source = self.version_dir(package, version)?;
        let staging = staging_dir(dest)?;
        let staged = staging.path().join("package");
        fs::create_dir(&staged).map_err(RepoError::io("create directory", &staged))?;
        let mut stager = Stager::new(staged.clone(), self.limits);
        copy_tree(&source, Path::new(""), &mut stager)?;
        stager.verify_links()?;
        publish(&staged, dest, package, version)
    }

    /// The versions present for `package`, ascending. Directories whose names are not semantic
    /// versions are ignored.
    pub fn versions(&self, package: &str) -> Result<Vec<semver::Version>, RepoError> {
        check_segment("package name", package)?;
        let dir = self.root.join(package);
        if !dir.is_dir() {
            return Err(RepoError::PackageNotFound {
                package: package.to_owned(),
            });
        }
        let read_err = RepoError::io("read directory", &dir);
        let mut versions = Vec::new();
        for entry in fs::read_dir(&dir).map_err(read_err)? {
            let entry = entry.map_err(RepoError::io("read directory", &dir))?;
            let name = entry.file_name();
            match name.to_str().map(parse_version) {
                Some(Ok(version)) if entry.path().is_dir() => versions.push(version),
                _ => {
                    tracing::debug!(entry = ?name, "skipping a repository entry that is not a version directory")
                }
            }
        }
        versions.sort();
        Ok(versions)
    }

    /// The version directory, which must resolve inside the repository root.
    fn version_dir(&self, package: &str, version: &str) -> Result<PathBuf, RepoError> {
        let not_found = || RepoError::VersionNotFound {
            package: package.to_owned(),
            version: version.to_owned(),
        };
        let path = self.root.join(package).join(version);
        let real = path.canonicalize().map_err(|_| not_found())?;
        let root = self
            .root
            .canonicalize()
            .map_err(RepoError::io("resolve repository root", &self.root))?;
        if !real.starts_with(&root) {
            return Err(RepoError::LinkEscapes {
                path: format!("{package}/{version}"),
                target: real.display().to_string(),
            });
        }
        if !real.is_dir() {
            return Err(not_found());
        }
        Ok(real)
    }
}

fn copy_tree(dir: &Path, rel: &Path, stager: &mut Stager) -> Result<(), RepoError> {
    let mut entries = fs::read_dir(dir)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(RepoError::io("read directory", dir))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let child = rel.join(entry.file_name());
        let meta = fs::symlink_metadata(&path).map_err(RepoError::io("stat", &path))?;
        let kind = meta.file_type();
        if kind.is_symlink() {
            let target = fs::read_link(&path).map_err(RepoError::io("read symlink", &path))?;
            stager.symlink(&child, &target)?;
        } else if kind.is_dir() {
            stager.dir(&child)?;
            copy_tree(&path, &child, stager)?;
        } else if kind.is_file() {
            use std::os::unix::fs::PermissionsExt;
            let executable = meta.permissions().mode() & 0o111 != 0;
            let file = fs::File::open(&path).map_err(RepoError::io("open", &path))?;
            stager.file(&child, file, executable)?;
        } else {
            return Err(RepoError::UnsupportedEntry {
                path: child.display().to_string(),
                kind: format!("{kind:?}"),
            });
        }
    }
    Ok(())
}
