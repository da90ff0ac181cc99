//! Running one hook process: its own process group, concurrent bounded
//! capture of stdout/stderr, a timeout and a cancellation token.
//!
//! Invariant: when [`execute`] returns, no process of the hook's is left
//! running — after a timeout or cancellation (SIGTERM to its group, then
//! SIGKILL after [`KILL_GRACE`]) and also after a normal exit, because
//! background children that still hold the output pipes would otherwise keep
//! the run open forever. Hooks therefore cannot leave daemons behind. With a
//! cgroup for the run (see `crate::isolation`) that holds whatever group or
//! session a process joined; without one, the process group and the child
//! subreaper's sweep (`reaper`) find them.

mod capture;
mod group;
mod reaper;

pub use group::KILL_GRACE;
pub use reaper::reap_escaped_hook_processes;

use std::ffi::OsString;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::unistd::Pid;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use capture::{Stream, TailBuffer, drain, lock};

use crate::isolation::{Confinement, LimitHit};

/// After the process exits, how long its pipes may take to reach EOF.
/// Only exceeded when a descendant escaped the group (`setsid`) and kept
/// the pipe open; then the capture is cut short instead of hanging.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// What to run.
pub(crate) struct Invocation<'a> {
    pub hook: &'a str,
    pub program: &'a Path,
    pub args: &'a [&'a str],
    pub cwd: &'a Path,
    pub env: Vec<(OsString, OsString)>,
    pub timeout: Duration,
    pub cancel: &'a CancellationToken,
    /// Bytes kept of stdout and of stderr, each.
    pub stream_limit: usize,
    /// Bytes kept of both streams interleaved.
    pub combined_limit: usize,
    /// How the process is confined (`None`: as berth's own user, as started).
    pub confinement: Option<Confinement>,
}

/// Variables of berth's own environment a hook inherits: what programs need to find each other
/// and to speak the right language and time zone. Everything else (`BERTH_*` tokens, database
/// URLs, cloud credentials, proxies with passwords) stays with berth.
pub const INHERITED_ENV: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TZ", "TMPDIR", "LANG", "LANGUAGE",
];

/// The part of `vars` a hook inherits: [`INHERITED_ENV`] and the `LC_*` locale variables.
pub fn inherited_env(
    vars: impl Iterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    vars.filter(|(k, _)| {
        k.to_str()
            .is_some_and(|k| INHERITED_ENV.contains(&k) || (k.starts_with("LC_") && k.len() > 3))
    })
    .collect()
}

/// A regular file (after links) with an execute bit: what discovery counts as a hook, and
/// what a direct start of a program would not refuse for its mode.
pub(crate) fn is_executable_file(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    meta.is_file() && meta.permissions().mode() & 0o111 != 0
}

/// The errors starting `program` directly gives for a missing file, a directory or a file
/// without an execute bit.
fn startable(program: &Path) -> std::io::Result<()> {
    if !is_executable_file(&std::fs::metadata(program)?) {
        return Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
    }
    Ok(())
}

/// How the process ended.
#[derive(Debug)]
pub(crate) enum Ending {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
}

/// The end and the captured output of a run.
#[derive(Debug)]
pub(crate) struct Finished {
    pub ending: Ending,
    pub stdout: String,
    pub stdout_truncated: bool,
    pub stderr: String,
    pub combined: String,
    /// The limits of its sandbox the run reached.
    pub hits: Vec<LimitHit>,
}

