//! The view API: a package's declarative operators' views as a read-only Kubernetes-style API
//! (discovery, get, list, watch), so `kubectl --server <views>/packages/<key>` reads them.
//! Callers present a bearer token berth's API accepts; the views come from hookevent
//! (`GetViews`, `WatchViews`), which holds them in memory.
//!
//! Each operator's views are the group `<operator>.view.dcontroller.io`, version `v1alpha1`;
//! a kind's resource is its lowercase name plus `s` (`HealthView`: `healthviews`), its
//! singular the lowercase name. Objects carry `metadata.resourceVersion`, the revision of
//! their last change; a list's is the views' revision, and a watch from it sends what changed
//! since (as `kubectl get -w` asks).
//!
//! Hand-written over hyper: no crate serves a Kubernetes-style API over data of one's own
//! (kube-rs is a client), and the few routes here need only path matching.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::auth::Tokens;
use berth_proto::hookevent::{GetViewsRequest, GetViewsResponse, ViewChange};

/// Connections open at once; more wait in the listen backlog.
const MAX_CONNECTIONS: usize = 256;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a watch stays open unless the caller asks for less (`timeoutSeconds`).
const MAX_WATCH: Duration = Duration::from_secs(1800);
/// The version every view group serves.
const VERSION: &str = "v1alpha1";

type Body = BoxBody<Bytes, Infallible>;

/// What the view API serves from.
#[derive(Clone)]
pub struct Views {
    pub tokens: Tokens,
    pub hookevent: berth_clients::HookEvents,
}

/// Serves the view API on `listener` (over TLS with `tls`) until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    views: Views,
    shutdown: CancellationToken,
) {
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = connections.clone().acquire_owned().await else {
            return;
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "view API: accept failed");
                    continue;
                }
            },
            _ = shutdown.cancelled() => return,
        };
        let (acceptor, views, shutdown) = (acceptor.clone(), views.clone(), shutdown.clone());
        berth_runtime::spawn_here(async move {
            let _permit = permit;
            let service = hyper::service::service_fn(move |req| {
                let views = views.clone();
                async move { Ok::<_, Infallible>(handle(&views, req).await) }
            });
            let builder = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HANDSHAKE_TIMEOUT)
                .clone();
            match acceptor {
                Some(acceptor) => {
                    let accepted =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await;
                    let Ok(Ok(tls)) = accepted else { return };
                    let conn = builder.serve_connection(TokioIo::new(tls), service);
                    run_connection(conn, shutdown).await;
                }
                None => {
                    let conn = builder.serve_connection(TokioIo::new(stream), service);
                    run_connection(conn, shutdown).await;
                }
            }
        });
    }
}

async fn run_connection<C>(conn: C, shutdown: CancellationToken)
where
    C: std::future::Future + GracefulShutdown,
{
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = shutdown.cancelled() => {
            conn.as_mut().shutdown();
            let _ = tokio::time::timeout(Duration::from_secs(5), conn).await;
        }
    }
}

/// hyper's connections' graceful shutdown, for either transport.
trait GracefulShutdown {
    fn shutdown(self: std::pin::Pin<&mut Self>);
}

impl<I, S> GracefulShutdown for hyper::server::conn::http1::Connection<I, S>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    S: hyper::service::HttpService<Incoming>,
    S::ResBody: http_body::Body + 'static,
    <S::ResBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn shutdown(self: std::pin::Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// A Kubernetes `Status` failure.
fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    json_response(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code.as_u16()}),
    )
}

fn json_response(code: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = code;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// The parameters of a list or watch the view API understands.
#[derive(Default)]
struct Query {
    watch: bool,
    resource_version: u64,
    labels: Vec<(String, String)>,
    name: Option<String>,
    timeout: Option<Duration>,
}

fn query(raw: Option<&str>) -> Result<Query, String> {
    let mut q = Query::default();
    for pair in raw.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = percent_decode(v);
        match k {
            "watch" => q.watch = v == "true" || v == "1",
            "resourceVersion" if !v.is_empty() => {
                q.resource_version = v
                    .parse()
                    .map_err(|_| format!("resourceVersion {v:?} is not a view revision"))?;
            }
            "labelSelector" => {
                for term in v.split(',').filter(|t| !t.is_empty()) {
                    let Some((lk, lv)) = term.split_once('=') else {
                        return Err(format!(
                            "labelSelector {term:?}: the view API takes key=value terms only"
                        ));
                    };
                    q.labels.push((
                        lk.trim_end_matches('=').to_owned(),
                        lv.trim_start_matches('=').to_owned(),
                    ));
                }
            }
            "fieldSelector" => {
                for term in v.split(',').filter(|t| !t.is_empty()) {
                    match term.split_once('=') {
                        Some(("metadata.name", name)) => q.name = Some(name.to_owned()),
                        _ => {
                            return Err(format!(
                                "fieldSelector {term:?}: the view API takes metadata.name=NAME only"
                            ));
                        }
                    }
                }
            }
            "timeoutSeconds" => {
                let secs: u64 = v
                    .parse()
                    .map_err(|_| format!("timeoutSeconds {v:?} is not a number"))?;
                q.timeout = Some(Duration::from_secs(secs));
            }
            _ => {}
        }
    }
    Ok(q)
}

