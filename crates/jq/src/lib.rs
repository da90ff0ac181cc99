//! jq programs, run by jaq in sandboxed evaluator processes with depth, time and memory limits
//! ([`JqLimits`]): hookevent's (`jqFilter` of kubernetes bindings, `JQPatch` operations) and
//! lifecycle's (settings conversions, `openapi/conversions/`).
//!
//! The evaluators are the running executable itself, started with [`EVALUATOR_ARG`]: every
//! executable that evaluates (`berth-hookevent`, `berth-lifecycle`, `berth` for `berth up`)
//! calls [`run_if_requested`] first thing in `main`.
//!
//! A program is checked (compiled by an evaluator) when a binding, operation or conversion is
//! accepted, then run on every input (for hookevent, every object the watch delivers). A
//! program that hits a limit is disabled while it is held: every later run fails at once with
//! the same error, so a hostile filter costs one evaluator, not one per event. `def f: [f]; f`
//! as a jqFilter used to overflow hookevent's stack and take `berth up` down (and again on
//! every restart, as the binding is restored); now its events are dropped with an error naming
//! the depth limit and the service keeps serving.

mod evaluator;
mod program;
mod sandbox;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use serde_json::Value;

pub use evaluator::{EVALUATOR_ARG, run_if_requested};
pub use program::JqProgram;

/// Longest jq program accepted, in bytes.
pub const MAX_PROGRAM_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, thiserror::Error)]
pub enum JqError {
    #[error("jq program {program:?} {reason}")]
    Compile { program: String, reason: String },
    #[error("jq program {program:?} failed: {reason}")]
    Run { program: String, reason: String },
    #[error("jq program {program:?} was stopped at its {limit}; it is not run again")]
    Limit { program: String, limit: String },
    #[error("jq program {program:?} could not be evaluated: {reason}")]
    Evaluator { program: String, reason: String },
}

/// The bounds on every jq evaluation.
#[derive(Clone, Copy, Debug)]
pub struct JqLimits {
    /// Longest one evaluation (one program on one object) may take, wall clock.
    pub time: Duration,
    /// Memory an evaluator process may allocate (`RLIMIT_DATA`), its stack included.
    pub memory_bytes: u64,
    /// Stack of the evaluation thread: what bounds recursion depth.
    pub stack_bytes: usize,
    /// Longest result (JSON text) one evaluation may return.
    pub output_bytes: usize,
    /// Evaluator processes running at once (and kept for reuse).
    pub evaluators: usize,
}

impl Default for JqLimits {
    fn default() -> Self {
        JqLimits {
            time: Duration::from_secs(2),
            memory_bytes: 512 << 20,
            stack_bytes: 16 << 20,
            output_bytes: 8 << 20,
            evaluators: 4,
        }
    }
}

/// A checked jq program, as bindings and operations hold it.
pub struct JqFilter {
    source: String,
    /// Set when a run hit a limit: the error every later run returns.
    disabled: OnceLock<JqError>,
}

impl std::fmt::Debug for JqFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JqFilter")
            .field("source", &self.source)
            .finish()
    }
}

impl JqFilter {
    pub fn source(&self) -> &str {
        &self.source
    }

    /// A filter that was never checked, for tests that evaluate it in process.
    #[cfg(any(test, feature = "test-support"))]
    pub fn unchecked(source: &str) -> JqFilter {
        JqFilter {
            source: source.to_owned(),
            disabled: OnceLock::new(),
        }
    }
}

/// The jq evaluators and the programs in use. Cloning shares them.
#[derive(Clone)]
pub struct Jq {
    sandbox: Arc<sandbox::Sandbox>,
    /// Source → program; entries every holder dropped are pruned on the next check, so the map
    /// stays as small as the set of programs in use. Bindings of one hook installed in many
    /// packages share one filter (and its disabled state).
    filters: Arc<Mutex<HashMap<String, Weak<JqFilter>>>>,
}

impl Jq {
    /// Evaluators run `program` (an executable that calls [`run_if_requested`] first thing in
    /// `main`) with `limits`.
    pub fn new(program: PathBuf, limits: JqLimits) -> Jq {
        Jq {
            sandbox: Arc::new(sandbox::Sandbox::new(program, limits)),
            filters: Arc::default(),
        }
    }

