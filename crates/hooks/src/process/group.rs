//! Process-group control: every hook runs as the leader of its own group so
//! that everything it spawned can be signalled at once.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;
use tokio::time::Instant;

/// How long a hook gets to exit after SIGTERM before the group is SIGKILLed.
/// Short on purpose: cancellation must be prompt (a cancelled run returns
/// well within a second) and hooks have no state worth a long shutdown.
pub const KILL_GRACE: Duration = Duration::from_millis(500);

/// How long to wait for the kernel to tear down a SIGKILLed group.
const REAP_WAIT: Duration = Duration::from_secs(2);

/// Polling step while waiting for a group to empty. There is no event for
/// "the last member of a process group exited" that we could wait on.
const POLL_STEP: Duration = Duration::from_millis(10);

/// Ends every process of the group: SIGTERM, up to [`KILL_GRACE`] to exit,
/// then SIGKILL. Reaps the leader. Returns once the group is gone (or after
/// a bounded wait, with a warning, if the kernel is slow to reap it).
pub(crate) async fn terminate(pgid: Pid, leader: &mut Child, hook: &str) {
    let grace_deadline = Instant::now() + KILL_GRACE;
    signal(pgid, Signal::SIGTERM);
    // Reap the leader if it exits in time, so it does not linger as a zombie
    // member of its own group while we poll.
    let _ = tokio::time::timeout_at(grace_deadline, leader.wait()).await;
    if wait_gone(pgid, grace_deadline).await {
        return;
    }
    tracing::debug!(hook.name = %hook, "hook ignored SIGTERM, sending SIGKILL to its process group");
    signal(pgid, Signal::SIGKILL);
    let reap_deadline = Instant::now() + REAP_WAIT;
    let _ = tokio::time::timeout_at(reap_deadline, leader.wait()).await;
    if !wait_gone(pgid, reap_deadline).await {
        tracing::warn!(hook.name = %hook, pgid = pgid.as_raw(), "hook process group still present after SIGKILL");
    }
}

pub(crate) fn signal(pgid: Pid, sig: Signal) {
    match killpg(pgid, sig) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(error) => {
            tracing::warn!(pgid = pgid.as_raw(), %error, ?sig, "signalling hook process group failed")
        }
    }
}

async fn wait_gone(pgid: Pid, deadline: Instant) -> bool {
    loop {
        if !alive(pgid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL_STEP).await;
    }
}

/// Whether any live (non-zombie) process is still in the group.
///
/// `kill(-pgid, 0)` alone also counts zombies: orphaned children are
/// re-parented to PID 1, and whether that reaps them promptly depends on the
/// container. So when the probe says "present", `/proc` decides.
pub(crate) fn alive(pgid: Pid) -> bool {
    match killpg(pgid, None) {
        Err(Errno::ESRCH) => false,
        _ => live_members_in_proc(pgid).unwrap_or(true),
    }
}

/// Scans `/proc/<pid>/stat` for members of `pgid` that are not zombies.
/// `None` when `/proc` cannot be read (non-Linux): trust the kill probe.
fn live_members_in_proc(pgid: Pid) -> Option<bool> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let live = entries.filter_map(Result::ok).any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            return false;
        };
        // Format: "pid (comm) state ppid pgrp …"; comm may contain spaces
        // and parentheses, so parse after the last ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
        pgrp == Some(pgid.as_raw()) && state != Some("Z") && state != Some("X")
    });
    Some(live)
}
