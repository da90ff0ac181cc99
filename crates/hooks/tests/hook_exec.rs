//! Hooks started through `berth-hook-exec` as the hook user (`start_hooks_with`): the service
//! spawns them without forking itself, and they run as they would otherwise. Its own test
//! binary: the hook user and the helper are per process.

mod common;

use std::path::Path;

use berth_hooks::{HookUser, RunError, run, run_hooks_as, start_hooks_with};
use common::{request, run_in_readable_dirs, shell_hook};

const HELPER: &str = env!("CARGO_BIN_EXE_berth-hook-exec");

#[test]
fn the_helper_drops_to_the_user_and_its_groups_then_runs_the_program() {
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: changing user needs root");
        return;
    }
    let out = std::process::Command::new(HELPER)
        .args([
            "65534",
            "65534",
            "/bin/sh",
            "-c",
            "echo $(id -u):$(id -g):$(id -G)",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "65534:65534:65534\n");

    let missing = std::process::Command::new(HELPER)
        .args(["65534", "65534", "/nonexistent/hook"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(126));
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(said.contains("cannot run /nonexistent/hook"), "{said}");

    let usage = std::process::Command::new(HELPER)
        .arg("x")
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(2));
}

#[tokio::test]
async fn hooks_started_through_the_helper_run_as_the_hook_user() {
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: running hooks as another user needs root");
        return;
    }
    start_hooks_with(HELPER.into()).expect("first");
    run_hooks_as(HookUser {
        uid: 65534,
        gid: 65534,
    })
    .expect("root may");
    // Its own process group, the run's environment, and the user without supplementary groups.
    let body = "#!/bin/bash\n\
        [ \"$(cut -d' ' -f5 /proc/$$/stat)\" = \"$$\" ] && g=own || g=shared\n\
        echo \"[{\\\"op\\\":\\\"add\\\",\\\"path\\\":\\\"/seen\\\",\\\"value\\\":\\\"$(id -u):$(id -g):$(id -G):$g\\\"}]\" > \"$VALUES_JSON_PATCH_PATH\"\n";
    let patch = run_in_readable_dirs(body).await;
    assert_eq!(patch[0]["value"], "65534:65534:65534:own", "{patch}");

    // A program that cannot be started is refused as a direct start would refuse it.
    let mut missing = shell_hook(Path::new("/nonexistent/hook").to_path_buf());
    missing.name = "missing".into();
    let tmp = tempfile::tempdir().expect("tempdir");
    let e = run(request(&missing, tmp.path())).await.unwrap_err();
    assert!(matches!(e, RunError::Spawn { .. }), "{e}");
}
