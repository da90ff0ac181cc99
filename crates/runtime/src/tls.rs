//! Service identity: mutual TLS between berth's services.
//!
//! Every service holds a certificate signed by the deployment's CA that names its [`Role`] as a
//! SAN URI (`spiffe://berth/<role>`) and as a DNS name (`<role>.berth`, what clients verify
//! the server against, whatever address they dial). Servers require a client certificate from
//! the same CA for every call but health checks, and authorise each RPC by the caller's role
//! ([`crate::authz`]). [`generate`] writes a CA and one certificate per role (files 0600), for
//! `berth up` and for `berth certs` (split mode).

use std::fmt;
use std::io::Write as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use tonic::transport::{Certificate, ClientTlsConfig, Identity, ServerTlsConfig};

/// Who a certificate speaks for. Its name (`gateway`, `broker`, ...) is the variant's, derived.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "lowercase")]
pub enum Role {
    /// The public API's process (a client of lifecycle).
    Gateway,
    Lifecycle,
    /// The queue broker.
    Broker,
    /// A queue worker running berth's task handlers.
    Worker,
    Hookevent,
    Release,
    /// A person's tools (`berth release ...` against the release service).
    Operator,
    /// berth's Kubernetes controller (berth.io resources into lifecycle's changes).
    Controller,
}

impl Role {
    pub const ALL: &[Role] = <Role as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The OpenTelemetry `service.name` of the process (or, in `berth up`, the part of it)
    /// that plays this role.
    pub fn service_name(self) -> &'static str {
        match self {
            Role::Gateway => "berth-gateway",
            Role::Lifecycle => "berth-lifecycle",
            Role::Broker => "berth-queue",
            Role::Worker => "berth-worker",
            Role::Hookevent => "berth-hookevent",
            Role::Release => "berth-release",
            Role::Operator => "berth",
            Role::Controller => "berth-controller",
        }
    }

    /// The SAN URI naming the role in a certificate.
    pub fn uri(self) -> String {
        format!("{URI_PREFIX}{}", self.as_str())
    }

    /// The DNS name a server of this role is verified against by its clients.
    pub fn server_name(self) -> String {
        format!("{}.berth", self.as_str())
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Role, String> {
        Role::ALL
            .iter()
            .copied()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| format!("unknown role {s:?}"))
    }
}

const URI_PREFIX: &str = "spiffe://berth/";

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("{what}: {message}")]
    Invalid { what: String, message: String },
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("--tls-ca, --tls-cert and --tls-key go together: {0} is missing")]
    Incomplete(&'static str),
    #[error(
        "no --tls-ca/--tls-cert/--tls-key: give this process its certificate (`berth certs` writes a set), or pass --insecure-plaintext for unauthenticated plain gRPC"
    )]
    Required,
}

/// A service's identity: the CA it trusts, and its own certificate and key (PEM).
#[derive(Clone)]
pub struct Tls {
    ca: Vec<u8>,
    cert: Vec<u8>,
    key: Vec<u8>,
    role: Role,
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls").field("role", &self.role).finish()
    }
}

impl Tls {
    /// An identity from PEM text; the role is read from the certificate.
    pub fn from_pem(ca: Vec<u8>, cert: Vec<u8>, key: Vec<u8>) -> Result<Tls, TlsError> {
        let role = pem_role(&cert)?;
        Ok(Tls {
            ca,
            cert,
            key,
            role,
        })
    }

