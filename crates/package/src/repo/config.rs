//! The repositories a berth installation offers (DESIGN.md §3): an Update names one of them, or
//! a directory under a configured repository root, and nothing else on a worker's disk.
//!
//! A repositories file, YAML, parsed strictly (unknown fields are refused):
//!
//! ```yaml
//! repositories:
//!   - name: local                       # a DNS label; what an Update's `repository` names
//!     directory: /srv/berth/packages    # <dir>/<package>/<version>/
//!   - name: releases
//!     archive: https://example.com/berth/   # <base><package>-<version>.tar.gz (or a directory)
//!   - name: registry
//!     oci: oci://registry.example.com/berth/packages
//!     plainHttp: false                  # HTTP instead of HTTPS (a registry on loopback)
//!     usernameFile: /etc/berth/registry-user
//!     passwordFile: /etc/berth/registry-password
//! roots:                                # an Update may name a directory under one of these
//!   - /home/me/packages
//! ```
//!
//! Relative paths in a file are relative to the file's directory. Credentials are read from
//! files when a worker opens the repository, never carried in the API or the file itself.
//!
//! Lifecycle checks a requested repository with [`Repositories::check`] (refusing what is
//! neither a name nor a relative directory under a root, before anything changes); a worker
//! resolves it with [`Repositories::resolve`], which canonicalises a root-relative path and
//! refuses one that leaves its root through symlinks.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::publish::staging_dir;
use super::{
    ArchiveRepository, Fetched, Limits, LocalRepository, OciAuth, OciRepository, RepoError,
    check_segment,
};
use crate::constraint::parse_version;
use crate::tree::{Dir, Links, TreeError};

/// Largest repositories file read.
pub const MAX_CONFIG_BYTES: u64 = 256 * 1024;
/// Most repositories (and, separately, roots) one configuration names.
pub const MAX_REPOSITORIES: usize = 256;
/// Largest credential file read (a user name or a password/token).
const MAX_CREDENTIAL_BYTES: u64 = 16 * 1024;
/// Longest an archive download may take.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(600);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A configuration that cannot be used, naming where (file and field, or flag) and why.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {message}")]
pub struct ConfigError {
    pub origin: String,
    pub message: String,
}

/// Where one named repository's packages come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `<dir>/<package>/<version>/`.
    Directory(PathBuf),
    /// `<root>/<dir>/<package>/<version>/`: a directory an Update named under a configured
    /// repository root (`dir` relative), read beneath the root (see [`LocalRepository`]).
    UnderRoot { root: PathBuf, dir: PathBuf },
    /// `<dir>/<package>-<version>.tar.gz`.
    Archive(PathBuf),
    /// `<base>/<package>-<version>.tar.gz` over HTTPS (HTTP only on loopback).
    ArchiveUrl(String),
    /// An OCI registry, `oci://host[:port]/path`.
    Oci(OciSource),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciSource {
    pub url: String,
    pub plain_http: bool,
    pub username_file: Option<PathBuf>,
    pub password_file: Option<PathBuf>,
    /// Credentials given in memory (a PackageRepository's Secret, read by the controller);
    /// files win when both are set.
    pub credentials: Option<Credentials>,
}

/// A registry user name and password; `Debug` shows neither.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials(<redacted>)")
    }
}

/// What a PackageRepository resource defines (lifecycle and workers turn its definition into
/// this, then into a [`Source`] with [`Repositories::define`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Defined {
    /// An absolute directory under one of the repository roots.
    Directory(PathBuf),
    /// An `https://` base of archives.
    ArchiveUrl(String),
    Oci {
        url: String,
        plain_http: bool,
        credentials: Option<Credentials>,
    },
}

/// The named repositories and repository roots of one installation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Repositories {
    named: BTreeMap<String, Source>,
    roots: Vec<PathBuf>,
}

/// A requested repository, checked against the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested<'a> {
    Named(&'a str, &'a Source),
    /// A directory relative to one of the roots (not yet resolved on disk).
    UnderRoot(&'a Path),
}

/// A requested repository resolved to its source by a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub source: Source,
    /// Names the source (its kind and canonical path or URL): two repositories offering the
    /// same package version are told apart by it.
    pub identity: String,
}

