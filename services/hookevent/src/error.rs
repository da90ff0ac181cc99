//! The service's errors and their one mapping to gRPC codes.

use tonic::Status;

use crate::kube::{OperationError, SetError};
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// Bad input: the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// hookevent was started without Kubernetes access.
    #[error("hookevent has no Kubernetes access (start it with --kubeconfig)")]
    NoKubernetes,
    /// The cluster did not answer as needed (watches not listed, an API call failed).
    #[error("{0}")]
    Unavailable(String),
    /// An object operation of a hook failed part-way.
    #[error("{0}")]
    Aborted(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Lifecycle could not say what the package is.
    #[error(transparent)]
    Scope(#[from] berth_clients::scope::ScopeError),
}

impl ServiceError {
    /// A failed object-operations batch of `hook`.
    pub fn operations(hook: &str, e: OperationError) -> ServiceError {
        let message = format!("hook {hook}: {e}");
        if e.is_invalid() {
            ServiceError::Invalid(message)
        } else {
            ServiceError::Aborted(message)
        }
    }
}

impl From<SetError> for ServiceError {
    fn from(e: SetError) -> ServiceError {
        if e.is_invalid() {
            ServiceError::Invalid(e.to_string())
        } else {
            ServiceError::Unavailable(e.to_string())
        }
    }
}

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Status {
        match e {
            ServiceError::Invalid(m) => Status::invalid_argument(m),
            ServiceError::NoKubernetes => Status::failed_precondition(e.to_string()),
            ServiceError::Unavailable(m) => Status::unavailable(m),
            ServiceError::Aborted(m) => Status::aborted(m),
            ServiceError::Store(s) => Status::internal(s.to_string()),
            ServiceError::Scope(s) => s.to_status(),
        }
    }
}
