//! Small measuring helpers the benchmark binaries share: percentiles and per-process CPU time.

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
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command name (in parentheses, may hold spaces); utime, stime, cutime
    // and cstime are fields 14–17 of the line, 12–15 after the name.
    let after = stat
        .rsplit_once(')')
        .context("/proc stat without a command name")?
        .1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let last = if children { 15 } else { 13 };
    let ticks: u64 = fields
        .get(11..last)
        .context("short /proc stat")?
        .iter()
        .map(|f| f.parse::<u64>())
        .sum::<Result<_, _>>()?;
    Ok(Duration::from_secs_f64(ticks as f64 / USER_HZ))
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
    }
}
