mod support;

use std::fs;
use std::path::{Path, PathBuf};

use berth_package::{ArchiveRepository, Limits, LocalRepository, RepoError, load};
use flate2::Compression;
use flate2::write::GzEncoder;
use sha2::{Digest, Sha256};
use support::{is_executable, package_dir, write};
use tar::{EntryType, Header};

/// One raw tar entry; names are written byte-for-byte so tests can build hostile archives that
/// `tar::Builder`'s own path checks would refuse.
enum Entry<'a> {
    File(&'a str, &'a [u8], u32),
    Dir(&'a str),
    Symlink(&'a str, &'a str),
    HardLink(&'a str, &'a str),
}

fn header(name: &str, kind: EntryType, size: u64, mode: u32, link: &str) -> Header {
    let mut header = Header::new_gnu();
    header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    header.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(mode);
    header.set_cksum();
    header
}

fn raw_archive(path: &Path, entries: &[Entry<'_>]) {
    let mut builder = tar::Builder::new(GzEncoder::new(
        fs::File::create(path).expect("create"),
        Compression::fast(),
    ));
    for entry in entries {
        let (h, data): (Header, &[u8]) = match entry {
            Entry::File(name, data, mode) => (
                header(name, EntryType::Regular, data.len() as u64, *mode, ""),
                data,
            ),
            Entry::Dir(name) => (header(name, EntryType::Directory, 0, 0o755, ""), &[]),
            Entry::Symlink(name, target) => {
                (header(name, EntryType::Symlink, 0, 0o777, target), &[])
            }
            Entry::HardLink(name, target) => (header(name, EntryType::Link, 0, 0o644, target), &[]),
        };
        builder.append(&h, data).expect("append");
    }
    builder
        .into_inner()
        .and_then(|gz| gz.finish())
        .expect("finish archive");
}

const DEFINITION: &[u8] = b"type: Application\nname: demo\nversion: 1.0.0\n";

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir(dir.path().join("repo")).expect("mkdir");
        Fixture { dir }
    }
    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }
    fn archive(&self, name: &str) -> PathBuf {
        self.repo().join(name)
    }
    fn dest(&self) -> PathBuf {
        self.dir.path().join("downloaded/demo")
    }
    fn fetch(&self) -> Result<berth_package::Fetched, RepoError> {
        ArchiveRepository::new(self.repo()).fetch("demo", "1.0.0", &self.dest())
    }
    /// Asserts a failed fetch left neither a package nor staging directories behind.
    fn assert_nothing_published(&self) {
        assert!(!self.dest().exists());
        let parent = self.dir.path().join("downloaded");
        let leftovers = fs::read_dir(&parent).map(|it| it.count()).unwrap_or(0);
        assert_eq!(leftovers, 0, "staging directories are removed");
    }
}

#[test]
fn helm_style_archive_with_top_directory_is_published() {
    let fx = Fixture::new();
    let source = package_dir(&fx.dir.path().join("src/demo"), "demo", "1.0.0");
    let mut builder = tar::Builder::new(GzEncoder::new(
        fs::File::create(fx.archive("demo-1.0.0.tar.gz")).expect("create"),
        Compression::fast(),
    ));
    builder.append_dir_all("demo", &source).expect("append");
    builder
        .into_inner()
        .and_then(|gz| gz.finish())
        .expect("finish");

    let fetched = fx.fetch().expect("fetches");
    let pkg = load(&fx.dest()).expect("loads");
    assert_eq!(pkg.definition.name, "demo");
    assert!(
        is_executable(&fx.dest().join("hooks/startup")),
        "exec bit survives the archive"
    );

    // The same content fetched from a directory repository has the same digest.
    let local_root = fx.dir.path().join("local");
    package_dir(&local_root.join("demo/1.0.0"), "demo", "1.0.0");
    let local = LocalRepository::new(&local_root)
        .fetch("demo", "1.0.0", &fx.dir.path().join("other"))
        .expect("fetches");
    assert_eq!(fetched.digest, local.digest);
}

#[test]
fn flat_archive_and_versions() {
    let fx = Fixture::new();
    for version in ["1.0.0", "0.9.0"] {
        let definition = format!("type: Application\nname: demo\nversion: {version}\n");
        raw_archive(
            &fx.archive(&format!("demo-{version}.tar.gz")),
            &[Entry::File("package.yaml", definition.as_bytes(), 0o644)],
        );
    }
    raw_archive(&fx.archive("demo-extra-2.0.0.tar.gz"), &[]);
    fx.fetch().expect("fetches");
    assert!(fx.dest().join("package.yaml").is_file());
    let versions = ArchiveRepository::new(fx.repo())
        .versions("demo")
        .expect("lists");
    assert_eq!(
        versions.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["0.9.0", "1.0.0"]
    );
}

#[test]
fn archive_digest_is_verified() {
    let fx = Fixture::new();
    let archive = fx.archive("demo-1.0.0.tar.gz");
    raw_archive(&archive, &[Entry::File("package.yaml", DEFINITION, 0o644)]);
    let actual = format!(
        "sha256:{}",
        hex::encode(Sha256::digest(fs::read(&archive).expect("read")))
    );
    let repo = ArchiveRepository::new(fx.repo());
    let wrong = format!("sha256:{}", "0".repeat(64));
    let err = repo
        .fetch_verified("demo", "1.0.0", &fx.dest(), Some(&wrong))
        .expect_err("digest mismatch");
    assert!(err.to_string().contains("expected sha256:000"), "{err}");
    fx.assert_nothing_published();
    repo.fetch_verified("demo", "1.0.0", &fx.dest(), Some(&actual))
        .expect("digest matches");
}

