//! Running a hook once: temp files in, process, parsed outputs back.
//!
//! Failure rule: outputs are read only after exit code 0. A hook that
//! fails, times out or is cancelled yields an error and its outputs
//! (values patch, object operations, metrics) are discarded — including
//! `ignoreHookError` status patches. One simple rule keeps a half-done
//! hook from leaving half-applied state; the task is retried anyway.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::hook::{Hook, HookKind};
use crate::isolation::{LimitHit, RunDir, Sandbox, sandbox};
use crate::outputs::{
    MetricOperation, ObjectOperation, parse_metrics, parse_object_operations, parse_values_patch,
};
use crate::process::{self, Ending, Finished, Invocation};
/// Bytes of interleaved stdout/stderr kept for [`RunOutput::output`] and errors.
pub const OUTPUT_TAIL_LIMIT: usize = 64 * 1024;
/// Largest output file read back; a bigger one is a [`RunError::BadOutput`].
const MAX_OUTPUT_FILE: u64 = 64 * 1024 * 1024;
/// Lines of the output tail shown in an error message (the full tail stays in the field).
const ERROR_TAIL_LINES: usize = 20;

/// Environment variables of the hook contract.
pub mod env {
    pub const BINDING_CONTEXT_PATH: &str = "BINDING_CONTEXT_PATH";
    pub const VALUES_PATH: &str = "VALUES_PATH";
    pub const CONFIG_VALUES_PATH: &str = "CONFIG_VALUES_PATH";
    pub const VALUES_JSON_PATCH_PATH: &str = "VALUES_JSON_PATCH_PATH";
    pub const CONFIG_VALUES_JSON_PATCH_PATH: &str = "CONFIG_VALUES_JSON_PATCH_PATH";
    pub const KUBERNETES_PATCH_PATH: &str = "KUBERNETES_PATCH_PATH";
    pub const METRICS_PATH: &str = "METRICS_PATH";
    /// The admission answer of a `kubernetesValidating`/`kubernetesMutating` run.
    pub const VALIDATING_RESPONSE_PATH: &str = "VALIDATING_RESPONSE_PATH";
    /// shell-operator's other name of the same file.
    pub const ADMISSION_RESPONSE_PATH: &str = "ADMISSION_RESPONSE_PATH";
    /// The answer of a `kubernetesCustomResourceConversion` run.
    pub const CONVERSION_RESPONSE_PATH: &str = "CONVERSION_RESPONSE_PATH";
}

/// One run of one hook.
#[derive(Debug, Clone)]
pub struct RunRequest<'a> {
    pub hook: &'a Hook,
    /// The JSON array written to `BINDING_CONTEXT_PATH`.
    pub binding_context: Value,
    /// Written to `VALUES_PATH`.
    pub values: Value,
    /// Written to `CONFIG_VALUES_PATH` (the settings).
    pub config_values: Value,
    /// Extra variables (identity, `TRACEPARENT`, …). They are added to the
    /// inherited environment; they cannot override the contract's file paths.
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub cancel: CancellationToken,
    /// Parent of the per-run temp directory; `None` = `std::env::temp_dir()`. A hook with a
    /// uid of its own gets its directory in berth's runs directory instead (see
    /// `crate::isolation`).
    pub tmp_dir: Option<PathBuf>,
    /// How the hook is confined: its principal, limits, package and extra files. Required
    /// where hooks run as their principals (`isolate_hooks` with a uid range, as root).
    pub sandbox: Option<Sandbox>,
}

/// What a successful run produced.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutput {
    /// From `VALUES_JSON_PATCH_PATH`; empty when the hook wrote none.
    pub values_patch: json_patch::Patch,
    /// From `CONFIG_VALUES_JSON_PATCH_PATH` (addon-operator's persisted
    /// config). Deckhouse packages ignore it; returned for callers that do not.
    pub config_values_patch: json_patch::Patch,
    /// From `KUBERNETES_PATCH_PATH`, in file order.
    pub kubernetes_operations: Vec<ObjectOperation>,
    /// From `METRICS_PATH`, in file order.
    pub metrics: Vec<MetricOperation>,
    /// The text of `VALIDATING_RESPONSE_PATH` (= `ADMISSION_RESPONSE_PATH`), as written: an
    /// empty or malformed answer is the webhook's to judge (`outputs::webhook`), not a failed run.
    pub admission_response: String,
    /// The text of `CONVERSION_RESPONSE_PATH`, as written.
    pub conversion_response: String,
    /// The last [`OUTPUT_TAIL_LIMIT`] bytes of stdout and stderr interleaved.
    pub output: String,
}

