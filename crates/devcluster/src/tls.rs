//! HTTPS: the dev cluster's CA and serving certificate, and the server that speaks HTTP/1.1 and
//! HTTP/2 over TLS.
//!
//! TLS is not optional here: kubectl and helm (client-go) send a bearer token only over TLS, so
//! a plain-HTTP API server cannot tell who calls it. The CA (ECDSA P-256) is made at the first
//! start and kept in `<data dir>/pki/` (0600), so kubeconfigs written earlier stay valid; the
//! serving certificate is signed afresh at every start for `localhost`, the loopback addresses,
//! the listen address and the in-cluster names (`kubernetes.default.svc`, ...). The kubeconfig
//! carries the CA (`certificate-authority-data`).

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::error::Error;

const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
/// Connections open at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 4096;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The CA clients trust and the server's TLS configuration.
pub struct Serving {
    pub ca_pem: String,
    pub config: Arc<rustls::ServerConfig>,
}

fn tls_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Tls(format!("{what}: {e}"))
}

/// The CA of `dir/pki` (made when missing; in memory without a data directory) and a serving
/// certificate it signs for `listen`.
pub fn serving(dir: Option<&Path>, listen: IpAddr) -> Result<Serving, Error> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let now = time::OffsetDateTime::now_utc();
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "berth-devcluster CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = now - time::Duration::hours(1);
    ca.not_after = now + time::Duration::days(3650);
    let pki = dir.map(|d| d.join("pki"));
    let stored = pki.as_ref().and_then(|p| {
        let cert = std::fs::read_to_string(p.join(CA_CERT)).ok()?;
        let key = std::fs::read_to_string(p.join(CA_KEY)).ok()?;
        Some((cert, key))
    });
    let (ca_pem, issuer) = match stored {
        Some((cert, key)) => {
            let key = KeyPair::from_pem(&key).map_err(|e| tls_error("reading the CA key", e))?;
            let issuer = Issuer::from_ca_cert_pem(&cert, key)
                .map_err(|e| tls_error("reading the CA certificate", e))?;
            (cert, issuer)
        }
        None => {
            let key = KeyPair::generate().map_err(|e| tls_error("making the CA key", e))?;
            let cert = ca
                .self_signed(&key)
                .map_err(|e| tls_error("making the CA certificate", e))?;
            let cert_pem = cert.pem();
            if let Some(p) = &pki {
                let io = |source| Error::Credentials {
                    path: p.clone(),
                    source,
                };
                crate::private::create_private_dir(p).map_err(io)?;
                crate::private::write_private(&p.join(CA_CERT), cert_pem.as_bytes()).map_err(io)?;
                crate::private::write_private(&p.join(CA_KEY), key.serialize_pem().as_bytes())
                    .map_err(io)?;
            }
            (cert_pem, Issuer::new(ca, key))
        }
    };
    let mut names: Vec<String> = [
        "localhost",
        "127.0.0.1",
        "::1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if !listen.is_unspecified() && !names.contains(&listen.to_string()) {
        names.push(listen.to_string());
    }
    let mut params =
        CertificateParams::new(names).map_err(|e| tls_error("naming the certificate", e))?;
    params
        .distinguished_name
        .push(DnType::CommonName, "berth-devcluster");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(365);
    let key = KeyPair::generate().map_err(|e| tls_error("making the serving key", e))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| tls_error("signing the serving certificate", e))?;
    let chain = vec![CertificateDer::from(cert.der().to_vec())];
    let key = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes())
        .map_err(|e| tls_error("reading the serving key", e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tls_error("TLS versions", e))?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .map_err(|e| tls_error("the serving certificate", e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Serving {
        ca_pem,
        config: Arc::new(config),
    })
}

/// Serves `router` over TLS on `listener` until `shutdown`, then gives open connections a few
/// seconds to finish.
pub async fn serve(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    router: axum::Router,
    shutdown: CancellationToken,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::server::conn::auto;
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let Ok(permit) = connections.clone().acquire_owned().await else {
            break;
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "dev cluster: accept failed");
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        // TCP_NODELAY: watch events and small responses are written as they happen; with
        // Nagle's algorithm a second small write waits for the client's delayed ACK, which
        // showed as a 40 ms floor on 1-2 % of create→event latencies.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let acceptor = acceptor.clone();
        let router = router.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "dev cluster: TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper_util::service::TowerToHyperService::new(router);
            let builder = auto::Builder::new(TokioExecutor::new());
            let conn = builder.serve_connection_with_upgrades(TokioIo::new(tls), service);
            if let Err(e) = watcher.watch(conn.into_owned()).await {
                tracing::debug!(error = %e, "dev cluster: connection ended with an error");
            }
        });
    }
    if tokio::time::timeout(Duration::from_secs(5), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::debug!("dev cluster: connections still open after 5 s; closing them");
    }
}
