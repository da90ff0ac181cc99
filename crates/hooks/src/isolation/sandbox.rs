//! One hook process's confinement, from its [`Sandbox`] and the process-wide [`State`]: the
//! helper's plan, the run's cgroup, and what ends the run.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::exec::{Paths, Plan};
use super::{HookUser, LimitHit, RunCgroup, RunDir, Sandbox, UidRange};

/// System directories a confined hook may read and execute: programs, interpreters and the
/// libraries they load (`/lib64` holds the dynamic loader).
const SYSTEM_EXEC: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt",
];
/// System directories a confined hook may read: configuration (name resolution, users and
/// groups, CA certificates, time zones, alternatives), its own process's view (`/proc`: other
/// uids' processes stay closed to it, and Landlock keeps it from tracing any process outside
/// its own domain) and the machine's (`/sys`: CPU counts, cgroup limits runtimes read), and
/// systemd-resolved's configuration (`/etc/resolv.conf` links there on such hosts).
const SYSTEM_READ: &[&str] = &["/etc", "/proc", "/sys", "/run/systemd/resolve"];
/// Device files a confined hook may read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];

/// Runs of each principal going on in this process: the uid-wide kill waits until a
/// principal's last run ends, so it never kills a sibling run. Held while that kill runs, so
/// no run of the principal starts meanwhile.
static ACTIVE: Mutex<Option<HashMap<u32, usize>>> = Mutex::new(None);

fn active() -> std::sync::MutexGuard<'static, Option<HashMap<u32, usize>>> {
    ACTIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a run's cgroup may take to empty after it was killed.
const EMPTY_WAIT: Duration = Duration::from_secs(5);
/// Tries of the uid-wide kill whose helper was killed by a signal.
const KILL_TRIES: usize = 3;

/// The confinement of one hook process, from preparation to its end.
pub(crate) struct Confinement {
    plan: Plan,
    helper: Option<PathBuf>,
    user: Option<HookUser>,
    principal: u32,
    uids: Option<UidRange>,
    cgroup: Option<RunCgroup>,
    /// Counted in [`ACTIVE`] (a run with a user of its own).
    counted: bool,
}

/// The user principal `principal` runs as here: `Ok(None)` when hooks run as berth's own user
/// (not root, `--hook-uids off`, or no isolation set up); an error naming the range when the
/// principal is past it.
pub fn principal_user(principal: u32) -> Result<Option<HookUser>, String> {
    match super::state().and_then(|s| s.uids) {
        Some(range) => range.user(principal).map(Some),
        None => Ok(None),
    }
}

impl Confinement {
    /// Where the run directory of a sandboxed run goes, and whose it is.
    pub(crate) fn run_dir_home(
        sandbox: &Sandbox,
        tmp: Option<&Path>,
    ) -> std::io::Result<(PathBuf, Option<HookUser>)> {
        let user = principal_user(sandbox.principal).map_err(std::io::Error::other)?;
        let state = super::state();
        let parent = match (user, state.and_then(|s| s.runs_root.as_ref())) {
            (Some(_), Some(root)) => root.path().to_path_buf(),
            _ => tmp
                .map(Path::to_path_buf)
                .or_else(|| state.map(|s| s.tmp_dir.clone()))
                .unwrap_or_else(std::env::temp_dir),
        };
        Ok((parent, user))
    }

    /// Prepares one run (blocking: makes its cgroup). `run_dir` is its directory (made by
    /// [`Confinement::run_dir_home`]'s answer), `mounts` the sandbox's mounts resolved to
    /// files of it.
    pub(crate) fn prepare(sandbox: &Sandbox, run_dir: &RunDir) -> std::io::Result<Confinement> {
        let Some(state) = super::state() else {
            return Ok(Confinement {
                plan: Plan::default(),
                helper: None,
                user: None,
                principal: sandbox.principal,
                uids: None,
                cgroup: None,
                counted: false,
            });
        };
        let user = principal_user(sandbox.principal).map_err(std::io::Error::other)?;
        let mut plan = Plan::default();
        let counted = user.is_some();
        if counted {
            *active()
                .get_or_insert_with(HashMap::new)
                .entry(sandbox.principal)
                .or_default() += 1;
        }
        let mut confinement = Confinement {
            plan: Plan::default(),
            helper: state.helper.clone(),
            user,
            principal: sandbox.principal,
            uids: state.uids,
            cgroup: None,
            counted,
        };
        if state.helper.is_none() {
            // No helper: nothing can be applied in the child (only berth's own user runs
            // hooks then; the worker said so at start).
            return Ok(confinement);
        }
        let cgroup = match &state.cgroups {
            Some(tree) => Some(tree.create(sandbox.principal, &sandbox.limits)?),
            None => None,
        };
        if let Some(cg) = &cgroup {
            plan.cgroups = cg.procs_files();
        }
        let limits = &sandbox.limits;
        // RLIMIT_NPROC counts the tasks of the real uid: only a uid of the principal's own
        // is the run's alone (berth's own counts berth's threads and everything else). Where a
        // pids cgroup holds the run to the limit, the rlimit is the uid's backstop across its
        // runs (twice the limit: the kernel checks it first, and the cgroup's refusal is the
        // one that names the limit); without one it is the limit.
        if user.is_some() {
            let processes = u64::from(limits.processes);
            plan.nproc = Some(
                if cgroup.as_ref().is_some_and(RunCgroup::limits_processes) {
                    processes * 2
                } else {
                    processes
                },
            );
        }
        if !cgroup.as_ref().is_some_and(RunCgroup::limits_memory) {
            plan.data = Some(limits.memory_bytes);
        }
        if state.root {
            for m in &sandbox.mounts {
                plan.mounts
                    .push((run_dir.path().join(&m.file), m.target.clone()));
            }
            for d in &sandbox.dirs {
                plan.binds.push((d.source.clone(), d.target.clone()));
            }
        }
        if user.is_some() && state.landlock.is_some() {
            plan.landlock = Some(landlock_paths(sandbox, run_dir.path(), &state.writable));
        }
        plan.no_new_privs = user.is_some();
        plan.user = user.map(|u| (u.uid, u.gid));
        confinement.plan = plan;
        confinement.cgroup = cgroup;
        Ok(confinement)
    }

