//! The package as this worker sees it: fetched into the worker's cache on first use, then loaded.
//! Every task that needs the files calls [`ensure`], so any worker can run any task of any package
//! (workers share nothing but the broker).

use std::path::Path;

use berth_package::{Limits, Package, Source};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use berth_proto::lifecycle::report_request::Report;
use berth_queue::worker::TaskError;

use crate::context::TaskContext;

/// Fetches (when missing) and loads the package version of the spec.
///
/// The spec names a repository from this worker's configuration (lifecycle checked it at the
/// Update); the worker resolves it again, so a root-relative directory that now leaves its root
/// through a symlink, or a name this worker does not know, fails the package. The cache entry is
/// `<cache>/<key>/<repository id>/<version>`: two repositories offering the same version never
/// share one. The revision the cached copy came from (an OCI tag's manifest digest, a
/// directory's content digest) is checked again once per generation, and a re-pushed tag or an
/// edited directory is fetched again (issue 31.9): an Update, `--force` included, after editing
/// a directory package loads the new files, while the tasks of one generation all see the files
/// its first task saw.
pub async fn ensure(cx: &TaskContext<'_>) -> Result<Package, TaskError> {
    ensure_files(cx).await.map_err(|e| e.error)
}

/// Why [`ensure_files`] has no package: the files could not be fetched, or they were and do not
/// load (the package's content: permanent until an Update brings other files).
pub struct Unavailable {
    pub error: TaskError,
    pub load_failed: bool,
}

/// The spec's repository: a PackageRepository's definition (from lifecycle, checked against
/// this worker's roots), or what this worker's configuration names.
fn resolve(cx: &TaskContext<'_>) -> Result<berth_package::Resolved, String> {
    let repositories = &cx.config.repositories;
    let Some(def) = &cx.spec.repository_definition else {
        return repositories.resolve(&cx.spec.repository);
    };
    let defined = berth_clients::repositories::defined(def)?;
    let source = repositories.define(&def.name, defined)?;
    repositories
        .with_defined(&def.name, source)?
        .resolve(&def.name)
}

/// [`ensure`], telling a package that does not load from files that could not be fetched.
pub async fn ensure_files(cx: &TaskContext<'_>) -> Result<Package, Unavailable> {
    let spec = &cx.spec;
    let (repo, package, requested) = (&spec.repository, &spec.package, &spec.version);
    let resolved = resolve(cx).map_err(|e| Unavailable {
        error: TaskError::permanent(format!("repository of {package} {requested}: {e}")),
        load_failed: false,
    })?;
    let dir = cx
        .config
        .cache_dir
        .join(&spec.key)
        .join(resolved.cache_id());
    let limits = Limits::default();
    let fetch_error = |e: berth_package::RepoError| {
        let message = format!("fetching {package} {requested} from {repo}: {e}");
        // The loader refused what was fetched: the same files give the same answer.
        let load_failed = match &e {
            berth_package::RepoError::InvalidPackage(load) => !load.is_transient(),
            berth_package::RepoError::Mismatch { .. } => true,
            _ => false,
        };
        Unavailable {
            error: match load_failed {
                true => TaskError::permanent(message),
                false => TaskError::retry(message),
            },
            load_failed,
        }
    };
    let version = &resolve_version(cx, &resolved.source, &dir, limits)
        .await
        .map_err(fetch_error)?;
    let dest = dir.join(version);
    let marker = dir.join(format!("{version}.revision"));
    let present = berth_package::is_package_dir(&dest);
    let fetch = match (&resolved.source, present) {
        (_, false) => true,
        (source, true) if source.has_revisions() => match read_revision(&marker) {
            Some((checked, _)) if checked >= spec.generation => false,
            Some((_, digest)) => {
                let now = resolved
                    .source
                    .revision(package, version, limits)
                    .await
                    .map_err(fetch_error)?;
                if now.as_deref() == Some(digest.as_str()) {
                    write_revision(&marker, spec.generation, &digest);
                    false
                } else {
                    true
                }
            }
            None => true,
        },
        (_, true) => false,
    };
    if fetch {
        let fetched = resolved
            .source
            .fetch(package, version, &dest, limits)
            .await
            .map_err(fetch_error)?;
        if let Some(revision) = fetched.revision {
            write_revision(&marker, spec.generation, &revision);
        }
    }
    let (package, version) = (package.clone(), version.clone());
    // Loading reads and parses files: blocking work.
    berth_runtime::spawn_blocking_here(move || {
        // What was fetched is what the repository has: a package that does not load is broken
        // until a new Update, and retrying cannot fix it.
        berth_package::load(&dest).map_err(|e| {
            let message = format!("loading {package} {version}: {e}");
            Unavailable {
                load_failed: !e.is_transient(),
                error: match e.is_transient() {
                    true => TaskError::retry(message),
                    false => TaskError::permanent(message),
                },
            }
        })
    })
    .await
    .map_err(|e| Unavailable {
        error: TaskError::retry(format!("package loader panicked: {e}")),
        load_failed: false,
    })?
}

