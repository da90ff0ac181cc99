//! Kubernetes: the watch manager behind `kubernetes` bindings (`manager`: registration and
//! watch events; `registry`: what is watched for whom; `tasks`: the HookRun tasks built from
//! it), kind resolution, the execution of hooks' object operations, and the watch metrics
//! (`metrics`).

mod binding;
mod impersonate;
mod manager;
mod metrics;
mod operations;
mod operators;
mod records;
mod registry;
mod resolve;
mod tasks;

pub use manager::{BindingObjects, KubeManager, SetError};
pub use metrics::WatchMetrics;
pub use operations::{OperationError, apply_operations};
pub use operators::{HealthReporter, OperatorStatus, ViewSnapshot, ViewUpdate};
pub use registry::WatchKey;
pub use resolve::{ResolveError, Resolved, Resolver};
pub use tasks::{hook_run_task, queue_name};
