//! A repository of gzip-compressed tarballs: `<root>/<package>-<version>.tar.gz`.
//!
//! The archive is first copied into the staging directory while its sha256 is computed, so the
//! bytes that are verified are the bytes that are unpacked. Entries are unpacked by hand rather
//! than with `tar::Archive::unpack`, so every entry goes through the [`Stager`] rules: plain
//! relative paths, regular files, directories and internal symlinks only (hard links, devices and
//! FIFOs are refused), and the size limits counted on decompressed bytes (gzip bombs stop at the
//! limit). An archive may wrap the package in one top-level directory, as `helm package` does.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use sha2::{Digest, Sha256};
use tar::EntryType;

use super::publish::{publish, staging_dir};
use super::stage::{Stager, tree_error};
use super::{Fetched, Limits, RepoError, check_segment};
use crate::constraint::parse_version;
use crate::load::is_package_dir;
use crate::tree::{Child, Dir, Links};

const ARCHIVE_SUFFIX: &str = ".tar.gz";

#[derive(Debug, Clone)]
pub struct ArchiveRepository {
    root: PathBuf,
    limits: Limits,
}

impl ArchiveRepository {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ArchiveRepository {
            root: root.into(),
            limits: Limits::default(),
        }
    }

    /// Uses `limits` instead of the defaults; `max_total_bytes` bounds both the archive and its
    /// unpacked contents.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Unpacks `<root>/<package>-<version>.tar.gz` and publishes it at `dest` atomically; see
    /// [`LocalRepository::fetch`](super::LocalRepository::fetch) for the publishing rules.
    pub fn fetch(&self, package: &str, version: &str, dest: &Path) -> Result<Fetched, RepoError> {
        self.fetch_verified(package, version, dest, None)
    }

    /// Like [`fetch`](Self::fetch), but first checks the archive's sha256 against
    /// `expected_digest` (`sha256:<hex>` or bare hex).
    pub fn fetch_verified(
        &self,
        package: &str,
        version: &str,
        dest: &Path,
        expected_digest: Option<&str>,
    ) -> Result<Fetched, RepoError> {
        check_segment("package name", package)?;
        check_segment("package version", version)?;
        let name = format!("{package}-{version}{ARCHIVE_SUFFIX}");
        let archive = self.root.join(&name);
        // Opened beneath the repository directory: a link may lead elsewhere in it, never out.
        let opened = Dir::open(&self.root).and_then(|d| d.file(Path::new(&name), Links::Beneath));
        let source = match opened {
            Ok((file, _)) => file,
            Err(e) if e.is_not_found() => {
                return Err(RepoError::VersionNotFound {
                    package: package.to_owned(),
                    version: version.to_owned(),
                });
            }
            Err(e) => return Err(tree_error(e)),
        };
        let staging = staging_dir(dest)?;
        let copy = staging.path().join("archive.tar.gz");
        let digest = copy_hashed(source, &copy, self.limits.max_total_bytes)?;
        if let Some(expected) = expected_digest {
            let expected_hex = expected.strip_prefix("sha256:").unwrap_or(expected);
            if !expected_hex.eq_ignore_ascii_case(&digest) {
                return Err(RepoError::Archive {
                    path: archive,
                    message: format!("digest is sha256:{digest}, expected {expected}"),
                });
            }
        }
        let unpacked = staging.path().join("package");
        fs::create_dir(&unpacked).map_err(RepoError::io("create directory", &unpacked))?;
        let mut stager = Stager::new(&unpacked, self.limits)?;
        let file = fs::File::open(&copy).map_err(RepoError::io("open archive", &copy))?;
        unpack_tar_gz(file, &mut stager).map_err(|e| in_archive(e, &archive))?;
        stager.verify_links()?;
        publish(&package_root(&unpacked)?, dest, package, version)
    }

    /// The versions with an archive for `package`, ascending.
    pub fn versions(&self, package: &str) -> Result<Vec<semver::Version>, RepoError> {
        check_segment("package name", package)?;
        let prefix = format!("{package}-");
        let mut versions = Vec::new();
        for entry in
            fs::read_dir(&self.root).map_err(RepoError::io("read directory", &self.root))?
        {
            let entry = entry.map_err(RepoError::io("read directory", &self.root))?;
            let name = entry.file_name();
            let version = name
                .to_str()
                .and_then(|n| n.strip_prefix(&prefix))
                .and_then(|n| n.strip_suffix(ARCHIVE_SUFFIX))
                .and_then(|v| parse_version(v).ok());
            if let Some(version) = version {
                versions.push(version);
            }
        }
        if versions.is_empty() {
            return Err(RepoError::PackageNotFound {
                package: package.to_owned(),
            });
        }
        versions.sort();
        Ok(versions)
    }
}