/// `%XX` escapes decoded, `+` as a space (kubectl escapes `=` and `,` in selectors).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = (b[i] == b'%' && i + 2 < b.len())
            .then(|| std::str::from_utf8(&b[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (hex, b[i]) {
            (Some(byte), _) => {
                out.push(byte);
                i += 3;
            }
            (None, b'+') => {
                out.push(b' ');
                i += 1;
            }
            (None, other) => {
                out.push(other);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A view kind's resource name.
fn plural(kind: &str) -> String {
    format!("{}s", kind.to_ascii_lowercase())
}

async fn handle(views: &Views, req: Request<Incoming>) -> Response<Body> {
    if let Err(refused) = views.tokens.verify(req.headers()) {
        return status(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            &format!("the view API takes berth's API tokens: {refused}"),
        );
    }
    if req.method() != Method::GET {
        return status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "views are read-only here: get, list and watch",
        );
    }
    let path = req.uri().path().to_owned();
    let Some(rest) = path.strip_prefix("/packages/") else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the view API serves /packages/<package key>/...",
        );
    };
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    let Some((key, segments)) = segments.split_first() else {
        return status(StatusCode::NOT_FOUND, "NotFound", "no package key");
    };
    let q = match query(req.uri().query()) {
        Ok(q) => q,
        Err(e) => return status(StatusCode::BAD_REQUEST, "BadRequest", &e),
    };
    match segments {
        ["version"] => json_response(
            StatusCode::OK,
            &json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-berth-views",
                "platform": "berth"}),
        ),
        ["api"] => json_response(
            StatusCode::OK,
            &json!({"kind": "APIVersions", "versions": [], "serverAddressByClientCIDRs": []}),
        ),
        _ => {
            let answer = views
                .hookevent
                .clone()
                .get_views(GetViewsRequest {
                    package: (*key).to_owned(),
                })
                .await;
            let got = match answer {
                Ok(a) => a.into_inner(),
                Err(s) => {
                    return status(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "ServiceUnavailable",
                        &format!("hookevent GetViews: {}", s.message()),
                    );
                }
            };
            if !got.running {
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("package {key:?} has no operators running"),
                );
            }
            route(views, key, segments, q, got).await
        }
    }
}

async fn route(
    views: &Views,
    key: &str,
    segments: &[&str],
    q: Query,
    got: GetViewsResponse,
) -> Response<Body> {
    let mut groups: Vec<&str> = got.kinds.iter().map(|k| k.group.as_str()).collect();
    groups.dedup();
    match segments {
        ["apis"] => {
            let groups: Vec<Value> = groups
                .iter()
                .map(|g| {
                    let v = json!({"groupVersion": format!("{g}/{VERSION}"), "version": VERSION});
                    json!({"name": g, "versions": [v.clone()], "preferredVersion": v})
                })
                .collect();
            json_response(
                StatusCode::OK,
                &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
            )
        }
        ["apis", group] if groups.contains(group) => {
            let v = json!({"groupVersion": format!("{group}/{VERSION}"), "version": VERSION});
            json_response(
                StatusCode::OK,
                &json!({"kind": "APIGroup", "apiVersion": "v1", "name": group,
                    "versions": [v.clone()], "preferredVersion": v}),
            )
        }
        ["apis", group, VERSION] if groups.contains(group) => {
            let resources: Vec<Value> = got
                .kinds
                .iter()
                .filter(|k| k.group == *group)
                .map(|k| {
                    json!({"name": plural(&k.kind), "singularName": k.kind.to_ascii_lowercase(),
                        "namespaced": true, "kind": k.kind, "verbs": ["get", "list", "watch"]})
                })
                .collect();
            json_response(
                StatusCode::OK,
                &json!({"kind": "APIResourceList", "apiVersion": "v1",
                    "groupVersion": format!("{group}/{VERSION}"), "resources": resources}),
            )
        }
        ["apis", group, VERSION, resource] => {
            objects(views, key, group, resource, None, None, q, got).await
        }
        ["apis", group, VERSION, "namespaces", ns, resource] => {
            objects(views, key, group, resource, Some(ns), None, q, got).await
        }
        ["apis", group, VERSION, "namespaces", ns, resource, name] => {
            objects(views, key, group, resource, Some(ns), Some(name), q, got).await
        }
        _ => status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!(
                "package {key:?}: no such view resource: /{}",
                segments.join("/")
            ),
        ),
    }
}

/// Which objects a request selects.
struct Selection {
    api_version: String,
    kind: String,
    namespace: Option<String>,
    name: Option<String>,
    labels: Vec<(String, String)>,
}

