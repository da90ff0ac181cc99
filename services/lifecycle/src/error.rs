//! The errors of the lifecycle service and their one mapping to gRPC status codes.

use tonic::Status;

use crate::model::PackageKey;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum LifecycleError {
    /// A request field is missing or wrong; the message starts with the field's name.
    #[error("{0}")]
    InvalidArgument(String),
    #[error("package {0} not found")]
    NotFound(PackageKey),
    /// The request cannot be done in the current state (a Remove of a package others need).
    #[error("{0}")]
    FailedPrecondition(String),
    /// The state changed under the request (it may be sent again).
    #[error("{0}")]
    Aborted(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Lifecycle's own data cannot be used (a stored schema that no longer compiles, a Dump
    /// that cannot be rendered).
    #[error("{0}")]
    Internal(String),
}

impl From<LifecycleError> for Status {
    fn from(e: LifecycleError) -> Status {
        // Settings errors list every failing field: bounded to fit a header.
        let message = berth_runtime::bounded_status_message(e.to_string());
        match &e {
            LifecycleError::InvalidArgument(_) => Status::invalid_argument(message),
            LifecycleError::NotFound(_) => Status::not_found(message),
            LifecycleError::FailedPrecondition(_) => Status::failed_precondition(message),
            LifecycleError::Aborted(_) => Status::aborted(message),
            LifecycleError::Store(_) => {
                tracing::error!(error = %e, "lifecycle store failed");
                Status::internal(message)
            }
            LifecycleError::Internal(_) => Status::internal(message),
        }
    }
}

impl From<StoreError> for Status {
    fn from(e: StoreError) -> Status {
        LifecycleError::Store(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_has_its_code() {
        let code = |e: LifecycleError| Status::from(e).code();
        assert_eq!(
            code(LifecycleError::InvalidArgument("ref: required".into())),
            tonic::Code::InvalidArgument
        );
        let key = PackageKey::from_issued("default.hello".into());
        let status = Status::from(LifecycleError::NotFound(key));
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert_eq!(status.message(), "package default.hello not found");
        assert_eq!(
            code(LifecycleError::Internal("x".into())),
            tonic::Code::Internal
        );
    }
}
