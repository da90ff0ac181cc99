//! Background controllers that do what kube-controller-manager would: garbage
//! collection and namespace cleanup always, workload status simulation when enabled.

pub mod aggregation;
pub mod gc;
mod namespace_defaults;
mod rollout;
pub mod simulate;
