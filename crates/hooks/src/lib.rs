//! berth-hooks: the shell-operator / addon-operator / module-sdk hook contract.
//!
//! Existing hooks run unchanged. The crate covers:
//! - [`config`]: the `configVersion: v1` schema (and module-sdk's batch
//!   variant), parsed strictly and validated at load time;
//! - [`discover`]: walking a package's `hooks/` and asking each hook for
//!   its config (`--config`, or `hook list` / `hook config` for batch binaries);
//! - [`ordered`]: lifecycle ordering;
//! - [`run`]: one execution with the contract's temp files, a process group,
//!   timeout and cancellation, and strictly parsed outputs;
//! - [`check_settings`]: a batch binary's `hook check`;
//! - [`isolation`]: every hook process confined to its package instance's principal (uid,
//!   run directory, cgroup and limits, Landlock, and nothing left when the run ends).
//!
//! It knows neither Kubernetes clients nor queues: callers build binding
//! contexts, apply patches and execute object operations.

pub mod binding_context;
pub mod config;
mod discover;
mod hook;
pub mod isolation;
pub mod outputs;
mod process;
mod run;
mod settings_check;
mod throttle;

pub use binding_context::{BindingContext, ObjectAndFilterResult, Snapshots};
pub use config::{
    AdmissionBinding, AdmissionKind, ConfigError, ConversionBinding, ConversionRule, FailurePolicy,
    HookConfig, KubernetesBinding, LifecycleBinding, ScheduleBinding, ThrottleSettings,
    WatchEventType,
};
pub use discover::{ConfigAnswer, DiscoverError, Discovery, discover, discover_all, from_answers};
pub use hook::{Hook, HookKind, ordered};
pub use isolation::{
    DirMount, HOOK_EXEC_NAME, HookUser, Isolation, Limits, Mount, RunDirFile, Sandbox, UidRange,
    isolate_hooks, landlock_abi, principal_user,
};
pub use outputs::{MetricOperation, ObjectOperation, ObjectRef};
pub use process::{INHERITED_ENV, KILL_GRACE, inherited_env, reap_escaped_hook_processes};
pub use run::{LimitHitText, OUTPUT_TAIL_LIMIT, RunError, RunOutput, RunRequest, env, run};
pub use settings_check::{SETTINGS_PATH, SettingsCheck, SettingsCheckRequest, check_settings};
pub use throttle::Throttle;