impl Resolved {
    /// A short, path-safe digest of [`identity`](Self::identity), for cache paths.
    pub fn cache_id(&self) -> String {
        hex::encode(&Sha256::digest(self.identity.as_bytes())[..8])
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDoc {
    #[serde(default)]
    repositories: Vec<EntryDoc>,
    #[serde(default)]
    roots: Vec<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct EntryDoc {
    name: String,
    directory: Option<PathBuf>,
    archive: Option<String>,
    oci: Option<String>,
    #[serde(default)]
    plain_http: bool,
    username_file: Option<PathBuf>,
    password_file: Option<PathBuf>,
}

impl Defined {
    /// What a PackageRepository's definition asks for, from its parts as they cross the seam
    /// (lifecycle's `RepositoryDefinition`): exactly one of `directory`, `archive_url` and
    /// `oci`; `plain_http` and `credentials` for OCI only.
    pub fn from_parts(
        directory: Option<&str>,
        archive_url: Option<&str>,
        oci: Option<&str>,
        plain_http: bool,
        credentials: Option<Credentials>,
    ) -> Result<Defined, String> {
        if (plain_http || credentials.is_some()) && oci.is_none() {
            return Err("plainHttp and credentials apply to oci repositories only".into());
        }
        match (directory, archive_url, oci) {
            (Some(d), None, None) => Ok(Defined::Directory(PathBuf::from(d))),
            (None, Some(u), None) => Ok(Defined::ArchiveUrl(u.to_owned())),
            (None, None, Some(url)) => Ok(Defined::Oci {
                url: url.to_owned(),
                plain_http,
                credentials,
            }),
            _ => Err("exactly one of directory, archive or oci".into()),
        }
    }
}

impl Repositories {
    /// Reads a repositories file.
    pub fn load(path: &Path) -> Result<Repositories, ConfigError> {
        let origin = format!("repositories file {}", path.display());
        let fail = |message: String| ConfigError {
            origin: origin.clone(),
            message,
        };
        let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
        let mut text = String::new();
        file.take(MAX_CONFIG_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(|e| fail(e.to_string()))?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(fail(format!("larger than {MAX_CONFIG_BYTES} bytes")));
        }
        // A bare file name (`repos.yaml`) has the empty path as its parent: its directory is
        // the working directory (issue 31.10: `absolute("")` is an error).
        let base = match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent,
            _ => Path::new("."),
        };
        let base = std::path::absolute(base).map_err(|e| fail(e.to_string()))?;
        Repositories::parse(&text, &base, &origin)
    }

    /// Parses a repositories file's text; relative paths are relative to `base`.
    pub fn parse(text: &str, base: &Path, origin: &str) -> Result<Repositories, ConfigError> {
        let fail = |message: String| ConfigError {
            origin: origin.to_owned(),
            message,
        };
        let doc: FileDoc = if text.trim().is_empty() {
            FileDoc {
                repositories: vec![],
                roots: vec![],
            }
        } else {
            serde_saphyr::from_str(text).map_err(|e| fail(e.to_string()))?
        };
        if doc.repositories.len() > MAX_REPOSITORIES || doc.roots.len() > MAX_REPOSITORIES {
            return Err(fail(format!(
                "more than {MAX_REPOSITORIES} repositories or roots"
            )));
        }
        let mut repos = Repositories::default();
        for (i, entry) in doc.repositories.into_iter().enumerate() {
            let at = format!("repositories[{i}]");
            let name = entry.name.clone();
            let source = entry_source(entry, base).map_err(|m| fail(format!("{at}: {m}")))?;
            repos
                .add(&name, source)
                .map_err(|m| fail(format!("{at}: {m}")))?;
        }
        for (i, root) in doc.roots.into_iter().enumerate() {
            repos
                .add_root(&base.join(root))
                .map_err(|m| fail(format!("roots[{i}]: {m}")))?;
        }
        Ok(repos)
    }

    /// Adds `NAME=SOURCE` from a command line: `oci://…` (HTTPS, or HTTP for a loopback
    /// host), `https://…` (archives over HTTP; `http://` for a loopback host), `archive:PATH`
    /// (a directory of archives), or a directory PATH. Relative paths are relative to `base`.
    pub fn add_flag(&mut self, flag: &str, base: &Path) -> Result<(), ConfigError> {
        let fail = |message: String| ConfigError {
            origin: format!("--repository {flag}"),
            message,
        };
        let (name, text) = flag
            .split_once('=')
            .ok_or_else(|| fail("expected NAME=SOURCE".into()))?;
        let source = if let Some(rest) = text.strip_prefix("oci://") {
            let host = rest.split('/').next().unwrap_or("");
            Source::Oci(OciSource {
                url: text.to_owned(),
                plain_http: is_loopback_host(host),
                username_file: None,
                password_file: None,
                credentials: None,
            })
        } else if text.starts_with("https://") || text.starts_with("http://") {
            Source::ArchiveUrl(text.to_owned())
        } else if let Some(path) = text.strip_prefix("archive:") {
            Source::Archive(base.join(path))
        } else {
            Source::Directory(base.join(text))
        };
        let source = checked_source(source).map_err(fail)?;
        self.add(name, source).map_err(fail)
    }

    /// Adds a named repository; the name is a DNS label and unique.
    pub fn add(&mut self, name: &str, source: Source) -> Result<(), String> {
        if !berth_names::is_dns_label(name) {
            return Err(format!(
                "name {name:?} must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"
            ));
        }
        if self.named.contains_key(name) {
            return Err(format!("name {name:?} is configured twice"));
        }
        if self.named.len() >= MAX_REPOSITORIES {
            return Err(format!("more than {MAX_REPOSITORIES} repositories"));
        }
        self.named.insert(name.to_owned(), source);
        Ok(())
    }

    /// The source a repository that a PackageRepository resource defines has here. Refused,
    /// naming why: a name that is not a DNS label or that the configuration already has (a
    /// configured repository wins), a source that cannot work, a directory that is not an
    /// absolute path of plain segments under one of the roots (it is read beneath that root, as
    /// an Update's root-relative directory is) or that is not there.
    pub fn define(&self, name: &str, defined: Defined) -> Result<Source, String> {
        if !berth_names::is_dns_label(name) {
            return Err(format!(
                "name {name:?} must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"
            ));
        }
        if self.named.contains_key(name) {
            return Err(format!(
                "{name:?} is a repository the installation configures; a resource cannot redefine it"
            ));
        }
        let source = match defined {
            Defined::Directory(dir) => {
                let plain = dir.is_absolute()
                    && dir
                        .components()
                        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
                if !plain {
                    return Err(format!(
                        "directory {}: must be an absolute path without '.' or '..' segments",
                        dir.display()
                    ));
                }
                let Some((root, rel)) = self
                    .roots
                    .iter()
                    .find_map(|r| Some((r, dir.strip_prefix(r).ok()?)))
                else {
                    return Err(format!(
                        "directory {} is under none of the repository roots ({})",
                        dir.display(),
                        self.describe()
                    ));
                };
                let requested = dir.display().to_string();
                let (root, _) = Repositories {
                    named: BTreeMap::new(),
                    roots: vec![root.clone()],
                }
                .under_root(&requested, rel)?;
                Source::UnderRoot {
                    root,
                    dir: rel.to_owned(),
                }
            }
            Defined::ArchiveUrl(url) => Source::ArchiveUrl(url),
            Defined::Oci {
                url,
                plain_http,
                credentials,
            } => Source::Oci(OciSource {
                url,
                plain_http,
                username_file: None,
                password_file: None,
                credentials,
            }),
        };
        checked_source(source)
    }

    /// This configuration with `name` as well, as `source` (what [`define`](Self::define)
    /// answered): what lifecycle checks an Update naming a defined repository against, and a
    /// worker resolves it with.
    pub fn with_defined(&self, name: &str, source: Source) -> Result<Repositories, String> {
        let mut out = self.clone();
        out.add(name, source)?;
        Ok(out)
    }

    /// Adds a repository root: an Update may name a directory under it. Must be absolute.
    pub fn add_root(&mut self, root: &Path) -> Result<(), String> {
        if !root.is_absolute() {
            return Err(format!("root {} must be absolute", root.display()));
        }
        if self.roots.len() >= MAX_REPOSITORIES {
            return Err(format!("more than {MAX_REPOSITORIES} roots"));
        }
        if !self.roots.iter().any(|r| r == root) {
            self.roots.push(root.to_owned());
        }
        Ok(())
    }

    /// Adds everything `other` configures; a name configured in both is refused.
    pub fn merge(&mut self, other: Repositories) -> Result<(), String> {
        for (name, source) in other.named {
            self.add(&name, source)?;
        }
        for root in other.roots {
            self.add_root(&root)?;
        }
        Ok(())
    }

    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.named.keys().map(String::as_str)
    }

    pub fn is_empty(&self) -> bool {
        self.named.is_empty() && self.roots.is_empty()
    }

    /// What is configured, for error messages: the names and the roots.
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.names().collect();
        let roots: Vec<String> = self.roots.iter().map(|r| r.display().to_string()).collect();
        format!(
            "configured repositories: [{}]; repository roots: [{}]",
            names.join(", "),
            roots.join(", ")
        )
    }

