//! `berth-hook-exec`, the child side of a confined hook: the worker starts it with
//! `posix_spawn` (the worker is never forked) and it confines itself, then executes the hook.
//!
//! ```text
//! berth-hook-exec [OPTION]... -- PROGRAM [ARG]...
//!   --cgroup FILE      write this process into a cgroup (FILE is its cgroup.procs)
//!   --nproc N          RLIMIT_NPROC (processes of the uid)
//!   --data BYTES       RLIMIT_DATA (where no memory cgroup limits the run)
//!   --mount SRC DST    in a private mount namespace, show the file SRC at DST
//!   --bind-dir SRC DST in a private mount namespace, show the directory SRC at DST, read-only
//!   --landlock         confine file access to the paths given with:
//!   --read P | --exec P | --write P | --dev P
//!   --no-new-privs     no set-user-ID or file-capability program gains anything
//!   --uid U --gid G    drop to U:G without supplementary groups
//! berth-hook-exec --kill-uid U --gid G --ruid X
//!   kill every process of uid U (from a process whose real uid is X, so U cannot kill it)
//! ```
//!
//! The order matters: the cgroup first (as root: the directories are root's), then rlimits,
//! the mounts (which need root and which Landlock forbids afterwards), Landlock (opening its
//! paths as root), and the user last. Anything that fails ends the helper with exit code 126
//! and a line on stderr naming what failed, before the hook ever runs.
//!
//! Why a helper: the standard library forks the whole service whenever a child must change
//! user (or run code between fork and exec); for `berth up` that fork was 45 % of its CPU at
//! scale. A small program started with `posix_spawn` borrows nothing of the service.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What a shell answers for a command it cannot run.
pub const CANNOT_RUN: u8 = 126;

/// Everything the helper does before it executes the hook.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub cgroups: Vec<PathBuf>,
    pub nproc: Option<u64>,
    pub data: Option<u64>,
    pub mounts: Vec<(PathBuf, PathBuf)>,
    /// Directories shown read-only at a path of their own (source, target).
    pub binds: Vec<(PathBuf, PathBuf)>,
    pub landlock: Option<Paths>,
    /// `PR_SET_NO_NEW_PRIVS`: no set-user-ID program or file capability raises what the hook
    /// may do (Landlock sets it too).
    pub no_new_privs: bool,
    pub user: Option<(u32, u32)>,
}

/// The paths a Landlock-confined hook may use, by what it may do there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Paths {
    pub read: Vec<PathBuf>,
    pub exec: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    pub dev: Vec<PathBuf>,
}

impl Plan {
    /// Whether the helper has anything to do (else the hook may start directly).
    pub fn is_empty(&self) -> bool {
        *self == Plan::default()
    }