impl Selection {
    fn matches(&self, o: &Value) -> bool {
        let field = |p: &str| o.pointer(p).and_then(Value::as_str);
        field("/apiVersion") == Some(self.api_version.as_str())
            && field("/kind") == Some(self.kind.as_str())
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| field("/metadata/namespace") == Some(ns))
            && self
                .name
                .as_deref()
                .is_none_or(|n| field("/metadata/name") == Some(n))
            && self.labels.iter().all(|(k, v)| {
                o.pointer("/metadata/labels")
                    .and_then(|l| l.get(k))
                    .and_then(Value::as_str)
                    == Some(v.as_str())
            })
    }
}

#[allow(clippy::too_many_arguments)]
async fn objects(
    views: &Views,
    key: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
    q: Query,
    got: GetViewsResponse,
) -> Response<Body> {
    let Some(kind) = got.kinds.iter().find(|k| {
        k.group == group && (plural(&k.kind) == resource || k.kind.to_ascii_lowercase() == resource)
    }) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("package {key:?} has no view resource {resource}.{group}"),
        );
    };
    let selection = Selection {
        api_version: format!("{group}/{VERSION}"),
        kind: kind.kind.clone(),
        namespace: namespace.map(str::to_owned),
        name: name.map(str::to_owned).or(q.name.clone()),
        labels: q.labels.clone(),
    };
    if q.watch {
        return watch(views, key, selection, &q).await;
    }
    let objects: Vec<Value> = got
        .objects
        .iter()
        .map(berth_proto::json::from_struct)
        .filter(|o| selection.matches(o))
        .collect();
    if let Some(name) = name {
        return match objects.into_iter().next() {
            Some(o) => json_response(StatusCode::OK, &o),
            None => status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("{}.{group} {name:?} not found", plural(&kind.kind)),
            ),
        };
    }
    json_response(
        StatusCode::OK,
        &json!({"kind": format!("{}List", kind.kind), "apiVersion": selection.api_version,
            "metadata": {"resourceVersion": got.revision.to_string()}, "items": objects}),
    )
}

/// A watch: the selected objects changed after `resourceVersion` (all of them, as ADDED,
/// without one), then every change, one JSON event per line.
async fn watch(views: &Views, key: &str, selection: Selection, q: &Query) -> Response<Body> {
    let stream = match views
        .hookevent
        .clone()
        .watch_views(GetViewsRequest {
            package: key.to_owned(),
        })
        .await
    {
        Ok(s) => s.into_inner(),
        Err(s) => {
            return status(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                &format!("hookevent WatchViews: {}", s.message()),
            );
        }
    };
    let after = q.resource_version;
    let limit = q.timeout.unwrap_or(MAX_WATCH).min(MAX_WATCH);
    let events = stream
        .take_until(tokio::time::sleep(limit))
        .filter_map(move |event| {
            let line = match event {
                Err(s) => Some(json!({"type": "ERROR", "object": {"kind": "Status",
                    "apiVersion": "v1", "status": "Failure", "reason": "Expired",
                    "code": 410, "message": s.message()}})),
                Ok(e) => {
                    let object = e
                        .object
                        .as_ref()
                        .map(berth_proto::json::from_struct)
                        .unwrap_or(Value::Null);
                    let revision = object
                        .pointer("/metadata/resourceVersion")
                        .and_then(Value::as_str)
                        .and_then(|r| r.parse::<u64>().ok())
                        .unwrap_or(e.revision);
                    let kind = match ViewChange::try_from(e.change) {
                        Ok(ViewChange::Added) => "ADDED",
                        Ok(ViewChange::Modified) => "MODIFIED",
                        Ok(ViewChange::Deleted) => "DELETED",
                        _ => return std::future::ready(None),
                    };
                    (revision > after && selection.matches(&object))
                        .then(|| json!({"type": kind, "object": object}))
                }
            };
            std::future::ready(
                line.map(|l| Ok::<_, Infallible>(Frame::data(Bytes::from(format!("{l}\n"))))),
            )
        });
    let mut response = Response::new(http_body_util::BodyExt::boxed(StreamBody::new(events)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_and_escapes_are_read() {
        let q = query(Some(
            "watch=1&resourceVersion=7&labelSelector=app%3Dweb%2Ctier%3Dfront&fieldSelector=metadata.name%3Dx",
        ))
        .expect("a query");
        assert!(q.watch);
        assert_eq!(q.resource_version, 7);
        assert_eq!(
            q.labels,
            vec![
                ("app".into(), "web".into()),
                ("tier".into(), "front".into())
            ]
        );
        assert_eq!(q.name.as_deref(), Some("x"));
        let refused = query(Some("labelSelector=app+in+(a)"))
            .err()
            .expect("refused");
        assert!(refused.contains("key=value"), "{refused}");
        assert_eq!(percent_decode("a%2"), "a%2");
    }
}