/// Why a run did not produce a [`RunOutput`]. Every variant names the hook.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("hook {hook}: preparing temporary files: {source}")]
    Prepare {
        hook: String,
        source: std::io::Error,
    },
    #[error("hook {hook}: cannot start {}: {source}", path.display())]
    Spawn {
        hook: String,
        path: PathBuf,
        source: std::io::Error,
    },
    /// Non-zero exit; `code` is 128 + signal number when killed by a signal.
    #[error(
        "hook {hook} failed with exit code {code}{}",
        display_tail(output_tail)
    )]
    Exit {
        hook: String,
        code: i32,
        output_tail: String,
    },
    /// Killed after running longer than the request's timeout.
    #[error("hook {hook} timed out after {after:?}{}", display_tail(output_tail))]
    Timeout {
        hook: String,
        after: Duration,
        output_tail: String,
    },
    #[error("hook {hook} was cancelled")]
    Cancelled { hook: String },
    /// It failed (or timed out) having reached a limit of its sandbox.
    #[error(
        "hook {hook} reached its {limit} (limits.{}) and {ending}{}",
        limit.field(),
        display_tail(output_tail)
    )]
    Limit {
        hook: String,
        limit: LimitHitText,
        /// How it ended: "failed with exit code 137", "timed out after 30s".
        ending: String,
        output_tail: String,
    },
    /// The hook exited 0 but an output file is malformed.
    #[error("hook {hook} wrote an invalid {file}: {reason}")]
    BadOutput {
        hook: String,
        file: &'static str,
        reason: String,
    },
}

/// Runs the hook and returns its parsed outputs. See the module docs for
/// the failure rule and [`crate::process`] for process-group handling.
#[tracing::instrument(skip_all, fields(hook.name = %req.hook.name))]
pub async fn run(req: RunRequest<'_>) -> Result<RunOutput, RunError> {
    let hook = &req.hook.name;
    let prepare = |source| RunError::Prepare {
        hook: hook.clone(),
        source,
    };
    let (files, confinement, extra_env) = RunFiles::create(&req).await.map_err(prepare)?;

    let mut env: Vec<(OsString, OsString)> =
        req.env.iter().map(|(k, v)| (k.into(), v.into())).collect();
    env.extend(extra_env);
    env.extend(files.env());
    let args = hook_args(req.hook.kind);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let cwd = req.hook.path.parent().unwrap_or(Path::new("/"));
    let finished = process::execute(Invocation {
        hook,
        program: &req.hook.path,
        args: &args,
        cwd,
        env,
        timeout: req.timeout,
        cancel: &req.cancel,
        stream_limit: OUTPUT_TAIL_LIMIT,
        combined_limit: OUTPUT_TAIL_LIMIT,
        confinement,
    })
    .await
    .map_err(|source| RunError::Spawn {
        hook: hook.clone(),
        path: req.hook.path.clone(),
        source,
    })?;

    if matches!(finished.ending, Ending::Exited(status) if status.success()) {
        return files
            .read_outputs_then_finish(hook, finished.combined)
            .await;
    }
    files.finish(hook);
    Err(failure(hook, finished, req.timeout))
}

/// A limit's description in an error (`process limit (256 processes)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitHitText(LimitHit);

impl LimitHitText {
    /// The package.yaml field of the limit: `processes` or `memory`.
    pub fn field(&self) -> &'static str {
        self.0.field()
    }
}