    /// The helper's arguments before the program.
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let push = |args: &mut Vec<OsString>, flag: &str, value: &OsStr| {
            args.push(flag.into());
            args.push(value.to_owned());
        };
        for c in &self.cgroups {
            push(&mut args, "--cgroup", c.as_os_str());
        }
        if let Some(n) = self.nproc {
            push(&mut args, "--nproc", OsStr::new(&n.to_string()));
        }
        if let Some(n) = self.data {
            push(&mut args, "--data", OsStr::new(&n.to_string()));
        }
        for (src, dst) in &self.mounts {
            push(&mut args, "--mount", src.as_os_str());
            args.push(dst.as_os_str().to_owned());
        }
        for (src, dst) in &self.binds {
            push(&mut args, "--bind-dir", src.as_os_str());
            args.push(dst.as_os_str().to_owned());
        }
        if let Some(paths) = &self.landlock {
            args.push("--landlock".into());
            for (flag, list) in [
                ("--read", &paths.read),
                ("--exec", &paths.exec),
                ("--write", &paths.write),
                ("--dev", &paths.dev),
            ] {
                for p in list {
                    args.push(flag.into());
                    args.push(p.as_os_str().to_owned());
                }
            }
        }
        if self.no_new_privs {
            args.push("--no-new-privs".into());
        }
        if let Some((uid, gid)) = self.user {
            args.extend(["--uid".into(), uid.to_string().into()]);
            args.extend(["--gid".into(), gid.to_string().into()]);
        }
        args.push("--".into());
        args
    }

    /// Parses [`Plan::args`] (and what follows `--`: the program and its arguments).
    pub fn parse(
        mut args: impl Iterator<Item = OsString>,
    ) -> Result<(Plan, OsString, Vec<OsString>), String> {
        let mut plan = Plan::default();
        let mut paths = Paths::default();
        let (mut uid, mut gid) = (None, None);
        let mut landlock = false;
        let number = |flag: &str, v: Option<OsString>| -> Result<u64, String> {
            v.as_deref()
                .and_then(OsStr::to_str)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("{flag} takes a number"))
        };
        let path = |flag: &str, v: Option<OsString>| -> Result<PathBuf, String> {
            v.map(PathBuf::from)
                .ok_or_else(|| format!("{flag} takes a path"))
        };
        loop {
            let Some(arg) = args.next() else {
                return Err("no program (expected -- PROGRAM [ARG]...)".into());
            };
            match arg.to_str().unwrap_or("") {
                "--" => break,
                "--cgroup" => plan.cgroups.push(path("--cgroup", args.next())?),
                "--nproc" => plan.nproc = Some(number("--nproc", args.next())?),
                "--data" => plan.data = Some(number("--data", args.next())?),
                "--mount" => {
                    let src = path("--mount", args.next())?;
                    plan.mounts.push((src, path("--mount", args.next())?));
                }
                "--bind-dir" => {
                    let src = path("--bind-dir", args.next())?;
                    plan.binds.push((src, path("--bind-dir", args.next())?));
                }
                "--landlock" => landlock = true,
                "--no-new-privs" => plan.no_new_privs = true,
                "--read" => paths.read.push(path("--read", args.next())?),
                "--exec" => paths.exec.push(path("--exec", args.next())?),
                "--write" => paths.write.push(path("--write", args.next())?),
                "--dev" => paths.dev.push(path("--dev", args.next())?),
                "--uid" => uid = Some(number("--uid", args.next())?),
                "--gid" => gid = Some(number("--gid", args.next())?),
                other => return Err(format!("unknown option {other:?}")),
            }
        }
        let id = |n: u64| u32::try_from(n).map_err(|_| format!("{n} is not a uid"));
        plan.user = match (uid, gid) {
            (Some(u), Some(g)) => Some((id(u)?, id(g)?)),
            (None, None) => None,
            _ => return Err("--uid and --gid go together".into()),
        };
        plan.landlock = landlock.then_some(paths);
        let program = args
            .next()
            .ok_or_else(|| "no program after --".to_owned())?;
        Ok((plan, program, args.collect()))
    }

    /// Applies everything, in order (see the module docs).
    pub fn apply(&self) -> Result<(), String> {
        for procs in &self.cgroups {
            std::fs::write(procs, b"0")
                .map_err(|e| format!("entering the cgroup {}: {e}", procs.display()))?;
        }
        use nix::sys::resource::{Resource, setrlimit};
        if let Some(n) = self.nproc {
            setrlimit(Resource::RLIMIT_NPROC, n, n).map_err(|e| format!("RLIMIT_NPROC: {e}"))?;
        }
        if let Some(n) = self.data {
            setrlimit(Resource::RLIMIT_DATA, n, n).map_err(|e| format!("RLIMIT_DATA: {e}"))?;
        }
        if !self.mounts.is_empty() || !self.binds.is_empty() {
            mount_files(&self.mounts, &self.binds)?;
        }
        if self.no_new_privs {
            nix::sys::prctl::set_no_new_privs().map_err(|e| format!("no_new_privs: {e}"))?;
        }
        if let Some(paths) = &self.landlock {
            restrict(paths)?;
        }
        if let Some((uid, gid)) = self.user {
            become_user(uid, gid, uid)?;
        }
        Ok(())
    }
}

/// Drops to `uid`:`gid` (real and saved uid `ruid`) without supplementary groups. Groups
/// first: once the user changed, the groups can no longer be.
fn become_user(uid: u32, gid: u32, ruid: u32) -> Result<(), String> {
    use nix::unistd::{Gid, Uid, setgroups, setresgid, setresuid};
    let (u, g, r) = (Uid::from_raw(uid), Gid::from_raw(gid), Uid::from_raw(ruid));
    setgroups(&[])
        .and_then(|()| setresgid(g, g, g))
        .and_then(|()| setresuid(r, u, r))
        .map_err(|e| format!("cannot become {uid}:{gid}: {e}"))
}

