//! CPU-heavy scaling: the same fixed-work tasks run by 1 and by 3 worker *processes*
//! (`queue-test-worker`, one task at a time each), so the ratio shows whether the queue lets
//! separate processes use separate cores.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use berth_proto::queue as pb;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::harness::{Broker, task};
use crate::{Args, Row};

/// `queue-test-worker`'s CPU work, repeated here to calibrate it (same loop, same cost).
fn spin(iters: u64) -> u64 {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..iters {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    std::hint::black_box(x)
}

/// Rounds of [`spin`] that take `ms` on one idle core of this machine (the best of 5 timings,
/// so momentary contention does not inflate the estimate).
fn calibrate(ms: u64) -> u64 {
    let probe = 2_000_000u64;
    let best = (0..5)
        .map(|_| {
            let t = Instant::now();
            spin(probe);
            t.elapsed()
        })
        .min()
        .unwrap_or(Duration::from_millis(1));
    (probe as f64 * ms as f64 / (best.as_secs_f64() * 1e3).max(1e-6)) as u64
}

pub async fn scaling(args: &Args, database: &str, scratch: &Path) -> anyhow::Result<Vec<Row>> {
    let iters = calibrate(args.cpu_task_ms);
    let mut rates = Vec::new();
    for processes in [1, 3] {
        let rate = run(args, database, scratch, processes, iters)
            .await
            .with_context(|| format!("{processes} processes"))?;
        eprintln!("CPU-heavy: {processes} worker processes: {rate:.1} tasks/s");
        rates.push(rate);
    }
    let ratio = rates[1] / rates[0].max(1e-9);
    let label = format!("CPU-heavy tasks/s ({} ms of CPU each)", args.cpu_task_ms);
    Ok(vec![
        Row {
            scenario: label.clone(),
            backend: "SQLite",
            workers: "1 process".into(),
            result: format!("{:.1} tasks/s", rates[0]),
            target: "",
        },
        Row {
            scenario: label,
            backend: "SQLite",
            workers: "3 processes".into(),
            result: format!("{:.1} tasks/s = {ratio:.2}× of 1", rates[1]),
            target: "≥ 1.8× (2 cores)",
        },
    ])
}

async fn run(
    args: &Args,
    database: &str,
    scratch: &Path,
    processes: usize,
    iters: u64,
) -> anyhow::Result<f64> {
    let broker = Broker::start(database).await?;
    let exe = std::env::current_exe()?.with_file_name("queue-test-worker");
    anyhow::ensure!(
        exe.exists(),
        "{} is missing: build it with `cargo build -p berth-queue --bins`",
        exe.display()
    );
    let mut children: Vec<Child> = Vec::new();
    for p in 0..processes {
        let mut child = Command::new(&exe)
            .args([
                "--broker",
                &broker.endpoint,
                "--id",
                &format!("cpu-{p}"),
                "--concurrency",
                "1",
            ])
            .arg("--log")
            .arg(scratch.join(format!("cpu-{processes}-{p}.log")))
            .env("BERTH_LOG", "error")
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let stdout = child.stdout.take().context("piped stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .context("worker did not start")??
            .context("worker exited at start")?;
        children.push(child);
    }
    let run = uuid::Uuid::new_v4();
    let payload = format!(r#"{{"spin_iters":{iters}}}"#);
    let tasks: Vec<pb::Task> = (0..args.cpu_tasks)
        .map(|i| task(format!("{run}-{i}"), i, "cpu", "Spin", payload.clone()))
        .collect();
    let started = Instant::now();
    broker
        .client()?
        .enqueue(pb::EnqueueRequest { tasks })
        .await
        .context("enqueue")?;
    broker.drained(args.timeout()).await?;
    let took = started.elapsed();
    for mut child in children {
        let _ = child.kill().await;
    }
    broker.stop().await?;
    Ok(args.cpu_tasks as f64 / took.as_secs_f64().max(1e-9))
}
