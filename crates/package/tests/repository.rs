mod support;

use std::fs;
use std::os::unix::fs::symlink;

use berth_package::{Limits, LocalRepository, RepoError, digest_tree, load};
use support::{is_executable, package_dir, write};

struct Repo {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    dest_parent: std::path::PathBuf,
}

fn repo_with(versions: &[&str]) -> Repo {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("repo");
    for version in versions {
        package_dir(&root.join("demo").join(version), "demo", version);
    }
    let dest_parent = dir.path().join("downloaded");
    Repo {
        root,
        dest_parent,
        _dir: dir,
    }
}

#[test]
fn fetch_publishes_a_loadable_copy_with_exec_bits() {
    let repo = repo_with(&["1.0.0"]);
    let dest = repo.dest_parent.join("demo/1.0.0");
    let fetched = LocalRepository::new(&repo.root)
        .fetch("demo", "1.0.0", &dest)
        .expect("fetches");
    assert_eq!(fetched.path, dest);
    assert!(
        fetched.digest.starts_with("sha256:") && fetched.digest.len() == 7 + 64,
        "{}",
        fetched.digest
    );
    assert_eq!(fetched.digest, digest_tree(&dest).expect("digest"));
    let pkg = load(&dest).expect("published package loads");
    assert_eq!(pkg.definition.name, "demo");
    assert!(
        is_executable(&dest.join("hooks/startup")),
        "hooks stay executable"
    );
    assert!(!is_executable(&dest.join("templates/cm.yaml")));
    let leftovers: Vec<_> = fs::read_dir(dest.parent().expect("parent"))
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(leftovers, ["1.0.0"], "no staging directory is left behind");
}

#[test]
fn refetch_is_idempotent_and_changed_content_is_replaced() {
    let repo = repo_with(&["1.0.0"]);
    let dest = repo.dest_parent.join("demo-1.0.0");
    let local = LocalRepository::new(&repo.root);
    let first = local.fetch("demo", "1.0.0", &dest).expect("fetches");
    let marker = dest.join("templates/cm.yaml");
    let mtime = fs::metadata(&marker)
        .and_then(|m| m.modified())
        .expect("mtime");
    let second = local.fetch("demo", "1.0.0", &dest).expect("fetches again");
    assert_eq!(first, second);
    assert_eq!(
        fs::metadata(&marker)
            .and_then(|m| m.modified())
            .expect("mtime"),
        mtime,
        "unchanged tree is not rewritten"
    );

    write(
        &repo.root.join("demo/1.0.0"),
        "templates/cm.yaml",
        "kind: Secret\n",
    );
    let third = local
        .fetch("demo", "1.0.0", &dest)
        .expect("fetches changed content");
    assert_ne!(third.digest, first.digest);
    assert_eq!(fs::read_to_string(&marker).expect("read"), "kind: Secret\n");
}

/// Issue 31.9: a directory version's revision is its content: the same until a file changes,
/// then different, and reading it keeps the fetch's limits.
#[test]
fn a_directory_revision_follows_its_content_within_the_limits() {
    let repo = repo_with(&["1.0.0"]);
    let local = LocalRepository::new(&repo.root);
    let first = local.revision("demo", "1.0.0").expect("a revision");
    assert_eq!(local.revision("demo", "1.0.0").expect("again"), first);
    write(
        &repo.root.join("demo/1.0.0"),
        "templates/cm.yaml",
        "kind: Secret\n",
    );
    let edited = local.revision("demo", "1.0.0").expect("a revision");
    assert_ne!(edited, first, "an edited file changes the revision");
    assert!(edited.starts_with("sha256:"), "{edited}");
    let few = Limits {
        max_entries: 3,
        ..Limits::default()
    };
    let err = LocalRepository::new(&repo.root)
        .with_limits(few)
        .revision("demo", "1.0.0")
        .expect_err("too many entries to digest");
    assert!(err.to_string().contains("3 entries"), "{err}");
    let err = local
        .revision("demo", "2.0.0")
        .expect_err("no such version");
    assert!(matches!(err, RepoError::VersionNotFound { .. }), "{err}");
}

#[test]
fn digest_covers_exec_bits() {
    let repo = repo_with(&["1.0.0"]);
    let local = LocalRepository::new(&repo.root);
    let before = local
        .fetch("demo", "1.0.0", &repo.dest_parent.join("a"))
        .expect("fetches")
        .digest;
    let hook = repo.root.join("demo/1.0.0/hooks/startup");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o644)).expect("chmod");
    let after = local
        .fetch("demo", "1.0.0", &repo.dest_parent.join("b"))
        .expect("fetches")
        .digest;
    assert_ne!(before, after);
}

#[test]
fn unsafe_names_are_rejected() {
    let repo = repo_with(&["1.0.0"]);
    let local = LocalRepository::new(&repo.root);
    let dest = repo.dest_parent.join("x");
    for (package, version) in [
        ("demo", "../1.0.0"),
        ("demo", ".."),
        ("..", "1.0.0"),
        ("demo/..", "1.0.0"),
        ("demo", ""),
    ] {
        let err = local.fetch(package, version, &dest).expect_err("rejected");
        assert!(
            matches!(err, RepoError::InvalidName { .. }),
            "{package}/{version}: {err}"
        );
    }
    assert!(!dest.exists());
}

