//! Running one hook process: its own process group, concurrent bounded
//! capture of stdout/stderr, a timeout and a cancellation token.
//!
//! Invariant: when [`execute`] returns, no process of the hook's group is
//! left running — after a timeout or cancellation (SIGTERM, then SIGKILL
//! after [`KILL_GRACE`]) and also after a normal exit, because background
//! children that still hold the output pipes would otherwise keep the run
//! open forever. Hooks therefore cannot leave daemons behind.

mod capture;
mod group;
mod reaper;

pub use group::KILL_GRACE;
pub use reaper::reap_escaped_hook_processes;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::unistd::Pid;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

use capture::{Stream, TailBuffer, drain, lock};

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

/// A user and group hook processes run as instead of berth's own (see [`run_hooks_as`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HookUser {
    pub uid: u32,
    pub gid: u32,
}

impl HookUser {
    /// `NAME` (its uid and primary group, from the user database), `UID` (group = uid) or
    /// `UID:GID`.
    pub fn parse(spec: &str) -> Result<HookUser, String> {
        let number = |s: &str| s.parse::<u32>().ok();
        if let Some((uid, gid)) = spec.split_once(':') {
            return match (number(uid), number(gid)) {
                (Some(uid), Some(gid)) => Ok(HookUser { uid, gid }),
                _ => Err(format!("hook user {spec:?}: UID:GID must be two numbers")),
            };
        }
        if let Some(uid) = number(spec) {
            return Ok(HookUser { uid, gid: uid });
        }
        match nix::unistd::User::from_name(spec) {
            Ok(Some(user)) => Ok(HookUser {
                uid: user.uid.as_raw(),
                gid: user.gid.as_raw(),
            }),
            Ok(None) => Err(format!("hook user {spec:?}: no such user")),
            Err(e) => Err(format!("hook user {spec:?}: {e}")),
        }
    }
}

impl HookUser {
    /// `nobody`: the user hooks run as by default when berth runs as root. Numeric, so it
    /// needs no entry in the user database (minimal images have none).
    pub const NOBODY: HookUser = HookUser {
        uid: 65534,
        gid: 65534,
    };

    /// The user hooks run as, from the `--hook-user` setting (`spec`) and berth's own
    /// effective uid: `None` when hooks run as berth's own user.
    ///
    /// As root, hooks run as [`HookUser::NOBODY`] unless `spec` names another user; naming
    /// root (`root`, `0`) keeps them root, the explicit opt-out. As any other user, hooks run
    /// as that user, and a `spec` naming someone else is an error (only root can switch).
    pub fn choose(spec: Option<&str>, euid: u32) -> Result<Option<HookUser>, String> {
        let user = spec.map(HookUser::parse).transpose()?;
        match (euid, user) {
            (0, None) => Ok(Some(HookUser::NOBODY)),
            (0, Some(user)) if user.uid == 0 => Ok(None),
            (0, Some(user)) => Ok(Some(user)),
            (_, None) => Ok(None),
            (own, Some(user)) if user.uid == own => Ok(None),
            (own, Some(user)) => Err(format!(
                "running hooks as uid {} needs root (berth runs as uid {own}); leave \
                 --hook-user unset to run them as berth's own user",
                user.uid
            )),
        }
    }

    /// [`HookUser::choose`] for this process's effective uid.
    pub fn choose_for_self(spec: Option<&str>) -> Result<Option<HookUser>, String> {
        HookUser::choose(spec, nix::unistd::geteuid().as_raw())
    }

    /// Checks that this user can reach `dir`: every directory from `/` to `dir` must be
    /// searchable by it (owner, primary group or others `x` bit: hooks run without
    /// supplementary groups). The error names the first directory that is not, and what to
    /// do. Hooks reach their package's files and their run's files through such directories;
    /// checked at start so a misconfigured worker refuses to start instead of failing every
    /// hook.
    pub fn check_reachable(self, dir: &Path) -> Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        let full = dir
            .canonicalize()
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        for step in full.ancestors().collect::<Vec<_>>().into_iter().rev() {
            let meta = std::fs::metadata(step).map_err(|e| format!("{}: {e}", step.display()))?;
            let mode = meta.mode();
            let searchable = if meta.uid() == self.uid {
                mode & 0o100 != 0
            } else if meta.gid() == self.gid {
                mode & 0o010 != 0
            } else {
                mode & 0o001 != 0
            };
            if !searchable {
                return Err(format!(
                    "hooks run as uid {}:{} and cannot reach {}: {} (mode {:04o}, owner {}:{}) \
                     is not searchable by them; make it so (chmod o+x {}), use a directory they \
                     can reach, or run hooks as root (--hook-user root)",
                    self.uid,
                    self.gid,
                    dir.display(),
                    step.display(),
                    mode & 0o7777,
                    meta.uid(),
                    meta.gid(),
                    step.display(),
                ));
            }
        }
        Ok(())
    }
}