    /// The program to start and its leading arguments: the helper with its plan (then the
    /// hook), or nothing when the hook may start directly.
    pub(crate) fn helper(&self) -> Option<(&Path, Vec<OsString>)> {
        if self.plan.is_empty() {
            return None;
        }
        let helper = self.helper.as_deref()?;
        Some((helper, self.plan.args()))
    }

    pub(crate) fn cgroup(&self) -> Option<&RunCgroup> {
        self.cgroup.as_ref()
    }

    /// Ends the run (blocking): kills what is left in its cgroup, reads the limits it
    /// reached, removes the cgroup, and — when the run had no cgroup, or its cgroup would not
    /// empty, and this was its principal's last run here — kills every process of the
    /// principal's uid. Returns the limits reached.
    ///
    /// With a cgroup that emptied, the uid-wide kill would find nothing: an unprivileged
    /// process cannot leave its cgroup (every other cgroup's `cgroup.procs` is root's), so the
    /// run's processes, the uid's in this worker, were all in it. The kill then runs once,
    /// when the package is removed ([`end_principal`]), and costs no run its ~0.5 ms.
    pub(crate) fn end(mut self, hook: &str) -> Vec<LimitHit> {
        let mut hits = Vec::new();
        let mut contained = false;
        if let Some(cg) = self.cgroup.take() {
            contained = cg.kill(Instant::now() + EMPTY_WAIT);
            if !contained {
                tracing::warn!(hook.name = %hook, "a hook run's cgroup still held processes after it was killed");
            }
            hits = cg.hits();
            cg.remove();
        }
        self.release(hook, !contained);
        hits
    }

    /// Uncounts the run; the principal's last run kills its uid's processes when `kill`.
    fn release(&mut self, hook: &str, kill: bool) {
        if !std::mem::take(&mut self.counted) {
            return;
        }
        let mut all = active();
        let map = all.get_or_insert_with(HashMap::new);
        let left = map.get_mut(&self.principal).map(|n| {
            *n -= 1;
            *n
        });
        if left == Some(0) {
            map.remove(&self.principal);
            if let (true, Some(user), Some(range), Some(helper)) =
                (kill, self.user, self.uids, self.helper.as_deref())
            {
                kill_uid(helper, user, range, hook);
            }
        }
    }
}

impl Drop for Confinement {
    /// An abandoned run: the cgroup ends itself when dropped; the count must not leak, and
    /// the uid's processes are killed (nothing says the cgroup emptied).
    fn drop(&mut self) {
        self.release("(abandoned run)", true);
    }
}

/// Kills every process of `principal`'s uid in this worker (blocking) and removes its cgroup
/// directories, unless one of its runs is going on here: for a package being removed, after
/// which nothing of it may live on.
pub fn end_principal(principal: u32) {
    let Some(state) = super::state() else {
        return;
    };
    let all = active();
    if all.as_ref().is_some_and(|map| map.contains_key(&principal)) {
        return;
    }
    if let (Some(range), Some(helper)) = (state.uids, state.helper.as_deref())
        && let Ok(user) = range.user(principal)
    {
        kill_uid(helper, user, range, "(package removed)");
    }
    if let Some(tree) = &state.cgroups {
        tree.forget(principal);
    }
}

/// Runs `helper --kill-uid` (blocking) until it is not killed by a signal itself.
fn kill_uid(helper: &Path, user: HookUser, range: UidRange, hook: &str) {
    let args = super::exec::kill_args(user.uid, user.gid, range.unused());
    for _ in 0..KILL_TRIES {
        match std::process::Command::new(helper)
            .args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .status()
        {
            Ok(status) if status.success() => return,
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt as _;
                if status.signal().is_some() {
                    continue;
                }
                tracing::warn!(hook.name = %hook, uid = user.uid, %status, "the kill of the hook's uid failed");
                return;
            }
            Err(error) => {
                tracing::warn!(hook.name = %hook, uid = user.uid, %error, "cannot kill the processes of the hook's uid");
                return;
            }
        }
    }
    tracing::warn!(hook.name = %hook, uid = user.uid, "the kill of the hook's uid was itself killed");
}

