//! Confining hook processes: every package instance (a *principal*, numbered by lifecycle) runs
//! its hooks under an OS identity of its own (docs/decisions/hook-identity.md).
//!
//! A worker calls [`isolate_hooks`] once at start. From then on every hook process it starts
//! (runs, discovery's config queries, settings checks) is given a [`Sandbox`] and runs:
//! - as uid = gid = `base + principal` from the configured [`UidRange`], without supplementary
//!   groups (when the worker is root and the range is not `off`);
//! - with a run directory of its own, owned by that uid, mode 0700 (its `TMPDIR` and `HOME`),
//!   inside a root-owned directory the uid cannot write (so it cannot swap its run directory);
//! - in a cgroup of its own (`berth/<principal>/<run>`, v2 where the unified hierarchy has the
//!   controllers, else the v1 `pids`, `memory` and `cpu` hierarchies) with the package's
//!   [`Limits`], plus `RLIMIT_NPROC` for the uid; without a writable hierarchy, rlimits only;
//! - under Landlock (where the kernel has it): read its package and the system directories,
//!   write only its run directory;
//! - and when the run ends, everything in its cgroup is killed — or, without a cgroup (or one
//!   that would not empty), every process of its uid, unless another run of the principal is
//!   still going in this worker; every process of the uid also dies when the package is
//!   removed ([`end_principal`]).
//!
//! The child side of all this is `berth-hook-exec` (see [`exec`]), started with `posix_spawn`:
//! the service itself is never forked.

mod cgroup;
pub mod exec;
mod rundir;
pub(crate) mod sandbox;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub(crate) use cgroup::{LimitHit, RunCgroup};
pub(crate) use rundir::RunDir;
pub(crate) use sandbox::Confinement;
pub use sandbox::{end_principal, principal_user};

/// The user and group a hook process runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HookUser {
    pub uid: u32,
    pub gid: u32,
}

impl HookUser {
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
                     can reach, or run hooks as berth's own user (--hook-uids off)",
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

/// The uids hooks run as: principal `p` runs as uid = gid = `base + p`, which must not pass
/// `last` (`--hook-uids BASE-LAST`). `base` itself is no principal's: the end-of-run kill
/// helper uses it as its real uid (see [`exec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UidRange {
    base: u32,
    last: u32,
}

impl UidRange {
    /// `2000000-2065535`: 65,535 principals, far above the uids distributions hand out (and
    /// below 2^31, which some tools still treat as signed).
    pub const DEFAULT: UidRange = UidRange {
        base: 2_000_000,
        last: 2_065_535,
    };

    /// Uids below this are the system's own (daemons, the first human users).
    const LOWEST_BASE: u32 = 1000;

    pub fn new(base: u32, last: u32) -> Result<UidRange, String> {
        if base < Self::LOWEST_BASE {
            return Err(format!(
                "{base}-{last}: the range must start at {} or above (below are the system's users)",
                Self::LOWEST_BASE
            ));
        }
        // (uid_t)-1 means "unchanged" to setresuid.
        if last <= base || last == u32::MAX {
            return Err(format!(
                "{base}-{last}: LAST must be above BASE and below {}",
                u32::MAX
            ));
        }
        Ok(UidRange { base, last })
    }

    /// `BASE-LAST`, or `off` (`None`: hooks run as berth's own user).
    pub fn parse(text: &str) -> Result<Option<UidRange>, String> {
        if text == "off" {
            return Ok(None);
        }
        let number = |s: &str| s.trim().parse::<u32>().ok();
        match text.split_once('-').map(|(b, l)| (number(b), number(l))) {
            Some((Some(base), Some(last))) => UidRange::new(base, last).map(Some),
            _ => Err(format!(
                "{text:?}: expected BASE-LAST (two uids, e.g. 2000000-2065535) or off"
            )),
        }
    }

    pub fn base(self) -> u32 {
        self.base
    }

    pub fn last(self) -> u32 {
        self.last
    }

