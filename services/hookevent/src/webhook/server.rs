//! The HTTPS server the API server calls: `POST /admission/<id>` (AdmissionReview v1) and
//! `POST /conversion/<id>` (ConversionReview v1). HTTP/1.1 over rustls (hyper); bodies,
//! connections and handshakes are bounded.

use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::certs::ServingCert;
use super::{MAX_REVIEW_BYTES, Webhooks};

/// Connections open at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 512;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The server's TLS configuration from its certificate.
pub fn tls_config(cert: &ServingCert) -> Result<Arc<rustls::ServerConfig>, String> {
    let certs = CertificateDer::pem_slice_iter(cert.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(cert.key_pem.as_bytes()).map_err(|e| e.to_string())?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| e.to_string())?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves webhook requests on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    webhooks: Arc<Webhooks>,
    shutdown: CancellationToken,
) {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = connections.clone().acquire_owned().await else {
            return;
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "webhook server: accept failed");
                    continue;
                }
            },
            _ = shutdown.cancelled() => return,
        };
        let (acceptor, webhooks, shutdown) = (acceptor.clone(), webhooks.clone(), shutdown.clone());
        berth_runtime::spawn_here(async move {
            let _permit = permit;
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "webhook server: TLS handshake failed");
                    return;
                }
                Err(_) => return,
            };
            let service = hyper::service::service_fn(move |req| {
                let webhooks = webhooks.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&webhooks, req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT)
                .serve_connection(TokioIo::new(tls), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = shutdown.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
                }
            }
        });
    }
}

async fn handle(webhooks: &Webhooks, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    let route = match path.strip_prefix("/admission/") {
        Some(id) => Some((true, id.to_owned())),
        None => path
            .strip_prefix("/conversion/")
            .map(|id| (false, id.to_owned())),
    };
    let Some((admission, id)) = route else {
        return text(StatusCode::NOT_FOUND, "not found");
    };
    if req.method() != hyper::Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "POST only");
    }
    let body = match Limited::new(req.into_body(), MAX_REVIEW_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("request body: {e} (limit {MAX_REVIEW_BYTES} bytes)"),
            );
        }
    };
    let review: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return text(StatusCode::BAD_REQUEST, &format!("not JSON: {e}")),
    };
    let span = tracing::info_span!(parent: None, "hookevent.webhook", webhook.route = %path);
    let answer = tracing::Instrument::instrument(
        async {
            if admission {
                webhooks.admit(&id, review).await
            } else {
                webhooks.convert(&id, review).await
            }
        },
        span,
    )
    .await;
    match answer {
        Ok(review) => Response::builder()
            .status(StatusCode::OK)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(review.to_string())))
            .unwrap_or_else(|_| text(StatusCode::INTERNAL_SERVER_ERROR, "response")),
        Err((code, message)) => text(
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            &message,
        ),
    }
}

fn text(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(message.to_owned())));
    *r.status_mut() = status;
    r
}
