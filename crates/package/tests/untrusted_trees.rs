//! Package trees are read beneath their root's descriptor, never checked then used: a local
//! user swapping directories for links while berth copies cannot make it read outside the tree
//! (issue 30, attack 7); and links to module directories elsewhere inside the repository root
//! are followed, while one leading out is refused naming it (issue 32, item 11).

mod support;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use berth_package::{LocalRepository, RepoError, Repositories, Source, load};
use support::{package_dir, write};

/// What berth must never copy: a directory outside the repository tree (its data directory, in
/// the attack), holding a "key".
const SECRET: &str = "-----BEGIN PRIVATE KEY----- not for packages";

fn secret_dir(base: &Path) -> PathBuf {
    let dir = base.join("data");
    write(&dir, "ca-key.pem", SECRET);
    write(&dir, "nested/service-key.pem", SECRET);
    dir
}

/// Every file under `dir` (links not followed) whose content is the secret.
fn leaked(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            found.extend(leaked(&path));
        } else if kind.is_file() && std::fs::read_to_string(&path).is_ok_and(|t| t == SECRET) {
            found.push(path);
        }
    }
    found
}

/// The attack: a local user who may write under the repository swaps, in a loop, a directory
/// of the package being copied with a link to berth's data directory (`renameat2` with
/// `RENAME_EXCHANGE`, atomically), while berth fetches the version again and again. Checking an
/// entry's type and then opening it by path would copy the keys in at some point; opening each
/// entry beneath its parent's descriptor, without following it, never does. The race runs for a
/// bounded time (and a bounded number of fetches), counting the swaps and fetches it saw.
#[test]
fn a_directory_swapped_for_a_link_mid_copy_never_brings_outside_files_in() {
    let base = tempfile::tempdir().expect("tempdir");
    let secret = secret_dir(base.path());
    let root = base.path().join("repo");
    let version = package_dir(&root.join("demo/1.0.0"), "demo", "1.0.0");
    // Many entries in the swapped directory: a copy spends its time there.
    for i in 0..200 {
        write(
            &version,
            &format!("templates/many/cm-{i:03}.yaml"),
            "kind: ConfigMap\n",
        );
    }
    // The link waits beside the package, in the attacker's corner of the repository.
    std::fs::create_dir_all(root.join("side")).expect("mkdir");
    symlink(&secret, root.join("side/many")).expect("symlink");

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicUsize::new(0));
    let swapper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let (templates, side) = (version.join("templates"), root.join("side"));
        std::thread::spawn(move || {
            let open = |p: &Path| {
                rustix::fs::open(
                    p,
                    rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY,
                    rustix::fs::Mode::empty(),
                )
                .expect("open")
            };
            let (templates, side) = (open(&templates), open(&side));
            while !stop.load(Ordering::Relaxed) {
                rustix::fs::renameat_with(
                    &templates,
                    "many",
                    &side,
                    "many",
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .expect("RENAME_EXCHANGE");
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };

    let published = base.path().join("cache");
    let deadline = Instant::now() + Duration::from_secs(8);
    let (mut fetches, mut fetched, mut refused) = (0, 0, 0);
    while Instant::now() < deadline && fetches < 400 {
        let dest = published.join(format!("demo-{fetches}"));
        match LocalRepository::new(&root).fetch("demo", "1.0.0", &dest) {
            Ok(_) => fetched += 1,
            // The link seen as a link: refused (it leads out of the package), or met where a
            // directory was a moment before.
            Err(RepoError::LinkEscapes { .. } | RepoError::UnsafePath { .. }) => refused += 1,
            Err(other) => panic!("fetch {fetches}: unexpected error {other}"),
        }
        fetches += 1;
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().expect("swapper");
    let swaps = swaps.load(Ordering::Relaxed);
    println!("{fetches} fetches ({fetched} published, {refused} refused) against {swaps} swaps");
    assert!(swaps > 1000, "the race ran: {swaps} swaps");
    assert!(
        fetched > 0 && refused > 0,
        "both sides of the swap were seen"
    );
    let leaks = leaked(&published);
    assert!(
        leaks.is_empty(),
        "files from outside the tree copied: {leaks:?}"
    );
}

/// `modules/<name>/<version>` links to a module stored elsewhere in the same tree (as
/// addon-operator's modules directories do): followed, since it stays beneath the root.
fn module_tree(base: &Path) -> PathBuf {
    let root = base.join("root");
    package_dir(&root.join("store/demo-1.0.0"), "demo", "1.0.0");
    std::fs::create_dir_all(root.join("modules/demo")).expect("mkdir");
    symlink("../../store/demo-1.0.0", root.join("modules/demo/1.0.0")).expect("symlink");
    root
}

#[test]
fn a_module_directory_linked_inside_the_repository_root_is_followed() {
    let base = tempfile::tempdir().expect("tempdir");
    let root = module_tree(base.path());
    // The package directory itself is the link ...
    let dest = base.path().join("cache/demo");
    LocalRepository::under_root(&root, "modules")
        .fetch("demo", "1.0.0", &dest)
        .expect("a link inside the root is followed");
    assert_eq!(load(&dest).expect("loads").definition.name, "demo");
    assert!(
        !std::fs::symlink_metadata(&dest)
            .expect("published")
            .is_symlink(),
        "the package is copied, not linked"
    );
    // ... and so may the package's directory be (`modules/demo -> ../store/demo`).
    std::fs::create_dir_all(root.join("store/demo/1.0.0")).expect("mkdir");
    package_dir(&root.join("store/demo/1.0.0"), "demo", "1.0.0");
    std::fs::remove_dir_all(root.join("modules/demo")).expect("rm");
    symlink("../store/demo", root.join("modules/demo")).expect("symlink");
    let repo = LocalRepository::under_root(&root, "modules");
    assert_eq!(
        repo.versions("demo").expect("versions"),
        [semver::Version::new(1, 0, 0)]
    );
    repo.fetch("demo", "1.0.0", &base.path().join("cache/demo-2"))
        .expect("followed");
}

#[test]
fn a_module_directory_linked_out_of_the_repository_root_is_refused_naming_the_link() {
    let base = tempfile::tempdir().expect("tempdir");
    let root = module_tree(base.path());
    package_dir(&base.path().join("elsewhere/demo-2.0.0"), "demo", "2.0.0");
    symlink(
        "../../../elsewhere/demo-2.0.0",
        root.join("modules/demo/2.0.0"),
    )
    .expect("symlink");
    symlink(
        base.path().join("elsewhere/demo-2.0.0"),
        root.join("modules/demo/3.0.0"),
    )
    .expect("symlink");
    for version in ["2.0.0", "3.0.0"] {
        let dest = base.path().join("cache").join(version);
        let err = LocalRepository::under_root(&root, "modules")
            .fetch("demo", version, &dest)
            .expect_err("leaves the root");
        let text = err.to_string();
        assert!(matches!(err, RepoError::LeavesRoot { .. }), "{text}");
        assert!(
            text.contains(&format!("modules/demo/{version} ->")),
            "names the link: {text}"
        );
        assert!(!dest.exists(), "nothing published");
    }
    // A directory repository is its own root: the same link leading out of it is refused.
    let err = LocalRepository::new(root.join("modules"))
        .fetch("demo", "1.0.0", &base.path().join("cache/own-root"))
        .expect_err("leaves the repository directory");
    assert!(
        err.to_string()
            .contains("demo/1.0.0 -> ../../store/demo-1.0.0"),
        "{err}"
    );
}

/// An Update names a directory under a configured root; the worker resolves and fetches it
/// beneath the root, following links that stay inside it.
#[tokio::test]
async fn a_repository_under_a_root_fetches_through_links_inside_the_root_only() {
    let base = tempfile::tempdir().expect("tempdir");
    let root = module_tree(base.path());
    let mut repos = Repositories::default();
    repos.add_root(&root).expect("root");
    let resolved = repos.resolve("modules").expect("resolves");
    assert_eq!(
        resolved.source,
        Source::UnderRoot {
            root: root.clone(),
            dir: "modules".into()
        }
    );
    let dest = base.path().join("cache/demo");
    resolved
        .source
        .fetch("demo", "1.0.0", &dest, Default::default())
        .await
        .expect("fetched");
    assert!(load(&dest).is_ok());
}
