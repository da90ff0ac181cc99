//! The controller's errors. A reconcile that fails is retried by kube's controller with a
//! backoff (`error_policy`); nothing here reaches a gRPC caller.

/// Why a reconcile (or the controller's start) failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("lifecycle: {0}")]
    Lifecycle(#[from] crate::client::CallError),
    #[error("installing the CustomResourceDefinitions: {0}")]
    Crds(String),
    #[error("the admission webhook: {0}")]
    Webhook(String),
    #[error("configuration: {0}")]
    Config(String),
}