/// Unpacks a `.tar.gz` stream entry by entry through `stager`.
pub(crate) fn unpack_tar_gz(reader: impl Read, stager: &mut Stager) -> Result<(), RepoError> {
    let mut archive = tar::Archive::new(GzDecoder::new(reader));
    let broken = |e: io::Error| RepoError::Archive {
        path: PathBuf::new(),
        message: e.to_string(),
    };
    for entry in archive.entries().map_err(broken)? {
        let mut entry = entry.map_err(broken)?;
        let path = entry.path().map_err(broken)?.into_owned();
        let kind = entry.header().entry_type();
        match kind {
            EntryType::Directory => stager.dir(&path)?,
            EntryType::Regular | EntryType::Continuous => {
                let executable = entry.header().mode().map_err(broken)? & 0o111 != 0;
                stager.file(&path, &mut entry, executable)?;
            }
            EntryType::Symlink => {
                let target =
                    entry
                        .link_name()
                        .map_err(broken)?
                        .ok_or_else(|| RepoError::UnsafePath {
                            path: path.display().to_string(),
                            reason: "symlink without a target",
                        })?;
                stager.symlink(&path, &target)?;
            }
            // Extended headers carry metadata for the next entry; the tar crate folds them in.
            EntryType::XGlobalHeader
            | EntryType::XHeader
            | EntryType::GNULongName
            | EntryType::GNULongLink => {}
            other => {
                return Err(RepoError::UnsupportedEntry {
                    path: path.display().to_string(),
                    kind: format!("{other:?}"),
                });
            }
        }
    }
    Ok(())
}

/// Names the archive in errors raised while reading it.
fn in_archive(error: RepoError, archive: &Path) -> RepoError {
    match error {
        RepoError::Archive { message, .. } => RepoError::Archive {
            path: archive.to_owned(),
            message,
        },
        other => other,
    }
}

/// Copies at most `limit` bytes and returns their sha256 as hex.
fn copy_hashed(source: fs::File, dest: &Path, limit: u64) -> Result<String, RepoError> {
    struct Tee<'a, W> {
        out: W,
        hasher: &'a mut Sha256,
    }
    impl<W: io::Write> io::Write for Tee<'_, W> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = self.out.write(buf)?;
            self.hasher.update(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            self.out.flush()
        }
    }
    let mut hasher = Sha256::new();
    let out = fs::File::create(dest).map_err(RepoError::io("create file", dest))?;
    let copied = io::copy(
        &mut source.take(limit + 1),
        &mut Tee {
            out,
            hasher: &mut hasher,
        },
    )
    .map_err(RepoError::io("copy archive", dest))?;
    if copied > limit {
        return Err(RepoError::LimitExceeded {
            limit: format!("{limit} bytes"),
        });
    }
    Ok(hex::encode(hasher.finalize()))
}

/// The unpacked package root: the staging dir itself, or its single top-level directory.
pub(super) fn package_root(unpacked: &Path) -> Result<PathBuf, RepoError> {
    if is_package_dir(unpacked) {
        return Ok(unpacked.to_owned());
    }
    let dir = Dir::open(unpacked).map_err(tree_error)?;
    let names = dir.names().map_err(tree_error)?;
    match names.as_slice() {
        [only] if matches!(dir.child(only).map_err(tree_error)?, Child::Dir(_)) => {
            Ok(unpacked.join(only))
        }
        _ => Ok(unpacked.to_owned()),
    }
}
