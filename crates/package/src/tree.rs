//! Untrusted trees, opened and never checked then used.
//!
//! A package tree (a local repository, a staging directory, the package cache) may be changed
//! by someone else while berth reads it: a directory swapped for a link to berth's data
//! directory between a check of the path and its use would have berth copy its own keys into a
//! package. So nothing under a tree's root is ever reached by path: the root is opened once
//! (its path is trusted: a configured root, berth's own cache), and everything below it is
//! resolved by the kernel beneath that directory's file descriptor, each object then checked
//! on the descriptor that is used (`fstat`), never on a path.
//!
//! Two ways to resolve a relative path:
//! - [`Links::Refuse`]: no component may be a symbolic link (`openat2` with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`): copying and digesting trees, writing staged
//!   ones. Links are read as links (`readlinkat`), never followed.
//! - [`Links::Beneath`]: links are followed while they stay beneath the root
//!   (`RESOLVE_BENEATH`: the kernel refuses `..` above the root and absolute links): a
//!   repository root with links inside it, the package cache (packages may hold links within
//!   themselves).
//!
//! Where `openat2` is missing (Linux before 5.6, or a seccomp profile without it), the same
//! resolution is done one component at a time: each component opened with `O_NOFOLLOW`
//! beneath the previous one's descriptor, `..` taken off berth's own stack of descriptors
//! (never the kernel's `..`), a link read with `readlinkat` and its target resolved the same
//! way (40 links at most, as the kernel's). Hand-written because no crate of the workspace
//! resolves beneath a descriptor without `openat2` (cap-std would, at the cost of a
//! dependency tree of its own).

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

/// Most links one resolution follows (the kernel's own limit).
const MAX_LINKS: usize = 40;
/// Attempts of an `openat2` that the kernel asks to retry (`EAGAIN`: a rename raced with a
/// `..` resolution beneath the root).
const RETRIES: usize = 8;

/// How symbolic links met while resolving a relative path are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Any link is refused.
    Refuse,
    /// Links are followed while they stay beneath the root.
    Beneath,
}

/// Why a path could not be resolved beneath a root.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    /// A symbolic link where none may be (`link`: the first one, when it could be told).
    #[error("{} passes through a symbolic link{}", path.display(), at(link.as_deref()))]
    Link {
        path: PathBuf,
        link: Option<PathBuf>,
    },
    /// The path leaves the root (through `..` or a link, `target` its target).
    #[error("{} leaves {}{}", path.display(), root.display(), at(link.as_deref()))]
    Escapes {
        path: PathBuf,
        root: PathBuf,
        link: Option<PathBuf>,
        target: Option<PathBuf>,
    },
    /// The entry changed while it was being opened (a directory swapped for a link, ...):
    /// whoever may write in the tree is changing it under the reader.
    #[error("{} changed while it was being read", path.display())]
    Changed { path: PathBuf },
    /// Not the kind of object asked for (a FIFO where a file was expected, ...).
    #[error("{} is {found}, not {wanted}", path.display())]
    Kind {
        path: PathBuf,
        found: &'static str,
        wanted: &'static str,
    },
}

fn at(link: Option<&Path>) -> String {
    link.map(|l| format!(" (the link {})", l.display()))
        .unwrap_or_default()
}

impl TreeError {
    /// Whether the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, TreeError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// Whether something that is not a directory stands where a directory was expected.
    pub fn is_not_a_directory(&self) -> bool {
        matches!(self, TreeError::Io { source, .. }
            if source.raw_os_error() == Some(Errno::NOTDIR.raw_os_error()))
    }

    /// Whether the object exists already (creating it exclusively failed).
    pub fn is_already_there(&self) -> bool {
        matches!(self, TreeError::Io { source, .. } if source.kind() == io::ErrorKind::AlreadyExists)
    }
}

/// What an object beneath a root is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Directory,
    File,
    /// A symbolic link itself (only when links are not followed).
    Link,
    /// Anything else, named: a FIFO, a socket, a device.
    Other(&'static str),
}

impl Kind {
    fn of(stat: &rustix::fs::Stat) -> Kind {
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => Kind::Directory,
            FileType::RegularFile => Kind::File,
            FileType::Symlink => Kind::Link,
            other => Kind::Other(kind_name(other)),
        }
    }
}

