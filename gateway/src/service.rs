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
    /// Where operators' views are read (`None`: the gateway was not given hookevent).
    hookevent: Option<berth_clients::HookEvents>,
}

impl Gateway {
    pub fn new(
        lifecycle: berth_clients::Lifecycle,
        hookevent: Option<berth_clients::HookEvents>,
    ) -> Self {
        Gateway {
            lifecycle,
            hookevent,
        }
    }

    async fn set_suspended(
        &self,
        req: v1::SuspendRequest,
        suspended: bool,
    ) -> Result<Response<v1::SuspendResponse>, Status> {
        let change = berth_proto::lifecycle::SuspendChange {
            r#ref: req.r#ref,
            suspended,
        };
        self.lifecycle
            .clone()
            .suspend(change)
            .await
            .map_err(upstream)
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

    async fn suspend(
        &self,
        req: Request<v1::SuspendRequest>,
    ) -> Result<Response<v1::SuspendResponse>, Status> {
        self.set_suspended(req.into_inner(), true).await
    }

    async fn resume(
        &self,
        req: Request<v1::SuspendRequest>,
    ) -> Result<Response<v1::SuspendResponse>, Status> {
        self.set_suspended(req.into_inner(), false).await
    }

    async fn get_views(
        &self,
        req: Request<v1::GetViewsRequest>,
    ) -> Result<Response<v1::GetViewsResponse>, Status> {
        let Some(hookevent) = &self.hookevent else {
            return Err(Status::unimplemented(
                "views: this gateway was not given hookevent's endpoint (--hookevent)",
            ));
        };
        let key = package_key(req.get_ref().r#ref.as_ref())?;
        let got = hookevent
            .clone()
            .get_views(berth_proto::hookevent::GetViewsRequest { package: key })
            .await
            .map_err(|s| match s.code() {
                tonic::Code::Unavailable => {
                    Status::unavailable(format!("hookevent service unavailable: {}", s.message()))
                }
                _ => s,
            })?
            .into_inner();
        let mut objects: Vec<(Vec<String>, prost_types::Struct)> = got
            .objects
            .into_iter()
            .map(|o| {
                let v = berth_proto::json::from_struct(&o);
                let field = |p: &str| {
                    v.pointer(p)
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                let sort = vec![
                    field("/apiVersion"),
                    field("/kind"),
                    field("/metadata/namespace"),
                    field("/metadata/name"),
                ];
                (sort, o)
            })
            .collect();
        objects.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(Response::new(v1::GetViewsResponse {
            running: got.running,
            objects: objects.into_iter().map(|(_, o)| o).collect(),
        }))
    }

    type WatchStream = WatchStream;

    async fn watch(&self, req: Request<v1::WatchRequest>) -> Result<Response<WatchStream>, Status> {
        let upstream_stream = forward!(self, watch, req)?.into_inner();
        Ok(Response::new(Box::pin(
            upstream_stream.map(|item| item.map_err(upstream)),
        )))
    }
}

/// The key of the package `r` names: `<namespace>.<name>` for an app, `<name>` for a module.
fn package_key(r: Option<&v1::PackageRef>) -> Result<String, Status> {
    let r = r.ok_or_else(|| Status::invalid_argument("ref: required"))?;
    if r.name.is_empty() {
        return Err(Status::invalid_argument("ref.name: required"));
    }
    match v1::PackageKind::try_from(r.kind) {
        Ok(v1::PackageKind::App) if r.namespace.is_empty() => Err(Status::invalid_argument(
            "ref.namespace: an app is named with its namespace",
        )),
        Ok(v1::PackageKind::App) => Ok(format!("{}.{}", r.namespace, r.name)),
        Ok(v1::PackageKind::Module) => Ok(r.name.clone()),
        _ => Err(Status::invalid_argument(format!(
            "ref.kind: {} is not App or Module",
            r.kind
        ))),
    }
}
