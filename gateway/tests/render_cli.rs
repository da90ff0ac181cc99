//! `berth render` prints what `helm template` prints, for a chart of the release service's
//! compatibility corpus rendered with a values file and `--set`. helm is taken from PATH or
//! `<workspace>/target/ci-tools/helm`; without it the test fails under `CI=true` and
//! otherwise prints a loud skip notice.

use berth_helm::helm_binary::find_helm;
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().expect("command runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn berth_render_prints_what_helm_template_prints() {
    let Some(helm) = find_helm() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("helm is not installed (PATH or target/ci-tools/helm); CI must run this test");
        }
        eprintln!(
            "\n!!!!!!!! SKIPPED: helm not found; `berth render` was NOT compared with helm !!!!!!!!\n"
        );
        return;
    };
    let oracle = workspace().join("crates/helm/tests/oracle");
    let args = |chart: &str| -> Vec<String> {
        vec![
            "demo".into(),
            oracle.join(chart).display().to_string(),
            "--namespace".into(),
            "render-ns".into(),
            "-f".into(),
            oracle
                .join("values/basics-override.yaml")
                .display()
                .to_string(),
            "--set".into(),
            "replicas=7,labels.extra=x".into(),
            "--kube-version".into(),
            "v1.31.0".into(),
        ]
    };
    for chart in ["basics", "umbrella"] {
        let helm_out = stdout_of(Command::new(&helm).arg("template").args(args(chart)));
        let berth_out = stdout_of(
            Command::new(env!("CARGO_BIN_EXE_berth"))
                .arg("render")
                .args(args(chart)),
        );
        assert!(!helm_out.is_empty());
        assert_eq!(
            berth_out, helm_out,
            "berth render differs from helm template for {chart}"
        );
    }
}