impl std::fmt::Display for LimitHitText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Why a run that did not succeed failed: a limit it reached first (the process limit, then
/// the memory limit), else its exit, timeout or cancellation.
pub(crate) fn failure(hook: &str, finished: Finished, timeout: Duration) -> RunError {
    let hook = hook.to_owned();
    let output_tail = finished.combined;
    let ending = match &finished.ending {
        Ending::Exited(status) => format!("failed with exit code {}", exit_code(*status)),
        Ending::TimedOut => format!("timed out after {timeout:?}"),
        Ending::Cancelled => return RunError::Cancelled { hook },
    };
    if let Some(hit) = finished.hits.first() {
        return RunError::Limit {
            hook,
            limit: LimitHitText(*hit),
            ending,
            output_tail,
        };
    }
    match finished.ending {
        Ending::Exited(status) => RunError::Exit {
            hook,
            code: exit_code(status),
            output_tail,
        },
        _ => RunError::Timeout {
            hook,
            after: timeout,
            output_tail,
        },
    }
}

/// Arguments that select what the executable runs.
pub(crate) fn hook_args(kind: HookKind) -> Vec<String> {
    match kind {
        HookKind::Shell => vec![],
        HookKind::Batch { index } => vec!["hook".into(), "run".into(), index.to_string()],
        HookKind::BatchReadiness => vec!["hook".into(), "ready".into()],
    }
}

/// The exit code, or 128 + signal like a shell reports it.
pub(crate) fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

fn display_tail(tail: &str) -> String {
    let lines: Vec<&str> = tail.trim_end().lines().collect();
    if lines.is_empty() {
        return String::new();
    }
    let start = lines.len().saturating_sub(ERROR_TAIL_LINES);
    format!("; output tail:\n{}", lines[start..].join("\n"))
}

/// The per-run temp directory and the contract's files inside it. The
/// directory has a unique name, so concurrent runs never share files; it is
/// removed after the run (see [`RunFiles::finish`]), and on drop if the
/// run future is abandoned.
struct RunFiles {
    dir: RunDir,
}

const FILES: [(&str, &str); 10] = [
    (env::BINDING_CONTEXT_PATH, "binding-context.json"),
    (env::VALUES_PATH, "values.json"),
    (env::CONFIG_VALUES_PATH, "config-values.json"),
    (env::VALUES_JSON_PATCH_PATH, "values-patch.json"),
    (
        env::CONFIG_VALUES_JSON_PATCH_PATH,
        "config-values-patch.json",
    ),
    (env::KUBERNETES_PATCH_PATH, "kubernetes-patch"),
    (env::METRICS_PATH, "metrics.json"),
    (env::VALIDATING_RESPONSE_PATH, "admission-response.json"),
    (env::ADMISSION_RESPONSE_PATH, "admission-response.json"),
    (env::CONVERSION_RESPONSE_PATH, "conversion-response.json"),
];

impl RunFiles {
    /// Creates the directory and its files and prepares the run's confinement in one
    /// blocking call: a run's dozen small file operations, each its own trip to tokio's
    /// blocking pool, cost more in thread wake-ups than in the writing. Also returns the
    /// confinement and the variables it adds.
    async fn create(
        req: &RunRequest<'_>,
    ) -> std::io::Result<(
        Self,
        Option<crate::isolation::Confinement>,
        Vec<(OsString, OsString)>,
    )> {
        let inputs = [
            (
                "binding-context.json",
                serde_json::to_vec(&req.binding_context)?,
            ),
            ("values.json", serde_json::to_vec(&req.values)?),
            (
                "config-values.json",
                serde_json::to_vec(&req.config_values)?,
            ),
        ];
        let (sandbox, tmp) = (req.sandbox.clone(), req.tmp_dir.clone());
        // The blocking thread logs inside the caller's span (package, task, hook).
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let prepared =
                sandbox::prepare_run(sandbox.as_ref(), tmp.as_deref(), "berth-hook-", |dir| {
                    for (name, bytes) in &inputs {
                        dir.write(name, bytes)?;
                    }
                    // Outputs exist (empty) before the run: hooks append with `>>` and some
                    // check `-f` first. Two variables share the admission answer's file.
                    let mut outputs: Vec<&str> = FILES[3..].iter().map(|(_, n)| *n).collect();
                    outputs.dedup();
                    for name in outputs {
                        dir.write(name, b"")?;
                    }
                    Ok(())
                })?;
            Ok((
                Self { dir: prepared.dir },
                prepared.confinement,
                prepared.env,
            ))
        })
        .await
        .map_err(std::io::Error::other)?
    }

    fn name(var: &str) -> &str {
        FILES
            .iter()
            .find(|(v, _)| *v == var)
            .map_or(var, |(_, name)| name)
    }

    fn path(&self, var: &str) -> PathBuf {
        self.dir.path().join(Self::name(var))
    }

    fn env(&self) -> impl Iterator<Item = (OsString, OsString)> + '_ {
        FILES
            .iter()
            .map(|(var, _)| (OsString::from(var), self.path(var).into_os_string()))
    }

    /// Reads and parses the output files, then removes the directory, in one blocking call
    /// (see [`RunFiles::create`]).
    async fn read_outputs_then_finish(
        self,
        hook: &str,
        output: String,
    ) -> Result<RunOutput, RunError> {
        let name = hook.to_owned();
        // `finish` logs the kept-files line (`DEBUG_KEEP_TMP_FILES`) inside the caller's span,
        // so it names the package and task as the run's other lines do.
        let span = tracing::Span::current();
        tokio::task::spawn_blocking(move || {
            let _entered = span.enter();
            let outputs = self.read_outputs_blocking(&name, output);
            self.finish(&name);
            outputs
        })
        .await
        .unwrap_or_else(|e| {
            Err(RunError::Prepare {
                hook: hook.to_owned(),
                source: std::io::Error::other(format!("reading the outputs: {e}")),
            })
        })
    }

    fn read_outputs_blocking(&self, hook: &str, output: String) -> Result<RunOutput, RunError> {
        let bad = |file: &'static str| {
            move |reason: String| RunError::BadOutput {
                hook: hook.to_owned(),
                file,
                reason,
            }
        };
        let values_patch = self
            .read(env::VALUES_JSON_PATCH_PATH)
            .and_then(|t| parse_values_patch(&t));
        let config_values_patch = self
            .read(env::CONFIG_VALUES_JSON_PATCH_PATH)
            .and_then(|t| parse_values_patch(&t));
        let kubernetes_operations = self
            .read(env::KUBERNETES_PATCH_PATH)
            .and_then(|t| parse_object_operations(&t));
        let metrics = self.read(env::METRICS_PATH).and_then(|t| parse_metrics(&t));
        Ok(RunOutput {
            values_patch: values_patch.map_err(bad(env::VALUES_JSON_PATCH_PATH))?,
            config_values_patch: config_values_patch
                .map_err(bad(env::CONFIG_VALUES_JSON_PATCH_PATH))?,
            kubernetes_operations: kubernetes_operations
                .map_err(bad(env::KUBERNETES_PATCH_PATH))?,
            metrics: metrics.map_err(bad(env::METRICS_PATH))?,
            admission_response: self
                .read(env::VALIDATING_RESPONSE_PATH)
                .map_err(bad(env::VALIDATING_RESPONSE_PATH))?,
            conversion_response: self
                .read(env::CONVERSION_RESPONSE_PATH)
                .map_err(bad(env::CONVERSION_RESPONSE_PATH))?,
            output,
        })
    }

    /// Reads an output file; a missing file (the hook deleted it) reads as empty. The hook
    /// controls the directory, so the file is opened without following a symbolic link and
    /// without blocking (a FIFO would hang the open), must be a regular file (not a FIFO,
    /// socket or device such as `/dev/zero`), and is read up to [`MAX_OUTPUT_FILE`] bytes.
    fn read(&self, var: &str) -> Result<String, String> {
        self.dir.read(Self::name(var), MAX_OUTPUT_FILE)
    }

    /// Removes the directory (see [`RunDir::finish`]).
    fn finish(self, hook: &str) {
        self.dir.finish(hook);
    }
}
