//! berth-hooks: the shell-operator / addon-operator / module-sdk hook contract.
pub mod config;
mod hook;

pub use config::{ConfigError, HookConfig, KubernetesBinding, LifecycleBinding, ScheduleBinding, ThrottleSettings};
pub use hook::{Hook, HookKind, ordered};