/// The package's chart files (`Package::chart_files`), read on a blocking thread: the walk
/// follows links inside the package and is bounded in entries and time, but it is file I/O and
/// must not hold an async worker thread (two link-DAG packages froze `berth up`, issue 30.6).
/// A chart the walk refuses (too large, links out of the package, too many entries) fails the
/// package for good: the fetched files give the same answer again.
pub async fn chart_files(pkg: &Package) -> Result<Vec<(String, Vec<u8>)>, TaskError> {
    off_runtime(pkg, Package::chart_files).await
}

/// Whether the chart reads the global values (`Package::reads_global`), on a blocking thread
/// as [`chart_files`].
pub async fn reads_global(pkg: &Package) -> Result<bool, TaskError> {
    off_runtime(pkg, Package::reads_global).await
}

async fn off_runtime<T: Send + 'static>(
    pkg: &Package,
    read: fn(&Package) -> Result<T, berth_package::LoadError>,
) -> Result<T, TaskError> {
    let pkg = pkg.clone();
    berth_runtime::spawn_blocking_here(move || read(&pkg))
        .await
        .map_err(|e| TaskError::retry(format!("chart reader panicked: {e}")))?
        .map_err(|e| {
            let message = format!("reading the chart: {e}");
            if e.is_transient() {
                TaskError::retry(message)
            } else {
                TaskError::permanent(message)
            }
        })
}

/// The version the spec's version names: itself, or for a constraint given to an OCI
/// repository (`~1.2`) the tag of the newest version it allows. Once the package is loaded,
/// the loaded version (lifecycle's spec carries it), so tasks after Load use the files Load
/// saw; before, a constraint is resolved once per generation on this worker (the answer kept in
/// `<dir>/<sha256 of the constraint>.resolved` as `<generation> <tag>`). Every Update naming a
/// constraint starts the package over, so it picks up versions pushed since.
async fn resolve_version(
    cx: &TaskContext<'_>,
    source: &Source,
    dir: &Path,
    limits: Limits,
) -> Result<String, berth_package::RepoError> {
    let spec = &cx.spec;
    if !matches!(source, Source::Oci(_)) || berth_package::parse_version(&spec.version).is_ok() {
        return Ok(spec.version.clone());
    }
    if !spec.loaded_version.is_empty() {
        return Ok(spec.loaded_version.clone());
    }
    let name = hex::encode(&Sha256::digest(spec.version.as_bytes())[..16]);
    let marker = dir.join(format!("{name}.resolved"));
    if let Some((generation, tag)) = read_revision(&marker)
        && generation == spec.generation
    {
        return Ok(tag);
    }
    let tag = source.resolve(&spec.package, &spec.version, limits).await?;
    if let Err(error) = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&marker, format!("{} {tag}\n", spec.generation)))
    {
        tracing::warn!(%error, path = %marker.display(), "recording the resolved version");
    }
    tracing::info!(constraint = %spec.version, version = %tag, "version constraint resolved");
    Ok(tag)
}

/// The generation at which the cached OCI image was last checked, and its manifest digest.
fn read_revision(path: &Path) -> Option<(i64, String)> {
    let text = std::fs::read_to_string(path).ok()?;
    let (generation, digest) = text.trim().split_once(' ')?;
    Some((generation.parse().ok()?, digest.to_owned()))
}

/// Records the revision; a write that fails only means the digest is checked again next time.
fn write_revision(path: &Path, generation: i64, digest: &str) {
    if let Err(error) = std::fs::write(path, format!("{generation} {digest}\n")) {
        tracing::warn!(%error, path = %path.display(), "recording the fetched revision");
    }
}

/// The values of the package now: settings and the stored hook patches layered over the
/// package's static values and defaults, laid out as the package's layout says (a nested
/// package sees the global values beside its own).
pub struct Values {
    pub settings: Value,
    pub patches: json_patch::Patch,
    pub current: Value,
    /// The global values and settings as lifecycle had them when the task started.
    global: Value,
    global_settings: Value,
    /// A hook's config values patch changed the settings in this task.
    settings_changed: bool,
    /// How many of `patches` lifecycle already stores; the rest are new in this task.
    stored: usize,
}

impl Values {
    pub fn compute(pkg: &Package, cx: &TaskContext<'_>) -> Result<Values, TaskError> {
        let settings = berth_proto::json::from_opt_struct(cx.spec.settings.as_ref());
        Values::compute_with(pkg, cx, settings)
    }