/// Shows each `src` at `dst` in a private mount namespace: a tmpfs over each target's
/// directory (created, empty and root-owned, if missing), an empty file per target in it,
/// and the source bound onto that file. Then each directory of `binds` onto its target
/// (created, empty and root-owned, if missing), read-only, no set-user-ID, no devices.
fn mount_files(mounts: &[(PathBuf, PathBuf)], binds: &[(PathBuf, PathBuf)]) -> Result<(), String> {
    use nix::mount::{MsFlags, mount};
    use nix::sched::{CloneFlags, unshare};
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| format!("a private mount namespace: {e}"))?;
    // Nothing mounted here propagates back to the worker's namespace.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("making / private: {e}"))?;
    let mut covered: Vec<&Path> = Vec::new();
    for (_, dst) in mounts {
        let dir = dst
            .parent()
            .filter(|d| *d != Path::new("/"))
            .ok_or_else(|| format!("cannot mount at {}: no directory of its own", dst.display()))?;
        if covered.contains(&dir) {
            continue;
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            Some("mode=0755,size=1m"),
        )
        .map_err(|e| format!("a tmpfs at {}: {e}", dir.display()))?;
        covered.push(dir);
    }
    for (src, dst) in mounts {
        std::fs::File::create(dst).map_err(|e| format!("{}: {e}", dst.display()))?;
        mount(
            Some(src.as_path()),
            dst.as_path(),
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| format!("showing {} at {}: {e}", src.display(), dst.display()))?;
    }
    for (src, dst) in binds {
        std::fs::create_dir_all(dst).map_err(|e| format!("{}: {e}", dst.display()))?;
        mount(
            Some(src.as_path()),
            dst.as_path(),
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REC,
            None::<&str>,
        )
        .map_err(|e| format!("showing {} at {}: {e}", src.display(), dst.display()))?;
        // A bind mount takes its flags only when remounted.
        mount(
            None::<&str>,
            dst.as_path(),
            None::<&str>,
            MsFlags::MS_BIND
                | MsFlags::MS_REMOUNT
                | MsFlags::MS_RDONLY
                | MsFlags::MS_NOSUID
                | MsFlags::MS_NODEV,
            None::<&str>,
        )
        .map_err(|e| format!("making {} read-only: {e}", dst.display()))?;
    }
    Ok(())
}

/// Landlock: the process may only use the paths given, as given. A kernel without Landlock
/// leaves the process as it is (the worker said so at start).
fn restrict(paths: &Paths) -> Result<(), String> {
    use landlock::{
        ABI, Access, AccessFs, BitFlags, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
        path_beneath_rules,
    };
    let abi = ABI::V7;
    let read: BitFlags<AccessFs> = AccessFs::ReadFile | AccessFs::ReadDir;
    let exec = read | AccessFs::Execute;
    let dev = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let fail = |e: landlock::RulesetError| format!("Landlock: {e}");
    let created = Ruleset::default()
        .handle_access(AccessFs::from_all(abi))
        .map_err(fail)?
        // No signals to, and no abstract sockets of, processes outside the hook's own.
        .scope(Scope::from_all(abi))
        .map_err(fail)?
        .create()
        .map_err(fail)?
        .add_rules(path_beneath_rules(&paths.read, read))
        .map_err(fail)?
        .add_rules(path_beneath_rules(&paths.exec, exec))
        .map_err(fail)?
        .add_rules(path_beneath_rules(&paths.dev, dev))
        .map_err(fail)?
        .add_rules(path_beneath_rules(&paths.write, AccessFs::from_all(abi)))
        .map_err(fail)?;
    created.restrict_self().map_err(fail)?;
    Ok(())
}