    /// Checks a requested repository without touching the disk: a configured name, or a
    /// relative path of plain segments (no `..`, `.`, or leading `/`) when a root is
    /// configured. The error says what was given and what is configured.
    pub fn check<'a>(&'a self, requested: &'a str) -> Result<Requested<'a>, String> {
        if let Some((name, source)) = self.named.get_key_value(requested) {
            return Ok(Requested::Named(name, source));
        }
        let path = Path::new(requested);
        let refuse = |why: &str| {
            Err(format!(
                "{requested:?} is {why}; an Update names a configured repository or a relative directory under a repository root ({})",
                self.describe()
            ))
        };
        if requested.is_empty() || requested.contains('\0') {
            return refuse("empty or not a path");
        }
        if path.is_absolute() {
            return refuse("an absolute path");
        }
        if !path.components().all(|c| matches!(c, Component::Normal(_))) {
            return refuse("a path with '.' or '..' segments");
        }
        if self.roots.is_empty() {
            return refuse("not a configured repository, and no repository root is configured");
        }
        Ok(Requested::UnderRoot(path))
    }

    /// [`check`](Self::check), and for a root-relative path that it is a directory under
    /// one of the roots here, resolved beneath the root: one that leaves its root through a
    /// link is refused naming the link. What lifecycle runs at the edge; the worker resolves
    /// it again when it fetches.
    pub fn check_exists(&self, requested: &str) -> Result<(), String> {
        match self.check(requested)? {
            Requested::Named(..) => Ok(()),
            Requested::UnderRoot(rel) => self.under_root(requested, rel).map(|_| ()),
        }
    }

