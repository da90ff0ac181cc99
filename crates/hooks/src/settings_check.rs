//! `hook check`: a batch binary's settings validation.
//!
//! Contract (module-sdk): `SETTINGS_PATH` holds the settings JSON; exit 0
//! means valid. On rejection the process exits non-zero and prints
//! `{"valid":false,"message":"…","warnings":[…]}` on stderr. Any other
//! failure (no such JSON, timeout, crash) is an error, not a verdict.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::isolation::{Sandbox, sandbox};
use crate::process::{self, Ending, Invocation};
use crate::run::{OUTPUT_TAIL_LIMIT, RunError, failure};

pub const SETTINGS_PATH: &str = "SETTINGS_PATH";

/// The verdict of a settings check.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SettingsCheck {
    pub valid: bool,
    pub message: Option<String>,
    pub warnings: Vec<String>,
}

impl SettingsCheck {
    /// Why the settings are refused (`settings check: <message>`); `None` when valid.
    pub fn refusal(&self) -> Option<String> {
        (!self.valid).then(|| {
            format!(
                "settings check: {}",
                self.message
                    .as_deref()
                    .unwrap_or("the settings are refused")
            )
        })
    }
}

/// One `hook check` invocation.
#[derive(Debug, Clone)]
pub struct SettingsCheckRequest<'a> {
    /// The batch binary ([`crate::Discovery::settings_check`]).
    pub executable: &'a Path,
    pub settings: &'a Value,
    /// Extra variables (identity, `TRACEPARENT`, …).
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    pub cancel: CancellationToken,
    pub tmp_dir: Option<PathBuf>,
    /// How the check is confined (see [`crate::RunRequest::sandbox`]).
    pub sandbox: Option<Sandbox>,
}

#[derive(Deserialize)]
struct RawResult {
    valid: bool,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
}

/// Runs `hook check` and interprets the answer.
pub async fn check_settings(req: SettingsCheckRequest<'_>) -> Result<SettingsCheck, RunError> {
    let hook = format!("{}:check", req.executable.display());
    let prepare = |source| RunError::Prepare {
        hook: hook.clone(),
        source,
    };
    let bytes = serde_json::to_vec(req.settings).map_err(|e| prepare(e.into()))?;
    let (sandbox, tmp) = (req.sandbox.clone(), req.tmp_dir.clone());
    // A check running as the principal's user reads its settings through a directory of its
    // own.
    let prepared = tokio::task::spawn_blocking(move || {
        sandbox::prepare_run(sandbox.as_ref(), tmp.as_deref(), "berth-check-", |dir| {
            dir.write("settings.json", &bytes)
        })
    })
    .await
    .map_err(|e| prepare(std::io::Error::other(e)))?
    .map_err(prepare)?;
    let settings_path = prepared.dir.path().join("settings.json");

    let mut env: Vec<(OsString, OsString)> =
        req.env.iter().map(|(k, v)| (k.into(), v.into())).collect();
    env.extend(prepared.env);
    env.push((SETTINGS_PATH.into(), settings_path.into_os_string()));
    let finished = process::execute(Invocation {
        hook: &hook,
        program: req.executable,
        args: &["hook", "check"],
        cwd: req.executable.parent().unwrap_or(Path::new("/")),
        env,
        timeout: req.timeout,
        cancel: &req.cancel,
        stream_limit: OUTPUT_TAIL_LIMIT,
        combined_limit: OUTPUT_TAIL_LIMIT,
        confinement: prepared.confinement,
    })
    .await;
    prepared.dir.finish(&hook);
    let finished = finished.map_err(|source| RunError::Spawn {
        hook: hook.clone(),
        path: req.executable.to_path_buf(),
        source,
    })?;

    match finished.ending {
        Ending::Exited(status) if status.success() => {
            // Valid; a Result on stderr may still carry warnings.
            let warnings = parse_result(&finished.stderr)
                .map(|r| r.warnings)
                .unwrap_or_default();
            Ok(SettingsCheck {
                valid: true,
                message: None,
                warnings,
            })
        }
        Ending::Exited(_) => match parse_result(&finished.stderr) {
            Some(r) if !r.valid => Ok(SettingsCheck {
                valid: false,
                message: r.message,
                warnings: r.warnings,
            }),
            _ => Err(failure(&hook, finished, req.timeout)),
        },
        _ => Err(failure(&hook, finished, req.timeout)),
    }
}

/// Finds the Result JSON on stderr: the whole text, or else the last line
/// that parses (log lines may precede it).
fn parse_result(stderr: &str) -> Option<RawResult> {
    serde_json::from_str(stderr.trim()).ok().or_else(|| {
        stderr
            .lines()
            .rev()
            .find_map(|line| serde_json::from_str(line.trim()).ok())
    })
}
