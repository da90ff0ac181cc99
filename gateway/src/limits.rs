//! Authentication and request limits on the public API, as one tower layer around the
//! `Packages` service: who the caller is, calls per second per caller, calls in progress, and
//! open Watch streams. A call over a limit is refused at once with `ResourceExhausted` naming
//! the limit (nothing queues behind it).
//!
//! A caller is the token it presented when that token is one the gateway accepts (see
//! [`crate::auth`]), and otherwise its address: calls without a token or with a wrong one are
//! counted against their address, then refused `Unauthenticated`, so a flood of made-up
//! tokens is throttled like one caller and never spends a real caller's calls. The limiter
//! remembers a bounded number of callers (by a keyed hash); when that many are active at once,
//! callers it does not know yet share one bucket, so a flood of addresses neither grows the
//! table nor gets a fresh burst per address.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http_body_util::BodyExt as _;
use tokio::sync::Semaphore;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tower::ServiceExt as _;

/// The limits; see each field.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Unary calls in progress at once (all callers).
    pub concurrent_calls: usize,
    /// Calls per second one caller may make, sustained.
    pub calls_per_second: u32,
    /// Calls one caller may make in a burst above the sustained rate.
    pub burst: u32,
    /// Watch streams open at once (all callers).
    pub watch_streams: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            concurrent_calls: 256,
            calls_per_second: 100,
            burst: 200,
            watch_streams: 128,
        }
    }
}

/// Callers remembered by the rate limiter before idle ones are forgotten.
const MAX_TRACKED_CALLERS: usize = 4096;

/// The bucket callers share when [`MAX_TRACKED_CALLERS`] are active.
const OVERFLOW: u64 = 0;

/// The layer applying [`Limits`].
#[derive(Clone)]
pub struct LimitLayer {
    state: Arc<State>,
}

struct State {
    limits: Limits,
    tokens: crate::auth::Tokens,
    calls: Arc<Semaphore>,
    watches: Arc<Semaphore>,
    buckets: Mutex<HashMap<u64, Bucket>>,
    /// Keys the caller hashes (random per process: callers cannot aim at each other's slot).
    hasher: std::collections::hash_map::RandomState,
}

/// A token bucket: `tokens` left as of `at`.
#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl LimitLayer {
    /// Admits callers presenting one of `tokens`, within `limits`.
    pub fn new(limits: Limits, tokens: crate::auth::Tokens) -> LimitLayer {
        LimitLayer {
            state: Arc::new(State {
                limits,
                tokens,
                calls: Arc::new(Semaphore::new(limits.concurrent_calls)),
                watches: Arc::new(Semaphore::new(limits.watch_streams)),
                buckets: Mutex::new(HashMap::new()),
                hasher: Default::default(),
            }),
        }
    }
}

impl<S> tower::Layer<S> for LimitLayer {
    type Service = Limited<S>;
    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            state: self.state.clone(),
        }
    }
}

/// A service behind [`LimitLayer`]; it keeps the inner service's gRPC name.
#[derive(Clone)]
pub struct Limited<S> {
    inner: S,
    state: Arc<State>,
}

impl<S: NamedService> NamedService for Limited<S> {
    const NAME: &'static str = S::NAME;
}

impl State {
    /// Takes one call from `caller`'s bucket; false when it is empty.
    /// Takes one of `caller`'s calls: `Err` with how long until it has one again (`None`
    /// when its bucket never refills) when it has none.
    fn admit(&self, caller: &Caller) -> Result<(), Option<Duration>> {
        let limits = self.limits;
        let capacity = f64::from(limits.burst.max(1));
        let rate = f64::from(limits.calls_per_second);
        let now = Instant::now();
        let mut key = std::hash::BuildHasher::hash_one(&self.hasher, caller).max(1);
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if buckets.len() >= MAX_TRACKED_CALLERS && !buckets.contains_key(&key) {
            // Forget callers whose bucket has refilled: they are as if never seen.
            buckets.retain(|k, b| {
                *k == OVERFLOW
                    || b.tokens + now.duration_since(b.at).as_secs_f64() * rate < capacity
            });
            if buckets.len() >= MAX_TRACKED_CALLERS {
                key = OVERFLOW;
            }
        }
        let bucket = buckets.entry(key).or_insert(Bucket {
            tokens: capacity,
            at: now,
        });
        bucket.tokens =
            (bucket.tokens + now.duration_since(bucket.at).as_secs_f64() * rate).min(capacity);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else if rate > 0.0 {
            Err(Some(Duration::from_secs_f64((1.0 - bucket.tokens) / rate)))
        } else {
            Err(None)
        }
    }
}