    /// The user principal `principal` runs as; an error naming the range when it is past it.
    pub fn user(self, principal: u32) -> Result<HookUser, String> {
        match self.base.checked_add(principal) {
            Some(uid) if principal >= 1 && uid <= self.last => Ok(HookUser { uid, gid: uid }),
            _ => Err(format!(
                "principal {principal} has no uid in the hook uid range {self} (--hook-uids): \
                 it fits principals 1 to {}",
                self.last - self.base
            )),
        }
    }

    /// A uid of the range no principal runs as (the base).
    pub(crate) fn unused(self) -> u32 {
        self.base
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.base, self.last)
    }
}

/// What one hook run may use: processes (tasks, threads included), memory and CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub processes: u32,
    pub memory_bytes: u64,
    /// Thousandths of a CPU (`500` = half a CPU).
    pub cpu_millis: u32,
}

impl Default for Limits {
    /// 256 processes, 512 MiB, 1 CPU.
    fn default() -> Self {
        Limits {
            processes: 256,
            memory_bytes: 512 << 20,
            cpu_millis: 1000,
        }
    }
}

/// `536870912` → `512 MiB`; sizes that are no whole number of MiB stay in bytes.
pub fn display_bytes(bytes: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, unit) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{} {unit}", bytes / size);
        }
    }
    format!("{bytes} bytes")
}

/// A file the caller adds to a run's directory: owned by the run's uid, mode 0600. With
/// `env`, the hook finds its path in that variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunDirFile {
    /// A plain file name (no `/`), not one of the contract's files.
    pub name: String,
    pub contents: Vec<u8>,
    pub env: Option<String>,
}

/// A file of the run directory ([`RunDirFile::name`]) shown at a fixed absolute path in a
/// private mount namespace of the hook (only when the worker is root; skipped otherwise). The
/// target's directory shows only the files mounted into it (a tmpfs covers it in the hook's
/// namespace, so the worker's own files there, a pod's token among them, stay hidden); a
/// directory that does not exist is created, empty and root-owned, as the mount point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub file: String,
    pub target: PathBuf,
}

/// A directory of the package shown read-only at a fixed absolute path in the hook's private
/// mount namespace (only when the worker is root; skipped otherwise), as shell-operator's
/// images hold their hooks at `/hooks`. The source must lie beneath the package's files; the
/// target is created, empty and root-owned, as the mount point when it does not exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirMount {
    pub source: PathBuf,
    pub target: PathBuf,
}

/// How one hook process is confined: whose it is, what it may use, what it may read.
#[derive(Clone, Debug, PartialEq)]
pub struct Sandbox {
    /// The package instance's principal number (≥ 1; lifecycle's `Spec.principal`).
    pub principal: u32,
    pub limits: Limits,
    /// The package's files: readable and executable under Landlock.
    pub package_dir: PathBuf,
    /// Files added to the run directory.
    pub files: Vec<RunDirFile>,
    /// Files of the run directory mounted at fixed paths.
    pub mounts: Vec<Mount>,
    /// Directories of the package shown read-only at fixed paths.
    pub dirs: Vec<DirMount>,
}

impl Sandbox {
    /// A sandbox with no extra files or mounts.
    pub fn new(principal: u32, limits: Limits, package_dir: PathBuf) -> Sandbox {
        Sandbox {
            principal,
            limits,
            package_dir,
            files: Vec::new(),
            mounts: Vec::new(),
            dirs: Vec::new(),
        }
    }
}

/// What a worker asks of [`isolate_hooks`].
#[derive(Clone, Debug)]
pub struct Isolation {
    /// Where principals' uids come from; `None` (`--hook-uids off`): hooks run as berth's own
    /// user, unconfined. Ignored (hooks run as berth's user) when berth is not root.
    pub uids: Option<UidRange>,
    /// Where run directories go (`--hook-tmp-dir`, or the system temp directory).
    pub tmp_dir: PathBuf,
    /// Directories every confined hook may also read and write (`--hook-writable`).
    pub writable: Vec<PathBuf>,
    /// `berth-hook-exec`; `None`: the one beside this process's executable.
    pub helper: Option<PathBuf>,
}

