//! Package repositories: where package versions come from, and how a version is published
//! safely into a local directory that the rest of berth reads.
//!
//! Every back end unpacks into a staging directory beside the destination through [`stage`],
//! which enforces the path, link and size rules, then [`publish`] checks the result is a loadable
//! package with the requested name and version and renames it into place. The digest of a
//! published tree ([`digest`]) makes re-fetching idempotent.
//!
//! The local and archive APIs are blocking (std::fs); async callers run them on
//! `spawn_blocking`. The OCI repository is async (it talks HTTP).

mod archive;
mod config;
mod digest;
mod local;
mod oci;
mod pack;
mod publish;
mod stage;

use std::io;
use std::path::PathBuf;

pub use archive::ArchiveRepository;
pub use config::{
    ConfigError, Credentials, Defined, MAX_CONFIG_BYTES, MAX_REPOSITORIES, OciSource, Repositories,
    Requested, Resolved, Source, SourceFetched,
};
pub use digest::digest_tree;
pub use local::LocalRepository;
pub use oci::{CONFIG_MEDIA_TYPE, OciAuth, OciFetched, OciRepository};
pub use pack::{Packed, pack, write_archive};

use crate::load::LoadError;

/// Default bound on the total bytes of one package version (hook binaries can be tens of MiB).
pub const DEFAULT_MAX_TOTAL_BYTES: u64 = 512 * 1024 * 1024;
/// Default bound on the number of entries (files, directories, links) in one package version.
pub const DEFAULT_MAX_ENTRIES: usize = 10_000;
/// Default bound on directory nesting inside a package.
pub const DEFAULT_MAX_DEPTH: usize = 32;

/// Size bounds applied while a package is unpacked, before anything is published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_total_bytes: u64,
    pub max_entries: usize,
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES,
            max_entries: DEFAULT_MAX_ENTRIES,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// A published package version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// `sha256:<hex>` over the published tree (see [`digest_tree`]).
    pub digest: String,
    /// Where it was published (the `dest` passed to `fetch`).
    pub path: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidName {
        what: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("package {package:?} version {version:?} is not in the repository")]
    VersionNotFound { package: String, version: String },
    #[error("package {package:?} is not in the repository")]
    PackageNotFound { package: String },
    #[error("{}: {op}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("unsafe path {path:?} in package: {reason}")]
    UnsafePath { path: String, reason: &'static str },
    #[error("symlink {path:?} -> {target:?} points outside the package")]
    LinkEscapes { path: String, target: String },
    /// The way to a package version leaves the repository root through a link.
    #[error(
        "{path} leaves the repository root {root}{}",
        match (link, target) {
            (Some(l), Some(t)) => format!(" through the link {l} -> {t}"),
            (Some(l), None) => format!(" through the link {l}"),
            _ => String::new(),
        }
    )]
    LeavesRoot {
        path: String,
        link: Option<String>,
        target: Option<String>,
        root: String,
    },
    #[error("{path:?} is a {kind}, which packages may not contain")]
    UnsupportedEntry { path: String, kind: String },
    #[error("package exceeds the limit of {limit}")]
    LimitExceeded { limit: String },
    #[error("archive {}: {message}", path.display())]
    Archive { path: PathBuf, message: String },
    #[error("registry {repository}: {op}: {message}")]
    Registry {
        repository: String,
        op: String,
        message: String,
    },
    #[error("fetched package is not valid: {0}")]
    InvalidPackage(#[source] Box<LoadError>),
    #[error("fetched package is {found}, but {expected} was requested")]
    Mismatch { expected: String, found: String },
}

impl RepoError {
    pub(crate) fn io(
        op: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(io::Error) -> RepoError {
        let path = path.into();
        move |source| RepoError::Io { op, path, source }
    }
}

/// Package names and versions become path segments, so they must not be able to leave the
/// repository root or the destination.
pub(crate) fn check_segment(what: &'static str, value: &str) -> Result<(), RepoError> {
    let reason = if value.is_empty() {
        Some("must not be empty")
    } else if value == "." || value == ".." || value.contains("..") {
        Some("must not contain '..'")
    } else if value.contains(['/', '\\', '\0']) {
        Some("must not contain path separators")
    } else if value.starts_with('.') {
        Some("must not start with '.'")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(RepoError::InvalidName {
            what,
            value: value.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}
