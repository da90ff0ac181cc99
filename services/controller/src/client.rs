//! The controller's calls to lifecycle, and what their answers mean (`CallError`): the one
//! module that knows gRPC status codes.

use berth_proto::lifecycle::{
    DeleteRepositoryRequest, OwnedRemove, OwnedSuspend, OwnedUpdate, Owner, RepositoryDefinition,
    SuspendChange,
};
use berth_proto::v1;
use futures::{Stream, StreamExt as _};

/// What a refused or failed call means to the controller.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The request is wrong (settings, repository, version): the spec must change.
    #[error("{0}")]
    Invalid(String),
    /// The state refuses it (another front door's package, a suspended one, a mandatory
    /// dependency): named in the message.
    #[error("{0}")]
    Refused(String),
    #[error("not found")]
    NotFound,
    /// Anything else (lifecycle unreachable, ...): retried.
    #[error("{code}: {message}")]
    Failed { code: String, message: String },
}

impl From<tonic::Status> for CallError {
    fn from(s: tonic::Status) -> CallError {
        match s.code() {
            tonic::Code::InvalidArgument => CallError::Invalid(s.message().to_owned()),
            tonic::Code::FailedPrecondition => CallError::Refused(s.message().to_owned()),
            tonic::Code::NotFound => CallError::NotFound,
            code => CallError::Failed {
                code: format!("{code:?}"),
                message: s.message().to_owned(),
            },
        }
    }
}

/// Lifecycle, as the controller calls it.
#[derive(Clone)]
pub struct Lifecycle(berth_clients::Lifecycle);

fn owner(resource: &str) -> Option<Owner> {
    Some(Owner {
        resource: resource.to_owned(),
    })
}

impl Lifecycle {
    pub fn new(client: berth_clients::Lifecycle) -> Lifecycle {
        Lifecycle(client)
    }

    pub async fn update_owned(
        &self,
        resource: &str,
        update: v1::UpdateRequest,
    ) -> Result<v1::UpdateResponse, CallError> {
        let request = OwnedUpdate {
            owner: owner(resource),
            update: Some(update),
        };
        Ok(self.0.clone().update_owned(request).await?.into_inner())
    }

    pub async fn remove_owned(&self, resource: &str, r: v1::PackageRef) -> Result<(), CallError> {
        let request = OwnedRemove {
            owner: owner(resource),
            remove: Some(v1::RemoveRequest {
                r#ref: Some(r),
                force: false,
            }),
        };
        self.0.clone().remove_owned(request).await?;
        Ok(())
    }

    pub async fn suspend_owned(
        &self,
        resource: &str,
        r: v1::PackageRef,
        suspended: bool,
    ) -> Result<(), CallError> {
        let request = OwnedSuspend {
            owner: owner(resource),
            change: Some(SuspendChange {
                r#ref: Some(r),
                suspended,
            }),
        };
        self.0.clone().suspend_owned(request).await?;
        Ok(())
    }

    /// Defines (or redefines) a repository; what its source resolved to.
    pub async fn put_repository(&self, def: RepositoryDefinition) -> Result<String, CallError> {
        Ok(self
            .0
            .clone()
            .put_repository(def)
            .await?
            .into_inner()
            .source)
    }

    pub async fn delete_repository(&self, name: &str) -> Result<(), CallError> {
        let request = DeleteRepositoryRequest {
            name: name.to_owned(),
        };
        self.0.clone().delete_repository(request).await?;
        Ok(())
    }

    /// The package, or `None` when lifecycle has none.
    pub async fn get(&self, r: v1::PackageRef) -> Result<Option<v1::Package>, CallError> {
        match self.0.clone().get(v1::GetRequest { r#ref: Some(r) }).await {
            Ok(p) => Ok(Some(p.into_inner())),
            Err(s) if s.code() == tonic::Code::NotFound => Ok(None),
            Err(s) => Err(s.into()),
        }
    }

    pub async fn validate(
        &self,
        request: v1::ValidateSettingsRequest,
    ) -> Result<v1::ValidateSettingsResponse, CallError> {
        Ok(self
            .0
            .clone()
            .validate_settings(request)
            .await?
            .into_inner())
    }

    /// Every package from its current state on, then each change (a deleted one `gone`).
    pub async fn watch(
        &self,
    ) -> Result<impl Stream<Item = Result<v1::Package, CallError>> + use<>, CallError> {
        let stream = self
            .0
            .clone()
            .watch(v1::WatchRequest { r#ref: None })
            .await?
            .into_inner();
        Ok(stream.map(|item| item.map_err(CallError::from)))
    }
}