    /// The first root `rel` is a directory under (resolved beneath it), with the directory.
    fn under_root(&self, requested: &str, rel: &Path) -> Result<(PathBuf, Dir), String> {
        for root in &self.roots {
            let Ok(opened) = Dir::open(root) else {
                continue;
            };
            match opened.dir(rel, Links::Beneath) {
                Ok(dir) => return Ok((root.clone(), dir)),
                Err(TreeError::Escapes { link, target, .. }) => {
                    let through = match (link, target) {
                        (Some(l), Some(t)) => {
                            format!(" (the link {} -> {})", l.display(), t.display())
                        }
                        _ => String::new(),
                    };
                    return Err(format!(
                        "{requested:?} leaves the repository root {} through a symlink{through}",
                        root.display()
                    ));
                }
                Err(_) => continue,
            }
        }
        Err(format!(
            "{requested:?} is neither a configured repository nor a directory under a repository root ({})",
            self.describe()
        ))
    }

    /// Resolves a requested repository to its source. A root-relative path is resolved
    /// beneath its root's descriptor (links followed while they stay beneath it): one that
    /// leaves the root through a link is refused, naming the link. The source keeps the root
    /// and the relative path, and every fetch resolves them beneath the root again, so what is
    /// read never depends on a path checked earlier.
    pub fn resolve(&self, requested: &str) -> Result<Resolved, String> {
        let rel = match self.check(requested)? {
            Requested::Named(name, source) => {
                return Ok(Resolved {
                    identity: format!("{name} {}", describe_source(source)),
                    source: source.clone(),
                });
            }
            Requested::UnderRoot(rel) => rel,
        };
        let (root, dir) = self.under_root(requested, rel)?;
        // The identity names the directory as the kernel knows it, so an internal link and
        // its target are one repository (one cache entry).
        let real = dir.real_path().map_err(|e| e.to_string())?;
        Ok(Resolved {
            identity: format!("directory {}", real.display()),
            source: Source::UnderRoot {
                root,
                dir: rel.to_owned(),
            },
        })
    }
}

impl Source {
    /// The source in words: its kind and path or URL (never credentials).
    pub fn describe(&self) -> String {
        describe_source(self)
    }
}

fn describe_source(source: &Source) -> String {
    match source {
        Source::Directory(p) => format!("directory {}", p.display()),
        Source::UnderRoot { root, dir } => {
            format!("directory {} under {}", dir.display(), root.display())
        }
        Source::Archive(p) => format!("archive {}", p.display()),
        Source::ArchiveUrl(u) => format!("archive {u}"),
        Source::Oci(o) => format!("oci {}", o.url),
    }
}

