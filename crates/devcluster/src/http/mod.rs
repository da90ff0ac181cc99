//! The HTTP front end: one axum fallback handler that parses Kubernetes paths itself, the
//! authentication, impersonation and authorization every request passes first (`guard`), and
//! JSON/Status rendering.

mod admission;
mod discovery;
mod openapi;
pub(crate) mod query;
mod resource;
mod reviews;
mod route;
mod scale;
mod table;
mod watch;

use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::auth::attributes::Attributes;
use crate::auth::{self, Authenticated, Authenticator, UserInfo, impersonation};
use crate::status::ApiError;
use crate::store::Store;
use route::Route;

/// Shared request state.
#[derive(Clone)]
pub struct App {
    pub store: Arc<Store>,
    pub auth: Arc<Authenticator>,
    /// Ends open watches at shutdown so graceful shutdown does not wait for their timeouts.
    pub shutdown: CancellationToken,
    /// `host:port` the server is reachable at, for `/api`'s serverAddressByClientCIDRs.
    pub address: Arc<str>,
}

pub fn router(app: App) -> Router {
    Router::new()
        .fallback(dispatch)
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Who a request acts as, once `guard` let it through.
#[derive(Clone)]
pub struct Caller(pub Arc<UserInfo>);

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

/// Authentication, impersonation and authorization, in kube-apiserver's order: a bad bearer
/// token is 401; a request its user (after impersonation) may not make is 403, worded as
/// kube-apiserver words it. What passes carries its [`Caller`].
async fn guard(State(app): State<App>, mut request: Request, next: Next) -> Response {
    let header = request
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let user = match app.auth.authenticate(header, &app.store) {
        Authenticated::Anonymous => UserInfo::anonymous(),
        Authenticated::User(u) => u,
        Authenticated::Invalid(why) => {
            tracing::debug!(reason = %why, http.path = request.uri().path(), "bearer token refused");
            return ApiError::unauthorized().into_response();
        }
    };
    let q = query::parse(request.uri().query());
    let attributes = Attributes::from_request(request.method(), request.uri().path(), &q);
    let rbac = app.store.rbac();
    let user = match impersonation::impersonate(rbac, &user, &attributes, request.headers()) {
        Ok(Some(impersonated)) => impersonated,
        Ok(None) => user,
        Err(e) => return e.into_response(),
    };
    let decision = rbac.authorize(&user, &attributes);
    if !decision.allowed {
        tracing::debug!(user = %user.name, verb = %attributes.verb, resource = %attributes.resource, path = %attributes.path, "forbidden");
        return auth::forbidden(&user, &attributes, &decision.reason).into_response();
    }
    request.extensions_mut().insert(Caller(Arc::new(user)));
    next.run(request).await
}

async fn dispatch(
    State(app): State<App>,
    Extension(Caller(user)): Extension<Caller>,
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
    let warnings = resource::Warnings::default();
    let result = match route {
        Route::Object(route) => {
            let req = resource::Request {
                method: &method,
                route,
                query: query::parse(uri.query()),
                headers: &headers,
                body: &body,
                user: &user,
                warnings: &warnings,
            };
            resource::handle(&app, req).await
        }
        other if method == Method::GET => read_only(&app, other, &headers, uri.path()),
        _ => Err(ApiError::method_not_allowed(format!(
            "{method} is not supported on {}",
            uri.path()
        ))),
    };
    let mut response = result.unwrap_or_else(IntoResponse::into_response);
    let mut seen = std::collections::BTreeSet::new();
    for w in warnings.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        // As kube-apiserver: `299 - "<text>"`, each text once.
        if seen.insert(w.clone())
            && let Ok(v) =
                http::HeaderValue::from_str(&format!("299 - {}", auth::rbac::go_quote(w)))
        {
            response.headers_mut().append(http::header::WARNING, v);
        }
    }
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