/// Runs the invocation to its end. Errors only if the process cannot start.
pub(crate) async fn execute(mut inv: Invocation<'_>) -> std::io::Result<Finished> {
    if inv.confinement.is_none() && crate::isolation::state().is_some_and(|s| s.uids.is_some()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "hooks run as their package's principal here, and this run names none",
        ));
    }
    let mut command = match inv.confinement.as_ref().and_then(Confinement::helper) {
        Some((helper, args)) => {
            // The helper reports a program it cannot run only on its stderr; what starting
            // the program directly would refuse is refused here the same way.
            startable(inv.program)?;
            let mut command = Command::new(helper);
            command.args(args).arg(inv.program);
            command
        }
        None => Command::new(inv.program),
    };
    command
        .args(inv.args)
        .current_dir(inv.cwd)
        // Hooks are untrusted: they see an allow-listed part of berth's environment (no
        // tokens, database URLs or credentials), then what the contract gives them.
        .env_clear()
        .envs(inherited_env(std::env::vars_os()))
        .envs(std::mem::take(&mut inv.env))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // Safety net if this future is dropped mid-run: at least the leader dies (and a
        // dropped run's cgroup kills the rest).
        .kill_on_drop(true);
    let (mut child, running) = reaper::spawn_registered(&mut command)?;
    // `process_group(0)` makes the child's pid its group id.
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);

    let own_out = Arc::new(Mutex::new(TailBuffer::new(inv.stream_limit)));
    let own_err = Arc::new(Mutex::new(TailBuffer::new(inv.stream_limit)));
    let combined = Arc::new(Mutex::new(TailBuffer::new(inv.combined_limit)));
    let mut readers = Vec::with_capacity(2);
    if let Some(out) = child.stdout.take() {
        readers.push(tokio::spawn(tracing::Instrument::in_current_span(drain(
            out,
            Stream::Stdout,
            inv.hook.to_owned(),
            own_out.clone(),
            combined.clone(),
        ))));
    }
    if let Some(err) = child.stderr.take() {
        readers.push(tokio::spawn(tracing::Instrument::in_current_span(drain(
            err,
            Stream::Stderr,
            inv.hook.to_owned(),
            own_err.clone(),
            combined.clone(),
        ))));
    }

    let ending = tokio::select! {
        status = child.wait() => Ending::Exited(status?),
        () = tokio::time::sleep(inv.timeout) => Ending::TimedOut,
        () = inv.cancel.cancelled() => Ending::Cancelled,
    };
    let exited = matches!(ending, Ending::Exited(_));
    let in_cgroup = inv
        .confinement
        .as_ref()
        .is_some_and(|c| c.cgroup().is_some());
    if in_cgroup {
        // The cgroup holds every process of the run, whatever group or session it joined.
        let cgroup_populated = || {
            inv.confinement
                .as_ref()
                .and_then(Confinement::cgroup)
                .is_some_and(|cg| cg.populated())
        };
        if !exited || cgroup_populated() {
            if exited {
                tracing::debug!(hook.name = %inv.hook, "hook exited leaving background processes; terminating them");
            }
            // A chance to end cleanly: SIGTERM to its group, then the grace period.
            if let Some(pgid) = pgid {
                group::signal(pgid, nix::sys::signal::Signal::SIGTERM);
            }
            let grace = tokio::time::Instant::now() + KILL_GRACE;
            let _ = tokio::time::timeout_at(grace, child.wait()).await;
            while cgroup_populated() && tokio::time::Instant::now() < grace {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    } else if let Some(pgid) = pgid {
        let leftovers = exited && group::alive(pgid);
        if leftovers {
            tracing::debug!(hook.name = %inv.hook, "hook exited leaving background processes; terminating them");
        }
        if leftovers || !exited {
            group::terminate(pgid, &mut child, inv.hook).await;
        }
    }
    // The run's end: its cgroup killed, emptied and removed, its uid's processes killed
    // (blocking work: sysfs, a helper process).
    let mut hits = Vec::new();
    if let Some(confinement) = inv.confinement.take() {
        let hook = inv.hook.to_owned();
        hits = tokio::task::spawn_blocking(move || confinement.end(&hook))
            .await
            .unwrap_or_default();
    }
    if !exited {
        let _ = tokio::time::timeout(Duration::from_secs(2), child.wait()).await;
    }
    // What left the group and was orphaned is ours to end (with a subreaper).
    drop(running);
    reaper::sweep(inv.hook).await;
    finish_readers(readers, inv.hook).await;

    let (stdout, stdout_truncated) = {
        let out = lock(&own_out);
        (out.to_text(), out.truncated())
    };
    let stderr = lock(&own_err).to_text();
    let combined = lock(&combined).to_text();
    Ok(Finished {
        ending,
        stdout,
        stdout_truncated,
        stderr,
        combined,
        hits,
    })
}

async fn finish_readers(readers: Vec<tokio::task::JoinHandle<()>>, hook: &str) {
    let deadline = tokio::time::Instant::now() + DRAIN_TIMEOUT;
    for reader in readers {
        let abort = reader.abort_handle();
        if tokio::time::timeout_at(deadline, reader).await.is_err() {
            tracing::warn!(hook.name = %hook, "hook output pipe still open after exit (escaped process?); output cut short");
            abort.abort();
        }
    }
}
