//! Processes that escape a hook's process group (`setsid`, or `setpgid` to a group of their
//! own) are out of reach of the group kill. With [`reap_escaped_hook_processes`] this process
//! becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`): an escaped process whose parent exits is
//! re-parented here instead of to init, and [`sweep`] — run after every hook process ends —
//! kills and reaps each such child.
//!
//! Why a subreaper and not a cgroup: it needs no privilege and no cgroup delegation, works the
//! same in a container and on a host, and catches a descendant however it detached, as soon as
//! its parent is gone. What it cannot see: an escaped process whose parent is still alive (its
//! hook's group is killed at the end of the run, so the parent dies then and the next sweep
//! takes the orphan), and processes that were started by something else than a hook: the sweep
//! spares this process's own group (berth's other children, such as jq evaluators in
//! `berth up`, stay in it) and the groups of hooks still running.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

static ENABLED: AtomicBool = AtomicBool::new(false);
/// Process groups of the hook processes running now.
static RUNNING: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

/// Rounds of a sweep: each killed process's own orphans come to us next.
const ROUNDS: usize = 64;

/// Makes this process the subreaper of every hook it starts, and every hook end sweep away the
/// processes that escaped its group. Call once at start, before hooks run.
pub fn reap_escaped_hook_processes() -> Result<(), String> {
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| format!("cannot become a child subreaper: {e}"))?;
    ENABLED.store(true, Ordering::SeqCst);
    Ok(())
}

/// A hook process group, registered while it runs so a sweep leaves it alone.
pub(crate) struct Running(i32);

/// Spawns a hook process that leads its own group (`process_group(0)`) and registers the group,
/// under the lock a sweep holds while it picks its victims: no sweep can mistake the new
/// process for an escaped one.
pub(crate) fn spawn_registered(
    command: &mut tokio::process::Command,
) -> std::io::Result<(tokio::process::Child, Option<Running>)> {
    let mut set = running();
    let child = command.spawn()?;
    let registered = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(|pgid| {
            set.get_or_insert_with(HashSet::new).insert(pgid);
            Running(pgid)
        });
    Ok((child, registered))
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(set) = running().as_mut() {
            set.remove(&self.0);
        }
    }
}

fn running() -> std::sync::MutexGuard<'static, Option<HashSet<i32>>> {
    RUNNING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Kills and reaps this process's children that left their hook's group: children outside
/// this process's own group and outside every running hook's group. Returns how many.
pub(crate) async fn sweep(hook: &str) -> usize {
    if !ENABLED.load(Ordering::SeqCst) {
        return 0;
    }
    let me = nix::unistd::getpid().as_raw();
    let own_group = nix::unistd::getpgrp().as_raw();
    let mut swept = 0;
    for _ in 0..ROUNDS {
        let strays: Vec<i32> = {
            // Held while choosing and killing, so a hook spawned meanwhile is registered first.
            let spared = running();
            let strays: Vec<i32> = children(me)
                .into_iter()
                .filter(|(_, pgid)| {
                    *pgid != own_group && !spared.as_ref().is_some_and(|s| s.contains(pgid))
                })
                .map(|(pid, _)| pid)
                .collect();
            for &pid in &strays {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            strays
        };
        if strays.is_empty() {
            break;
        }
        // They are our children now: reap them (by pid, never another child's status).
        let reaped = tokio::task::spawn_blocking(move || {
            for pid in &strays {
                let _ = nix::sys::wait::waitpid(Pid::from_raw(*pid), None);
            }
            strays.len()
        })
        .await
        .unwrap_or(0);
        swept += reaped;
    }
    if swept > 0 {
        tracing::warn!(hook.name = %hook, processes = swept, "killed processes that escaped a hook's process group");
    }
    swept
}

/// `(pid, process group)` of every child of `parent`, from `/proc`.
fn children(parent: i32) -> Vec<(i32, i32)> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses.
            let (_, rest) = stat.rsplit_once(')')?;
            let mut fields = rest.split_whitespace();
            let _state = fields.next()?;
            let ppid: i32 = fields.next()?.parse().ok()?;
            let pgrp: i32 = fields.next()?.parse().ok()?;
            (ppid == parent).then_some((pid, pgrp))
        })
        .collect()
}
