//! A cgroup per hook run: `berth/<principal>/<run>` under this process's own cgroup, in the
//! unified (v2) hierarchy where it has the controllers, else in the v1 `pids`, `memory` and
//! `cpu` hierarchies. A run ends with `cgroup.kill` (v2); in v1, with its forks refused
//! (`pids.max` 0) and every listed process killed until none is left. Only a run no pids
//! controller holds also enters the unified hierarchy without controllers (for its
//! `cgroup.kill`) or else a v1 `freezer` (frozen, killed, thawed): each hierarchy costs every
//! run a directory made, entered and removed.
//!
//! Hand-written because no maintained crate does this small part: cgroups-rs manages whole
//! hierarchies (and pulls in much more), and none handles the hybrid layout.

use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Limits, display_bytes};

/// The controllers berth uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Controller {
    Pids,
    Memory,
    Cpu,
    Freezer,
}

impl Controller {
    const LIMITS: [Controller; 3] = [Controller::Pids, Controller::Memory, Controller::Cpu];

    fn name(self) -> &'static str {
        match self {
            Controller::Pids => "pids",
            Controller::Memory => "memory",
            Controller::Cpu => "cpu",
            Controller::Freezer => "freezer",
        }
    }
}

/// berth's part of the unified hierarchy: `<own>/berth`.
#[derive(Debug)]
struct V2 {
    base: PathBuf,
    /// The limit controllers enabled for berth's cgroups.
    controllers: Vec<Controller>,
    /// The kernel has `cgroup.kill` (5.14).
    kill: bool,
}

/// berth's part of one v1 hierarchy: `<own>/berth`.
#[derive(Debug)]
struct V1 {
    controller: Controller,
    base: PathBuf,
}

/// Where this process makes its runs' cgroups.
#[derive(Debug)]
pub(crate) struct Tree {
    v2: Option<V2>,
    v1: Vec<V1>,
}

/// One mounted cgroup hierarchy: its root (as the mount shows it) and mount point.
#[derive(Debug)]
struct Mounted {
    root: String,
    point: PathBuf,
    /// v1: the controllers of the hierarchy; v2: empty.
    controllers: Vec<String>,
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let n = (bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0');
            out.push(n);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroup mounts of `/proc/self/mountinfo`: (v2 mounts, v1 mounts).
fn mounts(mountinfo: &str) -> (Vec<Mounted>, Vec<Mounted>) {
    let (mut v2, mut v1) = (Vec::new(), Vec::new());
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let fields: Vec<&str> = left.split(' ').collect();
        let theirs: Vec<&str> = right.split(' ').collect();
        let (Some(root), Some(point), Some(fstype)) =
            (fields.get(3), fields.get(4), theirs.first())
        else {
            continue;
        };
        let mounted = |controllers| Mounted {
            root: unescape(root),
            point: PathBuf::from(unescape(point)),
            controllers,
        };
        match *fstype {
            "cgroup2" => v2.push(mounted(vec![])),
            "cgroup" => {
                let options = theirs.get(2).copied().unwrap_or_default();
                v1.push(mounted(options.split(',').map(str::to_owned).collect()));
            }
            _ => {}
        }
    }
    (v2, v1)
}

/// This process's cgroup paths from `/proc/self/cgroup`: (v2 path, [(v1 controllers, path)]).
fn own_paths(text: &str) -> (Option<String>, Vec<(Vec<String>, String)>) {
    let (mut v2, mut v1) = (None, Vec::new());
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_owned());
        } else {
            v1.push((
                controllers.split(',').map(str::to_owned).collect(),
                path.to_owned(),
            ));
        }
    }
    (v2, v1)
}

/// The directory of `own` (a path in the hierarchy) under `mount`, if the mount shows it.
fn own_dir(mount: &Mounted, own: &str) -> Option<PathBuf> {
    let rel = if mount.root == "/" {
        own.strip_prefix('/')?
    } else {
        own.strip_prefix(mount.root.as_str())?
            .trim_start_matches('/')
    };
    Some(if rel.is_empty() {
        mount.point.clone()
    } else {
        mount.point.join(rel)
    })
}

fn mkdir(path: &Path) -> std::io::Result<()> {
    match std::fs::create_dir(path) {
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}

/// Writes `value` to a cgroup file (which always exists: never created).
fn write(path: &Path, value: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)?
        .write_all(value.as_bytes())
}

