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

use std::collections::{HashMap, HashSet};
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

/// Processes seen by an earlier sweep that do not descend from this process, by pid, with the
/// inode number of their `/proc/<pid>` directory. Such a process can never become our child
/// (an orphan is re-parented to a subreaper among its ancestors, and a process gains no
/// ancestors), so a sweep does not read its `stat` again: on a host with a few hundred
/// processes, reading every one's `stat` after every hook was most of what a worker's kernel
/// time went to. The inode tells a process from a later one given the same pid: procfs gives
/// each `/proc/<pid>` it instantiates a new inode number (and drops it when the process dies),
/// so a reused pid, or an evicted entry, reads as new and is read again.
static NOT_DESCENDANTS: Mutex<Option<HashMap<i32, u64>>> = Mutex::new(None);

/// The `/proc` inode number a directory entry gets when procfs could not instantiate it; it
/// identifies nothing.
const UNKNOWN_INO: u64 = 1;

/// This process's children as (pid, process group), from `/proc`.
fn children(me: i32) -> Vec<(i32, i32)> {
    use std::os::unix::fs::DirEntryExt as _;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    let mut remembered = NOT_DESCENDANTS.lock().unwrap_or_else(|p| p.into_inner());
    let known = remembered.take().unwrap_or_default();
    let mut still = HashMap::with_capacity(known.len());
    let mut read = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let ino = entry.ino();
        if ino != UNKNOWN_INO && known.get(&pid) == Some(&ino) {
            still.insert(pid, ino);
            continue;
        }
        if let Some((ppid, pgrp)) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .as_deref()
            .and_then(parse_stat)
        {
            read.push(Process {
                pid,
                ppid,
                pgrp,
                ino,
            });
        }
    }
    for p in not_descendants(me, &read, &still) {
        still.insert(p.pid, p.ino);
    }
    *remembered = Some(still);
    read.iter()
        .filter(|p| p.ppid == me)
        .map(|p| (p.pid, p.pgrp))
        .collect()
}

/// One process as read from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Process {
    pid: i32,
    ppid: i32,
    pgrp: i32,
    ino: u64,
}

/// (ppid, pgrp) from the text of `/proc/<pid>/stat`: "pid (comm) state ppid pgrp ...", where
/// comm may hold spaces and parentheses.
fn parse_stat(stat: &str) -> Option<(i32, i32)> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let _state = fields.next()?;
    let ppid: i32 = fields.next()?.parse().ok()?;
    let pgrp: i32 = fields.next()?.parse().ok()?;
    Some((ppid, pgrp))
}

/// The processes of `read` that provably do not descend from `me`: their parent chain ends at
/// pid 0 (the kernel's) or at a process known not to descend from `me` (`known`, when that pid
/// was not read again now) without passing `me`. A
/// process whose parent was not seen (it died, and the process is being re-parented) is not
/// provably anything, so it is read again next time; so are `me`'s descendants.
fn not_descendants<'a>(
    me: i32,
    read: &'a [Process],
    known: &HashMap<i32, u64>,
) -> Vec<&'a Process> {
    let by_pid: HashMap<i32, &Process> = read.iter().map(|p| (p.pid, p)).collect();
    // Memoised walk up the parent chain; chains are short.
    let mut verdict: HashMap<i32, bool> = HashMap::new();
    fn outside(
        pid: i32,
        me: i32,
        by_pid: &HashMap<i32, &Process>,
        known: &HashMap<i32, u64>,
        verdict: &mut HashMap<i32, bool>,
        depth: usize,
    ) -> bool {
        if pid == me {
            return false;
        }
        if pid == 0 {
            return true;
        }
        if let Some(v) = verdict.get(&pid) {
            return *v;
        }
        // What was read now is what that pid is now; `known` holds what was read before.
        let v = match by_pid.get(&pid) {
            // A cycle cannot happen, but pids read under racing forks must not recurse without
            // end.
            Some(p) if depth < 4096 => outside(p.ppid, me, by_pid, known, verdict, depth + 1),
            Some(_) => false,
            None => known.contains_key(&pid),
        };
        verdict.insert(pid, v);
        v
    }
    read.iter()
        .filter(|p| p.ino != UNKNOWN_INO && outside(p.pid, me, &by_pid, known, &mut verdict, 0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32) -> Process {
        Process {
            pid,
            ppid,
            pgrp: pid,
            ino: 1000 + pid as u64,
        }
    }

    fn outside(me: i32, read: &[Process], known: &[i32]) -> Vec<i32> {
        let known = known.iter().map(|&k| (k, 7)).collect();
        let mut pids: Vec<i32> = not_descendants(me, read, &known)
            .into_iter()
            .map(|p| p.pid)
            .collect();
        pids.sort_unstable();
        pids
    }

    #[test]
    fn only_processes_whose_ancestry_misses_this_one_are_remembered() {
        // init(1) ← me(50) ← hook(60) ← its child(61); init ← postgres(20) ← backend(21);
        // kthreadd(2) ← kworker(3).
        let read = [
            p(1, 0),
            p(2, 0),
            p(3, 2),
            p(20, 1),
            p(21, 20),
            p(50, 1),
            p(60, 50),
            p(61, 60),
        ];
        assert_eq!(outside(50, &read, &[]), [1, 2, 3, 20, 21]);
    }

    #[test]
    fn a_process_under_one_remembered_is_outside_and_one_whose_parent_is_gone_is_not() {
        // 30's parent 20 was remembered earlier and not read again; 40's parent 39 is gone
        // (40 is being re-parented, maybe to us).
        let read = [p(30, 20), p(40, 39)];
        assert_eq!(outside(50, &read, &[20]), [30]);
    }

    #[test]
    fn a_pid_read_again_counts_as_what_it_is_now() {
        // 20 was remembered as outside, but the pid now belongs to a hook's child.
        let read = [p(20, 60), p(60, 50), p(21, 20)];
        assert_eq!(outside(50, &read, &[20]), Vec::<i32>::new());
    }

    #[test]
    fn stat_lines_give_parent_and_group_even_with_parentheses_in_the_name() {
        assert_eq!(
            parse_stat("4242 (a (weird) name) S 17 4242 4242 0 -1"),
            Some((17, 4242))
        );
        assert_eq!(parse_stat("garbage"), None);
    }
}
