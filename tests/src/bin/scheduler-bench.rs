//! `scheduler-bench`: how long lifecycle's scheduler takes to bring a dependency graph up, and
//! what it costs lifecycle.
//!
//! It writes a repository of `--packages` apps (default 1,000) in `--depth` levels (default 10):
//! every package of level L > 0 depends mandatorily on two packages of level L − 1. The apps
//! have neither chart nor hooks, so what is measured is berth's own path: lifecycle (Updates,
//! reports, scheduling passes, the outbox), the broker and one worker running Load → Start
//! (ApplySettings → Startup → Run in one task). The packages are installed deepest level first, so every
//! dependent arrives before its dependencies and waits for the scheduler to enable it.
//!
//! It prints the time from the last Update's answer to every package Running (polled with List
//! every 100 ms), and lifecycle's CPU time (user + system, from `/proc`) over the whole run,
//! divided by the packages. The services are the builds next to this binary, as separate
//! processes with mutual TLS ([`SplitTopology`]), against the embedded dev cluster (in this
//! process) or the cluster of `BERTH_TEST_KUBECONFIG`.
//!
//! Run: `cargo build -p berth-tests --bins` (or `--release`, and the services too), then
//! `BERTH_LOG=warn target/debug/scheduler-bench [--packages 1000] [--depth 10]
//! [--concurrency 8]` (`--concurrency`: tasks the worker runs at once).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use berth_tests::measure::cpu_time;
use berth_tests::{SplitTopology, TestCluster, journey};

/// Longest the whole graph may take to come up.
const CONVERGE_DEADLINE: Duration = Duration::from_secs(1800);
/// How often the bench lists the packages while waiting.
const POLL: Duration = Duration::from_millis(100);
/// The namespace of every app (dependencies of apps resolve in their own namespace).
const NAMESPACE: &str = "bench";

struct Args {
    packages: usize,
    depth: usize,
    concurrency: usize,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        packages: 1000,
        depth: 10,
        concurrency: 8,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        let n: usize = value
            .parse()
            .with_context(|| format!("{flag}: {value:?} is not a number"))?;
        match flag.as_str() {
            "--packages" => args.packages = n,
            "--depth" => args.depth = n,
            "--concurrency" => args.concurrency = n,
            _ => bail!("unknown flag {flag} (--packages, --depth, --concurrency)"),
        }
    }
    if args.depth == 0 || args.packages < args.depth * 2 {
        bail!("--packages must be at least twice --depth, and --depth at least 1");
    }
    Ok(args)
}

fn name(i: usize) -> String {
    format!("p{i:05}")
}

/// The level of package `i`: `packages / depth` packages per level.
fn level(i: usize, args: &Args) -> usize {
    (i * args.depth / args.packages).min(args.depth - 1)
}

/// Writes the repository: `<root>/<name>/1.0.0/package.yaml` for every package.
fn write_repository(root: &Path, args: &Args) -> anyhow::Result<()> {
    let per_level = args.packages / args.depth;
    for i in 0..args.packages {
        let l = level(i, args);
        let mut yaml = format!(
            "apiVersion: berth.io/v1\ntype: Application\nname: {}\nversion: 1.0.0\n",
            name(i)
        );
        if l > 0 {
            // Two dependencies on the level below, spread over it.
            let below = (l - 1) * per_level;
            let a = below + i % per_level;
            let b = below + (i * 7 + 3) % per_level;
            yaml.push_str("requirements:\n  modules:\n    mandatory:\n");
            for d in [a, b] {
                yaml.push_str(&format!("      - name: {}\n", name(d)));
            }
        }
        let dir = root.join(name(i)).join("1.0.0");
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("package.yaml"), yaml)?;
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let dir = tempfile::tempdir()?;
    // Under the harness's repository root: an Update names a repository by a relative path.
    let (repo_dir, repo) = berth_tests::temp_repo();
    write_repository(repo_dir.path(), &args)?;
    let cluster = TestCluster::start().await?;
    let concurrency = args.concurrency.to_string();
    let topology = SplitTopology::start_with(
        &cluster.kubeconfig,
        dir.path(),
        &["--concurrency", &concurrency],
    )
    .await?;
    let result = measure(&topology, &repo, &args).await;
    topology.stop().await;
    cluster.stop().await;
    result
}

async fn measure(topology: &SplitTopology, repo: &str, args: &Args) -> anyhow::Result<()> {
    let pid = topology
        .pid_of("berth-lifecycle")
        .context("lifecycle is not running")?;
    let mut client = journey::connect(&topology.gateway.endpoint()).await?;
    let cpu_before = cpu_time(pid, false)?;
    // Deepest level first: every dependent is installed before its dependencies.
    let mut order: Vec<usize> = (0..args.packages).collect();
    order.sort_by_key(|i| std::cmp::Reverse(level(*i, args)));
    for i in order {
        journey::update_app(&mut client, repo, NAMESPACE, &name(i)).await?;
    }
    let last_update = Instant::now();
    let deadline = last_update + CONVERGE_DEADLINE;
    loop {
        if journey::count_running(&mut client).await? == Some(args.packages) {
            break;
        }
        if Instant::now() >= deadline {
            bail!("not every package was Running within {CONVERGE_DEADLINE:?}");
        }
        tokio::time::sleep(POLL).await;
    }
    let converged = last_update.elapsed();
    let cpu = cpu_time(pid, false)? - cpu_before;
    println!(
        "{} packages, {} levels deep, worker concurrency {}",
        args.packages, args.depth, args.concurrency
    );
    println!(
        "last Update -> all Running: {:.1} s",
        converged.as_secs_f64()
    );
    println!(
        "lifecycle CPU: {:.2} s in all, {:.2} ms per package",
        cpu.as_secs_f64(),
        cpu.as_secs_f64() * 1000.0 / args.packages as f64
    );
    Ok(())
}
