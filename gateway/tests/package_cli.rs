//! `berth package build` writes an archive that an archive repository serves back unchanged.

use std::path::Path;
use std::process::Command;

#[test]
fn package_build_writes_an_archive_a_repository_can_fetch() {
    let work = tempfile::tempdir().expect("tempdir");
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/packages/hello/1.0.0");
    let out = work.path().join("repo");
    let run = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["package", "build"])
        .arg(&examples)
        .arg("-o")
        .arg(&out)
        .output()
        .expect("berth runs");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let printed = String::from_utf8(run.stdout).expect("utf-8");
    let (path, digest) = printed.trim().split_once(' ').expect("path and digest");
    assert!(path.ends_with("repo/hello-1.0.0.tar.gz"), "{printed}");
    let fetched = berth_package::ArchiveRepository::new(&out)
        .fetch_verified(
            "hello",
            "1.0.0",
            &work.path().join("cache/hello"),
            Some(digest),
        )
        .expect("the archive fetches, with the printed digest");
    assert!(fetched.path.join("hooks/10-greeting.sh").is_file());

    // Not a package: a clear error, and no archive.
    let run = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["package", "build"])
        .arg(work.path())
        .arg("-o")
        .arg(work.path().join("none"))
        .output()
        .expect("berth runs");
    assert!(!run.status.success());
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("package.yaml"), "{err}");
    assert!(!work.path().join("none").exists());
}
