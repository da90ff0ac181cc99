//! `queue-bench`: the queue's performance figures, printed as a table.
//!
//! Every scenario runs a real broker (`berth_queue::process::serve`, the code `berth-queue serve`
//! runs) on a loopback port over a fresh database, and workers that talk to it over gRPC:
//!
//! - **no-op throughput**: tasks/s from the first Enqueue to the last accepted Complete, with the
//!   producer running concurrently with 1 and 3 worker runtimes (in this process, each with its
//!   own connection);
//! - **enqueue→start latency**: p50/p99 from just before the Enqueue call to the handler's start,
//!   with tasks produced at a steady half of the measured maximum rate, after a second of
//!   warm-up at that rate;
//! - **supersede→cancel**: from a Supersede with a newer generation to the running task's
//!   handler seeing its cancellation;
//! - **CPU-heavy scaling**: tasks doing fixed CPU work, run by 1 and by 3 `queue-test-worker`
//!   processes (one task at a time each), as a throughput ratio.
//!
//! SQLite always runs (a new file in the temp dir); PostgreSQL runs when `--postgres URL` names
//! a database (its queue tables are created if missing and left empty).

mod cpu;
mod harness;
mod scenarios;

use std::time::Duration;

use anyhow::Context;
use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "queue-bench", about = "performance figures of the berth queue")]
pub struct Args {
    /// PostgreSQL database URL; without it only SQLite is measured.
    #[arg(long)]
    postgres: Option<String>,
    /// Tasks per throughput run.
    #[arg(long, default_value_t = 5_000)]
    tasks: usize,
    /// Queues the tasks are spread over (round-robin).
    #[arg(long, default_value_t = 100)]
    queues: usize,
    /// Tasks each in-process worker runs at once. With no-op tasks, throughput is tasks in
    /// flight divided by the round trip (on PostgreSQL, mostly the WAL flush of each commit),
    /// so fewer slots measure the round trip rather than the queue; try 16 to see that.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Seconds of steady production for the latency measurement.
    #[arg(long, default_value_t = 5)]
    latency_secs: u64,
    /// Seconds of production at the same rate before the latency measurement, not counted: a
    /// freshly started broker is still opening connections and preparing statements.
    #[arg(long, default_value_t = 1)]
    warmup_secs: u64,
    /// Tasks/s for the latency measurement instead of half the measured maximum; the
    /// throughput runs are then skipped.
    #[arg(long)]
    latency_rate: Option<f64>,
    /// Supersede→cancel measurements per backend.
    #[arg(long, default_value_t = 5)]
    cancel_rounds: usize,
    /// CPU-heavy tasks per scaling run (0 skips the scenario).
    #[arg(long, default_value_t = 60)]
    cpu_tasks: usize,
    /// CPU time of one CPU-heavy task on an idle core, in milliseconds.
    #[arg(long, default_value_t = 50)]
    cpu_task_ms: u64,
    /// Give up on any one run after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

impl Args {
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout)
    }
}

/// One line of the result table.
pub struct Row {
    pub scenario: String,
    pub backend: &'static str,
    pub workers: String,
    pub result: String,
    pub target: &'static str,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let scratch = harness::Scratch::new()?;
    let mut rows = Vec::new();
    let mut backends = vec![("SQLite", None)];
    if let Some(url) = &args.postgres {
        backends.push(("PostgreSQL", Some(url.clone())));
    }
    for (n, (backend, url)) in backends.into_iter().enumerate() {
        let database = match url {
            Some(url) => url,
            None => format!("sqlite://{}/queue-{n}.db", scratch.path().display()),
        };
        let target = if backend == "SQLite" {
            "≥ 5000/s"
        } else {
            "≥ 2000/s"
        };
        let mut best = 0.0f64;
        let runs: &[usize] = if args.latency_rate.is_some() {
            &[]
        } else {
            &[1, 3]
        };
        for &workers in runs {
            let rate = scenarios::throughput(&args, &database, workers)
                .await
                .with_context(|| format!("{backend} throughput with {workers} workers"))?;
            eprintln!("{backend}: {workers} workers: {rate:.0} tasks/s");
            best = best.max(rate);
            rows.push(Row {
                scenario: "no-op tasks/s (enqueue→complete)".into(),
                backend,
                workers: workers.to_string(),
                result: format!("{rate:.0} tasks/s"),
                target,
            });
        }
        let half = args.latency_rate.unwrap_or(best / 2.0).max(1.0);
        let latency = scenarios::latency(&args, &database, 3, half)
            .await
            .with_context(|| format!("{backend} latency"))?;
        rows.push(Row {
            scenario: format!("enqueue→start at {half:.0} tasks/s"),
            backend,
            workers: "3".into(),
            result: latency.to_string(),
            target: "p99 ≤ 20 ms",
        });
        let cancel = scenarios::cancellation(&args, &database)
            .await
            .with_context(|| format!("{backend} cancellation"))?;
        rows.push(Row {
            scenario: "supersede→running task cancelled".into(),
            backend,
            workers: "1".into(),
            result: cancel.to_string(),
            target: "≤ 1 s",
        });
    }
    if args.cpu_tasks > 0 {
        let database = format!("sqlite://{}/queue-cpu.db", scratch.path().display());
        rows.extend(
            cpu::scaling(&args, &database, scratch.path())
                .await
                .context("CPU scaling")?,
        );
    }
    print!("{}", table(&rows));
    Ok(())
}

fn table(rows: &[Row]) -> String {
    let mut cells = vec![["scenario", "backend", "workers", "result", "target"].map(str::to_owned)];
    for r in rows {
        cells.push([
            r.scenario.clone(),
            r.backend.to_owned(),
            r.workers.clone(),
            r.result.clone(),
            r.target.to_owned(),
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|i| {
            cells
                .iter()
                .map(|r| r[i].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |r: &[String; 5]| {
        let padded: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = line(&cells[0]);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&format!("|-{}-|\n", rule.join("-|-")));
    for r in &cells[1..] {
        out.push_str(&line(r));
    }
    out
}