static HOOK_USER: std::sync::OnceLock<HookUser> = std::sync::OnceLock::new();
/// `berth-hook-exec`, when hooks start through it (see [`start_hooks_with`]).
static HOOK_EXEC: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// The name of the program that starts a hook as the hook user (`src/bin/berth-hook-exec.rs`).
pub const HOOK_EXEC_NAME: &str = "berth-hook-exec";

/// Starts hooks that run as the hook user through `helper` (`berth-hook-exec`), so that this
/// process starts them with `posix_spawn` instead of forking itself (see that program). Set
/// once; [`run_hooks_as`] sets it to the one beside this process's executable, if there is one.
pub fn start_hooks_with(helper: PathBuf) -> Result<(), String> {
    let set = HOOK_EXEC.get_or_init(|| helper.clone());
    if *set != helper {
        return Err(format!("hooks already start through {}", set.display()));
    }
    Ok(())
}

/// A regular file (after links) with an execute bit: what discovery counts as a hook, and
/// what a direct start of a program would not refuse for its mode.
pub(crate) fn is_executable_file(meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    meta.is_file() && meta.permissions().mode() & 0o111 != 0
}

/// `berth-hook-exec` in the directory of this process's executable, if it is there and
/// executable.
fn hook_exec_beside_self() -> Option<PathBuf> {
    let exe = std::fs::read_link("/proc/self/exe")
        .or_else(|_| std::env::current_exe())
        .ok()?;
    let helper = exe.parent()?.join(HOOK_EXEC_NAME);
    is_executable_file(&std::fs::metadata(&helper).ok()?).then_some(helper)
}

/// Makes every hook process this process starts (runs, discovery's `--config`, settings
/// checks) run as `user`, with no supplementary groups, and hands it its run's temporary files.
/// Only root can do this; berth's own files stay out of the hooks' reach (package files are
/// owned by berth and read-only to others). Set once at start: `Err` when already set to
/// another user, or when this process is not root.
pub fn run_hooks_as(user: HookUser) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("running hooks as another user needs root".into());
    }
    let set = HOOK_USER.get_or_init(|| user);
    if *set != user {
        return Err(format!("hooks already run as {set:?}"));
    }
    match hook_exec_beside_self() {
        Some(helper) => {
            let _ = start_hooks_with(helper);
        }
        None => tracing::info!(
            "no {HOOK_EXEC_NAME} beside this executable: hook processes start with a fork of this process"
        ),
    }
    Ok(())
}

/// The user hooks run as, if [`run_hooks_as`] set one.
pub fn hook_user() -> Option<HookUser> {
    HOOK_USER.get().copied()
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
}

/// Runs the invocation to its end. Errors only if the process cannot start.
pub(crate) async fn execute(inv: Invocation<'_>) -> std::io::Result<Finished> {
    let mut command = match (hook_user(), HOOK_EXEC.get()) {
        (Some(user), Some(helper)) => {
            // The helper reports a program it cannot run only on its stderr; what starting
            // the program directly would refuse is refused here the same way.
            startable(inv.program)?;
            let mut command = Command::new(helper);
            command
                .arg(user.uid.to_string())
                .arg(user.gid.to_string())
                .arg(inv.program);
            command
        }
        (Some(user), None) => {
            let mut command = Command::new(inv.program);
            // Dropping from root to the user also drops supplementary groups (std does so).
            command.uid(user.uid).gid(user.gid);
            command
        }
        (None, _) => Command::new(inv.program),
    };
    command
        .args(inv.args)
        .current_dir(inv.cwd)
        // Hooks are untrusted: they see an allow-listed part of berth's environment (no
        // tokens, database URLs or credentials), then what the contract gives them.
        .env_clear()
        .envs(inherited_env(std::env::vars_os()))
        .envs(inv.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        // Safety net if this future is dropped mid-run: at least the leader dies.
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
    if let Some(pgid) = pgid {
        let leftovers = matches!(ending, Ending::Exited(_)) && group::alive(pgid);
        if leftovers {
            tracing::debug!(hook.name = %inv.hook, "hook exited leaving background processes; terminating them");
        }
        if leftovers || !matches!(ending, Ending::Exited(_)) {
            group::terminate(pgid, &mut child, inv.hook).await;
        }
    }
    // The group is gone; what left it and was orphaned is ours to end (with a subreaper).
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
