//! Files only their owner may read: the dev cluster's state holds every Secret it stores, and
//! its kubeconfig is the key to it. Directories are created 0700 and files 0600 (existing ones
//! are tightened, not just new ones).

use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

/// Creates `dir` (and missing parents) readable by its owner only, and tightens it if it
/// existed.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Makes `path` a file readable by its owner only: created empty (0600) when missing, its
/// mode tightened to 0600 when it exists.
pub fn tighten_or_create_private(path: &Path) -> io::Result<()> {
    open_private(path, false).map(drop)
}

/// Writes `bytes` to `path` as a file readable by its owner only.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = open_private(path, true)?;
    file.write_all(bytes)
}

/// Opens `path` for writing (truncating when `truncate`), created 0600 and tightened to 0600
/// if it existed.
pub fn open_private(path: &Path, truncate: bool) -> io::Result<fs::File> {
    let file = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(truncate)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_and_directories_are_the_owner_s_only_even_when_they_existed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&dir).unwrap();
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        let file = dir.join("kubeconfig");
        fs::write(&file, "old").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&file, b"new").unwrap();
        assert_eq!(
            fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(fs::read_to_string(&file).unwrap(), "new");
    }
}