fn is_loopback_host(host_port: &str) -> bool {
    let host = if let Some(rest) = host_port.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// One file entry as a source: exactly one of `directory`, `archive`, `oci`; OCI options
/// only with `oci`.
fn entry_source(entry: EntryDoc, base: &Path) -> Result<Source, String> {
    let kinds = [
        entry.directory.is_some(),
        entry.archive.is_some(),
        entry.oci.is_some(),
    ];
    if kinds.iter().filter(|k| **k).count() != 1 {
        return Err(format!(
            "repository {:?} must have exactly one of directory, archive, oci",
            entry.name
        ));
    }
    let oci_options =
        entry.plain_http || entry.username_file.is_some() || entry.password_file.is_some();
    if oci_options && entry.oci.is_none() {
        return Err(format!(
            "repository {:?}: plainHttp, usernameFile and passwordFile apply to oci repositories only",
            entry.name
        ));
    }
    if entry.username_file.is_some() != entry.password_file.is_some() {
        return Err(format!(
            "repository {:?}: usernameFile and passwordFile go together",
            entry.name
        ));
    }
    let source = if let Some(dir) = entry.directory {
        Source::Directory(base.join(dir))
    } else if let Some(archive) = entry.archive {
        if archive.starts_with("https://") || archive.starts_with("http://") {
            Source::ArchiveUrl(archive)
        } else {
            Source::Archive(base.join(archive))
        }
    } else {
        Source::Oci(OciSource {
            url: entry.oci.unwrap_or_default(),
            plain_http: entry.plain_http,
            username_file: entry.username_file.map(|p| base.join(p)),
            password_file: entry.password_file.map(|p| base.join(p)),
            credentials: None,
        })
    };
    checked_source(source).map_err(|m| format!("repository {:?}: {m}", entry.name))
}

/// Refuses sources that cannot work: bad OCI URLs, archive URLs over plain HTTP to another
/// host.
fn checked_source(source: Source) -> Result<Source, String> {
    match &source {
        Source::Oci(o) => {
            OciRepository::new(&o.url, OciAuth::Anonymous, o.plain_http)
                .map_err(|e| e.to_string())?;
        }
        Source::ArchiveUrl(url) => {
            let parsed = reqwest::Url::parse(url).map_err(|e| format!("archive {url:?}: {e}"))?;
            let host = parsed.host_str().unwrap_or("");
            let plain_ok = parsed.scheme() == "http" && is_loopback_host(host);
            if parsed.scheme() != "https" && !plain_ok {
                return Err(format!(
                    "archive {url:?}: must be https:// (http:// only on a loopback host)"
                ));
            }
            if !parsed.username().is_empty() || parsed.password().is_some() {
                return Err(format!(
                    "archive {url:?}: credentials in the URL are not accepted"
                ));
            }
        }
        Source::Directory(_) | Source::UnderRoot { .. } | Source::Archive(_) => {}
    }
    Ok(source)
}

/// What a fetch from a [`Source`] published, and the revision it came from when the source
/// has one (an OCI manifest digest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFetched {
    pub fetched: Fetched,
    pub revision: Option<String>,
}

impl Source {
    fn oci(o: &OciSource, limits: Limits) -> Result<OciRepository, RepoError> {
        let auth = match (&o.username_file, &o.password_file, &o.credentials) {
            (Some(user), Some(password), _) => OciAuth::Basic {
                username: read_credential(user)?,
                password: read_credential(password)?,
            },
            (_, _, Some(c)) => OciAuth::Basic {
                username: c.username.clone(),
                password: c.password.clone(),
            },
            _ => OciAuth::Anonymous,
        };
        Ok(OciRepository::new(&o.url, auth, o.plain_http)?.with_limits(limits))
    }

    /// The revision `version` of `package` has in the source now, when the source can tell:
    /// the OCI manifest digest behind the tag, or a directory's content digest (its files may
    /// be edited under the same version, issue 31.9); `None` for archives.
    pub async fn revision(
        &self,
        package: &str,
        version: &str,
        limits: Limits,
    ) -> Result<Option<String>, RepoError> {
        if let Some(repo) = self.local(limits) {
            let (package, version) = (package.to_owned(), version.to_owned());
            return tokio::task::spawn_blocking(move || repo.revision(&package, &version))
                .await
                .map_err(|e| RepoError::Archive {
                    path: PathBuf::new(),
                    message: format!("digest task failed: {e}"),
                })?
                .map(Some);
        }
        match self {
            Source::Oci(o) => Ok(Some(
                Source::oci(o, limits)?
                    .manifest_digest(package, version)
                    .await?,
            )),
            _ => Ok(None),
        }
    }

