//! The worker's side of the other services' gRPC APIs: the clients its task flows call, and what
//! their refusals mean to a task. The flows speak in these terms only.

use berth_queue::worker::TaskError;

use crate::config::TaskConfig;

/// A call to another service that failed: its status as the service (or the transport) gave it.
pub type CallError = tonic::Status;

/// An endpoint that cannot be used (malformed address).
pub type ConnectError = berth_clients::ConnectError;

/// The clients a handler needs; cheap to clone.
#[derive(Clone)]
pub struct Services {
    pub lifecycle: berth_clients::Lifecycle,
    pub release: berth_clients::Releases,
    pub hookevent: berth_clients::HookEvents,
}

impl Services {
    /// Clients of the services `config` names; they connect on first use.
    pub fn connect_lazy(config: &TaskConfig) -> Result<Services, ConnectError> {
        let tls = config.tls.as_ref();
        Ok(Services {
            lifecycle: berth_clients::lifecycle(&config.lifecycle_endpoint, tls)?,
            release: berth_clients::release(&config.release_endpoint, tls)?,
            hookevent: berth_clients::hookevent(&config.hookevent_endpoint, tls)?,
        })
    }
}

/// A failed call as a retryable task error naming the call.
pub fn rpc_error(call: &str, status: CallError) -> TaskError {
    TaskError::retry(format!(
        "{call}: {} ({:?})",
        status.message(),
        status.code()
    ))
}

/// The service found nothing by that name (a package lifecycle no longer knows).
pub fn not_found(status: &CallError) -> bool {
    status.code() == tonic::Code::NotFound
}

/// The release service refused an App's chart for reaching outside its namespace (or the call
/// itself was not this worker's to make): retrying cannot succeed.
pub fn confined(status: &CallError) -> bool {
    status.code() == tonic::Code::PermissionDenied
}

/// The service refused the request's content: retrying the same request cannot succeed.
pub fn invalid_argument(status: &CallError) -> bool {
    status.code() == tonic::Code::InvalidArgument
}