/// The process-wide state [`isolate_hooks`] sets.
pub(crate) struct State {
    /// Some when hooks run as their principal's uid (root, a range).
    pub uids: Option<UidRange>,
    /// This process is root (mount namespaces, rlimits for another uid).
    pub root: bool,
    pub helper: Option<PathBuf>,
    pub cgroups: Option<cgroup::Tree>,
    /// The kernel's Landlock ABI, when it has one and hooks are confined.
    pub landlock: Option<i32>,
    /// Root-owned 0711 parent of confined runs' directories; removed at exit.
    pub runs_root: Option<tempfile::TempDir>,
    pub tmp_dir: PathBuf,
    pub writable: Vec<PathBuf>,
}

static STATE: OnceLock<State> = OnceLock::new();

pub(crate) fn state() -> Option<&'static State> {
    STATE.get()
}

/// Whether this process runs as root (and so may run hooks as their principals' uids).
pub fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The name of the program that starts a confined hook (`src/bin/berth-hook-exec.rs`).
pub const HOOK_EXEC_NAME: &str = "berth-hook-exec";

/// `berth-hook-exec` in the directory of this process's executable, if it is there and
/// executable.
fn hook_exec_beside_self() -> Option<PathBuf> {
    let exe = std::fs::read_link("/proc/self/exe")
        .or_else(|_| std::env::current_exe())
        .ok()?;
    let helper = exe.parent()?.join(HOOK_EXEC_NAME);
    crate::process::is_executable_file(&std::fs::metadata(&helper).ok()?).then_some(helper)
}

/// The newest Landlock ABI (up to 7, what berth uses) whose file system rights and scopes the
/// kernel enforces, if it has Landlock enabled: each is tried as a hard requirement on a
/// ruleset that is made and dropped, never applied.
pub fn landlock_abi() -> Option<i32> {
    use landlock::{ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, Scope};
    let abis = [
        (ABI::V7, 7),
        (ABI::V6, 6),
        (ABI::V5, 5),
        (ABI::V4, 4),
        (ABI::V3, 3),
        (ABI::V2, 2),
        (ABI::V1, 1),
    ];
    abis.into_iter().find_map(|(abi, n)| {
        let ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::HardRequirement)
            .handle_access(AccessFs::from_all(abi))
            .ok()?;
        let ruleset = if n >= 6 {
            ruleset.scope(Scope::from_all(abi)).ok()?
        } else {
            ruleset
        };
        ruleset.create().ok().map(|_| n)
    })
}

