//! Hooks as a dedicated unprivileged user (`run_hooks_as`), when berth runs as root. Its own
//! test binary: the hook user is set once per process.

mod common;

use std::os::unix::fs::PermissionsExt;

use berth_hooks::{HookUser, run, run_hooks_as};
use common::{request, script, shell_hook};

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
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let body = "#!/bin/bash\n\
        if echo x >> \"$(dirname \"$0\")/whoami.sh\" 2>/dev/null; then w=yes; else w=no; fi\n\
        echo \"[{\\\"op\\\":\\\"add\\\",\\\"path\\\":\\\"/uid\\\",\\\"value\\\":\\\"$(id -u):$(id -g):$(id -G):$w\\\"}]\" > \"$VALUES_JSON_PATCH_PATH\"\n";
    let hook = shell_hook(script(dir.path(), "whoami.sh", body));
    let tmp = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = run(request(&hook, tmp.path()))
        .await
        .expect("the hook runs");
    let patch = serde_json::to_value(&out.values_patch).unwrap();
    assert_eq!(
        patch[0]["value"], "65534:65534:65534:no",
        "uid, gid, no supplementary groups, and the package's files are read-only: {patch}"
    );
}
