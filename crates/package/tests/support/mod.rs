//! Builds package directories in temporary directories for the integration tests.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

pub const MINIMAL_DEFINITION: &str = "type: Application\nname: demo\nversion: 1.0.0\n";

/// Writes `contents` to `root/rel`, creating parent directories.
pub fn write(root: &Path, rel: &str, contents: &str) -> PathBuf {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().expect("has a parent")).expect("create parent");
    fs::write(&path, contents).expect("write file");
    path
}

pub fn write_executable(root: &Path, rel: &str, contents: &str) -> PathBuf {
    let path = write(root, rel, contents);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

pub fn is_executable(path: &Path) -> bool {
    fs::metadata(path).expect("stat").permissions().mode() & 0o111 != 0
}

/// A package directory with a definition for `name`/`version` and a small chart and hook.
pub fn package_dir(root: &Path, name: &str, version: &str) -> PathBuf {
    fs::create_dir_all(root).expect("create package root");
    write(
        root,
        "package.yaml",
        &format!("type: Application\nname: {name}\nversion: {version}\n"),
    );
    write(
        root,
        "Chart.yaml",
        &format!("apiVersion: v2\nname: {name}\nversion: {version}\n"),
    );
    write(root, "templates/cm.yaml", "kind: ConfigMap\n");
    write_executable(root, "hooks/startup", "#!/bin/sh\necho ok\n");
    root.to_owned()
}