/// What a confined hook may read, execute and write.
pub(crate) fn landlock_paths(sandbox: &Sandbox, run_dir: &Path, writable: &[PathBuf]) -> Paths {
    let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
    // The directories its mounted files show in.
    for m in &sandbox.mounts {
        if let Some(dir) = m.target.parent()
            && !read.iter().any(|r| r == dir)
        {
            read.push(dir.to_path_buf());
        }
    }
    let mut exec: Vec<PathBuf> = SYSTEM_EXEC.iter().map(PathBuf::from).collect();
    exec.push(sandbox.package_dir.clone());
    // A bound directory is its own mount: the package's rule does not reach through it.
    exec.extend(sandbox.dirs.iter().map(|d| d.target.clone()));
    let mut write = vec![run_dir.to_path_buf()];
    write.extend(writable.iter().cloned());
    Paths {
        read,
        exec,
        write,
        dev: DEVICES.iter().map(PathBuf::from).collect(),
    }
}

/// One hook process's directory, confinement and the variables naming what is in it.
pub(crate) struct Prepared {
    pub dir: RunDir,
    pub confinement: Option<Confinement>,
    /// `TMPDIR`/`HOME` of a hook with a uid of its own, and the caller's files' variables.
    pub env: Vec<(OsString, OsString)>,
}

/// Names of files berth writes into every run directory: a caller's file may not take one.
pub(crate) const RESERVED: &[&str] = &[
    "binding-context.json",
    "values.json",
    "config-values.json",
    "values-patch.json",
    "config-values-patch.json",
    "kubernetes-patch",
    "metrics.json",
    "admission-response.json",
    "conversion-response.json",
    "settings.json",
];

/// Makes a run's directory in `tmp` (or, for a hook with a uid of its own, in the root-owned
/// runs directory), lets `fill` write berth's files into it, writes the sandbox's files, and
/// prepares the confinement (blocking: a dozen small file operations and the cgroup's).
pub(crate) fn prepare_run(
    sandbox: Option<&Sandbox>,
    tmp: Option<&Path>,
    prefix: &str,
    fill: impl FnOnce(&RunDir) -> std::io::Result<()>,
) -> std::io::Result<Prepared> {
    let (parent, owner) = match sandbox {
        Some(sandbox) => Confinement::run_dir_home(sandbox, tmp)?,
        None => (
            tmp.map(Path::to_path_buf)
                .unwrap_or_else(std::env::temp_dir),
            None,
        ),
    };
    let dir = RunDir::create(&parent, prefix, owner)?;
    fill(&dir)?;
    let mut env = Vec::new();
    if owner.is_some() {
        env.extend(super::run_dir_env(dir.path()));
    }
    let Some(sandbox) = sandbox else {
        return Ok(Prepared {
            dir,
            confinement: None,
            env,
        });
    };
    check_extras(sandbox)?;
    for file in &sandbox.files {
        dir.write(&file.name, &file.contents)?;
        if let Some(var) = &file.env {
            env.push((var.into(), dir.path().join(&file.name).into_os_string()));
        }
    }
    let confinement = Confinement::prepare(sandbox, &dir)?;
    Ok(Prepared {
        dir,
        confinement: Some(confinement),
        env,
    })
}

/// A caller's files are plain, distinct names that are not berth's; mounts name such a file
/// and an absolute, plain target path below a directory other than `/`.
fn check_extras(sandbox: &Sandbox) -> std::io::Result<()> {
    let invalid = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
    let mut seen = Vec::new();
    for file in &sandbox.files {
        let name = file.name.as_str();
        let plain = !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains('/')
            && !name.contains('\0');
        if !plain || RESERVED.contains(&name) || seen.contains(&name) {
            return Err(invalid(format!(
                "run directory file {name:?}: a plain file name, not berth's own and not given twice"
            )));
        }
        seen.push(name);
    }
    for m in &sandbox.mounts {
        let plain = m.target.is_absolute()
            && m.target
                .components()
                .skip(1)
                .all(|c| matches!(c, std::path::Component::Normal(_)))
            && m.target.parent().is_some_and(|p| p != Path::new("/"));
        if !plain || !seen.contains(&m.file.as_str()) {
            return Err(invalid(format!(
                "mount of {:?} at {}: the file must be one of the run's files, the target an \
                 absolute path below a directory other than /",
                m.file,
                m.target.display()
            )));
        }
    }
    for d in &sandbox.dirs {
        let plain = |p: &Path| {
            p.is_absolute()
                && p.components()
                    .skip(1)
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
        };
        if !plain(&d.source)
            || !d.source.starts_with(&sandbox.package_dir)
            || !plain(&d.target)
            || d.target == Path::new("/")
        {
            return Err(invalid(format!(
                "directory {} shown at {}: the source must be a plain path beneath the package's \
                 files, the target an absolute path other than /",
                d.source.display(),
                d.target.display()
            )));
        }
    }
    Ok(())
}
