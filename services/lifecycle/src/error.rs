//! The errors of the lifecycle service and their one mapping to gRPC status codes.

use berth_lifecycle_core::PackageKey;
use berth_lifecycle_core::conversion::PlanRefusal;
use berth_lifecycle_core::engine::Refused;
use berth_lifecycle_core::update::{SettingsError, UpdateRefused};
use tonic::Status;

use crate::conversion::Unconvertible;
use crate::convert::RequestError;
use crate::store::StoreError;
use crate::writer::{ReportError, WriteError};

/// Why a request failed, as its RPC answers.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Request(#[from] RequestError),
    #[error("package {key} not found")]
    NotFound { key: PackageKey },
    /// The package's version did not load: its settings cannot be checked (issue 31.7).
    #[error("{key}: version {version} did not load, so its settings cannot be checked: {why}")]
    NotLoaded {
        key: PackageKey,
        version: String,
        why: String,
    },
    /// Settings that break the loaded package's schema (or its schema cannot be read).
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// Settings of an older version that cannot be converted to the loaded one's.
    #[error(transparent)]
    Unconvertible(#[from] Unconvertible),
    /// The settings an Update leaves a package with do not fit the version it moves to.
    #[error("{key}: the settings do not fit version {version}: {reason}")]
    SettingsDoNotFit {
        key: PackageKey,
        version: String,
        reason: String,
    },
    /// A worker's settings check refused the settings.
    #[error("{key}: {reason}")]
    SettingsInvalid { key: PackageKey, reason: String },
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "lifecycle has {} reports waiting to be written; report again later",
        crate::writer::MAX_QUEUED_REPORTS
    )]
    Busy,
    #[error("the report's write ended without an answer")]
    ReportLost,
    /// A repository definition (a PackageRepository's) that cannot be used.
    #[error("repository {name}: {reason}")]
    RepositoryInvalid { name: String, reason: String },
    #[error(
        "repository {name}: resources define {} repositories already",
        crate::store::MAX_DEFINED
    )]
    TooManyRepositories { name: String },
    /// A Dump that cannot be rendered.
    #[error(transparent)]
    Dump(#[from] crate::dump::RenderError),
}

impl From<WriteError> for Error {
    fn from(e: WriteError) -> Error {
        match e {
            WriteError::Refused(refused) => Error::Refused(refused),
            WriteError::Store(store) => Error::Store(store),
        }
    }
}

impl From<ReportError> for Error {
    fn from(e: ReportError) -> Error {
        match e {
            ReportError::Write(write) => write.into(),
            ReportError::Busy => Error::Busy,
            ReportError::Lost => Error::ReportLost,
        }
    }
}

impl From<Error> for Status {
    fn from(e: Error) -> Status {
        // Settings errors list every failing field: bounded to fit a header.
        let message = berth_runtime::bounded_status_message(e.to_string());
        let internal = |e: &Error| {
            tracing::error!(error = %e, "lifecycle failed");
            Status::internal(message.clone())
        };
        match &e {
            Error::Request(_)
            | Error::Unconvertible(_)
            | Error::SettingsInvalid { .. }
            | Error::SettingsDoNotFit { .. }
            | Error::RepositoryInvalid { .. }
            | Error::Settings(SettingsError::Refused { .. })
            | Error::Refused(Refused::Update(
                UpdateRefused::Settings(SettingsError::Refused { .. })
                | UpdateRefused::Conversion(PlanRefusal::TooNew(_)),
            )) => Status::invalid_argument(message),
            Error::NotFound { .. } => Status::not_found(message),
            Error::NotLoaded { .. } => Status::failed_precondition(message),
            Error::Refused(
                Refused::MandatoryDependency { .. }
                | Refused::OtherOwner { .. }
                | Refused::Suspended { .. },
            ) => Status::failed_precondition(message),
            // The state changed under the request: it may be sent again.
            Error::Refused(
                Refused::Update(UpdateRefused::Conversion(PlanRefusal::ConversionsChanged))
                | Refused::SettingsChangedWhileConverted { .. },
            ) => Status::aborted(message),
            Error::Busy => Status::unavailable(message),
            Error::TooManyRepositories { .. } => Status::resource_exhausted(message),
            // Lifecycle's own data or database failed.
            Error::Settings(SettingsError::StoredSchema { .. })
            | Error::Refused(Refused::Update(UpdateRefused::Settings(
                SettingsError::StoredSchema { .. },
            )))
            | Error::Store(_)
            | Error::ReportLost
            | Error::Dump(_) => internal(&e),
        }
    }
}

impl From<StoreError> for Status {
    fn from(e: StoreError) -> Status {
        Error::Store(e).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_has_its_code() {
        let code = |e: Error| Status::from(e).code();
        assert_eq!(
            code(Error::Request(RequestError::MissingRef)),
            tonic::Code::InvalidArgument
        );
        let key = PackageKey::from_issued("default.hello".into());
        let status = Status::from(Error::NotFound { key: key.clone() });
        assert_eq!(status.code(), tonic::Code::NotFound);
        assert_eq!(status.message(), "package default.hello not found");
        let refused = Error::Refused(Refused::MandatoryDependency {
            key: key.clone(),
            dependents: vec![PackageKey::from_issued("default.web".into())],
        });
        let status = Status::from(refused);
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(
            status.message(),
            "default.hello is a mandatory dependency of default.web; remove them first, or remove with force"
        );
        assert_eq!(
            code(Error::Refused(Refused::SettingsChangedWhileConverted {
                key
            })),
            tonic::Code::Aborted
        );
        let schema = SettingsError::StoredSchema { reason: "x".into() };
        assert_eq!(code(Error::Settings(schema)), tonic::Code::Internal);
        assert_eq!(code(Error::Busy), tonic::Code::Unavailable);
        let owner = berth_lifecycle_core::Owner::resource("Module db").unwrap();
        let other = Error::Refused(Refused::OtherOwner {
            key: PackageKey::from_issued("db".into()),
            owner,
        });
        let status = Status::from(other);
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert!(status.message().contains("Module db"), "{status:?}");
    }
}
