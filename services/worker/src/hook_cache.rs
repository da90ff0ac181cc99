//! The hooks a worker discovered, per package directory, and the token buckets of hooks with
//! `settings`: per-process state every task of the worker shares.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_hooks::{ConfigAnswer, Hook, Sandbox, Throttle};
use berth_package::Package;
use berth_proto::lifecycle::HookConfigs;
use berth_queue::worker::TaskError;

/// Packages whose discovered hooks are kept; past this, the entry kept longest goes first.
/// A package's tasks (Load, then Start) reach a worker far apart when many packages are
/// queued: with 1,000 packages in flight, a cache emptied at 256 entries made nearly every
/// task run each hook with `--config` again (a fork and exec per hook). An entry is a few KiB
/// (the hooks' parsed configs).
const HOOK_CACHE_ENTRIES: usize = 2048;
/// Bound of the `settings` token buckets; cleared when full (a cleared bucket starts full).
const THROTTLE_ENTRIES: usize = 2048;

/// What discovery found in one package directory.
#[derive(Clone, Default)]
struct Discovered {
    hooks: Arc<Vec<Hook>>,
    settings_check: Option<PathBuf>,
    answers: Arc<Vec<ConfigAnswer>>,
}

/// Discovered hooks per package directory, oldest first out.
#[derive(Default)]
struct Entries {
    by_dir: HashMap<PathBuf, Discovered>,
    /// Insertion order of `by_dir`'s keys.
    order: VecDeque<PathBuf>,
}

impl Entries {
    fn insert(&mut self, dir: PathBuf, found: Discovered) {
        while self.by_dir.len() >= HOOK_CACHE_ENTRIES {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.by_dir.remove(&oldest);
        }
        if self.by_dir.insert(dir.clone(), found).is_none() {
            self.order.push_back(dir);
        }
    }

    fn forget(&mut self, dir_prefix: &std::path::Path) {
        self.by_dir.retain(|k, _| !k.starts_with(dir_prefix));
        self.order.retain(|k| !k.starts_with(dir_prefix));
    }
}

/// Discovered hooks per package directory: discovery runs every hook with `--config`, too costly
/// to repeat for every event.
#[derive(Default)]
pub struct HookCache {
    entries: Mutex<Entries>,
    /// Token buckets of hooks with `settings` (executionMinInterval/executionBurst), by
    /// `<package>/<hook>`. Per worker: several workers each allow the configured rate.
    throttles: Mutex<HashMap<String, Throttle>>,
}

impl HookCache {
    /// The package's hooks: built from `recorded` (what the Load's discovery recorded, as the
    /// spec carries it) or else discovered (each run with `--config`, for at most `timeout`),
    /// on first use.
    pub async fn get(
        &self,
        pkg: &Package,
        recorded: Option<&HookConfigs>,
        timeout: Duration,
        sandbox: &Sandbox,
    ) -> Result<Arc<Vec<Hook>>, TaskError> {
        Ok(self
            .discovered(pkg, recorded, timeout, sandbox)
            .await?
            .hooks)
    }

    /// The package's settings check (the batch binary answering `hook check`), if it has one.
    pub async fn settings_check(
        &self,
        pkg: &Package,
        recorded: Option<&HookConfigs>,
        timeout: Duration,
        sandbox: &Sandbox,
    ) -> Result<Option<PathBuf>, TaskError> {
        Ok(self
            .discovered(pkg, recorded, timeout, sandbox)
            .await?
            .settings_check)
    }

    /// Load's discovery: the package's hooks and what its executables answered to their config
    /// queries (for the Load report). The spec's record is not used (a Load looks at the
    /// files); an entry this worker already holds for the directory is, as for every task.
    #[allow(clippy::type_complexity)]
    pub async fn load(
        &self,
        pkg: &Package,
        timeout: Duration,
        sandbox: &Sandbox,
    ) -> Result<(Arc<Vec<Hook>>, Arc<Vec<ConfigAnswer>>), TaskError> {
        let found = self.discovered(pkg, None, timeout, sandbox).await?;
        Ok((found.hooks, found.answers))
    }

    async fn discovered(
        &self,
        pkg: &Package,
        recorded: Option<&HookConfigs>,
        timeout: Duration,
        sandbox: &Sandbox,
    ) -> Result<Discovered, TaskError> {
        let Some(dir) = pkg.hooks_dir.clone() else {
            return Ok(Discovered::default());
        };
        if let Some(found) = self.lock().by_dir.get(&dir) {
            return Ok(found.clone());
        }
        let from_record = recorded.and_then(|r| {
            let answers = r
                .answers
                .iter()
                .map(|a| ConfigAnswer {
                    path: a.path.clone(),
                    batch: a.batch,
                    output: a.output.clone(),
                })
                .collect();
            berth_hooks::from_answers(&dir, answers)
                .inspect_err(|error| {
                    tracing::warn!(%error, dir = %dir.display(), "the recorded hook configs do not fit this copy of the package; discovering");
                })
                .ok()
        });
        let found = match from_record {
            Some(found) => found,
            None => berth_hooks::discover_all(&dir, timeout, Some(sandbox))
                .await
                .map_err(discovery_error)?,
        };
        let found = Discovered {
            hooks: Arc::new(found.hooks),
            settings_check: found.settings_check,
            answers: Arc::new(found.answers),
        };
        self.lock().insert(dir, found.clone());
        Ok(found)
    }

    /// Takes a run from the hook's `settings` throttle (always granted without settings), or
    /// says how long until the throttle allows one.
    pub fn throttle(&self, package: &str, hook: &Hook) -> Result<(), std::time::Duration> {
        let Some(settings) = hook.config.settings else {
            return Ok(());
        };
        let mut all = self.throttles.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() >= THROTTLE_ENTRIES {
            all.clear();
        }
        all.entry(format!("{package}/{}", hook.name))
            .or_insert_with(|| Throttle::new(settings))
            .try_acquire()
    }

    pub fn forget(&self, dir_prefix: &std::path::Path) {
        self.lock().forget(dir_prefix);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_cache_drops_its_oldest_entry_only() {
        let mut entries = Entries::default();
        let dir = |i: usize| PathBuf::from(format!("/cache/p{i}/1.0.0"));
        for i in 0..=HOOK_CACHE_ENTRIES {
            entries.insert(dir(i), Discovered::default());
        }
        assert_eq!(entries.by_dir.len(), HOOK_CACHE_ENTRIES);
        assert!(
            !entries.by_dir.contains_key(&dir(0)),
            "the oldest entry is dropped"
        );
        assert!(entries.by_dir.contains_key(&dir(1)));
        assert!(entries.by_dir.contains_key(&dir(HOOK_CACHE_ENTRIES)));
        // Inserting a key again does not queue it twice.
        entries.insert(dir(1), Discovered::default());
        assert_eq!(entries.order.len(), HOOK_CACHE_ENTRIES);

        entries.forget(std::path::Path::new("/cache/p1"));
        assert!(!entries.by_dir.contains_key(&dir(1)));
        assert!(
            entries.by_dir.contains_key(&dir(10)),
            "p10 is not under /cache/p1"
        );
        assert_eq!(entries.order.len(), entries.by_dir.len());
    }
}