/// Who a call is counted against.
#[derive(Debug, Hash, PartialEq, Eq)]
enum Caller {
    /// The accepted token it presented.
    Token(crate::auth::Verified),
    /// No accepted token: the address it calls from.
    Address(std::net::IpAddr),
    /// No accepted token and no address known (not a TCP connection).
    Anonymous,
}

fn address<B>(req: &http::Request<B>) -> Caller {
    let ext = req.extensions();
    let addr = ext
        .get::<TcpConnectInfo>()
        .and_then(|i| i.remote_addr())
        .or_else(|| {
            ext.get::<TlsConnectInfo<TcpConnectInfo>>()
                .and_then(|i| i.get_ref().remote_addr())
        });
    match addr {
        Some(addr) => Caller::Address(addr.ip()),
        None => Caller::Anonymous,
    }
}

/// The metadata key of a refusal worth retrying: after how many milliseconds a call may be
/// admitted (the `berth` CLI waits that long and retries, as kubectl does on a 429).
pub const RETRY_AFTER_MS: &str = "retry-after-ms";

/// Refuses a call over a limit; `retry_after` (when the limit frees up with time) goes out as
/// [`RETRY_AFTER_MS`].
fn refuse(
    message: String,
    retry_after: Option<Duration>,
) -> BoxFuture<'static, Result<http::Response<Body>, Infallible>> {
    tracing::warn!(%message, "call refused");
    let mut metadata = tonic::metadata::MetadataMap::new();
    if let Some(after) = retry_after {
        // At least 1 ms: a hint of 0 would make a client spin.
        let ms = after.as_millis().clamp(1, u128::from(u32::MAX));
        if let Ok(value) = ms.to_string().parse() {
            metadata.insert(RETRY_AFTER_MS, value);
        }
    }
    answer(tonic::Status::with_metadata(
        tonic::Code::ResourceExhausted,
        message,
        metadata,
    ))
}

/// How long a caller refused for calls or Watch streams in progress waits before it retries:
/// they end on their own, at no known time.
const BUSY_RETRY_AFTER: Duration = Duration::from_millis(200);

fn answer(status: tonic::Status) -> BoxFuture<'static, Result<http::Response<Body>, Infallible>> {
    Box::pin(std::future::ready(Ok(status.into_http())))
}

