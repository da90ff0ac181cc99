//! OCI repositories against a real registry: Debian's `docker-registry` (the reference
//! distribution registry), started by the test on a loopback port of its own, with and without
//! htpasswd authentication. Without the binary the tests fail under `CI=true` (CI installs
//! it) and otherwise print a loud skip notice.

mod support;

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use berth_package::{Limits, OciAuth, OciRepository, RepoError, pack};
use support::{package_dir, write, write_executable};

const REGISTRY_BIN: &str = "docker-registry";

/// A registry process on 127.0.0.1, killed when dropped.
struct Registry {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn registry_binary() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join(REGISTRY_BIN))
            .find(|p| p.is_file())
    })
}

/// Starts a registry; `users` enables htpasswd auth with those (user, password) pairs.
fn start_registry(users: &[(&str, &str)]) -> Option<Registry> {
    let Some(binary) = registry_binary() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("no {REGISTRY_BIN} on PATH; CI must run the OCI repository tests");
        }
        eprintln!(
            "\n!!!!!!!! SKIPPED: no {REGISTRY_BIN} on PATH (apt-get install docker-registry) !!!!!!!!\n"
        );
        return None;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let mut auth = String::new();
    if !users.is_empty() {
        let htpasswd = dir.path().join("htpasswd");
        let lines: Vec<String> = users
            .iter()
            .map(|(u, p)| format!("{u}:{}", bcrypt::hash(p, 5).expect("bcrypt")))
            .collect();
        std::fs::write(&htpasswd, lines.join("\n") + "\n").expect("htpasswd");
        auth = format!(
            "auth:\n  htpasswd:\n    realm: berth-test\n    path: {}\n",
            htpasswd.display()
        );
    }
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:0\n  secret: berth-test\n{auth}",
            dir.path().join("data").display()
        ),
    )
    .expect("config");
    let mut child = Command::new(binary)
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start docker-registry");
    // It logs `listening on 127.0.0.1:PORT` once it accepts connections; the reader keeps
    // draining its log afterwards so it never blocks on a full pipe.
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let mut sent = false;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if !sent && let Some(at) = line.find("listening on ") {
                let addr: String = line[at + "listening on ".len()..]
                    .chars()
                    .take_while(|c| !c.is_whitespace() && *c != '"')
                    .collect();
                let _ = tx.send(addr);
                sent = true;
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("docker-registry announced its address");
    Some(Registry {
        child,
        addr,
        _dir: dir,
    })
}

fn repo(registry: &Registry, auth: OciAuth) -> OciRepository {
    OciRepository::new(
        &format!("oci://{}/berth/packages", registry.addr),
        auth,
        true,
    )
    .expect("valid repository URL")
}

fn packed(root: &Path, name: &str, version: &str) -> berth_package::Packed {
    let dir = package_dir(&root.join(format!("{name}-{version}")), name, version);
    write(&dir, "values.yaml", &format!("release: \"{version}\"\n"));
    pack(&dir, Limits::default()).expect("pack")
}

#[tokio::test]
async fn push_then_fetch_the_newest_matching_version() {
    let Some(registry) = start_registry(&[]) else {
        return;
    };
    let work = tempfile::tempdir().expect("tempdir");
    let repo = repo(&registry, OciAuth::Anonymous);
    for version in ["1.2.0", "1.2.7", "1.3.0", "2.0.0"] {
        repo.push(&packed(work.path(), "demo", version))
            .await
            .expect("push");
    }
    let versions: Vec<String> = repo
        .versions("demo")
        .await
        .expect("versions")
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(versions, ["1.2.0", "1.2.7", "1.3.0", "2.0.0"]);

    let dest = work.path().join("cache/demo");
    let got = repo
        .fetch("demo", "~1.2", &dest, None)
        .await
        .expect("fetch ~1.2");
    assert_eq!(got.version.to_string(), "1.2.7", "the newest 1.2.x");
    assert!(got.manifest_digest.starts_with("sha256:"));
    let values = std::fs::read_to_string(dest.join("values.yaml")).expect("published");
    assert_eq!(values, "release: \"1.2.7\"\n");
    assert!(
        dest.join("hooks/startup")
            .metadata()
            .is_ok_and(|m| m.permissions().mode() & 0o111 != 0),
        "hooks stay executable"
    );

    // The same tag again: same manifest; pinned to it, it still fetches.
    let again = repo
        .fetch("demo", "1.2.7", &dest, Some(&got.manifest_digest))
        .await
        .expect("pinned fetch");
    assert_eq!(again.fetched.digest, got.fetched.digest);

    // The tag pushed again with other content: the manifest digest changes, and a fetch
    // pinned to the old one is refused, leaving what was published.
    let changed = work.path().join("changed");
    package_dir(&changed, "demo", "1.2.7");
    write(&changed, "values.yaml", "release: rebuilt\n");
    repo.push(&pack(&changed, Limits::default()).expect("pack"))
        .await
        .expect("push again");
    let err = repo
        .fetch("demo", "1.2.7", &dest, Some(&got.manifest_digest))
        .await
        .expect_err("the manifest changed");
    assert!(err.to_string().contains("expected sha256:"), "{err}");
    assert_eq!(
        std::fs::read_to_string(dest.join("values.yaml")).unwrap(),
        "release: \"1.2.7\"\n",
        "a refused fetch changes nothing"
    );
    let refetched = repo
        .fetch("demo", "1.2.7", &dest, None)
        .await
        .expect("fetch");
    assert_ne!(refetched.manifest_digest, got.manifest_digest);
    assert_eq!(
        std::fs::read_to_string(dest.join("values.yaml")).unwrap(),
        "release: rebuilt\n"
    );

    // Clear errors for what is not there.
    let missing = repo.fetch("demo", "~3", &dest, None).await.unwrap_err();
    assert!(
        matches!(missing, RepoError::VersionNotFound { .. }),
        "{missing}"
    );
    let unknown = repo.versions("nope").await.unwrap_err();
    assert!(
        matches!(unknown, RepoError::PackageNotFound { .. }),
        "{unknown}"
    );
}

