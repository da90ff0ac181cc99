//! OCI registries as package repositories, the way Deckhouse distributes modules: the
//! repository `oci://host[:port]/path` holds each package as the image `host/path/<package>`,
//! whose tags are the package's versions. An image has one layer, the package's files as a
//! `.tar.gz` (what [`pack`](super::pack::pack) writes; a single top-level directory is
//! accepted as for archives).
//!
//! Fetching resolves a version constraint against the tags (the newest matching version),
//! pulls the manifest, checks the layer's declared size against the limits before downloading
//! it, downloads it into the staging directory while hashing it, refuses it unless its sha256
//! is the digest the manifest names, and unpacks and publishes it through the same rules as
//! every repository. The manifest digest is returned, so a caller can tell when the image
//! behind a tag changed and fetch again.
//!
//! The OCI protocol itself (token auth, manifests, blob uploads) is oci-client's.

use std::path::Path;

use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::manifest::{IMAGE_LAYER_GZIP_MEDIA_TYPE, OciDescriptor};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt as _;

use super::archive::{package_root, unpack_tar_gz};
use super::pack::Packed;
use super::publish::{publish, staging_dir};
use super::stage::Stager;
use super::{Fetched, Limits, RepoError, check_segment};
use crate::constraint::{VersionConstraint, parse_version};

/// The media type of the config blob berth pushes (a small JSON with name and version).
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.berth.package.config.v1+json";
/// Layer media types a package image may carry.
const LAYER_MEDIA_TYPES: &[&str] = &[
    IMAGE_LAYER_GZIP_MEDIA_TYPE,
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
];
/// Most tags read when listing a package's versions.
const MAX_TAGS: usize = 10_000;

/// Credentials for a registry.
#[derive(Clone, Default)]
pub enum OciAuth {
    #[default]
    Anonymous,
    Basic {
        username: String,
        password: String,
    },
}

impl std::fmt::Debug for OciAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OciAuth::Anonymous => f.write_str("Anonymous"),
            OciAuth::Basic { username, .. } => write!(f, "Basic({username}, ****)"),
        }
    }
}

/// What a fetch published, and the manifest it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciFetched {
    pub fetched: Fetched,
    /// The version the constraint resolved to.
    pub version: semver::Version,
    /// `sha256:<hex>` of the image manifest: changes when the tag is pushed again.
    pub manifest_digest: String,
}

#[derive(Clone)]
pub struct OciRepository {
    registry: String,
    path: String,
    auth: OciAuth,
    limits: Limits,
    client: Client,
}

impl std::fmt::Debug for OciRepository {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "OciRepository(oci://{}/{})", self.registry, self.path)
    }
}

