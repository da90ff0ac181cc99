//! `hook-isolation-bench`: what confining a hook to its principal costs per hook run (issue 30;
//! docs/decisions/hook-identity.md), against a plain `posix_spawn` of the same hook.
//!
//! The hook is a two-line shell script (`#!/bin/sh`, `exit 0`) in a package directory. Each
//! row runs one step `--runs` times in a row and prints the mean, median and p99 of one
//! iteration; the cost a step adds is its row minus the row it builds on:
//! - `spawn`: `posix_spawn` of the hook and a wait (what the standard library does for a
//!   child that needs nothing between fork and exec);
//! - `helper`: the hook started through `berth-hook-exec` with nothing to do (its own exec);
//! - `helper + uid`: … dropping to the principal's uid (setgroups, setresgid, setresuid,
//!   no_new_privs);
//! - `helper + uid + landlock`: … and Landlock with the rules a confined hook gets;
//! - `cgroup create/kill/remove`: the run cgroup alone (every hierarchy in use, the limits
//!   written, `cgroup.kill` or its stand-in, rmdir), no process;
//! - `helper + cgroup`: the hook entering a fresh run cgroup (created, entered, killed,
//!   removed);
//! - `run directory`: made, handed to the uid (chown), three input files written, removed;
//! - `kill uid`: `berth-hook-exec --kill-uid` (a spawn, the uid change, `kill(-1)`);
//! - `berth_hooks::run, unconfined` and `…, confined`: the whole run as the worker does it,
//!   before and after `isolate_hooks` (temp files, output capture, parsing) — their
//!   difference is the isolation's whole cost per run.
//!
//! Needs root (the confined rows are skipped otherwise). Build and run:
//! `cargo build --release -p berth-hooks -p berth-tests --bins`, then
//! `target/release/hook-isolation-bench [--runs 500]`. The machine's load average is printed
//! before and after.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use berth_hooks::isolation::{exec, steps};
use berth_hooks::{Hook, HookConfig, HookKind, Isolation, Limits, RunRequest, Sandbox, UidRange};
use berth_tests::measure::percentile;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const PRINCIPAL: u32 = 1;

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Runs `step` `runs` times and prints its row.
fn row(
    name: &str,
    runs: usize,
    mut step: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    // A few rounds first: page cache, dentries, the helper's pages.
    for _ in 0..runs.min(20) {
        step()?;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        step()?;
        times.push(t0.elapsed());
    }
    Ok(print_row(name, &mut times))
}

fn print_row(name: &str, times: &mut [Duration]) -> f64 {
    times.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = times.iter().map(|d| ms(*d)).sum::<f64>() / times.len() as f64;
    println!(
        "| {name} | {:.3} | {:.3} | {:.3} |",
        mean,
        ms(percentile(times, 50.0)),
        ms(percentile(times, 99.0)),
    );
    mean
}

fn wait_ok(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()?;
    ensure!(status.success(), "{command:?}: {status}");
    Ok(())
}

