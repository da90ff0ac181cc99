//! Locating the external CLIs (kubectl, helm) the CLI conformance tests drive.
//!
//! A tool is taken from `PATH`, else from `target/ci-tools/` (where `.ci/run` unpacks
//! kubectl and helm from the npm registry). When it is missing the test cannot say
//! anything, so it must not pass quietly: under `CI=true` it fails, elsewhere it prints
//! that it was skipped and returns.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// How long one CLI invocation may run before the test fails (helm install with
/// `--wait` is the slowest; it has its own shorter `--timeout`).
pub const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// The path of `name`, or None (after failing under CI / printing a skip notice).
pub fn locate(name: &str) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    });
    let ci_tools = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/ci-tools")
        .join(name);
    if let Some(found) = on_path.or_else(|| ci_tools.is_file().then_some(ci_tools)) {
        return Some(found);
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    assert!(
        !ci,
        "{name} is required under CI=true: not on PATH nor in target/ci-tools (.ci/run installs it)"
    );
    eprintln!("SKIPPED: {name} not found on PATH or in target/ci-tools");
    None
}

/// A located CLI with the arguments and environment every invocation gets (the
/// kubeconfig, isolated helm home directories).
pub struct Cli {
    program: PathBuf,
    base_args: Vec<String>,
    env: Vec<(String, PathBuf)>,
}

impl Cli {
    /// `name` located by [`locate`], run with `--kubeconfig <kubeconfig>`; None when skipped.
    pub fn new(name: &str, kubeconfig: &Path) -> Option<Cli> {
        Some(Cli {
            program: locate(name)?,
            base_args: vec!["--kubeconfig".into(), kubeconfig.display().to_string()],
            env: Vec::new(),
        })
    }

    /// Sets an environment variable to a path for every invocation.
    pub fn env(mut self, key: &str, value: PathBuf) -> Cli {
        self.env.push((key.into(), value));
        self
    }

    /// A command for `args`, killed when dropped, for callers that stream its output.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.args(&self.base_args)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .kill_on_drop(true);
        cmd
    }

    /// Runs to completion within [`CLI_TIMEOUT`].
    pub async fn run(&self, args: &[&str]) -> Output {
        let out = tokio::time::timeout(CLI_TIMEOUT, self.command(args).output()).await;
        match out {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => panic!("{} {args:?} did not start: {e}", self.program.display()),
            Err(_) => panic!(
                "{} {args:?} did not finish within {CLI_TIMEOUT:?}",
                self.program.display()
            ),
        }
    }

    /// Runs to completion, failing the test (with stderr) unless it succeeded; returns stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.status.success(),
            "{} {args:?} failed: {}{}",
            self.program.display(),
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}
