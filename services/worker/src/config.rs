//! What a worker needs to run berth's tasks: where the other services are and its local limits.

use std::path::PathBuf;
use std::time::Duration;

/// Where a worker finds the other services, and its local limits.
#[derive(Clone, Debug)]
pub struct TaskConfig {
    pub lifecycle_endpoint: String,
    pub release_endpoint: String,
    pub hookevent_endpoint: String,
    /// Package cache of this worker (`<data-dir>/packages`): `<key>/<repository id>/<version>`,
    /// so each instance has its own copy (Cleanup deletes `<key>`), and two repositories never
    /// share an entry.
    pub cache_dir: PathBuf,
    /// The repositories a spec may name (lifecycle checked the Update against the same
    /// configuration); a name this worker does not know fails the package.
    pub repositories: std::sync::Arc<berth_package::Repositories>,
    /// Longest a hook may run before its process group is killed.
    pub hook_timeout: Duration,
    /// Longest a Run waits for the release to become ready before it fails (and is retried).
    pub ready_timeout: Duration,
    /// Where each hook run's temporary files (binding context, values, output files) go;
    /// `None` = the system temp directory. Creating them is most of a hook's start overhead on
    /// a disk file system, so a tmpfs (an `emptyDir` with `medium: Memory`) is the place.
    pub hook_tmp_dir: Option<PathBuf>,
    /// The worker's identity towards the broker, lifecycle, release and hookevent (mutual
    /// TLS); `None`: plain gRPC.
    pub tls: Option<berth_runtime::Tls>,
    /// The most a package may declare in package.yaml `limits:`.
    pub hook_limit_caps: LimitCaps,
}

/// The most a package may declare in package.yaml `limits:` on this worker
/// (`--hook-max-*`); a package declaring more fails, naming the field and the cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitCaps {
    pub processes: u32,
    pub memory_bytes: u64,
    pub cpu_millis: u32,
}

impl Default for LimitCaps {
    /// 4,096 processes, 4 GiB, 4 CPUs.
    fn default() -> Self {
        LimitCaps {
            processes: 4096,
            memory_bytes: 4 << 30,
            cpu_millis: 4000,
        }
    }
}

impl LimitCaps {
    /// The package's limits as the hooks' sandbox takes them, or why they exceed a cap.
    pub fn check(&self, limits: &berth_package::HookLimits) -> Result<berth_hooks::Limits, String> {
        let over = |field: &str, declared: String, flag: &str, cap: String| {
            Err(format!(
                "package.yaml limits.{field} {declared} exceeds this worker's --hook-max-{flag} {cap}"
            ))
        };
        if limits.processes > self.processes {
            return over(
                "processes",
                limits.processes.to_string(),
                "processes",
                self.processes.to_string(),
            );
        }
        if limits.memory_bytes > self.memory_bytes {
            return over(
                "memory",
                berth_hooks::isolation::display_bytes(limits.memory_bytes),
                "memory",
                berth_hooks::isolation::display_bytes(self.memory_bytes),
            );
        }
        if limits.cpu_millis > self.cpu_millis {
            return over(
                "cpu",
                format!("{}m", limits.cpu_millis),
                "cpu",
                format!("{}m", self.cpu_millis),
            );
        }
        Ok(berth_hooks::Limits {
            processes: limits.processes,
            memory_bytes: limits.memory_bytes,
            cpu_millis: limits.cpu_millis,
        })
    }
}

/// `--hook-uids`: a range, or `None` for `off`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HookUids(pub Option<berth_hooks::UidRange>);

impl HookUids {
    fn parse(text: &str) -> Result<HookUids, String> {
        berth_hooks::UidRange::parse(text).map(HookUids)
    }
}

