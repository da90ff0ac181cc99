//! The public `berth.v1.Packages` API. The gateway owns authentication and routing; package
//! state lives in lifecycle, so every call is forwarded there with the caller's trace context.

use std::pin::Pin;

use berth_proto::v1;
use berth_proto::v1::packages_server::Packages;
use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status};

#[derive(Clone)]
pub struct Gateway {
    lifecycle: berth_clients::Lifecycle,
}

impl Gateway {
    pub fn new(lifecycle: berth_clients::Lifecycle) -> Self {
        Gateway { lifecycle }
    }
}

/// Lifecycle's answer as the caller's. `Unavailable` is prefixed with the service that failed, so
/// a caller can tell "lifecycle is down" from anything lifecycle itself answered.
fn upstream(status: Status) -> Status {
    match status.code() {
        tonic::Code::Unavailable => Status::unavailable(format!(
            "lifecycle service unavailable: {}",
            status.message()
        )),
        _ => status,
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<v1::Package, Status>> + Send>>;

macro_rules! forward {
    ($self:ident, $method:ident, $req:ident) => {
        $self
            .lifecycle
            .clone()
            .$method($req.into_inner())
            .await
            .map_err(upstream)
    };
}

#[tonic::async_trait]
impl Packages for Gateway {
    async fn update(
        &self,
        req: Request<v1::UpdateRequest>,
    ) -> Result<Response<v1::UpdateResponse>, Status> {
        forward!(self, update, req)
    }

    async fn remove(
        &self,
        req: Request<v1::RemoveRequest>,
    ) -> Result<Response<v1::RemoveResponse>, Status> {
        forward!(self, remove, req)
    }

    async fn dump(
        &self,
        req: Request<v1::DumpRequest>,
    ) -> Result<Response<v1::DumpResponse>, Status> {
        forward!(self, dump, req)
    }

    async fn validate_settings(
        &self,
        req: Request<v1::ValidateSettingsRequest>,
    ) -> Result<Response<v1::ValidateSettingsResponse>, Status> {
        forward!(self, validate_settings, req)
    }

    async fn get(&self, req: Request<v1::GetRequest>) -> Result<Response<v1::Package>, Status> {
        forward!(self, get, req)
    }

    async fn list(
        &self,
        req: Request<v1::ListRequest>,
    ) -> Result<Response<v1::ListResponse>, Status> {
        forward!(self, list, req)
    }

    type WatchStream = WatchStream;

    async fn watch(&self, req: Request<v1::WatchRequest>) -> Result<Response<WatchStream>, Status> {
        let upstream_stream = forward!(self, watch, req)?.into_inner();
        Ok(Response::new(Box::pin(
            upstream_stream.map(|item| item.map_err(upstream)),
        )))
    }
}

/// Checks `authorization: Bearer <token>` against the configured tokens, when there are any.
#[derive(Clone)]
pub struct Auth {
    expected: std::sync::Arc<Vec<String>>,
}

impl Auth {
    pub fn new(tokens: Vec<String>) -> Self {
        Auth {
            expected: std::sync::Arc::new(
                tokens.into_iter().map(|t| format!("Bearer {t}")).collect(),
            ),
        }
    }
}

/// Equal contents, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The tokens in a token file: one per line; blank lines and lines starting with `#` are
/// skipped. A file without any token is an error (it would turn authentication off).
pub fn read_tokens(path: &std::path::Path) -> Result<Vec<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let tokens: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    if tokens.is_empty() {
        return Err(format!("{}: no token in the file", path.display()));
    }
    Ok(tokens)
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        if self.expected.is_empty() {
            return Ok(req);
        }
        match req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
        {
            Some(given)
                if self
                    .expected
                    .iter()
                    .any(|e| same(e.as_bytes(), given.as_bytes())) =>
            {
                Ok(req)
            }
            Some(_) => Err(Status::unauthenticated("invalid bearer token")),
            None => Err(Status::unauthenticated(
                "missing bearer token (authorization: Bearer <token>)",
            )),
        }
    }
}