#[test]
fn missing_version_is_reported() {
    let repo = repo_with(&["1.0.0"]);
    let err = LocalRepository::new(&repo.root)
        .fetch("demo", "2.0.0", &repo.dest_parent.join("x"))
        .expect_err("missing");
    assert!(matches!(err, RepoError::VersionNotFound { .. }), "{err}");
    assert!(err.to_string().contains("2.0.0"));
}

#[test]
fn symlink_escaping_the_package_is_rejected() {
    let repo = repo_with(&["1.0.0"]);
    let source = repo.root.join("demo/1.0.0");
    symlink("../../../../etc/passwd", source.join("templates/passwd")).expect("symlink");
    let dest = repo.dest_parent.join("demo");
    let err = LocalRepository::new(&repo.root)
        .fetch("demo", "1.0.0", &dest)
        .expect_err("rejected");
    assert!(matches!(err, RepoError::LinkEscapes { .. }), "{err}");
    assert!(!dest.exists(), "nothing is published");

    fs::remove_file(source.join("templates/passwd")).expect("rm");
    symlink("/etc/passwd", source.join("templates/abs")).expect("symlink");
    let err = LocalRepository::new(&repo.root)
        .fetch("demo", "1.0.0", &dest)
        .expect_err("rejected");
    assert!(matches!(err, RepoError::LinkEscapes { .. }), "{err}");
}

#[test]
fn symlink_chains_that_escape_are_rejected() {
    let repo = repo_with(&["1.0.0"]);
    let source = repo.root.join("demo/1.0.0");
    // `a/b/lnk` points up to `a`, so `a/b/up` -> `lnk/../../../etc` stays inside the package when
    // read lexically (from a/b) but really climbs two levels above the package root.
    fs::create_dir_all(source.join("a/b")).expect("mkdir");
    symlink("..", source.join("a/b/lnk")).expect("symlink");
    symlink("lnk/../../../etc", source.join("a/b/up")).expect("symlink");
    let err = LocalRepository::new(&repo.root)
        .fetch("demo", "1.0.0", &repo.dest_parent.join("x"))
        .expect_err("rejected");
    assert!(matches!(err, RepoError::LinkEscapes { .. }), "{err}");
}

#[test]
fn internal_symlinks_are_kept() {
    let repo = repo_with(&["1.0.0"]);
    let source = repo.root.join("demo/1.0.0");
    symlink("cm.yaml", source.join("templates/alias.yaml")).expect("symlink");
    let dest = repo.dest_parent.join("x");
    LocalRepository::new(&repo.root)
        .fetch("demo", "1.0.0", &dest)
        .expect("fetches");
    assert_eq!(
        fs::read_link(dest.join("templates/alias.yaml")).expect("link"),
        std::path::Path::new("cm.yaml")
    );
}

#[test]
fn limits_are_enforced() {
    let repo = repo_with(&["1.0.0"]);
    write(
        &repo.root.join("demo/1.0.0"),
        "templates/big.yaml",
        &"x".repeat(10_000),
    );
    let small = Limits {
        max_total_bytes: 5_000,
        ..Limits::default()
    };
    let err = LocalRepository::new(&repo.root)
        .with_limits(small)
        .fetch("demo", "1.0.0", &repo.dest_parent.join("x"))
        .expect_err("too big");
    assert!(err.to_string().contains("5000 bytes"), "{err}");
    let few = Limits {
        max_entries: 3,
        ..Limits::default()
    };
    let err = LocalRepository::new(&repo.root)
        .with_limits(few)
        .fetch("demo", "1.0.0", &repo.dest_parent.join("x"))
        .expect_err("too many");
    assert!(err.to_string().contains("3 entries"), "{err}");
}

#[test]
fn package_identity_must_match_the_request() {
    let repo = repo_with(&[]);
    package_dir(&repo.root.join("demo/1.0.0"), "other", "1.0.0");
    let err = LocalRepository::new(&repo.root)
        .fetch("demo", "1.0.0", &repo.dest_parent.join("x"))
        .expect_err("mismatch");
    assert!(matches!(err, RepoError::Mismatch { .. }), "{err}");

    package_dir(&repo.root.join("demo/2.0.0"), "demo", "2.0.1");
    let err = LocalRepository::new(&repo.root)
        .fetch("demo", "2.0.0", &repo.dest_parent.join("y"))
        .expect_err("mismatch");
    assert!(err.to_string().contains("demo 2.0.1"), "{err}");
}

#[test]
fn versions_are_sorted_semver_directories() {
    let repo = repo_with(&["1.10.0", "1.2.0", "v2.0.0"]);
    fs::create_dir_all(repo.root.join("demo/not-a-version")).expect("mkdir");
    let versions = LocalRepository::new(&repo.root)
        .versions("demo")
        .expect("lists");
    let shown: Vec<String> = versions.iter().map(ToString::to_string).collect();
    assert_eq!(shown, ["1.2.0", "1.10.0", "2.0.0"]);
    let err = LocalRepository::new(&repo.root)
        .versions("absent")
        .expect_err("missing");
    assert!(matches!(err, RepoError::PackageNotFound { .. }), "{err}");
}