    /// Whether [`Source::revision`] tells this source's revisions.
    pub fn has_revisions(&self) -> bool {
        !matches!(self, Source::Archive(_) | Source::ArchiveUrl(_))
    }

    /// The directory repository this source is, if it is one.
    fn local(&self, limits: Limits) -> Option<LocalRepository> {
        match self {
            Source::Directory(dir) => Some(LocalRepository::new(dir).with_limits(limits)),
            Source::UnderRoot { root, dir } => {
                Some(LocalRepository::under_root(root, dir).with_limits(limits))
            }
            _ => None,
        }
    }

    /// The version `requested` names in the source now: an OCI repository resolves a semver
    /// constraint (`~1.2`, `>=1.0 <2`) to the tag of the newest version it allows; an exact
    /// version, and any version of a directory or archive source, is itself.
    pub async fn resolve(
        &self,
        package: &str,
        requested: &str,
        limits: Limits,
    ) -> Result<String, RepoError> {
        match self {
            Source::Oci(o) if parse_version(requested).is_err() => Ok(Source::oci(o, limits)?
                .resolve_tag(package, requested)
                .await?
                .1),
            _ => Ok(requested.to_owned()),
        }
    }

    /// Fetches `package` `version` and publishes it at `dest` (see
    /// [`LocalRepository::fetch`]).
    pub async fn fetch(
        &self,
        package: &str,
        version: &str,
        dest: &Path,
        limits: Limits,
    ) -> Result<SourceFetched, RepoError> {
        let (package_owned, version_owned, dest_owned) =
            (package.to_owned(), version.to_owned(), dest.to_owned());
        let blocking = |f: Box<dyn FnOnce() -> Result<Fetched, RepoError> + Send>| async move {
            tokio::task::spawn_blocking(f)
                .await
                .map_err(|e| RepoError::Archive {
                    path: PathBuf::new(),
                    message: format!("fetch task failed: {e}"),
                })?
        };
        let fetched = match self {
            Source::Directory(_) | Source::UnderRoot { .. } => {
                // The revision is taken before the copy: a tree edited meanwhile is newer than
                // the revision recorded, so the next check fetches it again.
                let revision = self.revision(package, version, limits).await?;
                let local = self.local(limits);
                let fetched = blocking(Box::new(move || match local {
                    Some(repo) => repo.fetch(&package_owned, &version_owned, &dest_owned),
                    None => Err(RepoError::UnsafePath {
                        path: dest_owned.display().to_string(),
                        reason: "not a directory repository",
                    }),
                }))
                .await?;
                return Ok(SourceFetched { fetched, revision });
            }
            Source::Archive(dir) => {
                let repo = ArchiveRepository::new(dir).with_limits(limits);
                blocking(Box::new(move || {
                    repo.fetch(&package_owned, &version_owned, &dest_owned)
                }))
                .await?
            }
            Source::ArchiveUrl(base) => {
                check_segment("package name", package)?;
                check_segment("package version", version)?;
                let staging = {
                    let dest = dest.to_owned();
                    tokio::task::spawn_blocking(move || staging_dir(&dest))
                        .await
                        .map_err(|e| RepoError::Archive {
                            path: PathBuf::new(),
                            message: format!("staging failed: {e}"),
                        })??
                };
                download_archive(base, package, version, staging.path(), limits).await?;
                let repo = ArchiveRepository::new(staging.path()).with_limits(limits);
                blocking(Box::new(move || {
                    let fetched = repo.fetch(&package_owned, &version_owned, &dest_owned);
                    drop(staging);
                    fetched
                }))
                .await?
            }
            Source::Oci(o) => {
                let fetched = Source::oci(o, limits)?
                    .fetch(package, version, dest, None)
                    .await?;
                return Ok(SourceFetched {
                    fetched: fetched.fetched,
                    revision: Some(fetched.manifest_digest),
                });
            }
        };
        Ok(SourceFetched {
            fetched,
            revision: None,
        })
    }
}