/// What one entry of a directory is, looked at without following it.
pub enum Child {
    Dir(Dir),
    /// A regular file, open for reading, and whether any execute bit is set.
    File(File, bool),
    /// A symbolic link and its target (never followed).
    Link(PathBuf),
    /// Anything else: a FIFO, a socket, a device.
    Other(&'static str),
}

/// An open directory of an untrusted tree; `path` only names it in messages.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    /// Opens the root of a tree. Its path is trusted (a configured repository root, berth's
    /// cache or staging directory), so links in it are followed.
    pub fn open(path: &Path) -> Result<Dir, TreeError> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| io_error(path, e))?;
        Ok(Dir {
            fd,
            path: path.to_owned(),
        })
    }

    /// The path this directory was opened as (for messages).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path the kernel knows this directory by now (it may have moved since it was
    /// opened), for identities and messages; never used to reach it.
    pub fn real_path(&self) -> Result<PathBuf, TreeError> {
        let link = format!("/proc/self/fd/{}", rustix::fd::AsRawFd::as_raw_fd(&self.fd));
        std::fs::read_link(&link).map_err(|source| TreeError::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// Opens the directory `rel` beneath this one.
    pub fn dir(&self, rel: &Path, links: Links) -> Result<Dir, TreeError> {
        let fd = self.resolve(rel, dir_flags(), links)?;
        Ok(Dir {
            fd,
            path: self.path.join(rel),
        })
    }

    /// Opens the regular file `rel` beneath this one for reading, and whether any execute bit
    /// is set. Opened without blocking (a FIFO put in its place cannot hang the reader) and
    /// checked on the descriptor.
    pub fn file(&self, rel: &Path, links: Links) -> Result<(File, bool), TreeError> {
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = self.resolve(rel, flags, links)?;
        let path = self.path.join(rel);
        let stat = rustix::fs::fstat(&fd).map_err(|e| io_error(&path, e))?;
        let kind = FileType::from_raw_mode(stat.st_mode);
        if kind != FileType::RegularFile {
            return Err(TreeError::Kind {
                path,
                found: kind_name(kind),
                wanted: "a regular file",
            });
        }
        Ok((File::from(fd), stat.st_mode & 0o111 != 0))
    }

    /// What `rel` is beneath this one, following links as `links` says: `None` when it does
    /// not exist.
    pub fn kind(&self, rel: &Path, links: Links) -> Result<Option<Kind>, TreeError> {
        match self.resolve(rel, OFlags::PATH | OFlags::CLOEXEC, links) {
            Ok(fd) => {
                let stat = rustix::fs::fstat(&fd).map_err(|e| io_error(&self.path.join(rel), e))?;
                Ok(Some(Kind::of(&stat)))
            }
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether `rel` is a directory (links followed as `links` says); `false` when it is
    /// missing or anything else.
    pub fn is_dir(&self, rel: &Path, links: Links) -> Result<bool, TreeError> {
        Ok(self.kind(rel, links)? == Some(Kind::Directory))
    }

    /// Whether `rel` is a regular file (links followed as `links` says).
    pub fn is_file(&self, rel: &Path, links: Links) -> Result<bool, TreeError> {
        Ok(self.kind(rel, links)? == Some(Kind::File))
    }

    /// The names in this directory, sorted bytewise (`.` and `..` left out).
    pub fn names(&self) -> Result<Vec<OsString>, TreeError> {
        let io = |e| io_error(&self.path, e);
        let mut dir = rustix::fs::Dir::read_from(&self.fd).map_err(io)?;
        let mut names = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry.map_err(io)?;
            let name = entry.file_name().to_bytes();
            if name != b"." && name != b".." {
                names.push(OsString::from_vec(name.to_vec()));
            }
        }
        names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
        Ok(names)
    }

    /// Opens the entry `name` of this directory without following it, and says what it is.
    /// What is opened is what is checked: the type comes from the descriptor (a file swapped
    /// for something else after the first look is refused, never read).
    pub fn child(&self, name: &OsStr) -> Result<Child, TreeError> {
        let path = self.path.join(name);
        check_name(name, &path)?;
        let io = |e| io_error(&path, e);
        let changed = || TreeError::Changed { path: path.clone() };
        let stat = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW).map_err(io)?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => match rustix::fs::readlinkat(&self.fd, name, Vec::new()) {
                Ok(target) => Ok(Child::Link(PathBuf::from(OsString::from_vec(
                    target.into_bytes(),
                )))),
                // No longer a link.
                Err(Errno::INVAL) => Err(changed()),
                Err(e) => Err(io(e)),
            },
            FileType::Directory => {
                match rustix::fs::openat(&self.fd, name, dir_flags(), Mode::empty()) {
                    Ok(fd) => Ok(Child::Dir(Dir { fd, path })),
                    // No longer a directory.
                    Err(Errno::LOOP | Errno::NOTDIR) => Err(changed()),
                    Err(e) => Err(io(e)),
                }
            }
            FileType::RegularFile => match self.file(Path::new(name), Links::Refuse) {
                Ok((file, exec)) => Ok(Child::File(file, exec)),
                // No longer a regular file.
                Err(TreeError::Link { .. } | TreeError::Kind { .. }) => Err(changed()),
                Err(e) => Err(e),
            },
            other => Ok(Child::Other(kind_name(other))),
        }
    }

    /// Creates the directory `name` in this one (mode 0755), or finds the directory there.
    /// Returns it open, and whether it was there already.
    pub fn create_dir(&self, name: &OsStr) -> Result<(Dir, bool), TreeError> {
        let path = self.path.join(name);
        check_name(name, &path)?;
        let existed = match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(0o755)) {
            Ok(()) => false,
            Err(Errno::EXIST) => true,
            Err(e) => return Err(io_error(&path, e)),
        };
        let fd = rustix::fs::openat(&self.fd, name, dir_flags(), Mode::empty())
            .map_err(|e| self.nofollow_error(name, e))?;
        Ok((Dir { fd, path }, existed))
    }

    /// Creates the file `name` in this one, which must not exist, with `mode`.
    pub fn create_file(&self, name: &OsStr, mode: u32) -> Result<File, TreeError> {
        let path = self.path.join(name);
        check_name(name, &path)?;
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NOCTTY;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode))
            .map_err(|e| io_error(&path, e))?;
        // The umask may have taken bits away; the descriptor is the file just made.
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(|e| io_error(&path, e))?;
        Ok(File::from(fd))
    }

    /// Creates the symbolic link `name` → `target` in this one.
    pub fn create_link(&self, name: &OsStr, target: &Path) -> Result<(), TreeError> {
        let path = self.path.join(name);
        check_name(name, &path)?;
        rustix::fs::symlinkat(target, &self.fd, name).map_err(|e| io_error(&path, e))
    }

    /// Resolves `rel` beneath this directory and opens it with `flags`.
    fn resolve(&self, rel: &Path, flags: OFlags, links: Links) -> Result<OwnedFd, TreeError> {
        let flags = flags | OFlags::CLOEXEC;
        let opened = match openat2_beneath(self.fd.as_fd(), rel, flags, links) {
            Some(result) => result,
            None => walk_beneath(self.fd.as_fd(), rel, flags, links),
        };
        opened.map_err(|e| self.resolve_error(rel, links, e))
    }

    /// The error for `rel` failing to resolve with `errno`, naming the link at fault when one
    /// can be found (a second walk, for the message only: nothing found is used).
    fn resolve_error(&self, rel: &Path, links: Links, errno: Errno) -> TreeError {
        let path = self.path.join(rel);
        match (errno, links) {
            (Errno::LOOP, Links::Refuse) => TreeError::Link {
                link: first_link(self.fd.as_fd(), rel).map(|(l, _)| self.path.join(l)),
                path,
            },
            (Errno::XDEV, _) => {
                let link = first_link(self.fd.as_fd(), rel);
                TreeError::Escapes {
                    link: link.as_ref().map(|(l, _)| self.path.join(l)),
                    target: link.map(|(_, t)| t),
                    root: self.path.clone(),
                    path,
                }
            }
            (e, _) => io_error(&path, e),
        }
    }

    /// The error of opening the directory `name` with `O_NOFOLLOW`: a link there (perhaps
    /// swapped in since it was looked at), or something else than a directory.
    fn nofollow_error(&self, name: &OsStr, errno: Errno) -> TreeError {
        let path = self.path.join(name);
        let is_link = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink);
        match errno {
            Errno::LOOP | Errno::NOTDIR if is_link => TreeError::Link {
                link: Some(path.clone()),
                path,
            },
            e => io_error(&path, e),
        }
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of an unknown type",
    }
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW
}