    /// Evaluators run this very executable: `/proc/self/exe` where there is one (it still
    /// names the running binary after the file was replaced or deleted by an upgrade), else
    /// the path it was started from.
    pub fn current_exe(limits: JqLimits) -> std::io::Result<Jq> {
        let proc_exe = PathBuf::from("/proc/self/exe");
        let program = if proc_exe.exists() {
            proc_exe
        } else {
            std::env::current_exe()?
        };
        Ok(Jq::new(program, limits))
    }

    /// The filter for `source`: the one in use, or a new one once an evaluator compiled it.
    pub async fn check(&self, source: &str) -> Result<Arc<JqFilter>, JqError> {
        if let Some(filter) = self.lock().get(source).and_then(Weak::upgrade) {
            return Ok(filter);
        }
        if source.len() > MAX_PROGRAM_BYTES {
            return Err(JqError::Compile {
                program: shorten(source),
                reason: format!(
                    "is {} bytes long, over the limit of {MAX_PROGRAM_BYTES}",
                    source.len()
                ),
            });
        }
        let filter = Arc::new(JqFilter {
            source: source.to_owned(),
            disabled: OnceLock::new(),
        });
        match self.call(&filter, None).await? {
            Ok(_) => {}
            Err(reason) => {
                return Err(JqError::Compile {
                    program: source.to_owned(),
                    reason,
                });
            }
        }
        let mut filters = self.lock();
        if let Some(existing) = filters.get(source).and_then(Weak::upgrade) {
            return Ok(existing);
        }
        filters.retain(|_, f| f.strong_count() > 0);
        filters.insert(source.to_owned(), Arc::downgrade(&filter));
        Ok(filter)
    }

    /// Runs `filter` on `input`: its one output, `null` for none, an array for several.
    pub async fn run(&self, filter: &JqFilter, input: &Value) -> Result<Value, JqError> {
        let input = input.to_string();
        let error = |reason: String| JqError::Run {
            program: filter.source.clone(),
            reason,
        };
        let text = self
            .call(filter, Some(input.as_bytes()))
            .await?
            .map_err(error)?;
        serde_json::from_str(&text).map_err(|e| error(format!("output is not JSON: {e}")))
    }

    async fn call(
        &self,
        filter: &JqFilter,
        input: Option<&[u8]>,
    ) -> Result<sandbox::Reply, JqError> {
        if let Some(e) = filter.disabled.get() {
            return Err(e.clone());
        }
        let request = evaluator::request(&filter.source, input);
        match self.sandbox.call(&request).await {
            Ok(reply) => Ok(reply),
            Err(sandbox::Failure::Limit(limit)) => {
                let e = JqError::Limit {
                    program: shorten(&filter.source),
                    limit,
                };
                tracing::error!(error = %e, "jq program disabled");
                Err(filter.disabled.get_or_init(|| e).clone())
            }
            Err(sandbox::Failure::Evaluator(reason)) => Err(JqError::Evaluator {
                program: shorten(&filter.source),
                reason,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Weak<JqFilter>>> {
        self.filters.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A program's text for an error message: at most 200 characters.
fn shorten(source: &str) -> String {
    match source.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &source[..i]),
        None => source.to_owned(),
    }
}

/// Command-line flags for [`JqLimits`] (`berth-hookevent`, `berth-lifecycle`, `berth up`).
#[derive(clap::Args, Clone, Debug)]
pub struct JqArgs {
    /// Longest one jq evaluation (a jqFilter on one object, a JQPatch, one settings
    /// conversion expression) may take, in ms.
    #[arg(long, env = "BERTH_JQ_TIME_LIMIT_MS", default_value_t = 2000)]
    pub jq_time_limit_ms: u64,
    /// Memory one jq evaluator process may allocate, in MiB.
    #[arg(long, env = "BERTH_JQ_MEMORY_LIMIT_MIB", default_value_t = 512)]
    pub jq_memory_limit_mib: u64,
}

impl JqArgs {
    pub fn limits(&self) -> JqLimits {
        JqLimits {
            time: Duration::from_millis(self.jq_time_limit_ms),
            memory_bytes: self.jq_memory_limit_mib << 20,
            ..JqLimits::default()
        }
    }
}