    /// An identity from PEM files.
    pub fn load(ca: &Path, cert: &Path, key: &Path) -> Result<Tls, TlsError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|source| TlsError::Read {
                path: p.display().to_string(),
                source,
            })
        };
        Tls::from_pem(read(ca)?, read(cert)?, read(key)?).map_err(|e| match e {
            TlsError::Invalid { message, .. } => TlsError::Invalid {
                what: cert.display().to_string(),
                message,
            },
            e => e,
        })
    }

    /// The identity of `role` from a directory written by [`generate`].
    pub fn from_dir(dir: &Path, role: Role) -> Result<Tls, TlsError> {
        let files = CertFiles::new(dir, role);
        Tls::load(&files.ca, &files.cert, &files.key)
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// The CA certificate (PEM).
    pub fn ca_pem(&self) -> &[u8] {
        &self.ca
    }

    fn identity(&self) -> Identity {
        Identity::from_pem(&self.cert, &self.key)
    }

    /// A server that presents this identity and verifies client certificates against the CA.
    /// Clients without a certificate still complete the handshake (health checks stay open);
    /// [`crate::authz`] refuses their other calls.
    pub fn server_config(&self) -> ServerTlsConfig {
        ServerTlsConfig::new()
            .identity(self.identity())
            .client_ca_root(Certificate::from_pem(&self.ca))
            .client_auth_optional(true)
    }

    /// A server that presents this identity and asks no client certificate (a public listener
    /// whose callers authenticate otherwise).
    pub fn public_server_config(&self) -> ServerTlsConfig {
        ServerTlsConfig::new().identity(self.identity())
    }

    /// A client that presents this identity and accepts only a server of role `server`.
    pub fn client_config(&self, server: Role) -> ClientTlsConfig {
        ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca))
            .identity(self.identity())
            .domain_name(server.server_name())
    }
}

/// The role a DER certificate names (its `spiffe://berth/<role>` SAN URI).
pub fn der_role(der: &[u8]) -> Option<Role> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let san = cert.subject_alternative_name().ok()??;
    san.value.general_names.iter().find_map(|name| match name {
        x509_parser::extensions::GeneralName::URI(uri) => {
            uri.strip_prefix(URI_PREFIX)?.parse().ok()
        }
        _ => None,
    })
}