fn io_error(path: &Path, errno: Errno) -> TreeError {
    TreeError::Io {
        path: path.to_owned(),
        source: io::Error::from(errno),
    }
}

/// A directory entry's name: one plain component.
fn check_name(name: &OsStr, path: &Path) -> Result<(), TreeError> {
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes == b"." || bytes == b".." || bytes.contains(&b'/') {
        return Err(TreeError::Io {
            path: path.to_owned(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "not a plain file name"),
        });
    }
    Ok(())
}

/// Whether `openat2` is known to work (1), known missing (2), or not tried yet (0).
static OPENAT2: AtomicU8 = AtomicU8::new(0);

/// For tests: resolve one component at a time, as without `openat2`.
#[cfg(test)]
pub(crate) fn without_openat2() {
    OPENAT2.store(2, Ordering::Relaxed);
}

/// `openat2` beneath `root`; `None` when the kernel has none (the caller walks instead).
fn openat2_beneath(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    links: Links,
) -> Option<Result<OwnedFd, Errno>> {
    if OPENAT2.load(Ordering::Relaxed) == 2 {
        return None;
    }
    let mut resolve = ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS;
    if links == Links::Refuse {
        resolve |= ResolveFlags::NO_SYMLINKS;
    }
    // The trailing component of a directory or a file to read is never followed when links
    // are refused; `O_NOFOLLOW` on top of `RESOLVE_NO_SYMLINKS` changes nothing then.
    let flags = match links {
        Links::Refuse => flags,
        Links::Beneath => flags - OFlags::NOFOLLOW,
    };
    let rel = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    for _ in 0..RETRIES {
        match rustix::fs::openat2(root, rel, flags, Mode::empty(), resolve) {
            Err(Errno::AGAIN) => continue,
            // No openat2 (old kernel), or a seccomp profile that does not know it.
            Err(Errno::NOSYS | Errno::PERM) if OPENAT2.load(Ordering::Relaxed) == 0 => {
                OPENAT2.store(2, Ordering::Relaxed);
                return None;
            }
            result => {
                OPENAT2.store(1, Ordering::Relaxed);
                return Some(result);
            }
        }
    }
    Some(Err(Errno::AGAIN))
}