    /// The values the package would have with `settings` instead of its own (a validation's
    /// candidate settings): everything else, the hooks' stored patches included, as it is.
    pub fn compute_with(
        pkg: &Package,
        cx: &TaskContext<'_>,
        settings: Value,
    ) -> Result<Values, TaskError> {
        let global = berth_proto::json::from_opt_struct(cx.spec.global_values.as_ref());
        let global_settings = berth_proto::json::from_opt_struct(cx.spec.global_settings.as_ref());
        let ops = cx.spec.values_patch.as_ref().map_or_else(Vec::new, |ops| {
            ops.values
                .iter()
                .map(berth_proto::json::from_value)
                .collect()
        });
        let patches: json_patch::Patch =
            serde_json::from_value(Value::Array(ops)).map_err(|e| {
                TaskError::permanent(format!("stored values patch is not a JSON patch: {e}"))
            })?;
        // Stored patches replay leniently: a settings change may have removed a path an old
        // patch touched, and that must not wedge the package.
        // Settings the package's schema refuses stay refused until the next Update.
        let current = berth_package::rebuild_values(pkg, &settings, &global, &patches)
            .map_err(|e| TaskError::permanent(e.to_string()))?;
        let stored = patches.0.len();
        Ok(Values {
            settings,
            patches,
            current,
            global,
            global_settings,
            settings_changed: false,
            stored,
        })
    }

    /// What a hook gets in `CONFIG_VALUES_PATH`: the settings, laid out as the values are.
    pub fn config_values(&self, pkg: &Package) -> Value {
        berth_package::config_values(pkg, &self.settings, &self.global_settings)
    }

    /// The settings when a hook changed them in this task.
    pub fn changed_settings(&self) -> Option<&Value> {
        self.settings_changed.then_some(&self.settings)
    }

    /// The patch operations added in this task, as JSON for lifecycle ("" when none).
    pub fn new_ops(&self) -> Option<prost_types::ListValue> {
        let new = &self.patches.0[self.stored.min(self.patches.0.len())..];
        if new.is_empty() {
            return None;
        }
        let ops = serde_json::to_value(new).ok()?;
        Some(prost_types::ListValue {
            values: ops
                .as_array()?
                .iter()
                .map(berth_proto::json::to_value)
                .collect(),
        })
    }

    /// Applies a hook's patch on top: within the package's own values, strict, and validated
    /// against the values schema. Returns whether the values changed.
    pub fn apply(
        &mut self,
        pkg: &Package,
        hook: &str,
        patch: json_patch::Patch,
    ) -> Result<bool, TaskError> {
        if patch.0.is_empty() {
            return Ok(false);
        }
        let failed = |e: berth_package::ValuesError| {
            TaskError::retry(format!("values patch of hook {hook}: {e}"))
        };
        berth_package::check_patch_scope(pkg, &patch).map_err(failed)?;
        // New operations apply strictly on top of the current values, then the result must
        // still match the values schema.
        let mut values = self.current.clone();
        json_patch::patch(&mut values, &patch)
            .map_err(|e| failed(berth_package::patch_error(pkg, &e)))?;
        berth_package::validate_values(pkg, &values).map_err(failed)?;
        check_size(hook, &values)?;
        let mut all = self.patches.clone();
        all.0.extend(patch.0);
        let changed = values != self.current;
        self.current = values;
        self.patches = all;
        Ok(changed)
    }

    /// Applies a hook's config values patch (`CONFIG_VALUES_JSON_PATCH_PATH`): the settings
    /// change (scoped and validated as settings), and the values are rebuilt on them. Returns
    /// whether the values changed.
    pub fn apply_config(
        &mut self,
        pkg: &Package,
        hook: &str,
        patch: &json_patch::Patch,
    ) -> Result<bool, TaskError> {
        if patch.0.is_empty() {
            return Ok(false);
        }
        let failed = |e: berth_package::ValuesError| {
            TaskError::retry(format!("config values patch of hook {hook}: {e}"))
        };
        let settings = berth_package::patch_settings(pkg, &self.settings, patch).map_err(failed)?;
        check_size(hook, &settings)?;
        let values = berth_package::rebuild_values(pkg, &settings, &self.global, &self.patches)
            .map_err(failed)?;
        check_size(hook, &values)?;
        self.settings_changed |= settings != self.settings;
        self.settings = settings;
        let changed = values != self.current;
        self.current = values;
        Ok(changed)
    }

    /// Lifecycle has the operations so far (they were reported): a later report of this task
    /// sends only those that come after.
    pub fn mark_reported(&mut self) {
        self.stored = self.patches.0.len();
    }

    /// The values as lifecycle stores them, with the operations new in this task.
    pub fn report(&self, inside_run: bool) -> berth_proto::lifecycle::Values {
        berth_proto::lifecycle::Values {
            values: Some(berth_proto::json::to_struct(&self.current)),
            values_patch: self.new_ops(),
            patch_inside_run: inside_run,
            settings: self.changed_settings().map(berth_proto::json::to_struct),
        }
    }
}

fn check_size(hook: &str, values: &Value) -> Result<(), TaskError> {
    let size = serde_json::to_vec(values).map_or(0, |v| v.len());
    if size > berth_proto::MAX_VALUES_BYTES {
        return Err(TaskError::retry(format!(
            "values patch of hook {hook}: the values would be {size} bytes, over the limit of {} bytes",
            berth_proto::MAX_VALUES_BYTES
        )));
    }
    Ok(())
}

/// Reports the values now and the patch operations new in this task.
pub async fn report_values(
    cx: &TaskContext<'_>,
    values: &Values,
    inside_run: bool,
) -> Result<(), TaskError> {
    cx.report(Report::Values(values.report(inside_run))).await
}
