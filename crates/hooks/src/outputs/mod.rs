//! Parsers for the files a hook writes: values patches, Kubernetes object
//! operations and metric operations. Each returns a plain reason string;
//! the runner wraps it with the hook name and the file's variable name.

mod metrics;
mod object_operations;
mod values_patch;
pub mod webhook;

pub use metrics::{MetricOperation, parse_metrics};
pub use object_operations::{ObjectOperation, ObjectRef, parse_object_operations};
pub use values_patch::parse_values_patch;
