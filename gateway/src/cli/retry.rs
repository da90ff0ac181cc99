//! The CLI's calls wait and retry when the server says "not now" (issue 31.10: a script of 1,000
//! `berth update`s lost 347 to the gateway's rate limit). A refusal is retried only when it is
//! `ResourceExhausted` and carries the gateway's `retry-after-ms` hint — a rate limit that
//! refills, or calls or Watch streams in progress — never a message over a size limit (also
//! ResourceExhausted, without the hint) nor any other error. As kubectl does on a 429: wait the
//! hint (with jitter, at most [`MAX_WAIT`] a time) and send again, for at most [`RETRY_FOR`].
//!
//! Written as a tower layer under the generated client rather than around each call: every
//! command, Watch included, gets it. A request body is a single protobuf message, bounded by
//! the client's encoding limit, so it is kept to be sent again.

use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http_body_util::BodyExt as _;
use tonic::body::Body;

/// The hint's metadata key (the gateway's `limits::RETRY_AFTER_MS`).
const RETRY_AFTER_MS: &str = crate::limits::RETRY_AFTER_MS;
/// Longest one wait, whatever the hint says.
const MAX_WAIT: Duration = Duration::from_secs(5);
/// How long a call keeps retrying before the refusal is the answer.
pub const RETRY_FOR: Duration = Duration::from_secs(120);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The channel, retrying refusals that carry a hint.
#[derive(Clone)]
pub struct Retrying<S> {
    inner: S,
    retry_for: Duration,
}

impl<S> Retrying<S> {
    pub fn new(inner: S, retry_for: Duration) -> Retrying<S> {
        Retrying { inner, retry_for }
    }
}

/// How long the server asks to wait before sending `response`'s call again; `None` when it is
/// not a refusal to retry. Refusals come trailers-only: status and metadata in the headers.
fn retry_after(response: &http::Response<Body>) -> Option<Duration> {
    let headers = response.headers();
    let code = headers
        .get("grpc-status")?
        .to_str()
        .ok()?
        .parse::<i32>()
        .ok()?;
    if tonic::Code::from(code) != tonic::Code::ResourceExhausted {
        return None;
    }
    let ms: u64 = headers.get(RETRY_AFTER_MS)?.to_str().ok()?.parse().ok()?;
    Some(Duration::from_millis(ms))
}

/// The wait before the next attempt: the hint, capped, plus up to a quarter more at random so
/// that many refused callers do not come back at the same instant.
fn wait_for(hint: Duration) -> Duration {
    let base = hint.clamp(Duration::from_millis(1), MAX_WAIT);
    base + base.mul_f64(rand::random::<f64>() / 4.0)
}

impl<S> tower::Service<http::Request<Body>> for Retrying<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>>
        + Clone
        + Send
        + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<http::Response<Body>, BoxError>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        // The clone that was made ready is the one to call first (tower's contract).
        let ready = self.inner.clone();
        let mut first = std::mem::replace(&mut self.inner, ready);
        let mut again = self.inner.clone();
        let retry_for = self.retry_for;
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect().await.map_err(BoxError::from)?.to_bytes();
            let rebuild = || {
                let mut req =
                    http::Request::new(Body::new(http_body_util::Full::new(bytes.clone())));
                *req.method_mut() = parts.method.clone();
                *req.uri_mut() = parts.uri.clone();
                *req.version_mut() = parts.version;
                *req.headers_mut() = parts.headers.clone();
                *req.extensions_mut() = parts.extensions.clone();
                req
            };
            let started = Instant::now();
            let mut response = first.call(rebuild()).await.map_err(Into::into)?;
            while let Some(hint) = retry_after(&response) {
                let wait = wait_for(hint);
                if started.elapsed() + wait > retry_for {
                    break;
                }
                tokio::time::sleep(wait).await;
                tower::ServiceExt::ready(&mut again)
                    .await
                    .map_err(Into::into)?;
                response = again.call(rebuild()).await.map_err(Into::into)?;
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(code: tonic::Code, hint: Option<&str>) -> http::Response<Body> {
        let mut metadata = tonic::metadata::MetadataMap::new();
        if let Some(h) = hint {
            metadata.insert(RETRY_AFTER_MS, h.parse().unwrap());
        }
        tonic::Status::with_metadata(code, "no", metadata).into_http()
    }

    #[test]
    fn only_hinted_resource_exhausted_refusals_are_retried() {
        assert_eq!(
            retry_after(&refusal(tonic::Code::ResourceExhausted, Some("250"))),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            retry_after(&refusal(tonic::Code::ResourceExhausted, None)),
            None,
            "a message over a size limit"
        );
        assert_eq!(
            retry_after(&refusal(tonic::Code::InvalidArgument, Some("250"))),
            None
        );
        assert_eq!(
            retry_after(&refusal(tonic::Code::ResourceExhausted, Some("soon"))),
            None
        );
        let waited = wait_for(Duration::from_secs(60));
        assert!(
            waited >= MAX_WAIT && waited <= MAX_WAIT + MAX_WAIT / 4,
            "{waited:?}"
        );
    }
}
