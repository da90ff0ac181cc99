//! Helm-format release records: the record itself (`format`), its Secrets (`store`) and the
//! key and MAC that tell berth's records from everyone else's (`key`).

pub mod format;
pub mod key;
pub mod store;

pub use format::{HelmRelease, Info, Status};
pub use key::{KeyError, RecordKey};
pub use store::{Foreign, Owner, Records, ReleaseStore, StoreError};