impl<S, B> tower::Service<http::Request<Body>> for Limited<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Readiness is the inner service's, awaited in `call` (`oneshot`).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let state = &self.state;
        let limits = state.limits;
        let verified = state.tokens.verify(req.headers());
        let caller = match &verified {
            Ok(token) => Caller::Token(*token),
            Err(_) => address(&req),
        };
        if let Err(retry_after) = state.admit(&caller) {
            return refuse(
                format!(
                    "rate limit: this caller made more than {} calls per second (burst {}); slow down",
                    limits.calls_per_second, limits.burst
                ),
                retry_after,
            );
        }
        if let Err(refused) = verified {
            tracing::warn!(?caller, %refused, "call refused: not authenticated");
            return answer(tonic::Status::unauthenticated(refused.to_string()));
        }
        let inner = self.inner.clone();
        if req.uri().path().ends_with("/Watch") {
            let Ok(permit) = state.watches.clone().try_acquire_owned() else {
                return refuse(
                    format!(
                        "too many open Watch streams (at most {} at once); close one and retry",
                        limits.watch_streams
                    ),
                    Some(BUSY_RETRY_AFTER),
                );
            };
            return Box::pin(async move {
                let response = inner.oneshot(req).await?;
                // The permit lives as long as the stream's body.
                Ok(response.map(|body| {
                    Body::new(body.map_frame(move |frame| {
                        let _open = &permit;
                        frame
                    }))
                }))
            });
        }
        let Ok(permit) = state.calls.clone().try_acquire_owned() else {
            return refuse(
                format!(
                    "too many calls in progress (at most {} at once); retry later",
                    limits.concurrent_calls
                ),
                Some(BUSY_RETRY_AFTER),
            );
        };
        Box::pin(async move {
            let response = inner.oneshot(req).await;
            drop(permit);
            Ok(response?.map(Body::new))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Tokens, Verified};
    use tower::{Layer as _, Service as _};

    fn tokens() -> Tokens {
        Tokens::new(vec!["alpha".into(), "beta".into()]).unwrap()
    }

    #[test]
    fn a_caller_over_its_rate_is_refused_and_others_are_not() {
        let layer = LimitLayer::new(
            Limits {
                calls_per_second: 1,
                burst: 3,
                ..Default::default()
            },
            tokens(),
        );
        let state = &layer.state;
        for _ in 0..3 {
            assert!(state.admit(&Caller::Token(Verified(0))).is_ok());
        }
        let Err(Some(after)) = state.admit(&Caller::Token(Verified(0))) else {
            panic!("the burst is spent, and it refills")
        };
        assert!(
            after > Duration::from_millis(900) && after <= Duration::from_secs(1),
            "one call a second: {after:?}"
        );
        assert!(
            state.admit(&Caller::Token(Verified(1))).is_ok(),
            "another caller has its own bucket"
        );
    }

    #[test]
    fn a_flood_of_new_callers_shares_one_bucket_and_the_table_stays_bounded() {
        let layer = LimitLayer::new(
            Limits {
                calls_per_second: 0,
                burst: 1,
                ..Default::default()
            },
            tokens(),
        );
        let state = &layer.state;
        let addr = |i: usize| Caller::Address(std::net::IpAddr::V6((i as u128).into()));
        for i in 0..MAX_TRACKED_CALLERS {
            assert!(state.admit(&addr(i)).is_ok());
        }
        assert!(
            state.admit(&addr(MAX_TRACKED_CALLERS)).is_ok(),
            "the shared bucket's one call"
        );
        assert_eq!(
            state.admit(&addr(MAX_TRACKED_CALLERS + 1)),
            Err(None),
            "the shared bucket is spent and never refills"
        );
        assert!(
            state.buckets.lock().unwrap().len() <= MAX_TRACKED_CALLERS + 1,
            "the table is bounded"
        );
    }

    fn request(token: Option<&str>) -> http::Request<Body> {
        let mut builder = http::Request::builder().uri("/berth.v1.Packages/List");
        if let Some(t) = token {
            builder = builder.header("authorization", format!("Bearer {t}"));
        }
        builder.body(Body::empty()).unwrap()
    }

    fn status(response: &http::Response<Body>) -> Option<tonic::Code> {
        tonic::Status::from_header_map(response.headers()).map(|s| s.code())
    }

    #[tokio::test]
    async fn made_up_tokens_are_counted_against_the_caller_not_per_token() {
        let inner = tower::service_fn(|_req: http::Request<Body>| async {
            Ok::<_, Infallible>(http::Response::new(Body::empty()))
        });
        let mut service = LimitLayer::new(
            Limits {
                calls_per_second: 0,
                burst: 2,
                ..Default::default()
            },
            tokens(),
        )
        .layer(inner);
        for i in 0..2 {
            let answer = service.call(request(Some(&format!("guess-{i}")))).await;
            assert_eq!(status(&answer.unwrap()), Some(tonic::Code::Unauthenticated));
        }
        for guess in [Some("guess-2"), None] {
            let answer = service.call(request(guess)).await.unwrap();
            assert_eq!(
                status(&answer),
                Some(tonic::Code::ResourceExhausted),
                "{guess:?}: the caller's burst is spent, whatever token it makes up"
            );
        }
        let answer = service.call(request(Some("alpha"))).await.unwrap();
        assert_eq!(status(&answer), None, "a real token has its own bucket");
    }

    #[tokio::test]
    async fn calls_over_the_concurrency_limit_are_refused_until_one_ends() {
        let release = Arc::new(tokio::sync::Notify::new());
        let held = release.clone();
        let inner = tower::service_fn(move |_req: http::Request<Body>| {
            let held = held.clone();
            async move {
                held.notified().await;
                Ok::<_, Infallible>(http::Response::new(Body::empty()))
            }
        });
        let mut service = LimitLayer::new(
            Limits {
                concurrent_calls: 1,
                ..Default::default()
            },
            tokens(),
        )
        .layer(inner);
        let alpha = || request(Some("alpha"));
        let first = tokio::spawn(service.call(alpha()));
        let refused = service.call(alpha()).await.unwrap();
        let status = tonic::Status::from_header_map(refused.headers()).unwrap();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(
            status
                .message()
                .contains("too many calls in progress (at most 1"),
            "{}",
            status.message()
        );
        release.notify_one();
        first.await.unwrap().unwrap();
        // The permit came back with the first call's answer.
        let next = tokio::spawn(service.call(alpha()));
        release.notify_one();
        let answered = next.await.unwrap().unwrap();
        assert!(tonic::Status::from_header_map(answered.headers()).is_none());
    }
}