#[tokio::test]
async fn an_authenticated_registry_needs_the_right_credentials() {
    let Some(registry) = start_registry(&[("berth", "s3cret")]) else {
        return;
    };
    let work = tempfile::tempdir().expect("tempdir");
    let good = repo(
        &registry,
        OciAuth::Basic {
            username: "berth".into(),
            password: "s3cret".into(),
        },
    );
    good.push(&packed(work.path(), "demo", "1.0.0"))
        .await
        .expect("push with credentials");
    let dest = work.path().join("cache/demo");
    good.fetch("demo", "1.0.0", &dest, None)
        .await
        .expect("fetch with credentials");

    for auth in [
        OciAuth::Anonymous,
        OciAuth::Basic {
            username: "berth".into(),
            password: "wrong".into(),
        },
    ] {
        let other = work.path().join("other");
        let err = repo(&registry, auth)
            .fetch("demo", "1.0.0", &other, None)
            .await
            .expect_err("refused without the right credentials");
        assert!(!other.exists(), "nothing published: {err}");
        let text = err.to_string().to_lowercase();
        assert!(
            text.contains("not authorized") || text.contains("unauthorized"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_layer_larger_than_the_limits_is_refused_before_download() {
    let Some(registry) = start_registry(&[]) else {
        return;
    };
    let work = tempfile::tempdir().expect("tempdir");
    let dir = package_dir(&work.path().join("big"), "big", "1.0.0");
    // Random-looking bytes do not compress: the layer is about as large as the file.
    let noise: String = (0..200_000u32)
        .map(|i| char::from(b'a' + (i.wrapping_mul(2_654_435_761) >> 27) as u8 % 26))
        .collect();
    write(&dir, "files/noise.txt", &noise);
    let packed = pack(&dir, Limits::default()).expect("pack");
    let repo = repo(&registry, OciAuth::Anonymous);
    repo.push(&packed).await.expect("push");
    let small = repo.clone().with_limits(Limits {
        max_total_bytes: 10_000,
        ..Limits::default()
    });
    let dest = work.path().join("cache/big");
    let err = small
        .fetch("big", "1.0.0", &dest, None)
        .await
        .expect_err("over the limit");
    assert!(matches!(err, RepoError::LimitExceeded { .. }), "{err}");
    assert!(!dest.exists());
}

#[test]
fn packing_is_reproducible_and_strips_special_modes() {
    let work = tempfile::tempdir().expect("tempdir");
    let dir = package_dir(&work.path().join("demo"), "demo", "1.0.0");
    let hook = write_executable(&dir, "hooks/setuid", "#!/bin/sh\n");
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let first = pack(&dir, Limits::default()).expect("pack");
    let second = pack(&dir, Limits::default()).expect("pack");
    assert_eq!(first.digest, second.digest, "same tree, same bytes");
    assert_eq!(
        (first.name.as_str(), first.version.as_str()),
        ("demo", "1.0.0")
    );
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(first.bytes.as_slice()));
    for entry in archive.entries().unwrap() {
        let entry = entry.unwrap();
        let mode = entry.header().mode().unwrap();
        assert_eq!(mode & 0o7000, 0, "{:?}: {mode:o}", entry.path().unwrap());
    }
    // Not a package: a clear error naming what is missing.
    let empty = work.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let err = pack(&empty, Limits::default()).unwrap_err();
    assert!(err.to_string().contains("package.yaml"), "{err}");
    // A link out of the package is refused.
    std::os::unix::fs::symlink("/etc/passwd", dir.join("leak")).unwrap();
    let err = pack(&dir, Limits::default()).unwrap_err();
    assert!(matches!(err, RepoError::LinkEscapes { .. }), "{err}");
}
