//! What a package is: its identity, its state, its conditions, and the typed values they are
//! made of. Knows neither transport nor storage: values become text only at the edges.
//!
//! - `id`: kinds, names and keys; `package`: [`Package`] and its phases;
//! - `owner`: [`Owner`], the front door that may change a package;
//! - `condition`: typed conditions; `time`: [`Timestamp`]; `version`: [`VersionRequest`].

pub mod condition;
pub mod id;
pub mod owner;
pub mod package;
pub mod time;
pub mod version;

pub use id::{GLOBAL, Generation, Kind, PackageId, PackageKey, global_key};
pub use owner::Owner;
pub use package::{HookState, Package, Phase};
pub use time::Timestamp;
pub use version::VersionRequest;