/// The number after `key` in a flat-keyed cgroup file (`oom_kill 3`).
fn keyed(path: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

impl Tree {
    /// Finds where this process may make cgroups, and makes `berth` there. An error says why
    /// there is no usable hierarchy.
    pub(crate) fn discover() -> Result<Tree, String> {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("/proc/self/mountinfo: {e}"))?;
        let cgroup = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
        let (v2_mounts, v1_mounts) = mounts(&mountinfo);
        let (v2_own, v1_own) = own_paths(&cgroup);
        let mut reasons = Vec::new();
        let v2 = match (v2_own, v2_mounts.first()) {
            (Some(own), Some(_)) => {
                let dir = v2_mounts.iter().find_map(|m| own_dir(m, &own));
                match dir.map(|d| V2::set_up(&d)) {
                    Some(Ok(v2)) => Some(v2),
                    Some(Err(e)) => {
                        reasons.push(format!("cgroup v2: {e}"));
                        None
                    }
                    None => None,
                }
            }
            _ => None,
        };
        let covered = |c: Controller| v2.as_ref().is_some_and(|v| v.controllers.contains(&c));
        let mut v1 = Vec::new();
        let mut wanted: Vec<Controller> = Controller::LIMITS
            .into_iter()
            .filter(|c| !covered(*c))
            .collect();
        wanted.push(Controller::Freezer);
        for controller in wanted {
            let name = controller.name();
            let Some(mount) = v1_mounts
                .iter()
                .find(|m| m.controllers.iter().any(|c| c == name))
            else {
                continue;
            };
            let Some(own) = v1_own
                .iter()
                .find(|(cs, _)| cs.iter().any(|c| c == name))
                .and_then(|(_, path)| own_dir(mount, path))
            else {
                continue;
            };
            let base = own.join("berth");
            match mkdir(&base) {
                Ok(()) => v1.push(V1 { controller, base }),
                Err(e) => reasons.push(format!("{}: {e}", base.display())),
            }
        }
        // A run held by a pids controller is killed by refusing its forks (`pids.max` 0) and
        // killing what is listed: nothing can appear meanwhile, so that ends it as surely as
        // freezing it first, and costs no hierarchy more per run. Only without one does a
        // run also enter the unified hierarchy (for `cgroup.kill`) or a freezer.
        let pids_held =
            covered(Controller::Pids) || v1.iter().any(|h| h.controller == Controller::Pids);
        let mut v2 = v2;
        if pids_held
            && v2.as_ref().is_some_and(|v| v.controllers.is_empty())
            && let Some(unused) = v2.take()
        {
            let _ = std::fs::remove_dir(&unused.base);
        }
        if pids_held || v2.as_ref().is_some_and(|v| v.kill) {
            v1.retain(|h| {
                let keep = h.controller != Controller::Freezer;
                if !keep {
                    let _ = std::fs::remove_dir(&h.base);
                }
                keep
            });
        }
        let limits = v1.iter().any(|h| h.controller != Controller::Freezer)
            || v2.as_ref().is_some_and(|v| !v.controllers.is_empty());
        if v2.is_none() && !limits {
            if reasons.is_empty() {
                reasons.push("no cgroup hierarchy with pids, memory or cpu is mounted".into());
            }
            return Err(reasons.join("; "));
        }
        Ok(Tree { v2, v1 })
    }

    /// One line for the start-up log: which hierarchy serves what.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(v2) = &self.v2 {
            let names: Vec<&str> = v2.controllers.iter().map(|c| c.name()).collect();
            parts.push(format!(
                "v2 {} ({}{})",
                v2.base.display(),
                if names.is_empty() {
                    "no controllers".to_owned()
                } else {
                    names.join(", ")
                },
                if v2.kill {
                    "; killed with cgroup.kill"
                } else {
                    ""
                }
            ));
        }
        for h in &self.v1 {
            parts.push(format!("v1 {} {}", h.controller.name(), h.base.display()));
        }
        let missing: Vec<&str> = Controller::LIMITS
            .into_iter()
            .filter(|c| !self.has(*c))
            .map(Controller::name)
            .collect();
        let mut text = parts.join(", ");
        if !missing.is_empty() {
            text.push_str(&format!(
                "; without {}: rlimits stand in where they can",
                missing.join(", ")
            ));
        }
        text
    }

    fn has(&self, c: Controller) -> bool {
        self.v2.as_ref().is_some_and(|v| v.controllers.contains(&c))
            || self.v1.iter().any(|h| h.controller == c)
    }

    /// Makes the cgroup of one run of `principal` with `limits`.
    pub(crate) fn create(&self, principal: u32, limits: &Limits) -> std::io::Result<RunCgroup> {
        static RUNS: AtomicU64 = AtomicU64::new(0);
        let run = format!(
            "{}-{}",
            std::process::id(),
            RUNS.fetch_add(1, Ordering::Relaxed)
        );
        let mut cgroup = RunCgroup {
            dirs: Vec::new(),
            processes: self.has(Controller::Pids).then_some(limits.processes),
            memory: self.has(Controller::Memory).then_some(limits.memory_bytes),
            removed: false,
        };
        // The principal's removal on another worker of this host may remove its (empty)
        // directory between our mkdir of it and of the run's: try again then.
        let mut attempt = 0;
        loop {
            match self.make_dirs(&mut cgroup, principal, &run, limits) {
                Ok(()) => return Ok(cgroup),
                Err(e) if e.kind() == ErrorKind::NotFound && attempt < 3 => {
                    cgroup.remove_dirs();
                    cgroup.dirs.clear();
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Removes `principal`'s (empty) directories, once its package is removed.
    pub(crate) fn forget(&self, principal: u32) {
        let bases = self
            .v2
            .iter()
            .map(|v| &v.base)
            .chain(self.v1.iter().map(|h| &h.base));
        for base in bases {
            // Busy while a run of the principal is in it (another worker's removal raced):
            // the next removal takes it.
            let _ = std::fs::remove_dir(base.join(principal.to_string()));
        }
    }

    fn make_dirs(
        &self,
        cgroup: &mut RunCgroup,
        principal: u32,
        run: &str,
        limits: &Limits,
    ) -> std::io::Result<()> {
        let named = |path: &Path| {
            let path = path.to_path_buf();
            move |e: std::io::Error| {
                std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))
            }
        };
        if let Some(v2) = &self.v2 {
            let principal_dir = v2.base.join(principal.to_string());
            mkdir(&principal_dir).map_err(named(&principal_dir))?;
            if !v2.controllers.is_empty() {
                let enable: Vec<String> = v2
                    .controllers
                    .iter()
                    .map(|c| format!("+{}", c.name()))
                    .collect();
                let control = principal_dir.join("cgroup.subtree_control");
                write(&control, &enable.join(" ")).map_err(named(&control))?;
            }
            let dir = principal_dir.join(run);
            std::fs::create_dir(&dir).map_err(named(&dir))?;
            cgroup.dirs.push(Dir {
                path: dir.clone(),
                v2: true,
                controller: None,
                kill: v2.kill,
            });
            for c in &v2.controllers {
                match c {
                    Controller::Pids => {
                        write_limit(&dir, "pids.max", &limits.processes.to_string())?
                    }
                    Controller::Memory => {
                        write_limit(&dir, "memory.max", &limits.memory_bytes.to_string())?;
                        // No swap: the limit is the memory the run may use, all of it.
                        optional(write_limit(&dir, "memory.swap.max", "0"))?;
                    }
                    Controller::Cpu => write_limit(
                        &dir,
                        "cpu.max",
                        &format!("{} {CPU_PERIOD_US}", cpu_quota_us(limits)),
                    )?,
                    Controller::Freezer => {}
                }
            }
        }
        for h in &self.v1 {
            let principal_dir = h.base.join(principal.to_string());
            mkdir(&principal_dir).map_err(named(&principal_dir))?;
            let dir = principal_dir.join(run);
            std::fs::create_dir(&dir).map_err(named(&dir))?;
            cgroup.dirs.push(Dir {
                path: dir.clone(),
                v2: false,
                controller: Some(h.controller),
                kill: false,
            });
            match h.controller {
                Controller::Pids => write_limit(&dir, "pids.max", &limits.processes.to_string())?,
                Controller::Memory => {
                    let bytes = limits.memory_bytes.to_string();
                    write_limit(&dir, "memory.limit_in_bytes", &bytes)?;
                    // Memory and swap together (where swap is accounted): no escape to swap.
                    optional(write_limit(&dir, "memory.memsw.limit_in_bytes", &bytes))?;
                }
                Controller::Cpu => {
                    // A hierarchy without CFS bandwidth control has neither file.
                    optional(write_limit(
                        &dir,
                        "cpu.cfs_period_us",
                        &CPU_PERIOD_US.to_string(),
                    ))?;
                    optional(write_limit(
                        &dir,
                        "cpu.cfs_quota_us",
                        &cpu_quota_us(limits).to_string(),
                    ))?;
                }
                Controller::Freezer => {}
            }
        }
        Ok(())
    }
}

/// The CFS period berth's CPU limits use (the kernel's default).
const CPU_PERIOD_US: u64 = 100_000;

/// A run's CPU quota per [`CPU_PERIOD_US`]: `cpu_millis` thousandths of the period, at least
/// the kernel's minimum of 1 ms.
fn cpu_quota_us(limits: &Limits) -> u64 {
    (u64::from(limits.cpu_millis) * CPU_PERIOD_US / 1000).max(1000)
}

fn write_limit(dir: &Path, file: &str, value: &str) -> std::io::Result<()> {
    let path = dir.join(file);
    write(&path, value).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("setting {} to {value}: {e}", path.display()),
        )
    })
}

