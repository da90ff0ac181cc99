//! The `/metrics` endpoint: plain HTTP/1.1 (hyper), on a port of its own so it can be exposed
//! to a scraper (or kept on loopback) without exposing a gRPC API.
//!
//! Bounded, as anything a network peer reaches: a request is a `GET` with a head of at most
//! [`MAX_HEAD_BYTES`] and no body (one with a body is refused with 413 before it is read),
//! [`MAX_CONNECTIONS`] connections at once (more wait in the listen backlog), each closed after
//! one response and after [`CONNECTION_DEADLINE`] however slow its peer.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::Metrics;

/// Content type of the page: the Prometheus text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Scrapers keep one connection each; a handful is plenty.
const MAX_CONNECTIONS: usize = 16;
/// The request line and headers (hyper's smallest read buffer): a scrape's are a few hundred
/// bytes.
const MAX_HEAD_BYTES: usize = 8192;
/// Longest a connection may take to send its request and read the answer.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);
/// Pause after a failed accept (out of file descriptors), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `metrics` at `/metrics` on `listener` until `shutdown`.
pub async fn serve(metrics: Metrics, listener: TcpListener, shutdown: CancellationToken) {
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            permit = connections.clone().acquire_owned() => match permit {
                Ok(p) => p,
                Err(_) => return,
            },
            () = shutdown.cancelled() => return,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics server: accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => return,
        };
        let metrics = metrics.clone();
        crate::spawn_here(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                let page = answer(&metrics, &req);
                async move { Ok::<_, Infallible>(page) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(CONNECTION_DEADLINE)
                .max_buf_size(MAX_HEAD_BYTES)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            if let Ok(Err(e)) = tokio::time::timeout(CONNECTION_DEADLINE, conn).await {
                tracing::debug!(error = %e, "metrics server: connection failed");
            }
        });
    }
}

/// The answer to one request.
fn answer<B: http_body::Body>(metrics: &Metrics, req: &Request<B>) -> Response<Full<Bytes>> {
    if req.uri().path() != "/metrics" {
        return text(
            StatusCode::NOT_FOUND,
            "not found: the metrics are at /metrics",
        );
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "GET /metrics only");
    }
    let has_body = req.headers().contains_key(header::TRANSFER_ENCODING)
        || req
            .headers()
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    if has_body {
        return text(StatusCode::PAYLOAD_TOO_LARGE, "a scrape has no body");
    }
    let mut response = Response::new(Full::new(Bytes::from(metrics.render())));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(CONTENT_TYPE),
    );
    response
}

fn text(status: StatusCode, message: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(message.as_bytes())));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        // A peer may close before reading everything sent (a refused oversized head).
        let _ = stream.write_all(request).await;
        let mut response = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
            .await
            .expect("answered in time");
        String::from_utf8_lossy(&response).into_owned()
    }

    #[tokio::test]
    async fn scrapes_are_answered_and_everything_else_refused() {
        let metrics = Metrics::default();
        metrics.add_text(|| "berth_up 1\n".into());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(serve(metrics, listener, shutdown.clone()));

        let ok = exchange(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(
            ok.contains(CONTENT_TYPE) && ok.ends_with("berth_up 1\n"),
            "{ok}"
        );

        let missing = exchange(addr, b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(missing.starts_with("HTTP/1.1 404"), "{missing}");
        let post = exchange(addr, b"POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        let body = exchange(
            addr,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        )
        .await;
        assert!(body.starts_with("HTTP/1.1 413"), "{body}");
        let huge = format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
            "a".repeat(64 << 10)
        );
        let refused = exchange(addr, huge.as_bytes()).await;
        assert!(
            refused.is_empty() || refused.starts_with("HTTP/1.1 431"),
            "an oversized head is refused: {refused}"
        );
        // The server still answers after all that.
        let again = exchange(addr, b"GET /metrics HTTP/1.0\r\n\r\n").await;
        assert!(again.contains(" 200 "), "{again}");

        shutdown.cancel();
        server.await.expect("the server stops at shutdown");
    }
}
