//! `berth-hook-exec UID GID PROGRAM [ARG...]`: drops to `UID`:`GID` with no supplementary
//! groups, then executes `PROGRAM` with the arguments, environment, directory and process
//! group it was started with.
//!
//! Why it exists: a hook running as another user must change user between the fork and the
//! exec. The standard library starts a child with `posix_spawn` (the child borrows the parent's
//! memory until it executes) unless the child must change user; then it forks the whole
//! service — every page table copied, every later write in the service a copy-on-write fault,
//! and the child's exec tearing the copy down. For `berth up` (some 130 MiB) that was 45 % of
//! its CPU in the 1,000-package scale bench. Started with `posix_spawn`, this small program
//! makes the change instead. Workers use it when it sits beside their own executable
//! (`berth_hooks::run_hooks_as`).

use std::os::unix::process::CommandExt as _;
use std::process::ExitCode;

/// What a shell answers for a command it cannot run.
const CANNOT_RUN: u8 = 126;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let number =
        |arg: Option<std::ffi::OsString>| arg.and_then(|a| a.to_str()?.parse::<u32>().ok());
    let (Some(uid), Some(gid), Some(program)) =
        (number(args.next()), number(args.next()), args.next())
    else {
        eprintln!("usage: berth-hook-exec UID GID PROGRAM [ARG...]");
        return ExitCode::from(2);
    };
    let (uid, gid) = (
        nix::unistd::Uid::from_raw(uid),
        nix::unistd::Gid::from_raw(gid),
    );
    // Groups first: once the user changed, the groups can no longer be.
    let dropped = nix::unistd::setgroups(&[])
        .and_then(|()| nix::unistd::setresgid(gid, gid, gid))
        .and_then(|()| nix::unistd::setresuid(uid, uid, uid));
    if let Err(e) = dropped {
        eprintln!("berth-hook-exec: cannot become {uid}:{gid}: {e}");
        return ExitCode::from(CANNOT_RUN);
    }
    let e = std::process::Command::new(&program).args(args).exec();
    eprintln!(
        "berth-hook-exec: cannot run {}: {e}",
        std::path::Path::new(&program).display()
    );
    ExitCode::from(CANNOT_RUN)
}
