//! Small measuring helpers the benchmark binaries share: percentiles, per-process CPU time and
//! the machine's CPU time by program.

use std::time::Duration;

use anyhow::Context as _;

/// Percentile `p` (0–100) of sorted `d`; zero when empty.
pub fn percentile(d: &[Duration], p: f64) -> Duration {
    if d.is_empty() {
        return Duration::ZERO;
    }
    let i = ((d.len() as f64 - 1.0) * p / 100.0).round() as usize;
    d[i.min(d.len() - 1)]
}

/// The unit of `/proc/PID/stat` times: Linux reports them in USER_HZ, 100 on the architectures
/// berth runs on (x86-64, arm64), whatever the kernel's own tick rate.
const USER_HZ: f64 = 100.0;

/// User + system CPU time of `pid` from `/proc/PID/stat`, plus that of the children it waited
/// for when `children` is set (a worker's hook processes).
pub fn cpu_time(pid: u32, children: bool) -> anyhow::Result<Duration> {
    cpu_of(&stat_fields(pid)?, children)
}

/// The fields of `/proc/PID/stat` after the command name (in parentheses, which may hold
/// spaces): field N of the line is at N - 3.
fn stat_fields(pid: u32) -> anyhow::Result<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat
        .rsplit_once(')')
        .context("/proc stat without a command name")?
        .1;
    Ok(after.split_whitespace().map(str::to_owned).collect())
}

/// [`cpu_time`] from the [`stat_fields`]: utime, stime, cutime and cstime are fields 14–17.
fn cpu_of(fields: &[String], children: bool) -> anyhow::Result<Duration> {
    let last = if children { 15 } else { 13 };
    let ticks: u64 = fields
        .get(11..last)
        .context("short /proc stat")?
        .iter()
        .map(|f| f.parse::<u64>())
        .sum::<Result<_, _>>()?;
    Ok(Duration::from_secs_f64(ticks as f64 / USER_HZ))
}

/// When the process started, from its [`stat_fields`] (field 22, clock ticks since boot): with
/// the pid, it tells one process from a later one that reused the pid.
fn start_of(fields: &[String]) -> anyhow::Result<u64> {
    Ok(fields.get(19).context("short /proc stat")?.parse()?)
}

/// CPU time of every process on the machine by program name (`comm`), children it waited for
/// included, so a run's cost can be shared out between berth, the API server, etcd, PostgreSQL
/// and the hooks. Take one before and one after; [`CpuByProgram::since`] gives the difference.
pub struct CpuByProgram {
    /// pid -> (program, start time, CPU time with waited-for children)
    pids: std::collections::HashMap<u32, (String, u64, Duration)>,
    /// All CPUs' busy time (user, nice, system, irq, softirq, steal) from `/proc/stat`.
    busy: Duration,
}

impl CpuByProgram {
    /// Reads `/proc` now; processes that vanish while it reads are skipped.
    pub fn now() -> anyhow::Result<CpuByProgram> {
        let mut pids = std::collections::HashMap::new();
        for entry in std::fs::read_dir("/proc")? {
            let Some(pid) = entry?
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let (Ok(comm), Ok(fields)) = (
                std::fs::read_to_string(format!("/proc/{pid}/comm")),
                stat_fields(pid),
            ) else {
                continue;
            };
            let (Ok(cpu), Ok(started)) = (cpu_of(&fields, true), start_of(&fields)) else {
                continue;
            };
            pids.insert(pid, (comm.trim().to_owned(), started, cpu));
        }
        let stat = std::fs::read_to_string("/proc/stat")?;
        let cpu = stat.lines().next().context("empty /proc/stat")?;
        // cpu user nice system idle iowait irq softirq steal ...
        let ticks: Vec<u64> = cpu
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        let busy: u64 = [0, 1, 2, 5, 6, 7]
            .iter()
            .filter_map(|&i| ticks.get(i))
            .sum();
        Ok(CpuByProgram {
            pids,
            busy: Duration::from_secs_f64(busy as f64 / USER_HZ),
        })
    }

    /// CPU time each program used between `earlier` and `self`, most first, and the machine's
    /// busy time. A process that exited in between is counted in its parent once waited for.
    pub fn since(&self, earlier: &CpuByProgram) -> (Vec<(String, Duration)>, Duration) {
        let mut by: std::collections::HashMap<&str, Duration> = std::collections::HashMap::new();
        for (pid, (comm, started, cpu)) in &self.pids {
            // The same process (not a reused pid) even if it changed its name since, as kernel
            // workers do with each work item: only its CPU time since counts.
            let before = earlier
                .pids
                .get(pid)
                .filter(|(_, s, _)| s == started)
                .map_or(Duration::ZERO, |(_, _, d)| *d);
            *by.entry(comm).or_default() += cpu.saturating_sub(before);
        }
        let mut by: Vec<(String, Duration)> = by
            .into_iter()
            .filter(|(_, d)| !d.is_zero())
            .map(|(c, d)| (c.to_owned(), d))
            .collect();
        by.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        (by, self.busy.saturating_sub(earlier.busy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_nearest_rank() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&d, 50.0), Duration::from_millis(51));
        assert_eq!(percentile(&d, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&d, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&[], 99.0), Duration::ZERO);
    }

    #[test]
    fn cpu_time_reads_a_live_process_and_refuses_a_gone_one() {
        let own = cpu_time(std::process::id(), false).expect("own stat");
        let with_children = cpu_time(std::process::id(), true).expect("own stat");
        assert!(with_children >= own, "{with_children:?} < {own:?}");
        // PIDs are below 2^22 on Linux, so this one cannot exist.
        assert!(cpu_time(u32::MAX, false).is_err());
        // A process started after this one started later.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let start_time = |pid| stat_fields(pid).and_then(|f| start_of(&f));
        let (own, later) = (start_time(std::process::id()), start_time(child.id()));
        let _ = child.kill();
        let _ = child.wait();
        assert!(later.expect("child stat") >= own.expect("own stat"));
    }

    #[test]
    fn cpu_by_program_counts_work_done_in_between() {
        let before = CpuByProgram::now().expect("read /proc");
        // Spin until this process has used 300 ms of CPU (however loaded the machine is), or
        // give up after a minute of wall time.
        let own_before = cpu_time(std::process::id(), false).expect("own stat");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let mut x = 0u64;
        while cpu_time(std::process::id(), false).expect("own stat") - own_before
            < Duration::from_millis(300)
            && std::time::Instant::now() < deadline
        {
            for _ in 0..100_000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        let after = CpuByProgram::now().expect("read /proc");
        let (by, busy) = after.since(&before);
        let own = std::fs::read_to_string("/proc/self/comm").expect("own comm");
        let spent = by
            .iter()
            .find(|(c, _)| c == own.trim())
            .map(|(_, d)| *d)
            .unwrap_or_default();
        assert!(
            spent >= Duration::from_millis(100),
            "{own}: {spent:?} in {by:?}"
        );
        assert!(busy >= spent / 2, "machine busy {busy:?} < own {spent:?}");
    }
}