/// A file the kernel may not offer (no swap accounting, no CFS bandwidth) is skipped.
fn optional(result: std::io::Result<()>) -> std::io::Result<()> {
    match result {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

impl V2 {
    /// Makes `<own>/berth` and enables the limit controllers `own` offers for it.
    fn set_up(own: &Path) -> Result<V2, String> {
        let base = own.join("berth");
        mkdir(&base).map_err(|e| format!("{}: {e}", base.display()))?;
        let offered = std::fs::read_to_string(own.join("cgroup.controllers")).unwrap_or_default();
        let mut controllers = Vec::new();
        for c in Controller::LIMITS {
            if !offered.split_whitespace().any(|o| o == c.name()) {
                continue;
            }
            let enable = format!("+{}", c.name());
            let mut enabled = write(&own.join("cgroup.subtree_control"), &enable);
            if matches!(&enabled, Err(e) if e.raw_os_error() == Some(libc::EBUSY))
                && move_self_to_leaf(own).is_ok()
            {
                enabled = write(&own.join("cgroup.subtree_control"), &enable);
            }
            if enabled.is_ok() && write(&base.join("cgroup.subtree_control"), &enable).is_ok() {
                controllers.push(c);
            }
        }
        let kill = base.join("cgroup.kill").exists();
        Ok(V2 {
            base,
            controllers,
            kill,
        })
    }
}

/// cgroup v2 enables controllers for a cgroup's children only while it holds no process
/// itself. When this process is alone in its cgroup (a container's worker), it moves into a
/// leaf of its own, `<own>/berth-worker`, so its cgroup can delegate. With company, nothing
/// moves (the controllers then stay off).
fn move_self_to_leaf(own: &Path) -> std::io::Result<()> {
    let procs = std::fs::read_to_string(own.join("cgroup.procs"))?;
    let me = std::process::id().to_string();
    if procs.lines().any(|p| p.trim() != me) {
        return Err(std::io::Error::other("other processes share the cgroup"));
    }
    let leaf = own.join("berth-worker");
    mkdir(&leaf)?;
    write(&leaf.join("cgroup.procs"), &me)
}

/// One directory of a run's cgroup (one per hierarchy).
#[derive(Debug)]
struct Dir {
    path: PathBuf,
    v2: bool,
    /// v1: the hierarchy's controller.
    controller: Option<Controller>,
    /// v2 with `cgroup.kill`.
    kill: bool,
}

/// A limit a run reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LimitHit {
    /// A fork was refused at the process limit.
    Processes(u32),
    /// The kernel killed a process of the run at the memory limit.
    Memory(u64),
}

impl LimitHit {
    /// `limits.processes` or `limits.memory`, as package.yaml names it.
    pub(crate) fn field(self) -> &'static str {
        match self {
            LimitHit::Processes(_) => "processes",
            LimitHit::Memory(_) => "memory",
        }
    }
}