fn read_credential(path: &Path) -> Result<String, RepoError> {
    let file = std::fs::File::open(path).map_err(RepoError::io("read credential", path))?;
    let mut text = String::new();
    file.take(MAX_CREDENTIAL_BYTES)
        .read_to_string(&mut text)
        .map_err(RepoError::io("read credential", path))?;
    Ok(text.trim_end_matches(['\n', '\r']).to_owned())
}

/// Downloads `<base>/<package>-<version>.tar.gz` into `dir`, at most `limits.max_total_bytes`.
async fn download_archive(
    base: &str,
    package: &str,
    version: &str,
    dir: &Path,
    limits: Limits,
) -> Result<(), RepoError> {
    use futures::StreamExt as _;
    use tokio::io::AsyncWriteExt as _;
    let file_name = format!("{package}-{version}.tar.gz");
    let url = format!("{}/{file_name}", base.trim_end_matches('/'));
    let failed = |message: String| RepoError::Registry {
        repository: base.to_owned(),
        op: format!("downloading {file_name}"),
        message,
    };
    // reqwest needs a process-wide rustls provider; berth uses ring (as for OCI).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::builder()
        .https_only(!url.starts_with("http://"))
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(DOWNLOAD_TIMEOUT)
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let response = client
        .get(&url)
        .send()
        .await
        .map_err(|e| failed(e.to_string()))?;
    if response.status() == reqwest::StatusCode::NOT_FOUND {
        return Err(RepoError::VersionNotFound {
            package: package.to_owned(),
            version: version.to_owned(),
        });
    }
    if !response.status().is_success() {
        return Err(failed(format!("HTTP {}", response.status())));
    }
    let limit = limits.max_total_bytes;
    if response.content_length().is_some_and(|n| n > limit) {
        return Err(RepoError::LimitExceeded {
            limit: format!("{limit} bytes"),
        });
    }
    let to = dir.join(&file_name);
    let mut file = tokio::fs::File::create(&to)
        .await
        .map_err(RepoError::io("create file", &to))?;
    let mut stream = response.bytes_stream();
    let mut written = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| failed(e.to_string()))?;
        written += chunk.len() as u64;
        if written > limit {
            return Err(RepoError::LimitExceeded {
                limit: format!("{limit} bytes"),
            });
        }
        file.write_all(&chunk)
            .await
            .map_err(RepoError::io("write file", &to))?;
    }
    file.flush()
        .await
        .map_err(RepoError::io("write file", &to))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Repositories, String> {
        Repositories::parse(text, Path::new("/etc/berth"), "repositories file r.yaml")
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_file_names_every_kind_and_resolves_relative_paths_against_its_directory() {
        let repos = parse(
            "repositories:\n\
             - name: local\n  directory: packages\n\
             - name: tarballs\n  archive: /srv/archives\n\
             - name: web\n  archive: https://example.com/berth/\n\
             - name: registry\n  oci: oci://registry.example.com/berth/packages\n  usernameFile: user\n  passwordFile: /run/secrets/password\n\
             roots:\n- /home/me/packages\n",
        )
        .expect("valid");
        assert_eq!(
            repos.names().collect::<Vec<_>>(),
            ["local", "registry", "tarballs", "web"]
        );
        assert_eq!(repos.roots(), [PathBuf::from("/home/me/packages")]);
        let local = repos.resolve("local").expect("named");
        assert_eq!(
            local.source,
            Source::Directory("/etc/berth/packages".into())
        );
        match repos.resolve("registry").expect("named").source {
            Source::Oci(o) => {
                assert_eq!(o.username_file, Some("/etc/berth/user".into()));
                assert!(!o.plain_http);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            repos.resolve("web").expect("named").source,
            Source::ArchiveUrl("https://example.com/berth/".into())
        );
    }

    #[test]
    fn refusals_name_the_file_and_the_field() {
        for (text, needle) in [
            (
                "repositories:\n- name: a\n  directory: /x\n  extra: 1\n",
                "extra",
            ),
            ("repos: []\n", "repos"),
            (
                "repositories:\n- name: Bad_Name\n  directory: /x\n",
                "repositories[0]: name \"Bad_Name\"",
            ),
            (
                "repositories:\n- name: a\n  directory: /x\n- name: a\n  directory: /y\n",
                "repositories[1]: name \"a\" is configured twice",
            ),
            (
                "repositories:\n- name: a\n",
                "exactly one of directory, archive, oci",
            ),
            (
                "repositories:\n- name: a\n  directory: /x\n  oci: oci://h/p\n",
                "exactly one of",
            ),
            (
                "repositories:\n- name: a\n  directory: /x\n  plainHttp: true\n",
                "oci repositories only",
            ),
            (
                "repositories:\n- name: a\n  oci: oci://h/p\n  usernameFile: u\n",
                "go together",
            ),
            (
                "repositories:\n- name: a\n  oci: https://h/p\n",
                "must start with oci://",
            ),
            (
                "repositories:\n- name: a\n  archive: http://example.com/x/\n",
                "must be https://",
            ),
            (
                "repositories:\n- name: a\n  archive: https://u:p@example.com/x/\n",
                "credentials in the URL",
            ),
            (
                "repositories:\n- name: a\n  oci: oci://h/p\n  password: hunter2\n",
                "password",
            ),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.starts_with("repositories file r.yaml: "), "{err}");
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn requests_are_a_name_or_a_plain_relative_path_under_a_root() {
        let mut repos = Repositories::default();
        repos
            .add("local", Source::Directory("/srv/p".into()))
            .unwrap();
        for refused in ["/tmp/evil", "../evil", "a/../../evil", "./a", ""] {
            let err = repos.check(refused).expect_err(refused);
            assert!(err.contains("configured repositories: [local]"), "{err}");
        }
        // Without a root only names are accepted.
        let err = repos.check("examples/packages").expect_err("no root");
        assert!(err.contains("no repository root"), "{err}");
        repos.add_root(Path::new("/srv/roots")).unwrap();
        assert_eq!(
            repos.check("examples/packages"),
            Ok(Requested::UnderRoot(Path::new("examples/packages")))
        );
        assert!(matches!(
            repos.check("local"),
            Ok(Requested::Named("local", _))
        ));
        assert!(
            repos.check("/srv/roots/x").is_err(),
            "absolute even under a root"
        );
    }

    #[test]
    fn a_path_under_a_root_resolves_canonically_and_may_not_leave_it() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("repo/pkg")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("evil")).unwrap();
        std::os::unix::fs::symlink("repo", root.path().join("alias")).unwrap();
        let mut repos = Repositories::default();
        repos.add_root(root.path()).unwrap();
        let real = root.path().canonicalize().unwrap().join("repo");
        let resolved = repos.resolve("repo").expect("inside");
        assert_eq!(
            resolved.source,
            Source::UnderRoot {
                root: root.path().to_owned(),
                dir: "repo".into()
            }
        );
        assert_eq!(resolved.identity, format!("directory {}", real.display()));
        // An internal symlink is the same repository (the same cache entry).
        assert_eq!(
            repos.resolve("alias").expect("inside").identity,
            resolved.identity
        );
        let err = repos.resolve("evil").expect_err("escapes");
        assert!(err.contains("leaves the repository root"), "{err}");
        assert!(err.contains("evil ->"), "names the link: {err}");
        let err = repos.resolve("missing").expect_err("missing");
        assert!(err.contains("neither a configured repository"), "{err}");
        assert!(repos.check_exists("repo").is_ok());
        assert!(repos.check_exists("missing").is_err());
        // Two sources never share a cache id.
        let mut other = Repositories::default();
        other.add("x", Source::Archive(real)).unwrap();
        assert_ne!(other.resolve("x").unwrap().cache_id(), resolved.cache_id());
    }

    #[test]
    fn flags_name_sources_by_their_form() {
        let mut repos = Repositories::default();
        let base = Path::new("/work");
        repos.add_flag("dir=packages", base).unwrap();
        repos.add_flag("tar=archive:dist", base).unwrap();
        repos
            .add_flag("reg=oci://127.0.0.1:5000/berth", base)
            .unwrap();
        repos
            .add_flag("remote=oci://registry.example.com/berth", base)
            .unwrap();
        let source = |n: &str| repos.resolve(n).unwrap().source;
        assert_eq!(source("dir"), Source::Directory("/work/packages".into()));
        assert_eq!(source("tar"), Source::Archive("/work/dist".into()));
        assert!(matches!(source("reg"), Source::Oci(o) if o.plain_http));
        assert!(matches!(source("remote"), Source::Oci(o) if !o.plain_http));
        let err = repos.add_flag("nothing", base).unwrap_err().to_string();
        assert!(
            err.contains("--repository nothing: expected NAME=SOURCE"),
            "{err}"
        );
        let err = repos.add_flag("dir=/other", base).unwrap_err().to_string();
        assert!(err.contains("configured twice"), "{err}");
    }
}