/// Sets up how every hook process of this process is confined (see the module docs), once,
/// before hooks run. Returns what it found, one sentence each, for the worker to log at start
/// (where hooks are *not* confined, or limits fall back to rlimits, it says so).
///
/// Errors: already set up; berth is root with a uid range but `berth-hook-exec` is missing
/// (confinement needs it), or the run directory's parent cannot be made.
pub fn isolate_hooks(config: Isolation) -> Result<Vec<String>, String> {
    if STATE.get().is_some() {
        return Err("hook isolation is already set up".into());
    }
    let root = nix::unistd::geteuid().is_root();
    let mut notes = Vec::new();
    let helper = config.helper.clone().or_else(hook_exec_beside_self);
    let uids = match (root, config.uids) {
        (true, Some(range)) => {
            if helper.is_none() {
                return Err(format!(
                    "{HOOK_EXEC_NAME} is not beside this executable: hooks cannot run as their \
                     principals' uids without it (install it, or run hooks as berth's own user \
                     with --hook-uids off)"
                ));
            }
            notes.push(format!(
                "hooks run as their package's own uid (uid = gid = {} + principal, range {range})",
                range.base()
            ));
            Some(range)
        }
        (true, None) => {
            notes.push(
                "hooks run as root, unconfined (--hook-uids off): they can read and change \
                 everything berth can"
                    .into(),
            );
            None
        }
        (false, _) => {
            notes.push(format!(
                "berth is not root: hooks run as berth's own user (uid {}), unconfined: they can \
                 read everything berth can, its keys included, and signal it",
                nix::unistd::geteuid()
            ));
            None
        }
    };
    let cgroups = match helper {
        Some(_) => cgroup::Tree::discover(),
        None => Err("no berth-hook-exec to enter a cgroup".into()),
    };
    let cgroups = match cgroups {
        Ok(tree) => {
            notes.push(format!(
                "each hook run gets a cgroup of its own: {}",
                tree.describe()
            ));
            Some(tree)
        }
        Err(why) => {
            let fallback = if helper.is_none() {
                "hooks run without process or memory limits".to_owned()
            } else if uids.is_some() {
                "limits fall back to rlimits (RLIMIT_NPROC for the uid, RLIMIT_DATA per process)"
                    .to_owned()
            } else {
                "limits fall back to rlimits (RLIMIT_DATA per process)".to_owned()
            };
            notes.push(format!("no cgroup for hook runs ({why}): {fallback}"));
            None
        }
    };
    let landlock = match (uids, landlock_abi()) {
        (Some(_), Some(abi)) => {
            notes.push(format!(
                "Landlock (ABI {abi} or later): hooks read their package and the system directories and \
                 write only their run directory"
            ));
            Some(abi)
        }
        (Some(_), None) => {
            notes.push(
                "the kernel has no Landlock: hooks can read every file their uid can (other \
                 packages' files among them) and write where their uid may"
                    .into(),
            );
            None
        }
        (None, _) => None,
    };
    let runs_root = match uids {
        Some(_) => {
            std::fs::create_dir_all(&config.tmp_dir)
                .map_err(|e| format!("{}: {e}", config.tmp_dir.display()))?;
            remove_stale_runs(&config.tmp_dir);
            let dir = tempfile::Builder::new()
                .prefix(&format!("{RUNS_PREFIX}{}-", std::process::id()))
                .tempdir_in(&config.tmp_dir)
                .map_err(|e| format!("{}: {e}", config.tmp_dir.display()))?;
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711))
                .map_err(|e| format!("{}: {e}", dir.path().display()))?;
            Some(dir)
        }
        None => None,
    };
    // Without a cgroup, processes that leave the hook's group are found as orphans: this
    // process becomes their subreaper. As PID 1 every orphan is ours anyway and must be
    // reaped.
    let subreaper = cgroups.is_none() || std::process::id() == 1;
    if subreaper && let Err(error) = crate::process::reap_escaped_hook_processes() {
        notes.push(format!(
            "processes that leave a hook's process group will outlive it: {error}"
        ));
    }
    let state = State {
        uids,
        root,
        helper,
        cgroups,
        landlock,
        runs_root,
        tmp_dir: config.tmp_dir,
        writable: config.writable,
    };
    STATE
        .set(state)
        .map_err(|_| "hook isolation is already set up".to_owned())?;
    Ok(notes)
}

/// The runs directory's name: `berth-runs-<pid>-<random>`.
const RUNS_PREFIX: &str = "berth-runs-";