impl std::fmt::Display for LimitHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LimitHit::Processes(n) => write!(f, "process limit ({n} processes)"),
            LimitHit::Memory(bytes) => write!(f, "memory limit ({})", display_bytes(*bytes)),
        }
    }
}

/// The cgroup of one run: made before the hook starts, emptied and removed after it ends
/// (or, if the run is abandoned, when dropped).
#[derive(Debug)]
pub(crate) struct RunCgroup {
    dirs: Vec<Dir>,
    /// The limits enforced by a controller (the others stand in as rlimits).
    processes: Option<u32>,
    memory: Option<u64>,
    removed: bool,
}

/// How often an emptying cgroup is looked at. There is no event to wait on that works the
/// same in both versions.
const POLL: Duration = Duration::from_millis(2);

impl RunCgroup {
    /// The `cgroup.procs` files the hook writes itself into.
    pub(crate) fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs
            .iter()
            .map(|d| d.path.join("cgroup.procs"))
            .collect()
    }

    /// Whether a controller enforces the process limit.
    pub(crate) fn limits_processes(&self) -> bool {
        self.processes.is_some()
    }

    /// Whether a controller enforces the memory limit.
    pub(crate) fn limits_memory(&self) -> bool {
        self.memory.is_some()
    }

    /// The directory whose `cgroup.procs` lists the run's processes.
    fn listing(&self) -> Option<&Dir> {
        self.dirs
            .iter()
            .find(|d| d.v2)
            .or_else(|| self.dirs.first())
    }

    /// Whether any process of the run is left (zombies are not).
    pub(crate) fn populated(&self) -> bool {
        let Some(dir) = self.listing() else {
            return false;
        };
        if dir.v2 {
            return keyed(&dir.path.join("cgroup.events"), "populated") != Some(0);
        }
        std::fs::read_to_string(dir.path.join("cgroup.procs"))
            .map(|t| !t.trim().is_empty())
            .unwrap_or(false)
    }

    /// Waits until the run has no process left, or `deadline`; whether it emptied.
    // Runs on a blocking thread (the sandbox's `end` is spawn_blocking'd; the hooks' process
    // code never calls it on the runtime), where polling the cgroup with a short sleep is right.
    #[allow(clippy::disallowed_methods)]
    pub(crate) fn wait_empty(&self, deadline: Instant) -> bool {
        loop {
            if !self.populated() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Kills every process of the run, whatever group or session it is in, and waits (until
    /// `deadline`) for none to be left: `cgroup.kill` (v2); else freeze, kill, thaw (v1
    /// freezer); else kill what is listed until nothing is, with forks refused meanwhile.
    /// Whether the run emptied.
    // Runs on a blocking thread (the sandbox's `end` is spawn_blocking'd; the hooks' process
    // code never calls it on the runtime), where polling the cgroup with a short sleep is right.
    #[allow(clippy::disallowed_methods)]
    pub(crate) fn kill(&self, deadline: Instant) -> bool {
        if let Some(dir) = self.dirs.iter().find(|d| d.kill)
            && write(&dir.path.join("cgroup.kill"), "1").is_ok()
        {
            return self.wait_empty(deadline);
        }
        // No more forks: a fork bomb cannot outrun the killing.
        for dir in &self.dirs {
            if dir.v2 || dir.controller == Some(Controller::Pids) {
                let _ = write(&dir.path.join("pids.max"), "0");
            }
        }
        if let Some(freezer) = self
            .dirs
            .iter()
            .find(|d| d.controller == Some(Controller::Freezer))
        {
            let state = freezer.path.join("freezer.state");
            if write(&state, "FROZEN").is_ok() {
                while std::fs::read_to_string(&state).is_ok_and(|s| s.trim() != "FROZEN")
                    && Instant::now() < deadline
                {
                    std::thread::sleep(POLL);
                }
                signal_listed(&freezer.path);
                let _ = write(&state, "THAWED");
            }
        }
        loop {
            if !self.populated() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            if let Some(dir) = self.listing() {
                signal_listed(&dir.path);
            }
            std::thread::sleep(POLL);
        }
    }

    /// The limits the run reached (read before [`RunCgroup::remove`]).
    pub(crate) fn hits(&self) -> Vec<LimitHit> {
        let mut hits = Vec::new();
        if let Some(n) = self.processes {
            let refused = self
                .dirs
                .iter()
                .filter(|d| d.v2 || d.controller == Some(Controller::Pids))
                .any(|d| keyed(&d.path.join("pids.events"), "max").is_some_and(|c| c > 0));
            if refused {
                hits.push(LimitHit::Processes(n));
            }
        }
        if let Some(bytes) = self.memory {
            let killed = self.dirs.iter().any(|d| {
                let file = if d.v2 {
                    "memory.events"
                } else if d.controller == Some(Controller::Memory) {
                    "memory.oom_control"
                } else {
                    return false;
                };
                keyed(&d.path.join(file), "oom_kill").is_some_and(|c| c > 0)
            });
            if killed {
                hits.push(LimitHit::Memory(bytes));
            }
        }
        hits
    }

    /// Removes the run's directories.
    pub(crate) fn remove(mut self) {
        self.remove_dirs();
        self.removed = true;
    }

    // Runs on a blocking thread (the sandbox's `end` is spawn_blocking'd; the hooks' process
    // code never calls it on the runtime), where polling the cgroup with a short sleep is right.
    #[allow(clippy::disallowed_methods)]
    fn remove_dirs(&mut self) {
        for dir in &self.dirs {
            // A process that just died may hold the cgroup a moment longer.
            let mut tries = 0;
            loop {
                match std::fs::remove_dir(&dir.path) {
                    Ok(()) => break,
                    Err(e) if e.kind() == ErrorKind::NotFound => break,
                    Err(e) if tries < 50 => {
                        let _ = e;
                        tries += 1;
                        std::thread::sleep(POLL);
                    }
                    Err(error) => {
                        tracing::warn!(cgroup = %dir.path.display(), %error, "removing a hook run's cgroup failed");
                        break;
                    }
                }
            }
        }
        // The principal's directories stay for its next runs (making a memory cgroup is
        // among the dearer steps of a run); they go when the package is removed
        // (`Tree::forget`).
    }
}

impl Drop for RunCgroup {
    /// An abandoned run (its future dropped): end what is left of it, without waiting long.
    fn drop(&mut self) {
        if !self.removed {
            self.kill(Instant::now() + Duration::from_millis(200));
            self.remove_dirs();
        }
    }
}

/// SIGKILL to every process `dir/cgroup.procs` lists.
fn signal_listed(dir: &Path) {
    let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,nosuid shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw
35 30 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:14 - cgroup cgroup rw,cpu,cpuacct
36 30 0:32 / /sys/fs/cgroup/memory rw,nosuid shared:15 - cgroup cgroup rw,memory
37 30 0:33 /ns /sys/fs/cgroup/my\\040pids rw shared:16 - cgroup cgroup rw,pids
";

    #[test]
    fn mounts_and_own_paths_give_this_process_directories() {
        let (v2, v1) = mounts(MOUNTINFO);
        assert_eq!(v2.len(), 1);
        assert_eq!(v2[0].point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(v1.len(), 3);
        assert!(v1[0].controllers.contains(&"cpu".to_owned()));
        assert_eq!(v1[2].point, PathBuf::from("/sys/fs/cgroup/my pids"));
        let (own2, own1) = own_paths("4:memory:/jobs/a\n3:cpu,cpuacct:/\n2:pids:/ns/x\n0::/\n");
        assert_eq!(own2.as_deref(), Some("/"));
        assert_eq!(own_dir(&v2[0], "/").unwrap(), v2[0].point);
        assert_eq!(
            own_dir(&v1[1], &own1[0].1).unwrap(),
            PathBuf::from("/sys/fs/cgroup/memory/jobs/a")
        );
        // A hierarchy mounted from /ns shows /ns/x at its mount point's x.
        assert_eq!(
            own_dir(&v1[2], "/ns/x").unwrap(),
            PathBuf::from("/sys/fs/cgroup/my pids/x")
        );
        assert_eq!(own_dir(&v1[2], "/elsewhere"), None);
    }

    #[test]
    fn cpu_quotas_are_thousandths_of_the_period() {
        let mut limits = Limits::default();
        assert_eq!(cpu_quota_us(&limits), 100_000);
        limits.cpu_millis = 250;
        assert_eq!(cpu_quota_us(&limits), 25_000);
        limits.cpu_millis = 1;
        assert_eq!(cpu_quota_us(&limits), 1000, "the kernel's minimum");
    }
}
