//! Where the real `helm` binary is, for the comparisons with it: the compatibility oracles,
//! `render-bench` and `install-bench`. berth itself never runs helm.

use std::path::{Path, PathBuf};

/// `helm` from PATH, else `<workspace>/target/ci-tools/helm` (where `.ci/run` installs it).
pub fn find_helm() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("helm"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let ci = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ci-tools/helm");
        ci.is_file().then_some(ci)
    })
}
