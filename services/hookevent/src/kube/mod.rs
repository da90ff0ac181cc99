//! Kubernetes: the watch manager behind `kubernetes` bindings, kind resolution, and the
//! execution of hooks' object operations.

mod binding;
mod manager;
mod operations;
mod resolve;

pub use manager::{BindingObjects, KubeManager, SetError, WatchKey, hook_run_task, queue_name, schedule_spec_of};
pub use operations::{OperationError, apply_operations};
pub use resolve::{ResolveError, Resolved, Resolver};
