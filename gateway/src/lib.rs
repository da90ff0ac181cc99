//! The gateway: berth's public gRPC API (`berth.v1.Packages`, health, reflection), the `berth`
//! CLI, and the all-in-one mode (`berth up`) that runs every service in one process.

pub mod auth;
pub mod cli;
pub mod limits;
mod service;
pub mod up;
pub mod views;

use berth_proto::v1::packages_server::PackagesServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use auth::{Tokens, read_tokens};
pub use limits::Limits;
pub use service::Gateway;

/// The address `berth up` and `berth-gateway` listen on by default, and the CLI's default server.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7070";

#[derive(Clone, Debug)]
pub struct Config {
    pub lifecycle_endpoint: String,
    /// Hookevent, where operators' views are read (`GetViews`, the view API); `None`: the
    /// gateway serves no views.
    pub hookevent_endpoint: Option<String>,
    /// The bearer tokens callers may present (any one of them); there is always one.
    pub tokens: Tokens,
    /// The gateway's identity towards lifecycle (mutual TLS); `None`: plain gRPC.
    pub tls: Option<berth_runtime::Tls>,
    /// The public listener's certificate; `None`: plain HTTP/2.
    pub public_tls: Option<PublicTls>,
    pub limits: Limits,
    /// Where the gateway's RPC metrics go.
    pub metrics: berth_runtime::Metrics,
}

/// A certificate and its key (PEM) for the public listener.
#[derive(Clone)]
pub struct PublicTls {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for PublicTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PublicTls")
    }
}

impl PublicTls {
    /// Reads the PEM files `cert` and `key`.
    pub fn load(cert: &std::path::Path, key: &std::path::Path) -> std::io::Result<PublicTls> {
        let read = |p: &std::path::Path| {
            std::fs::read(p)
                .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", p.display())))
        };
        Ok(PublicTls {
            cert: read(cert)?,
            key: read(key)?,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("lifecycle endpoint {endpoint}: {source}")]
    Lifecycle {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("hookevent endpoint {endpoint}: {source}")]
    Hookevent {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("the view API's TLS: {0}")]
    ViewsTls(String),
    #[error("serving gRPC: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// The view API's TLS configuration: the public listener's certificate, HTTP/1.1.
fn views_tls(public: &PublicTls) -> Result<std::sync::Arc<rustls::ServerConfig>, String> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(&public.cert)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(&public.key).map_err(|e| e.to_string())?;
    let mut config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(std::sync::Arc::new(config))
}

/// Serves the public API on `listener` until `shutdown`, and the view API on `views` (when
/// given, with a hookevent endpoint in `config`), over TLS with its certificate or else the
/// public listener's (kubectl sends tokens over TLS only).
pub async fn run(
    config: Config,
    listener: TcpListener,
    views: Option<(TcpListener, Option<PublicTls>)>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let lifecycle = berth_clients::lifecycle(&config.lifecycle_endpoint, config.tls.as_ref())
        .map_err(|source| Error::Lifecycle {
            endpoint: config.lifecycle_endpoint.clone(),
            source,
        })?;
    let max = berth_runtime::MAX_MESSAGE_BYTES;
    let hookevent = match &config.hookevent_endpoint {
        Some(endpoint) => Some(
            berth_clients::hookevent(endpoint, config.tls.as_ref()).map_err(|source| {
                Error::Hookevent {
                    endpoint: endpoint.clone(),
                    source,
                }
            })?,
        ),
        None => None,
    };
    if let (Some((listener, tls)), Some(hookevent)) = (views, &hookevent) {
        let tls = match tls.as_ref().or(config.public_tls.as_ref()) {
            Some(p) => Some(views_tls(p).map_err(Error::ViewsTls)?),
            None => None,
        };
        let served = views::Views {
            tokens: config.tokens.clone(),
            hookevent: hookevent.clone(),
        };
        berth_runtime::spawn_in(
            tracing::info_span!(parent: None, "gateway.views"),
            views::serve(listener, tls, served, shutdown.clone()),
        );
    }
    let gateway = Gateway::new(lifecycle, hookevent);
    let api = PackagesServer::new(gateway)
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    // Authentication and limits in one layer: the rate limit keys on the verified caller.
    let api = tower::Layer::layer(&limits::LimitLayer::new(config.limits, config.tokens), api);
    // The public listener authenticates callers by bearer token, not by certificate: no
    // role check here. Its reflection and metrics know the public API only (issue 31.10:
    // listing the internal services, which answer Unimplemented here, misled callers).
    let mut server = berth_runtime::grpc_server(
        berth_runtime::Role::Gateway,
        None,
        &config.metrics,
        berth_proto::PUBLIC_FILE_DESCRIPTOR_SET,
    )?;
    if let Some(public) = &config.public_tls {
        let identity = tonic::transport::Identity::from_pem(&public.cert, &public.key);
        server = server.tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))?;
    }
    let router = server.add_service(api);
    berth_runtime::serve_router(
        router,
        listener,
        berth_proto::PUBLIC_FILE_DESCRIPTOR_SET,
        &["berth.v1.Packages"],
        shutdown,
    )
    .await?;
    Ok(())
}