/// How hooks are confined: the flags `berth-queue work` and `berth up` share.
#[derive(clap::Args, Clone, Debug)]
pub struct HookIsolationArgs {
    /// The uids hooks run as, `BASE-LAST`: a package instance's hooks run as uid = gid =
    /// BASE + its principal number (lifecycle gives each instance one), without supplementary
    /// groups, each run in a cgroup of its own and, where the kernel has Landlock, reading
    /// only its package and the system's files and writing only its run directory. Needs
    /// root. `off`: hooks run as berth's own user, unconfined (as root: root). A worker that
    /// is not root always runs hooks as itself, unconfined, and says so at start.
    #[arg(long, env = "BERTH_HOOK_UIDS", default_value = "2000000-2065535", value_parser = HookUids::parse)]
    pub hook_uids: HookUids,
    /// The most processes a package may declare per hook run (package.yaml limits.processes).
    #[arg(long, env = "BERTH_HOOK_MAX_PROCESSES", default_value_t = 4096)]
    pub hook_max_processes: u32,
    /// The most memory a package may declare per hook run (limits.memory; e.g. 4Gi).
    #[arg(long, env = "BERTH_HOOK_MAX_MEMORY", default_value = "4Gi", value_parser = berth_package::parse_memory)]
    pub hook_max_memory: u64,
    /// The most CPU a package may declare per hook run (limits.cpu; e.g. 4 or 500m).
    #[arg(long, env = "BERTH_HOOK_MAX_CPU", default_value = "4", value_parser = berth_package::parse_cpu)]
    pub hook_max_cpu: u32,
    /// A directory every confined hook may also read and write (a shared scratch space);
    /// repeatable. Hooks otherwise write only their run directory.
    #[arg(
        long = "hook-writable",
        env = "BERTH_HOOK_WRITABLE",
        value_delimiter = ','
    )]
    pub hook_writable: Vec<PathBuf>,
    /// Replaced by --hook-uids (hooks of each package instance run as a uid of their own).
    #[arg(long, env = "BERTH_HOOK_USER", hide = true)]
    pub hook_user: Option<String>,
}

impl HookIsolationArgs {
    pub fn caps(&self) -> LimitCaps {
        LimitCaps {
            processes: self.hook_max_processes,
            memory_bytes: self.hook_max_memory,
            cpu_millis: self.hook_max_cpu,
        }
    }

    /// Sets up how this process confines hooks (`berth_hooks::isolate_hooks`), with run
    /// directories in `tmp_dir`, after checking that the hooks' users reach `dirs` (flag,
    /// directory): the package cache and the run directories' parent. Logs what it found, once.
    pub fn apply(
        &self,
        tmp_dir: &std::path::Path,
        dirs: &[(&str, &std::path::Path)],
    ) -> Result<(), String> {
        if let Some(user) = &self.hook_user {
            return Err(format!(
                "--hook-user {user}: hooks no longer share one user; each package instance's \
                 run as a uid of its own from --hook-uids BASE-LAST (default \
                 2000000-2065535), or as berth's own user with --hook-uids off"
            ));
        }
        let root = berth_hooks::isolation::running_as_root();
        if let (true, Some(range)) = (root, self.hook_uids.0) {
            // Every uid of the range reaches a directory as "others" (none owns it).
            let stranger = berth_hooks::HookUser {
                uid: range.last(),
                gid: range.last(),
            };
            for (flag, dir) in dirs {
                stranger
                    .check_reachable(dir)
                    .map_err(|e| format!("{flag}: {e}"))?;
            }
        }
        let notes = berth_hooks::isolate_hooks(berth_hooks::Isolation {
            uids: self.hook_uids.0,
            tmp_dir: tmp_dir.to_path_buf(),
            writable: self.hook_writable.clone(),
            helper: None,
        })?;
        for note in notes {
            tracing::info!("{note}");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        isolation: HookIsolationArgs,
    }

    #[test]
    fn a_package_may_declare_up_to_the_workers_caps() {
        let caps = LimitCaps::default();
        let mut limits = berth_package::HookLimits::default();
        assert_eq!(
            caps.check(&limits),
            Ok(berth_hooks::Limits {
                processes: 256,
                memory_bytes: 512 << 20,
                cpu_millis: 1000
            })
        );
        limits.memory_bytes = 8 << 30;
        assert_eq!(
            caps.check(&limits).unwrap_err(),
            "package.yaml limits.memory 8 GiB exceeds this worker's --hook-max-memory 4 GiB"
        );
        limits = berth_package::HookLimits {
            processes: 5000,
            ..Default::default()
        };
        assert!(
            caps.check(&limits)
                .unwrap_err()
                .contains("limits.processes 5000")
        );
    }

    #[test]
    fn hook_uids_default_to_the_documented_range_and_may_be_off() {
        let flags = Flags::parse_from(["worker"]);
        assert_eq!(
            flags.isolation.hook_uids,
            HookUids(Some(berth_hooks::UidRange::DEFAULT))
        );
        assert_eq!(flags.isolation.caps(), LimitCaps::default());
        let off = Flags::parse_from(["worker", "--hook-uids", "off", "--hook-max-cpu", "500m"]);
        assert_eq!(off.isolation.hook_uids, HookUids(None));
        assert_eq!(off.isolation.caps().cpu_millis, 500);
        assert!(Flags::try_parse_from(["worker", "--hook-uids", "10-20"]).is_err());
        // --hook-user is gone: a worker given it refuses to start, naming its successor.
        let old = Flags::parse_from(["worker", "--hook-user", "nobody"]);
        let refused = old
            .isolation
            .apply(std::path::Path::new("/tmp"), &[])
            .unwrap_err();
        assert!(refused.contains("--hook-uids"), "{refused}");
    }
}
