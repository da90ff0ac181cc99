//! The worker's side of the other services' gRPC APIs: the clients its task flows call, and what
//! their refusals mean to a task. The flows speak in these terms only.

use berth_queue::worker::TaskError;

use crate::config::TaskConfig;

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

/// A call to another service that failed: which call, and how the service (or the transport)
/// answered. The flows read it through its methods, never as a gRPC status.
#[derive(Debug, thiserror::Error)]
#[error("{call}: {message} ({code:?})")]
pub struct CallError {
    /// The service and method, `hookevent SetBindings`.
    call: &'static str,
    code: tonic::Code,
    message: String,
    /// The reason the service named (`berth_proto::failure`), if any.
    reason: Option<String>,
}

impl CallError {
    pub fn new(call: &'static str, status: tonic::Status) -> CallError {
        CallError {
            call,
            code: status.code(),
            message: status.message().to_owned(),
            reason: berth_proto::failure::reason(&status),
        }
    }

    /// The service named `reason` (`berth_proto::failure`) as why the call failed.
    pub fn is(&self, reason: &str) -> bool {
        self.reason.as_deref() == Some(reason)
    }

    /// The same call may succeed if made again: anything but a refusal of the request's
    /// content or a render limit. (A service that cannot be reached, or that refuses this worker's role, may be
    /// back or fixed by the next attempt; the same request stays invalid.)
    pub fn is_retryable(&self) -> bool {
        !self.is_invalid() && !self.is_render_limit()
    }

    /// The service refused the request's content: the same request cannot succeed.
    pub fn is_invalid(&self) -> bool {
        self.code == tonic::Code::InvalidArgument
    }

    /// The service found nothing by that name (a package lifecycle no longer knows).
    pub fn is_not_found(&self) -> bool {
        self.code == tonic::Code::NotFound
    }

    /// The release service refused an App's chart for reaching outside its namespace (or the
    /// call was not this worker's to make).
    pub fn is_confined(&self) -> bool {
        self.code == tonic::Code::PermissionDenied
    }

    /// The release service refused the chart's render for hitting one of its render limits
    /// (memory, time, output): the same chart and values hit it again, so retrying only
    /// repeats the work (a memory bomb retried forever was issue 30.5).
    pub fn is_render_limit(&self) -> bool {
        self.code == tonic::Code::ResourceExhausted
    }

    /// The release service gives packages no Kubernetes identity: it acts as none (no
    /// principals), or the cluster mints no ServiceAccount tokens. Hooks then run without one.
    pub fn is_not_served(&self) -> bool {
        self.code == tonic::Code::Unimplemented
    }

    /// The call does not apply to the package's state now (a principal kept while the package
    /// is not being removed).
    pub fn is_failed_precondition(&self) -> bool {
        self.code == tonic::Code::FailedPrecondition
    }

    /// What the service said.
    pub fn message(&self) -> &str {
        &self.message
    }
}

/// A failed call fails its task: retried when the call may succeed again, for good otherwise.
impl From<CallError> for TaskError {
    fn from(e: CallError) -> TaskError {
        if e.is_retryable() {
            TaskError::retry(e.to_string())
        } else {
            TaskError::permanent(e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_request_fails_its_task_for_good_and_the_rest_are_retried() {
        let invalid = CallError::new(
            "hookevent SetBindings",
            tonic::Status::invalid_argument("bad jqFilter"),
        );
        assert!(invalid.is_invalid() && !invalid.is_retryable());
        let task = TaskError::from(invalid);
        assert!(!task.retry);
        assert_eq!(
            task.message,
            "hookevent SetBindings: bad jqFilter (InvalidArgument)"
        );
        for status in [
            tonic::Status::unavailable("down"),
            tonic::Status::permission_denied("role worker may not call"),
            tonic::Status::not_found("no package"),
        ] {
            let e = CallError::new("lifecycle GetSpec", status);
            assert!(e.is_retryable(), "{e}");
            assert!(TaskError::from(e).retry);
        }
        let gone = CallError::new("lifecycle GetSpec", tonic::Status::not_found("x"));
        assert!(gone.is_not_found() && !gone.is_confined());
        let refused = CallError::new("release Install", tonic::Status::permission_denied("x"));
        assert!(refused.is_confined());
    }
}
