//! Hooks as a dedicated unprivileged user (`run_hooks_as`), when berth runs as root. Its own
//! test binary: the hook user is set once per process.

mod common;

use std::os::unix::fs::PermissionsExt;

use berth_hooks::{HookUser, run_hooks_as};
use common::run_in_readable_dirs;

#[test]
fn user_specs_parse() {
    assert_eq!(
        HookUser::parse("65534:65533").unwrap(),
        HookUser {
            uid: 65534,
            gid: 65533
        }
    );
    assert_eq!(
        HookUser::parse("1234").unwrap(),
        HookUser {
            uid: 1234,
            gid: 1234
        }
    );
    assert_eq!(HookUser::parse("root").unwrap().uid, 0);
    assert!(HookUser::parse("no-such-user-berth").is_err());
    assert!(HookUser::parse("1:x").is_err());
}

#[test]
fn root_runs_hooks_as_nobody_unless_told_otherwise() {
    let choose = |spec, euid| HookUser::choose(spec, euid);
    assert_eq!(choose(None, 0), Ok(Some(HookUser::NOBODY)));
    assert_eq!(
        choose(Some("1234:5"), 0),
        Ok(Some(HookUser { uid: 1234, gid: 5 }))
    );
    // Naming root is the opt-out: hooks keep berth's own user.
    assert_eq!(choose(Some("root"), 0), Ok(None));
    assert_eq!(choose(Some("0"), 0), Ok(None));
    // Not root: hooks run as berth's user; only that user may be named.
    assert_eq!(choose(None, 1000), Ok(None));
    assert_eq!(choose(Some("1000"), 1000), Ok(None));
    let refused = choose(Some("65534"), 1000).unwrap_err();
    assert!(refused.contains("needs root"), "{refused}");
    assert!(choose(Some("1:x"), 0).is_err());
}

#[test]
fn reachability_names_the_first_directory_hooks_cannot_search() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (outer, inner) = (dir.path().join("outer"), dir.path().join("outer/inner"));
    std::fs::create_dir_all(&inner).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&outer, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Whoever owns the files: a user that is neither their owner nor in their group.
    let stranger = HookUser {
        uid: 4_000_000,
        gid: 4_000_000,
    };
    let error = stranger.check_reachable(&inner).unwrap_err();
    assert!(
        error.contains(&format!("{} (mode 0700", outer.display()))
            && error.contains(&inner.display().to_string())
            && error.contains("--hook-user root"),
        "{error}"
    );
    std::fs::set_permissions(&outer, std::fs::Permissions::from_mode(0o711)).unwrap();
    stranger
        .check_reachable(&inner)
        .expect("searchable by others");
    // The owner's own `x` bit counts for the owner.
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&outer).unwrap();
    std::fs::set_permissions(&outer, std::fs::Permissions::from_mode(0o700)).unwrap();
    let owner = HookUser {
        uid: meta.uid(),
        gid: meta.gid(),
    };
    owner
        .check_reachable(&inner)
        .expect("the owner searches its own");
}

#[tokio::test]
async fn hooks_run_as_the_hook_user_and_cannot_write_package_files() {
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: running hooks as another user needs root");
        return;
    }
    let nobody = HookUser {
        uid: 65534,
        gid: 65534,
    };
    run_hooks_as(nobody).expect("root may");
    // The package's directory as the cache holds it: berth's, readable by others.
    let body = "#!/bin/bash\n\
        if echo x >> \"$(dirname \"$0\")/whoami.sh\" 2>/dev/null; then w=yes; else w=no; fi\n\
        echo \"[{\\\"op\\\":\\\"add\\\",\\\"path\\\":\\\"/uid\\\",\\\"value\\\":\\\"$(id -u):$(id -g):$(id -G):$w\\\"}]\" > \"$VALUES_JSON_PATCH_PATH\"\n";
    let patch = run_in_readable_dirs(body).await;
    assert_eq!(
        patch[0]["value"], "65534:65534:65534:no",
        "uid, gid, no supplementary groups, and the package's files are read-only: {patch}"
    );
}
