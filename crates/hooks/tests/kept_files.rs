//! `DEBUG_KEEP_TMP_FILES`: the line that says where a run's files were kept is logged inside
//! the caller's span, so it names the package and task as the run's other lines do (issue
//! 31.10). The variable is read from the process environment, which tests may not set
//! (`set_var` is forbidden in the project), so the test runs itself again as a child process
//! with the variable set and reads the child's log.

mod common;

use common::{request, script, shell_hook};
use tracing::Instrument as _;

/// Set in the child run: it runs a hook and logs to stderr.
const CHILD: &str = "BERTH_KEPT_FILES_CHILD";

#[tokio::test]
async fn the_kept_files_line_names_the_callers_span() {
    if std::env::var_os(CHILD).is_some() {
        return child().await;
    }
    let exe = std::env::current_exe().expect("test binary");
    let out = tokio::process::Command::new(exe)
        .args([
            "--exact",
            "the_kept_files_line_names_the_callers_span",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("DEBUG_KEEP_TMP_FILES", "1")
        .output()
        .await
        .expect("the child test runs");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed: {log}");
    let line = log
        .lines()
        .find(|l| l.contains("keeping hook temp files"))
        .unwrap_or_else(|| panic!("no kept-files line in: {log}"));
    assert!(
        line.contains("default.demo") && line.contains("HookRun"),
        "the line does not name the caller's span: {line}"
    );
}

/// The child: one hook run inside a span naming a package and task, logged as text to
/// stderr; the kept run directory is removed with the temp dir.
async fn child() {
    // Global, as a service's: the line is logged on a blocking-pool thread.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let dir = tempfile::tempdir().expect("tempdir");
    let tmp = tempfile::tempdir().expect("tmp");
    let path = script(dir.path(), "hooks/ok.sh", "#!/bin/sh\nexit 0\n");
    let hook = shell_hook(path);
    let req = request(&hook, tmp.path());
    berth_hooks::run(req)
        .instrument(tracing::info_span!(
            "task",
            package.key = "default.demo",
            task.kind = "HookRun"
        ))
        .await
        .expect("hook succeeds");
}
