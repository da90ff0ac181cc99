//! The hooks a worker discovered, per package directory, and the token buckets of hooks with
//! `settings`: per-process state every task of the worker shares.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_hooks::{Hook, Throttle};
use berth_package::Package;
use berth_queue::worker::TaskError;

/// Packages whose discovered hooks are kept; the cache is cleared when it grows past this, since a
/// rediscovery only costs a `--config` run per hook.
const HOOK_CACHE_ENTRIES: usize = 256;

/// What discovery found in one package directory.
#[derive(Clone, Default)]
struct Discovered {
    hooks: Arc<Vec<Hook>>,
    settings_check: Option<PathBuf>,
}

/// Discovered hooks per package directory: discovery runs every hook with `--config`, too costly
/// to repeat for every event.
#[derive(Default)]
pub struct HookCache {
    entries: Mutex<HashMap<PathBuf, Discovered>>,
    /// Token buckets of hooks with `settings` (executionMinInterval/executionBurst), by
    /// `<package>/<hook>`. Per worker: several workers each allow the configured rate.
    throttles: Mutex<HashMap<String, Throttle>>,
}

impl HookCache {
    /// The package's hooks, discovered (each run with `--config`, for at most `timeout`) on
    /// first use.
    pub async fn get(&self, pkg: &Package, timeout: Duration) -> Result<Arc<Vec<Hook>>, TaskError> {
        Ok(self.discovered(pkg, timeout).await?.hooks)
    }

    /// The package's settings check (the batch binary answering `hook check`), if it has one.
    pub async fn settings_check(
        &self,
        pkg: &Package,
        timeout: Duration,
    ) -> Result<Option<PathBuf>, TaskError> {
        Ok(self.discovered(pkg, timeout).await?.settings_check)
    }

    async fn discovered(&self, pkg: &Package, timeout: Duration) -> Result<Discovered, TaskError> {
        let Some(dir) = pkg.hooks_dir.clone() else {
            return Ok(Discovered::default());
        };
        if let Some(found) = self.lock().get(&dir) {
            return Ok(found.clone());
        }
        let found = berth_hooks::discover_all(&dir, timeout)
            .await
            .map_err(discovery_error)?;
        let found = Discovered {
            hooks: Arc::new(found.hooks),
            settings_check: found.settings_check,
        };
        let mut entries = self.lock();
        if entries.len() >= HOOK_CACHE_ENTRIES {
            entries.clear();
        }
        entries.insert(dir, found.clone());
        Ok(found)
    }

    /// Takes a run from the hook's `settings` throttle (always granted without settings), or
    /// says how long until the throttle allows one.
    pub fn throttle(&self, package: &str, hook: &Hook) -> Result<(), std::time::Duration> {
        let Some(settings) = hook.config.settings else {
            return Ok(());
        };
        let mut all = self.throttles.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() >= HOOK_CACHE_ENTRIES * 8 {
            all.clear();
        }
        all.entry(format!("{package}/{}", hook.name))
            .or_insert_with(|| Throttle::new(settings))
            .try_acquire()
    }

    pub fn forget(&self, dir_prefix: &std::path::Path) {
        self.lock().retain(|k, _| !k.starts_with(dir_prefix));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Discovered>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A discovery failure as a task error: a config that does not parse (or a second settings
/// check) is the package's fault and permanent; a hook that could not start, failed or timed
/// out answering `--config` may do better on the next attempt.
fn discovery_error(e: berth_hooks::DiscoverError) -> TaskError {
    use berth_hooks::DiscoverError::*;
    match e {
        Config { .. } | SecondSettingsCheck { .. } | TooLarge { .. } => {
            TaskError::permanent(e.to_string())
        }
        _ => TaskError::retry(e.to_string()),
    }
}
