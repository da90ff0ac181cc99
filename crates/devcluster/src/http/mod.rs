//! The HTTP front end: one axum fallback handler that parses Kubernetes paths itself,
//! bearer-token authentication, and JSON/Status rendering.

mod admission;
mod discovery;
mod openapi;
mod query;
mod resource;
mod route;
mod scale;
mod table;
mod watch;

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::status::ApiError;
use crate::store::Store;
use route::Route;

/// Shared request state.
#[derive(Clone)]
pub struct App {
    pub store: Arc<Store>,
    pub token: Option<Arc<str>>,
    /// Ends open watches at shutdown so graceful shutdown does not wait for their timeouts.
    pub shutdown: CancellationToken,
    /// `host:port` the server is reachable at, for `/api`'s serverAddressByClientCIDRs.
    pub address: Arc<str>,
}

pub fn router(app: App) -> Router {
    Router::new()
        .fallback(dispatch)
        .layer(middleware::from_fn_with_state(app.clone(), authenticate))
        .with_state(app)
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(code, &self.to_status())
    }
}

pub fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// With a token configured, every request needs `Authorization: Bearer <token>`.
async fn authenticate(State(app): State<App>, request: Request, next: Next) -> Response {
    if let Some(expected) = &app.token {
        let presented = request
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !presented.is_some_and(|p| constant_time_eq(p.as_bytes(), expected.as_bytes())) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

/// Compares without an early exit, so response time does not reveal a token prefix.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn dispatch(
    State(app): State<App>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // One line per request at debug level (`RUST_LOG=berth_devcluster=debug`): the way
    // to see what a client such as helm or kubectl actually sends.
    tracing::debug!(
        http.method = %method,
        http.path = uri.path(),
        http.query = uri.query().unwrap_or(""),
        http.content_type = headers.get(http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or(""),
        http.accept = headers.get(http::header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or(""),
        "request"
    );
    let route = route::parse(uri.path());
    let result = match route {
        Route::Object(route) => {
            let req = resource::Request {
                method: &method,
                route,
                query: query::parse(uri.query()),
                headers: &headers,
                body: &body,
            };
            resource::handle(&app, req).await
        }
        other if method == Method::GET => read_only(&app, other, &headers, uri.path()),
        _ => Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on {}",
            uri.path()
        ))),
    };
    let response = result.unwrap_or_else(IntoResponse::into_response);
    tracing::debug!(http.method = %method, http.path = uri.path(), http.status = response.status().as_u16(), "response");
    response
}

fn read_only(
    app: &App,
    route: Route,
    headers: &HeaderMap,
    path: &str,
) -> Result<Response, ApiError> {
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let ok = |v: Value| Ok(json_response(StatusCode::OK, &v));
    match route {
        Route::Version => ok(discovery::version()),
        Route::Health => Ok((StatusCode::OK, "ok").into_response()),
        Route::CoreVersions if discovery::wants_aggregated(accept) => Ok(aggregated(app, true)),
        Route::CoreVersions => ok(discovery::core_versions(&app.address)),
        Route::Groups if discovery::wants_aggregated(accept) => Ok(aggregated(app, false)),
        Route::Groups => ok(discovery::groups(&app.store.registry())),
        Route::Group(g) => discovery::group(&app.store.registry(), &g)
            .map_or_else(|| Err(ApiError::no_route(path)), ok),
        Route::Resources { group, version } => {
            discovery::resources(&app.store.registry(), &group, &version)
                .map_or_else(|| Err(ApiError::no_route(path)), ok)
        }
        Route::OpenApiV3(None) => ok(openapi::index(&app.store.registry())),
        Route::OpenApiV3(Some(gv)) => openapi::document_for_path(&app.store.registry(), &gv)
            .map_or_else(|| Err(ApiError::no_route(path)), ok),
        // No OpenAPI v2: see `openapi` for why v3 paths suffice for kubectl and helm.
        Route::OpenApiV2 | Route::Unknown | Route::Object(_) => Err(ApiError::no_route(path)),
    }
}

fn aggregated(app: &App, core: bool) -> Response {
    let body = discovery::aggregated(&app.store.registry(), core);
    (
        StatusCode::OK,
        [(
            http::header::CONTENT_TYPE,
            discovery::AGGREGATED_CONTENT_TYPE,
        )],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
