//! Processes that leave their hook's process group are killed when the hook ends, with this
//! process as their subreaper. Its own test binary: the subreaper is per process.

mod common;

use std::time::{Duration, Instant};

use berth_hooks::{reap_escaped_hook_processes, run};
use common::{request, script, shell_hook};

fn alive(pid: i32) -> bool {
    // A zombie is dead; /proc says which.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

#[tokio::test]
async fn processes_that_setsid_or_leave_the_group_are_killed_when_the_hook_ends() {
    reap_escaped_hook_processes().expect("prctl");
    let dir = tempfile::tempdir().expect("tempdir");
    let pids = dir.path().join("pids");
    // One escapes with setsid, one with a process group of its own (perl setpgrp), each in a
    // subshell that exits at once, so both are orphaned while the hook still runs; both keep the
    // hook's stdout open.
    let body = format!(
        "#!/bin/bash\n\
         (setsid sleep 1000 & echo $! >> {p})\n\
         (perl -e 'setpgrp(0, 0); print \"$$\\n\"; close STDOUT; open(STDOUT, \">&\", STDERR); sleep 1000' >> {p} &)\n\
         for i in $(seq 100); do [ $(wc -l < {p}) -ge 2 ] && break; sleep 0.05; done\n\
         exit 0\n",
        p = pids.display()
    );
    let hook = shell_hook(script(dir.path(), "escape.sh", &body));
    // Twice: the second sweep starts with what the first remembered of the processes around
    // (those not descending from this one, whose `stat` it does not read again).
    for round in 0..2 {
        let _ = std::fs::remove_file(&pids);
        let started = Instant::now();
        run(request(&hook, dir.path()))
            .await
            .expect("the hook succeeds");
        let took = started.elapsed();
        let escaped: Vec<i32> = std::fs::read_to_string(&pids)
            .expect("pids written")
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        assert_eq!(escaped.len(), 2, "round {round}: {escaped:?}");
        for pid in &escaped {
            assert!(
                !alive(*pid),
                "round {round}: escaped process {pid} survived the hook"
            );
        }
        assert!(
            took < Duration::from_secs(2),
            "round {round}: the run did not wait for the escaped processes' pipes: {took:?}"
        );
    }
}
