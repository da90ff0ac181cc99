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

    type WatchStream = WatchStream;

    async fn watch(&self, req: Request<v1::WatchRequest>) -> Result<Response<WatchStream>, Status> {
        let upstream_stream = forward!(self, watch, req)?.into_inner();
        Ok(Response::new(Box::pin(
            upstream_stream.map(|item| item.map_err(upstream)),
        )))
    }
}