/// The components of `rel` to walk: names and `..` (`.` dropped); an absolute path leaves
/// any root.
fn components(rel: &Path) -> Result<VecDeque<OsString>, Errno> {
    let mut out = VecDeque::new();
    for c in rel.components() {
        match c {
            Component::Normal(name) => out.push_back(name.to_owned()),
            Component::ParentDir => out.push_back(OsString::from("..")),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return Err(Errno::XDEV),
        }
    }
    Ok(out)
}

/// Resolves `rel` beneath `root` one component at a time (see the module docs), opening the
/// last with `flags`.
fn walk_beneath(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    links: Links,
) -> Result<OwnedFd, Errno> {
    let mut pending = components(rel)?;
    // The directories walked into, beneath `root`; `..` pops one, and never past `root`.
    let mut stack: Vec<OwnedFd> = Vec::new();
    let mut followed = 0;
    loop {
        let Some(name) = pending.pop_front() else {
            // Nothing left: the path named a directory walked into (or the root itself).
            let here = stack.last().map_or(root, AsFd::as_fd);
            return rustix::fs::openat(here, ".", flags, Mode::empty());
        };
        if name == ".." {
            stack.pop().ok_or(Errno::XDEV)?;
            continue;
        }
        let here = stack.last().map_or(root, AsFd::as_fd);
        let last = pending.is_empty();
        let open_flags = if last {
            flags | OFlags::NOFOLLOW
        } else {
            dir_flags()
        };
        let opened = rustix::fs::openat(here, &name, open_flags, Mode::empty());
        // `O_PATH | O_NOFOLLOW` opens a trailing link itself instead of failing.
        let opened_link = match &opened {
            Ok(fd) if last && flags.contains(OFlags::PATH) => rustix::fs::fstat(fd)
                .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink),
            _ => false,
        };
        match opened {
            Ok(fd) if last && !opened_link => return Ok(fd),
            Ok(fd) if !last => stack.push(fd),
            Ok(_) | Err(Errno::LOOP | Errno::NOTDIR) => {
                let is_link = opened_link
                    || rustix::fs::statat(here, &name, AtFlags::SYMLINK_NOFOLLOW)
                        .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Symlink);
                if !is_link {
                    return Err(Errno::NOTDIR);
                }
                if links == Links::Refuse {
                    return Err(Errno::LOOP);
                }
                followed += 1;
                if followed > MAX_LINKS {
                    return Err(Errno::LOOP);
                }
                let target = rustix::fs::readlinkat(here, &name, Vec::new())?;
                let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
                let mut spliced = components(&target)?;
                spliced.append(&mut pending);
                pending = spliced;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The first symbolic link on `rel`'s way beneath `root`, and its target, for messages.
fn first_link(root: BorrowedFd<'_>, rel: &Path) -> Option<(PathBuf, PathBuf)> {
    let mut walked = PathBuf::new();
    let mut here: Option<OwnedFd> = None;
    for c in rel.components() {
        let Component::Normal(name) = c else {
            return None;
        };
        let dir = here.as_ref().map_or(root, AsFd::as_fd);
        walked.push(name);
        let stat = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Symlink => {
                let target = rustix::fs::readlinkat(dir, name, Vec::new()).ok()?;
                let target = PathBuf::from(OsString::from_vec(target.into_bytes()));
                return Some((walked, target));
            }
            FileType::Directory => {
                here = Some(rustix::fs::openat(dir, name, dir_flags(), Mode::empty()).ok()?);
            }
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use std::os::unix::fs::symlink;

    /// root/{a/b/file, a/up -> .., a/out -> ../.., a/abs -> /etc, a/loop -> loop, link -> a}
    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/file"), "inside").unwrap();
        std::fs::write(dir.path().join("secret"), "outside").unwrap();
        symlink("..", root.join("a/up")).unwrap();
        symlink("../..", root.join("a/out")).unwrap();
        symlink("/etc", root.join("a/abs")).unwrap();
        symlink("loop", root.join("a/loop")).unwrap();
        symlink("a", root.join("link")).unwrap();
        dir
    }

    fn read(dir: &Dir, rel: &str, links: Links) -> Result<String, TreeError> {
        let (mut file, _) = dir.file(Path::new(rel), links)?;
        let mut text = String::new();
        file.read_to_string(&mut text).unwrap();
        Ok(text)
    }

    fn both_ways(check: impl Fn()) {
        check();
        without_openat2();
        check();
        OPENAT2.store(0, Ordering::Relaxed);
    }

    #[test]
    fn links_are_refused_or_followed_only_beneath_the_root() {
        both_ways(|| {
            let t = tree();
            let root = Dir::open(&t.path().join("root")).unwrap();
            assert_eq!(read(&root, "a/b/file", Links::Refuse).unwrap(), "inside");
            let refused = read(&root, "link/b/file", Links::Refuse).unwrap_err();
            assert!(
                matches!(&refused, TreeError::Link { link: Some(l), .. } if l.ends_with("root/link")),
                "{refused}"
            );
            assert_eq!(
                read(&root, "link/b/file", Links::Beneath).unwrap(),
                "inside"
            );
            assert_eq!(
                read(&root, "a/up/a/b/file", Links::Beneath).unwrap(),
                "inside"
            );
            for out in ["a/out/secret", "../secret", "a/abs/passwd"] {
                let e = read(&root, out, Links::Beneath).unwrap_err();
                assert!(matches!(e, TreeError::Escapes { .. }), "{out}: {e}");
            }
            assert!(read(&root, "a/loop", Links::Beneath).is_err());
            assert!(
                read(&root, "a/b/missing", Links::Beneath)
                    .unwrap_err()
                    .is_not_found()
            );
            assert!(root.is_dir(Path::new("link"), Links::Beneath).unwrap());
            assert!(
                !root
                    .is_dir(Path::new("link"), Links::Refuse)
                    .is_ok_and(|d| d)
            );
        });
    }

    #[test]
    fn children_are_what_their_descriptor_says() {
        let t = tree();
        let root = Dir::open(&t.path().join("root")).unwrap();
        let a = match root.child(OsStr::new("a")).unwrap() {
            Child::Dir(d) => d,
            _ => panic!("a directory"),
        };
        assert_eq!(
            a.names().unwrap(),
            ["abs", "b", "loop", "out", "up"].map(OsString::from)
        );
        assert!(
            matches!(a.child(OsStr::new("out")).unwrap(), Child::Link(t) if t == Path::new("../.."))
        );
        let fifo = t.path().join("root/fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(matches!(
            root.child(OsStr::new("fifo")).unwrap(),
            Child::Other("a FIFO")
        ));
        let e = root.file(Path::new("fifo"), Links::Refuse).unwrap_err();
        assert!(
            matches!(
                e,
                TreeError::Kind {
                    found: "a FIFO",
                    ..
                }
            ),
            "{e}"
        );
        assert!(root.child(OsStr::new("..")).is_err());
    }

    #[test]
    fn files_are_created_beneath_and_never_through_a_link() {
        let t = tree();
        let root = Dir::open(&t.path().join("root")).unwrap();
        let (made, existed) = root.create_dir(OsStr::new("new")).unwrap();
        assert!(!existed);
        let mut f = made.create_file(OsStr::new("f"), 0o755).unwrap();
        std::io::Write::write_all(&mut f, b"x").unwrap();
        let mode = std::fs::metadata(t.path().join("root/new/f")).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o755
        );
        assert!(
            root.create_file(OsStr::new("link"), 0o644).is_err(),
            "a link is there"
        );
        assert!(matches!(
            root.create_dir(OsStr::new("link")),
            Err(TreeError::Link { .. })
        ));
        let (_, existed) = root.create_dir(OsStr::new("a")).unwrap();
        assert!(existed);
    }
}