async fn run_rows(
    name: &str,
    runs: usize,
    hook: &Hook,
    tmp: &Path,
    sandbox: Option<Sandbox>,
) -> anyhow::Result<f64> {
    let request = || RunRequest {
        hook,
        binding_context: json!([{"binding": "onStartup"}]),
        values: json!({}),
        config_values: json!({}),
        env: vec![],
        timeout: Duration::from_secs(30),
        cancel: CancellationToken::new(),
        tmp_dir: Some(tmp.to_path_buf()),
        sandbox: sandbox.clone(),
    };
    for _ in 0..runs.min(20) {
        berth_hooks::run(request()).await?;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        berth_hooks::run(request()).await?;
        times.push(t0.elapsed());
    }
    Ok(print_row(name, &mut times))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut runs = 500usize;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => runs = args.next().context("--runs N")?.parse()?,
            other => {
                anyhow::bail!("unknown argument {other} (usage: hook-isolation-bench [--runs N])")
            }
        }
    }
    let helper: PathBuf = std::env::current_exe()?
        .parent()
        .context("the bench's directory")?
        .join(berth_hooks::HOOK_EXEC_NAME);
    ensure!(helper.exists(), "{} is not built", helper.display());
    let root = nix::unistd::geteuid().is_root();
    let base = tempfile::Builder::new()
        .prefix("hook-isolation-bench-")
        .tempdir()?;
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755))?;
    let pkg = base.path().join("pkg");
    std::fs::create_dir(&pkg)?;
    std::fs::set_permissions(&pkg, std::fs::Permissions::from_mode(0o755))?;
    let script = pkg.join("true.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n")?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    let tmp = base.path().join("tmp");
    std::fs::create_dir(&tmp)?;
    let hook = Hook {
        name: "true.sh".into(),
        path: script.clone(),
        kind: HookKind::Shell,
        config: HookConfig::default(),
    };
    let range = UidRange::DEFAULT;
    let uid = range
        .user(PRINCIPAL)
        .map_err(anyhow::Error::msg)?
        .uid
        .to_string();
    let limits = Limits::default();
    let sandbox = Sandbox::new(PRINCIPAL, limits, pkg.clone());

    println!(
        "hook-isolation-bench: {runs} runs per row, load average before: {}",
        load()
    );
    println!();
    println!("| step | mean ms | p50 ms | p99 ms |");
    println!("|---|---|---|---|");
    let spawn = row("spawn (posix_spawn + wait)", runs, || {
        wait_ok(&mut Command::new(&script))
    })?;
    row("helper", runs, || {
        wait_ok(Command::new(&helper).arg("--").arg(&script))
    })?;
    let unconfined = run_rows("berth_hooks::run, unconfined", runs, &hook, &tmp, None).await?;
    if !root {
        println!("\nnot root: the confined rows need root (skipped)");
        return Ok(());
    }
    row("helper + uid", runs, || {
        wait_ok(
            Command::new(&helper)
                .args(["--no-new-privs", "--uid", &uid, "--gid", &uid, "--"])
                .arg(&script),
        )
    })?;
    let run_dir = base.path().join("landlocked");
    std::fs::create_dir(&run_dir)?;
    let plan = exec::Plan {
        landlock: Some(steps::landlock_paths(&sandbox, &run_dir)),
        no_new_privs: true,
        user: Some((range.base() + PRINCIPAL, range.base() + PRINCIPAL)),
        ..Default::default()
    };
    let landlocked = plan.args();
    row("helper + uid + landlock", runs, || {
        wait_ok(Command::new(&helper).args(&landlocked).arg(&script))
    })?;

    let notes = berth_hooks::isolate_hooks(Isolation {
        uids: Some(range),
        tmp_dir: tmp.clone(),
        writable: vec![],
        helper: Some(helper.clone()),
    })
    .map_err(anyhow::Error::msg)?;
    let cgroups = steps::cgroup_cycle(PRINCIPAL, &limits)?;
    if cgroups {
        row("cgroup create/kill/remove", runs, || {
            steps::cgroup_cycle(PRINCIPAL, &limits)?;
            Ok(())
        })?;
        row("helper + cgroup", runs, || {
            let cg = steps::cgroup(PRINCIPAL, &limits)?.context("a cgroup")?;
            let plan = exec::Plan {
                cgroups: cg.procs_files(),
                ..Default::default()
            };
            wait_ok(Command::new(&helper).args(plan.args()).arg(&script))
        })?;
    }
    row("run directory (mkdir, chown, 3 files, rm)", runs, || {
        steps::run_dir(&tmp, range, PRINCIPAL)?;
        Ok(())
    })?;
    row("kill uid", runs, || {
        steps::kill_uid(&helper, range, PRINCIPAL)?;
        Ok(())
    })?;
    let confined = run_rows(
        "berth_hooks::run, confined",
        runs,
        &hook,
        &tmp,
        Some(sandbox.clone()),
    )
    .await?;
    println!();
    println!(
        "isolation adds {:.3} ms per hook run (confined {confined:.3} ms - unconfined {unconfined:.3} ms); a bare posix_spawn of the hook is {spawn:.3} ms",
        confined - unconfined
    );
    println!("load average after: {}", load());
    println!("set up: {}", notes.join("; "));
    Ok(())
}