/// Removes the runs directories of workers that are gone (their pid names no process), which a
/// worker stopped by a signal leaves behind. One whose pid was reused by another process is
/// left alone: nothing here can tell it from a live worker's.
fn remove_stale_runs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(RUNS_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<i32>().ok())
        else {
            continue;
        };
        let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None)
            == Err(nix::errno::Errno::ESRCH);
        if gone && entry.file_type().is_ok_and(|t| t.is_dir()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The variables a confined hook gets besides the contract's: its run directory as `TMPDIR`
/// and `HOME` (the only place it may write).
pub(crate) fn run_dir_env(dir: &Path) -> [(OsString, OsString); 2] {
    [
        ("TMPDIR".into(), dir.as_os_str().to_owned()),
        ("HOME".into(), dir.as_os_str().to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_ranges_parse_and_map_principals() {
        let range = UidRange::parse("2000000-2065535").unwrap().unwrap();
        assert_eq!(range, UidRange::DEFAULT);
        assert_eq!(
            range.user(1),
            Ok(HookUser {
                uid: 2_000_001,
                gid: 2_000_001
            })
        );
        assert_eq!(range.user(65535).unwrap().uid, 2_065_535);
        let past = range.user(65536).unwrap_err();
        assert!(
            past.contains("2000000-2065535") && past.contains("1 to 65535"),
            "{past}"
        );
        assert!(range.user(0).is_err());
        assert_eq!(UidRange::parse("off"), Ok(None));
        for bad in ["", "5", "a-b", "10-20", "3000-2000", "3000-4294967295"] {
            assert!(UidRange::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn runs_directories_of_gone_workers_are_removed_and_live_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let stale = tmp.path().join(format!("{RUNS_PREFIX}{gone}-abc"));
        let live = tmp
            .path()
            .join(format!("{RUNS_PREFIX}{}-def", std::process::id()));
        let other = tmp.path().join("berth-runs-notapid");
        for dir in [&stale, &live, &other] {
            std::fs::create_dir_all(dir.join("berth-hook-1")).unwrap();
        }
        remove_stale_runs(tmp.path());
        assert!(!stale.exists());
        assert!(live.exists() && other.exists());
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(display_bytes(512 << 20), "512 MiB");
        assert_eq!(display_bytes(2 << 30), "2 GiB");
        assert_eq!(display_bytes(1000), "1000 bytes");
    }
}

/// The steps of a confined run one at a time, for `hook-isolation-bench` (not an API).
#[doc(hidden)]
pub mod steps {
    use std::path::{Path, PathBuf};
    use std::time::Instant;

    use super::{Limits, RunDir, Sandbox, UidRange};

    /// Makes the run cgroup of `principal` (every hierarchy, with `limits`), then kills what
    /// is in it (nothing) and removes it. `Ok(false)` when this process has no cgroups.
    pub fn cgroup_cycle(principal: u32, limits: &Limits) -> std::io::Result<bool> {
        let Some(tree) = super::state().and_then(|s| s.cgroups.as_ref()) else {
            return Ok(false);
        };
        let cg = tree.create(principal, limits)?;
        cg.kill(Instant::now() + std::time::Duration::from_secs(1));
        let _ = cg.hits();
        cg.remove();
        Ok(true)
    }

    /// A run cgroup, killed and removed when dropped.
    pub struct Cgroup(super::RunCgroup);

    impl Cgroup {
        /// The `cgroup.procs` files a process writes itself into.
        pub fn procs_files(&self) -> Vec<PathBuf> {
            self.0.procs_files()
        }
    }

    /// A run cgroup of `principal`; `None` when this process has no cgroups.
    pub fn cgroup(principal: u32, limits: &Limits) -> std::io::Result<Option<Cgroup>> {
        let Some(tree) = super::state().and_then(|s| s.cgroups.as_ref()) else {
            return Ok(None);
        };
        Ok(Some(Cgroup(tree.create(principal, limits)?)))
    }

    /// Makes a run directory owned by the principal's uid, with the contract's inputs, then
    /// removes it.
    pub fn run_dir(parent: &Path, range: UidRange, principal: u32) -> std::io::Result<()> {
        let user = range.user(principal).map_err(std::io::Error::other)?;
        let dir = RunDir::create(parent, "berth-bench-", Some(user))?;
        for name in ["binding-context.json", "values.json", "config-values.json"] {
            dir.write(name, b"{}")?;
        }
        dir.finish("bench");
        Ok(())
    }

    /// The helper's plan for a confined hook of `sandbox` whose run directory is `run_dir`
    /// (Landlock paths included, cgroups not).
    pub fn landlock_paths(sandbox: &Sandbox, run_dir: &Path) -> super::exec::Paths {
        super::sandbox::landlock_paths(sandbox, run_dir, &[])
    }

    /// `berth-hook-exec --kill-uid` for the principal's uid (blocking).
    pub fn kill_uid(helper: &Path, range: UidRange, principal: u32) -> std::io::Result<()> {
        let user = range.user(principal).map_err(std::io::Error::other)?;
        let status = std::process::Command::new(helper)
            .args(super::exec::kill_args(user.uid, user.gid, range.unused()))
            .status()?;
        if !status.success() {
            return Err(std::io::Error::other(format!("kill-uid: {status}")));
        }
        Ok(())
    }
}
