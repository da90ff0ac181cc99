//! A run's directory: made fresh for each hook process, owned by the hook's uid (mode 0700)
//! when it runs as its principal, and read back through a handle on the directory, never by
//! path: the hook controls what is inside.

use std::fs::File;
use std::io::Read as _;
use std::os::fd::AsFd as _;
use std::path::Path;

use nix::fcntl::OFlag;
use nix::sys::stat::Mode;

use super::HookUser;

/// Operator environment switch that keeps run directories (shell-operator's).
const DEBUG_KEEP_TMP_FILES: &str = "DEBUG_KEEP_TMP_FILES";

/// One run's directory; removed by [`RunDir::finish`] (or when dropped).
pub(crate) struct RunDir {
    dir: tempfile::TempDir,
    handle: File,
    owner: Option<HookUser>,
}

impl RunDir {
    /// Makes a fresh directory in `parent` (mode 0700), handed to `owner` when given.
    pub(crate) fn create(
        parent: &Path,
        prefix: &str,
        owner: Option<HookUser>,
    ) -> std::io::Result<RunDir> {
        let dir = tempfile::Builder::new().prefix(prefix).tempdir_in(parent)?;
        let handle = nix::fcntl::open(
            dir.path(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map(File::from)
        .map_err(std::io::Error::from)?;
        // The owner's alone, whatever the umask or the temp file crate's default.
        nix::sys::stat::fchmod(handle.as_fd(), Mode::S_IRWXU).map_err(std::io::Error::from)?;
        if let Some(user) = owner {
            chown(&handle, user)?;
        }
        Ok(RunDir { dir, handle, owner })
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a new file `name` (mode 0600, the owner's).
    pub(crate) fn write(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write as _;
        let fd = nix::fcntl::openat(
            self.handle.as_fd(),
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| std::io::Error::new(std::io::Error::from(e).kind(), format!("{name}: {e}")))?;
        let mut file = File::from(fd);
        if let Some(user) = self.owner {
            chown(&file, user)?;
        }
        file.write_all(bytes)
    }

    /// Reads the file `name` that the hook may have written, replaced or removed: a missing
    /// file reads as empty. It is opened beneath the directory without following a link and
    /// without blocking (a FIFO would hang the open), and must be a regular file (not a FIFO,
    /// socket or device such as `/dev/zero`), the hook's own (not another file linked in), of
    /// at most `limit` bytes.
    pub(crate) fn read(&self, name: &str, limit: u64) -> Result<String, String> {
        let opened = nix::fcntl::openat(
            self.handle.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        );
        let file = match opened {
            Ok(fd) => File::from(fd),
            Err(nix::errno::Errno::ENOENT) => return Ok(String::new()),
            Err(nix::errno::Errno::ELOOP) => {
                return Err(
                    "it is a symbolic link; output files must be regular files (links are not followed)"
                        .into(),
                );
            }
            Err(e) => return Err(format!("cannot open: {e}")),
        };
        let meta = file.metadata().map_err(|e| format!("cannot stat: {e}"))?;
        if !meta.file_type().is_file() {
            return Err(format!(
                "it is {}, not a regular file; output files must be regular files",
                file_kind(&meta.file_type())
            ));
        }
        if let Some(user) = self.owner {
            use std::os::unix::fs::MetadataExt as _;
            if meta.uid() != user.uid {
                return Err(format!(
                    "it belongs to uid {}, not to the hook's uid {} (a link to another file?)",
                    meta.uid(),
                    user.uid
                ));
            }
        }
        if meta.len() > limit {
            return Err(format!(
                "{} bytes exceeds the {limit} byte limit",
                meta.len()
            ));
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        file.take(limit + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot read: {e}"))?;
        if bytes.len() as u64 > limit {
            return Err(format!(
                "it grew past the {limit} byte limit while being read"
            ));
        }
        String::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))
    }

    /// Removes the directory, unless `DEBUG_KEEP_TMP_FILES` is set to `yes`/`true`/`1` in the
    /// operator's environment (the shell-operator switch for inspecting what a hook saw and
    /// wrote).
    pub(crate) fn finish(self, hook: &str) {
        let keep = std::env::var(DEBUG_KEEP_TMP_FILES)
            .is_ok_and(|v| matches!(v.to_ascii_lowercase().as_str(), "yes" | "true" | "1"));
        if keep {
            let path = self.dir.keep();
            tracing::info!(hook.name = %hook, path = %path.display(), "keeping hook temp files ({DEBUG_KEEP_TMP_FILES})");
        } else if let Err(error) = self.dir.close() {
            tracing::warn!(hook.name = %hook, %error, "removing hook temp files failed");
        }
    }
}

fn chown(file: &File, user: HookUser) -> std::io::Result<()> {
    nix::unistd::fchown(
        file.as_fd(),
        Some(nix::unistd::Uid::from_raw(user.uid)),
        Some(nix::unistd::Gid::from_raw(user.gid)),
    )
    .map_err(std::io::Error::from)
}

fn file_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "a special file"
    }
}