impl OciRepository {
    /// A repository at `oci://host[:port]/path`. `plain_http` talks HTTP instead of HTTPS to
    /// it (a registry on loopback in tests and development).
    pub fn new(url: &str, auth: OciAuth, plain_http: bool) -> Result<Self, RepoError> {
        let invalid = |reason: &'static str| RepoError::InvalidName {
            what: "OCI repository",
            value: url.to_owned(),
            reason,
        };
        let rest = url
            .strip_prefix("oci://")
            .ok_or_else(|| invalid("must start with oci://"))?;
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| invalid("must name a path after the registry host"))?;
        let path = path.trim_end_matches('/');
        if registry.is_empty() || path.is_empty() {
            return Err(invalid("must name a registry host and a path"));
        }
        if path
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == ".." || s.contains(':') || s.contains('@'))
        {
            return Err(invalid(
                "has an empty, relative, tagged or digested path segment",
            ));
        }
        // reqwest (under oci-client) needs a process-wide rustls provider; berth uses ring.
        // Installing fails only when one is installed already, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let protocol = if plain_http {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        };
        let client = Client::new(ClientConfig {
            protocol,
            ..Default::default()
        });
        Ok(OciRepository {
            registry: registry.to_owned(),
            path: path.to_owned(),
            auth,
            limits: Limits::default(),
            client,
        })
    }

    /// Uses `limits` instead of the defaults; `max_total_bytes` bounds the layer too.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    fn auth(&self) -> RegistryAuth {
        match &self.auth {
            OciAuth::Anonymous => RegistryAuth::Anonymous,
            OciAuth::Basic { username, password } => {
                RegistryAuth::Basic(username.clone(), password.clone())
            }
        }
    }

    fn reference(&self, package: &str, tag: &str) -> Reference {
        Reference::with_tag(
            self.registry.clone(),
            format!("{}/{package}", self.path),
            tag.to_owned(),
        )
    }

    fn registry_error(&self, package: &str, op: &str, e: impl std::fmt::Display) -> RepoError {
        RepoError::Registry {
            repository: format!("oci://{}/{}/{package}", self.registry, self.path),
            op: op.to_owned(),
            message: e.to_string(),
        }
    }

    /// The versions tagged for `package`, ascending; tags that are not versions are ignored.
    pub async fn versions(&self, package: &str) -> Result<Vec<semver::Version>, RepoError> {
        Ok(self
            .tags(package)
            .await?
            .into_iter()
            .map(|(v, _)| v)
            .collect())
    }

    /// `package`'s tags that are versions, as (version, tag text: `1.2.0` or `v1.2.0`),
    /// ascending by version.
    async fn tags(&self, package: &str) -> Result<Vec<(semver::Version, String)>, RepoError> {
        check_segment("package name", package)?;
        let image = self.reference(package, "latest");
        let tags = match self
            .client
            .list_tags(&image, &self.auth(), Some(MAX_TAGS), None)
            .await
        {
            Ok(t) => t.tags,
            Err(e) if is_not_found(&e) => {
                return Err(RepoError::PackageNotFound {
                    package: package.to_owned(),
                });
            }
            Err(e) => return Err(self.registry_error(package, "listing tags", e)),
        };
        let mut versions: Vec<(semver::Version, String)> = tags
            .into_iter()
            .filter_map(|t| parse_version(&t).ok().map(|v| (v, t)))
            .collect();
        if versions.is_empty() {
            return Err(RepoError::PackageNotFound {
                package: package.to_owned(),
            });
        }
        versions.sort();
        Ok(versions)
    }

    /// The newest version of `package` that `constraint` (an exact version or a semver
    /// constraint such as `~1.2`) allows.
    pub async fn resolve(
        &self,
        package: &str,
        constraint: &str,
    ) -> Result<semver::Version, RepoError> {
        Ok(self.resolve_tag(package, constraint).await?.0)
    }

    /// [`resolve`](Self::resolve), with the tag text that version was pushed under.
    pub async fn resolve_tag(
        &self,
        package: &str,
        constraint: &str,
    ) -> Result<(semver::Version, String), RepoError> {
        let wanted = VersionConstraint::parse(constraint).map_err(|_| RepoError::InvalidName {
            what: "version constraint",
            value: constraint.to_owned(),
            reason: "is neither a version nor a semver constraint",
        })?;
        self.tags(package)
            .await?
            .into_iter()
            .rev()
            .find(|(v, _)| wanted.matches(v))
            .ok_or_else(|| RepoError::VersionNotFound {
                package: package.to_owned(),
                version: constraint.to_owned(),
            })
    }

    /// The manifest digest behind the tag `constraint` resolves to now: changes when the tag
    /// is pushed again.
    pub async fn manifest_digest(
        &self,
        package: &str,
        constraint: &str,
    ) -> Result<String, RepoError> {
        let (_, tag) = self.resolve_tag(package, constraint).await?;
        self.client
            .fetch_manifest_digest(&self.reference(package, &tag), &self.auth())
            .await
            .map_err(|e| self.registry_error(package, "reading the manifest digest", e))
    }

    /// Resolves `constraint`, pulls that version and publishes it at `dest` atomically. With
    /// `expected_manifest`, the image's manifest digest must be that one.
    pub async fn fetch(
        &self,
        package: &str,
        constraint: &str,
        dest: &Path,
        expected_manifest: Option<&str>,
    ) -> Result<OciFetched, RepoError> {
        let (version, tag) = self.resolve_tag(package, constraint).await?;
        let image = self.reference(package, &tag);
        let (manifest, manifest_digest) = self
            .client
            .pull_image_manifest(&image, &self.auth())
            .await
            .map_err(|e| self.registry_error(package, "pulling the manifest", e))?;
        if let Some(expected) = expected_manifest
            && expected != manifest_digest
        {
            return Err(self.registry_error(
                package,
                "verifying the manifest",
                format!("digest is {manifest_digest}, expected {expected}"),
            ));
        }
        let layer = match manifest
            .layers
            .iter()
            .filter(|l| LAYER_MEDIA_TYPES.contains(&l.media_type.as_str()))
            .collect::<Vec<_>>()
            .as_slice()
        {
            [one] => (*one).clone(),
            found => {
                return Err(self.registry_error(
                    package,
                    "reading the manifest",
                    format!(
                        "a package image has exactly one .tar.gz layer, this one has {}",
                        found.len()
                    ),
                ));
            }
        };
        let limit = self.limits.max_total_bytes;
        if u64::try_from(layer.size).unwrap_or(u64::MAX) > limit {
            return Err(RepoError::LimitExceeded {
                limit: format!("{limit} bytes"),
            });
        }
        let dest_owned = dest.to_owned();
        let staging = tokio::task::spawn_blocking(move || staging_dir(&dest_owned))
            .await
            .map_err(|e| self.registry_error(package, "staging", e))??;
        let copy = staging.path().join("layer.tar.gz");
        self.download(&image, &layer, &copy, package).await?;
        let (package_owned, version_text, dest_owned) =
            (package.to_owned(), version.to_string(), dest.to_owned());
        let limits = self.limits;
        let fetched = tokio::task::spawn_blocking(move || -> Result<Fetched, RepoError> {
            let unpacked = staging.path().join("package");
            std::fs::create_dir(&unpacked).map_err(RepoError::io("create directory", &unpacked))?;
            let mut stager = Stager::new(&unpacked, limits)?;
            let file = std::fs::File::open(&copy).map_err(RepoError::io("open layer", &copy))?;
            unpack_tar_gz(file, &mut stager)?;
            stager.verify_links()?;
            publish(
                &package_root(&unpacked)?,
                &dest_owned,
                &package_owned,
                &version_text,
            )
        })
        .await
        .map_err(|e| self.registry_error(package, "unpacking", e))??;
        Ok(OciFetched {
            fetched,
            version,
            manifest_digest,
        })
    }

    /// Downloads the layer into `to`, bounded by the layer's declared size and the limits, and
    /// checks its sha256 against the manifest's digest.
    async fn download(
        &self,
        image: &Reference,
        layer: &OciDescriptor,
        to: &Path,
        package: &str,
    ) -> Result<(), RepoError> {
        use futures::StreamExt as _;
        let limit = self
            .limits
            .max_total_bytes
            .min(u64::try_from(layer.size).unwrap_or(u64::MAX));
        let mut stream = self
            .client
            .pull_blob_stream(image, layer)
            .await
            .map_err(|e| self.registry_error(package, "pulling the layer", e))?;
        let mut file = tokio::fs::File::create(to)
            .await
            .map_err(RepoError::io("create file", to))?;
        let mut hasher = Sha256::new();
        let mut written = 0u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.registry_error(package, "pulling the layer", e))?;
            written += chunk.len() as u64;
            if written > limit {
                return Err(RepoError::LimitExceeded {
                    limit: format!("{limit} bytes"),
                });
            }
            hasher.update(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(RepoError::io("write file", to))?;
        }
        file.sync_all()
            .await
            .map_err(RepoError::io("write file", to))?;
        let digest = format!("sha256:{}", hex::encode(hasher.finalize()));
        if digest != layer.digest {
            return Err(self.registry_error(
                package,
                "verifying the layer",
                format!("digest is {digest}, the manifest says {}", layer.digest),
            ));
        }
        Ok(())
    }

    /// Pushes a packed package as `<path>/<name>:<version>` and returns the manifest digest.
    pub async fn push(&self, packed: &Packed) -> Result<String, RepoError> {
        let image = self.reference(&packed.name, &packed.version);
        let layer = ImageLayer::new(
            packed.bytes.clone(),
            IMAGE_LAYER_GZIP_MEDIA_TYPE.to_owned(),
            None,
        );
        let config = Config::new(
            serde_json::to_vec(&serde_json::json!({
                "name": packed.name,
                "version": packed.version,
            }))
            .unwrap_or_default(),
            CONFIG_MEDIA_TYPE.to_owned(),
            None,
        );
        self.client
            .push(&image, &[layer], config, &self.auth(), None)
            .await
            .map_err(|e| self.registry_error(&packed.name, "pushing", e))?;
        let digest = self
            .client
            .fetch_manifest_digest(&image, &self.auth())
            .await
            .map_err(|e| self.registry_error(&packed.name, "reading the pushed manifest", e))?;
        Ok(digest)
    }
}

/// Whether the registry said the repository (package) does not exist.
fn is_not_found(e: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::OciDistributionError as E;
    match e {
        E::RegistryError { envelope, .. } => envelope
            .errors
            .iter()
            .any(|e| matches!(e.code, oci_client::errors::OciErrorCode::NameUnknown)),
        E::ServerError { code, .. } => *code == 404,
        _ => false,
    }
}