/// Kills every process of `uid` but this one with one `kill(-1, SIGKILL)`. It runs with real
/// and saved uid `ruid` (no principal's: the range's base) and effective uid `uid`, so it may
/// signal exactly the processes of `uid` and `ruid`, while those of `uid` may not signal it
/// (the kernel lets a process signal another only when its real or effective uid is the
/// other's real or saved uid, and Landlock's signal scope keeps confined hooks from signalling
/// out of their domain besides).
///
/// One call suffices: the kernel signals every process under the task list lock, and a fork
/// that was under way fails, since fork checks for a pending signal under the same lock. A
/// second call costs nothing and covers a kernel that would not.
fn kill_uid(uid: u32, gid: u32, ruid: u32) -> Result<ExitCode, String> {
    become_user(uid, gid, ruid)?;
    for _ in 0..2 {
        // kill(-1) fails only with ESRCH, when there is no other process at all; it does not
        // say whether it could signal any (EPERM for the others is not reported).
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(-1),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The helper's `main`.
pub fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1).peekable();
    if args.peek().map(|a| a.as_bytes()) == Some(b"--kill-uid") {
        let rest: Vec<OsString> = args.skip(1).collect();
        let number = |i: usize| {
            rest.get(i)
                .and_then(|a| a.to_str())
                .and_then(|a| a.parse::<u32>().ok())
        };
        let flags = (rest.get(1), rest.get(3));
        let parsed = match (number(0), flags, number(2), number(4)) {
            (Some(uid), (Some(g), Some(r)), Some(gid), Some(ruid))
                if g.as_bytes() == b"--gid" && r.as_bytes() == b"--ruid" =>
            {
                Some((uid, gid, ruid))
            }
            _ => None,
        };
        let Some((uid, gid, ruid)) = parsed else {
            eprintln!("usage: berth-hook-exec --kill-uid UID --gid GID --ruid RUID");
            return ExitCode::from(2);
        };
        return kill_uid(uid, gid, ruid).unwrap_or_else(|e| {
            eprintln!("berth-hook-exec: {e}");
            ExitCode::from(CANNOT_RUN)
        });
    }
    let (plan, program, program_args) = match Plan::parse(args) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("berth-hook-exec: {e}");
            eprintln!("usage: berth-hook-exec [OPTION]... -- PROGRAM [ARG]...");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = plan.apply() {
        eprintln!("berth-hook-exec: {e}");
        return ExitCode::from(CANNOT_RUN);
    }
    use std::os::unix::process::CommandExt as _;
    let e = std::process::Command::new(&program)
        .args(program_args)
        .exec();
    eprintln!(
        "berth-hook-exec: cannot run {}: {e}",
        Path::new(&program).display()
    );
    ExitCode::from(CANNOT_RUN)
}

/// The arguments of a `--kill-uid` run.
pub(crate) fn kill_args(uid: u32, gid: u32, ruid: u32) -> [String; 6] {
    [
        "--kill-uid".into(),
        uid.to_string(),
        "--gid".into(),
        gid.to_string(),
        "--ruid".into(),
        ruid.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_survives_its_arguments() {
        let plan = Plan {
            cgroups: vec!["/sys/fs/cgroup/pids/berth/3/1-2/cgroup.procs".into()],
            nproc: Some(256),
            data: Some(1 << 29),
            mounts: vec![("/run/x/token".into(), "/var/run/secrets/t".into())],
            binds: vec![("/pkg dir/hooks".into(), "/hooks".into())],
            landlock: Some(Paths {
                read: vec!["/etc".into()],
                exec: vec!["/usr".into(), "/pkg dir".into()],
                write: vec!["/run/x".into()],
                dev: vec!["/dev/null".into()],
            }),
            no_new_privs: true,
            user: Some((2_000_003, 2_000_003)),
        };
        let mut args = plan.args();
        args.extend(["/bin/sh".into(), "-c".into(), "true".into()]);
        let (back, program, rest) = Plan::parse(args.into_iter()).unwrap();
        assert_eq!(back, plan);
        assert_eq!(program, "/bin/sh");
        assert_eq!(rest, ["-c", "true"]);
        assert!(Plan::default().is_empty());
        let bad = |args: &[&str]| Plan::parse(args.iter().map(OsString::from)).unwrap_err();
        assert!(bad(&["--uid", "1", "--", "x"]).contains("together"));
        assert!(bad(&["--nproc", "x", "--", "x"]).contains("number"));
        assert!(bad(&["--what", "--", "x"]).contains("unknown option"));
        assert!(bad(&["--"]).contains("no program"));
    }
}