fn pem_role(pem: &[u8]) -> Result<Role, TlsError> {
    let invalid = |message: String| TlsError::Invalid {
        what: "certificate".into(),
        message,
    };
    let (_, block) = x509_parser::pem::parse_x509_pem(pem)
        .map_err(|e| invalid(format!("not a PEM certificate: {e}")))?;
    der_role(&block.contents).ok_or_else(|| {
        invalid(format!(
            "names no berth role (a SAN URI {URI_PREFIX}<role>, one of {})",
            Role::ALL
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// Where [`generate`] puts the CA and a role's certificate and key.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl CertFiles {
    pub fn new(dir: &Path, role: Role) -> CertFiles {
        CertFiles {
            ca: dir.join("ca.pem"),
            cert: dir.join(format!("{role}.pem")),
            key: dir.join(format!("{role}-key.pem")),
        }
    }
}

/// Writes a CA (`ca.pem`, `ca-key.pem`) and, for every role, `<role>.pem` and `<role>-key.pem`
/// into `dir` (created 0700; files 0600). Each certificate names its role as a SAN URI and
/// `<role>.berth` as a DNS name; `hosts` (DNS names or IP addresses) are added to every
/// certificate so that a server can also be reached by them (the gateway's public listener).
pub fn generate(dir: &Path, hosts: &[String]) -> Result<(), TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose, SanType,
    };
    let now = time::OffsetDateTime::now_utc();
    let mut ca = CertificateParams::default();
    ca.distinguished_name.push(DnType::CommonName, "berth CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = now - time::Duration::hours(1);
    ca.not_after = now + time::Duration::days(3650);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca.self_signed(&ca_key)?;
    create_private_dir(dir)?;
    write_private(&dir.join("ca.pem"), ca_cert.pem().as_bytes())?;
    write_private(&dir.join("ca-key.pem"), ca_key.serialize_pem().as_bytes())?;
    let issuer = Issuer::new(ca, ca_key);
    for &role in Role::ALL {
        let mut params = CertificateParams::new(hosts.to_vec())?;
        params
            .distinguished_name
            .push(DnType::CommonName, role.as_str());
        params
            .subject_alt_names
            .push(SanType::URI(role.uri().try_into()?));
        params
            .subject_alt_names
            .push(SanType::DnsName(role.server_name().try_into()?));
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.not_before = now - time::Duration::hours(1);
        params.not_after = now + time::Duration::days(825);
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &issuer)?;
        let files = CertFiles::new(dir, role);
        write_private(&files.cert, cert.pem().as_bytes())?;
        write_private(&files.key, key.serialize_pem().as_bytes())?;
    }
    Ok(())
}

/// [`generate`] unless `dir` already holds a complete set that is valid for another
/// [`RENEW_BEFORE`] at least and for every one of `hosts` (so a restart keeps the CA its
/// clients trust, and a set about to expire, or made for other hosts, is replaced). Returns
/// whether it generated.
pub fn ensure_generated(dir: &Path, hosts: &[String]) -> Result<bool, TlsError> {
    let deadline = time::OffsetDateTime::now_utc() + RENEW_BEFORE;
    // Whether the certificate at `path` lasts past the deadline and names every host in `names`.
    let good = |path: &Path, names: &[String]| {
        std::fs::read(path).is_ok_and(|pem| {
            x509_parser::pem::parse_x509_pem(&pem).is_ok_and(|(_, block)| {
                block.parse_x509().is_ok_and(|cert| {
                    cert.validity().not_after.timestamp() > deadline.unix_timestamp()
                        && names.iter().all(|host| names_host(&cert, host))
                })
            })
        })
    };
    let complete = Role::ALL.iter().all(|&role| {
        let files = CertFiles::new(dir, role);
        good(&files.ca, &[]) && good(&files.cert, hosts) && files.key.is_file()
    });
    if complete {
        return Ok(false);
    }
    generate(dir, hosts)?;
    Ok(true)
}

/// Whether `cert` has `host` (a DNS name or an IP address) among its SANs.
fn names_host(cert: &x509_parser::certificate::X509Certificate<'_>, host: &str) -> bool {
    use x509_parser::extensions::GeneralName;
    let ip: Option<std::net::IpAddr> = host.parse().ok();
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return false;
    };
    san.value.general_names.iter().any(|name| match (name, ip) {
        (GeneralName::DNSName(dns), None) => dns.eq_ignore_ascii_case(host),
        (GeneralName::IPAddress(bytes), Some(std::net::IpAddr::V4(v4))) => {
            *bytes == v4.octets().as_slice()
        }
        (GeneralName::IPAddress(bytes), Some(std::net::IpAddr::V6(v6))) => {
            *bytes == v6.octets().as_slice()
        }
        _ => false,
    })
}

/// How long a kept set must still be valid: [`ensure_generated`] replaces one that expires
/// sooner.
pub const RENEW_BEFORE: time::Duration = time::Duration::days(30);

fn create_private_dir(dir: &Path) -> Result<(), TlsError> {
    let err = |source| TlsError::Write {
        path: dir.display().to_string(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(err)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(err)
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), TlsError> {
    let err = |source| TlsError::Write {
        path: path.display().to_string(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .map_err(err)?;
    file.write_all(bytes).map_err(err)
}

/// The `--tls-ca`, `--tls-cert` and `--tls-key` flags every service binary takes (all three;
/// or, for plain unauthenticated gRPC, none and `--insecure-plaintext`).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct TlsArgs {
    /// PEM file of the CA that signs every berth service's certificate (mutual TLS between
    /// services; with it, --tls-cert and --tls-key).
    #[arg(long, env = "BERTH_TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// PEM file of this process's certificate (its role in a SAN URI `spiffe://berth/<role>`;
    /// `berth certs` writes one per role).
    #[arg(long, env = "BERTH_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// PEM file of this process's private key.
    #[arg(long, env = "BERTH_TLS_KEY", hide_env_values = true)]
    pub tls_key: Option<PathBuf>,
    /// Without --tls-*: serve and call plain gRPC that anyone who can reach the port may call
    /// (tests and benchmarks on a machine of one's own only).
    #[arg(long, conflicts_with_all = ["tls_ca", "tls_cert", "tls_key"])]
    pub insecure_plaintext: bool,
}

impl TlsArgs {
    /// The identity the flags name, for a service: it must be given unless
    /// `--insecure-plaintext` is (then `None`). When `expected` is given, the certificate must
    /// name that role.
    pub fn load(&self, expected: Option<Role>) -> Result<Option<Tls>, TlsError> {
        if self.tls_ca.is_none() && self.tls_cert.is_none() && self.tls_key.is_none() {
            if !self.insecure_plaintext {
                return Err(TlsError::Required);
            }
            tracing::warn!("--insecure-plaintext: gRPC is plain text and unauthenticated");
            return Ok(None);
        }
        self.load_client(expected)
    }

    /// The identity the flags name, `None` when none is given (a command-line client, which
    /// then talks plain gRPC to a server that allows it).
    pub fn load_client(&self, expected: Option<Role>) -> Result<Option<Tls>, TlsError> {
        let (ca, cert, key) = match (&self.tls_ca, &self.tls_cert, &self.tls_key) {
            (None, None, None) => return Ok(None),
            (Some(ca), Some(cert), Some(key)) => (ca, cert, key),
            (None, _, _) => return Err(TlsError::Incomplete("--tls-ca")),
            (_, None, _) => return Err(TlsError::Incomplete("--tls-cert")),
            (_, _, None) => return Err(TlsError::Incomplete("--tls-key")),
        };
        let tls = Tls::load(ca, cert, key)?;
        if let Some(expected) = expected
            && tls.role() != expected
        {
            return Err(TlsError::Invalid {
                what: cert.display().to_string(),
                message: format!(
                    "names the role {}, but this process is the {expected}",
                    tls.role()
                ),
            });
        }
        Ok(Some(tls))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_certificates_name_their_role_and_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("tls");
        assert!(ensure_generated(&dir, &["localhost".into()]).unwrap());
        assert!(
            !ensure_generated(&dir, &[]).unwrap(),
            "a complete set is kept"
        );
        assert!(
            !ensure_generated(&dir, &["localhost".into()]).unwrap(),
            "a set that names the hosts is kept"
        );
        assert!(
            ensure_generated(&dir, &["berth.example".into(), "10.1.2.3".into()]).unwrap(),
            "a set made for other hosts is replaced"
        );
        assert!(!ensure_generated(&dir, &["10.1.2.3".into()]).unwrap());
        std::fs::remove_file(dir.join("worker.pem")).unwrap();
        assert!(
            ensure_generated(&dir, &[]).unwrap(),
            "an incomplete set is replaced"
        );
        std::fs::write(dir.join("ca.pem"), "not a certificate").unwrap();
        assert!(
            ensure_generated(&dir, &[]).unwrap(),
            "a broken set is replaced"
        );
        for &role in Role::ALL {
            let tls = Tls::from_dir(&dir, role).unwrap();
            assert_eq!(tls.role(), role);
            let files = CertFiles::new(&dir, role);
            for path in [files.ca, files.cert, files.key] {
                let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
                assert_eq!(mode, 0o600, "{}", path.display());
            }
        }
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn a_certificate_without_a_role_is_refused() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let err = Tls::from_pem(
            cert.pem().into_bytes(),
            cert.pem().into_bytes(),
            key.serialize_pem().into_bytes(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("names no berth role"), "{err}");
    }

    #[test]
    fn flags_go_together() {
        let args = TlsArgs {
            tls_ca: Some("ca.pem".into()),
            ..Default::default()
        };
        let err = args.load(None).unwrap_err();
        assert!(err.to_string().contains("--tls-cert is missing"), "{err}");
        let none = TlsArgs::default();
        let err = none.load(None).unwrap_err();
        assert!(err.to_string().contains("--insecure-plaintext"), "{err}");
        assert!(none.load_client(None).unwrap().is_none());
        let plain = TlsArgs {
            insecure_plaintext: true,
            ..Default::default()
        };
        assert!(plain.load(None).unwrap().is_none());
    }
}
