//! Helm-format release records: the record itself (`format`) and its Secrets (`store`).

pub mod format;
pub mod store;

pub use format::{HelmRelease, Info, Status};
pub use store::{ReleaseStore, StoreError};