/// A named hostile archive and a check that the error is the expected kind.
type HostileCase = (&'static str, Vec<Entry<'static>>, fn(&RepoError) -> bool);

#[test]
fn hostile_archives_are_rejected() {
    let cases: Vec<HostileCase> = vec![
        (
            "absolute path",
            vec![Entry::File("/etc/evil", b"x", 0o644)],
            |e| matches!(e, RepoError::UnsafePath { .. }),
        ),
        (
            "parent dir",
            vec![Entry::File("../evil", b"x", 0o644)],
            |e| matches!(e, RepoError::UnsafePath { .. }),
        ),
        (
            "nested parent dir",
            vec![Entry::File("a/../../evil", b"x", 0o644)],
            |e| matches!(e, RepoError::UnsafePath { .. }),
        ),
        (
            "escaping symlink",
            vec![Entry::Symlink("link", "../../outside")],
            |e| matches!(e, RepoError::LinkEscapes { .. }),
        ),
        (
            "absolute symlink",
            vec![Entry::Symlink("link", "/etc")],
            |e| matches!(e, RepoError::LinkEscapes { .. }),
        ),
        (
            "write through a symlink",
            vec![
                Entry::Dir("sub"),
                Entry::Symlink("sub/up", ".."),
                Entry::File("sub/up/package.yaml", DEFINITION, 0o644),
            ],
            |e| {
                matches!(
                    e,
                    RepoError::UnsafePath {
                        reason: "passes through a symlink",
                        ..
                    }
                )
            },
        ),
        (
            "entry replacing a symlink",
            vec![
                Entry::Symlink("package.yaml", "x"),
                Entry::File("package.yaml", DEFINITION, 0o644),
            ],
            |e| {
                matches!(
                    e,
                    RepoError::UnsafePath {
                        reason: "appears twice",
                        ..
                    }
                )
            },
        ),
        (
            "hard link",
            vec![Entry::File("a", b"x", 0o644), Entry::HardLink("b", "a")],
            |e| matches!(e, RepoError::UnsupportedEntry { .. }),
        ),
    ];
    for (name, entries, expected) in cases {
        let fx = Fixture::new();
        raw_archive(&fx.archive("demo-1.0.0.tar.gz"), &entries);
        let err = fx.fetch().expect_err(name);
        assert!(expected(&err), "{name}: unexpected error {err}");
        fx.assert_nothing_published();
    }
}

#[test]
fn size_limits_apply_to_unpacked_bytes() {
    let fx = Fixture::new();
    // 1 MiB of zeros compresses to about 1 KiB: the limit must count what is unpacked.
    let zeros = vec![0u8; 1024 * 1024];
    raw_archive(
        &fx.archive("demo-1.0.0.tar.gz"),
        &[
            Entry::File("package.yaml", DEFINITION, 0o644),
            Entry::File("blob", &zeros, 0o644),
        ],
    );
    assert!(
        fs::metadata(fx.archive("demo-1.0.0.tar.gz"))
            .expect("stat")
            .len()
            < 64 * 1024
    );
    let limits = Limits {
        max_total_bytes: 256 * 1024,
        ..Limits::default()
    };
    let err = ArchiveRepository::new(fx.repo())
        .with_limits(limits)
        .fetch("demo", "1.0.0", &fx.dest())
        .expect_err("too big");
    assert!(matches!(err, RepoError::LimitExceeded { .. }), "{err}");
    fx.assert_nothing_published();
}

#[test]
fn corrupt_archive_names_the_file() {
    let fx = Fixture::new();
    write(&fx.repo(), "demo-1.0.0.tar.gz", "this is not gzip");
    let err = fx.fetch().expect_err("corrupt");
    assert!(matches!(err, RepoError::Archive { .. }), "{err}");
    assert!(err.to_string().contains("demo-1.0.0.tar.gz"), "{err}");
}

#[test]
fn missing_archive_is_not_found() {
    let fx = Fixture::new();
    let err = fx.fetch().expect_err("missing");
    assert!(matches!(err, RepoError::VersionNotFound { .. }), "{err}");
}

/// A setuid, setgid or sticky bit in a package never reaches the published tree: from an
/// archive or a directory repository, files are 0755 (any execute bit) or 0644.
#[test]
fn setuid_setgid_and_sticky_bits_are_stripped_when_published() {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &Path| fs::metadata(p).expect("stat").permissions().mode() & 0o7777;
    let fx = Fixture::new();
    raw_archive(
        &fx.archive("demo-1.0.0.tar.gz"),
        &[
            Entry::File("package.yaml", DEFINITION, 0o644),
            Entry::File("hooks/suid", b"#!/bin/sh\n", 0o4755),
            Entry::File("hooks/sgid", b"#!/bin/sh\n", 0o2750),
            Entry::File("sticky", b"x", 0o1644),
            Entry::File("sgid-data", b"x", 0o2644),
        ],
    );
    fx.fetch().expect("fetches");
    assert_eq!(mode(&fx.dest().join("hooks/suid")), 0o755);
    assert_eq!(mode(&fx.dest().join("hooks/sgid")), 0o755);
    assert_eq!(mode(&fx.dest().join("sticky")), 0o644);
    assert_eq!(mode(&fx.dest().join("sgid-data")), 0o644);

    let local_root = fx.dir.path().join("local");
    let dir = package_dir(&local_root.join("demo/1.0.0"), "demo", "1.0.0");
    let suid = dir.join("hooks/startup");
    fs::set_permissions(&suid, fs::Permissions::from_mode(0o6755)).expect("chmod");
    let dest = fx.dir.path().join("other");
    LocalRepository::new(&local_root)
        .fetch("demo", "1.0.0", &dest)
        .expect("fetches");
    assert_eq!(mode(&dest.join("hooks/startup")), 0o755);
}
