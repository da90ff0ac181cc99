//! The package as this worker sees it: fetched into the worker's cache on first use, then loaded.
//! Every task that needs the files calls [`ensure`], so any worker can run any task of any package
//! (workers share nothing but the broker).

use berth_package::{LocalRepository, Package};
use serde_json::Value;

use berth_proto::lifecycle::report_request::Report;
use berth_queue::worker::TaskError;

use crate::context::TaskContext;

/// Fetches (when missing) and loads the package version of the spec.
pub async fn ensure(cx: &TaskContext<'_>) -> Result<Package, TaskError> {
    let dest = cx.package_dir();
    let repo = cx.spec.repository.clone();
    let package = cx.spec.package.clone();
    let version = cx.spec.version.clone();
    // Copying and digesting files is blocking work.
    berth_telemetry::spawn_blocking_here(move || {
        if !dest.join("package.yaml").exists() {
            LocalRepository::new(&repo)
                .fetch(&package, &version, &dest)
                .map_err(|e| {
                    TaskError::retry(format!("fetching {package} {version} from {repo}: {e}"))
                })?;
        }
        // What was fetched is what the repository has: a package that does not load is broken
        // until a new Update, and retrying cannot fix it.
        berth_package::load(&dest)
            .map_err(|e| TaskError::permanent(format!("loading {package} {version}: {e}")))
    })
    .await
    .map_err(|e| TaskError::retry(format!("package loader panicked: {e}")))?
}

/// The values of the package now: settings and the stored hook patches layered over the
/// package's static values and defaults.
pub struct Values {
    pub settings: Value,
    pub patches: json_patch::Patch,
    pub current: Value,
    /// How many of `patches` lifecycle already stores; the rest are new in this task.
    stored: usize,
}

impl Values {
    pub fn compute(pkg: &Package, cx: &TaskContext<'_>) -> Result<Values, TaskError> {
        let settings = berth_proto::json::from_opt_struct(cx.spec.settings.as_ref());
        let patches: json_patch::Patch =
            serde_json::from_str(&cx.spec.values_patch_json).map_err(|e| {
                TaskError::permanent(format!("stored values patch is not a JSON patch: {e}"))
            })?;
        // Stored patches replay leniently: a settings change may have removed a path an old
        // patch touched, and that must not wedge the package.
        // Settings the package's schema refuses stay refused until the next Update.
        let current = berth_package::rebuild_values(pkg, &settings, &patches)
            .map_err(|e| TaskError::permanent(e.to_string()))?;
        let stored = patches.0.len();
        Ok(Values {
            settings,
            patches,
            current,
            stored,
        })
    }

    /// The patch operations added in this task, as JSON for lifecycle ("" when none).
    pub fn new_ops_json(&self) -> String {
        let new = &self.patches.0[self.stored.min(self.patches.0.len())..];
        if new.is_empty() {
            String::new()
        } else {
            serde_json::to_string(new).unwrap_or_default()
        }
    }

    /// Applies a hook's patch on top: strict, and validated against the values schema. Returns
    /// whether the values changed.
    pub fn apply(
        &mut self,
        pkg: &Package,
        hook: &str,
        patch: json_patch::Patch,
    ) -> Result<bool, TaskError> {
        if patch.0.is_empty() {
            return Ok(false);
        }
        // New operations apply strictly on top of the current values, then the result must
        // still match the values schema.
        let mut values = self.current.clone();
        json_patch::patch(&mut values, &patch)
            .map_err(|e| TaskError::retry(format!("values patch of hook {hook}: {e}")))?;
        if let Some(schema) = &pkg.values_schema {
            schema.validate(&values).map_err(|errors| {
                let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
                TaskError::retry(format!(
                    "values patch of hook {hook}: values do not match the values schema: {}",
                    text.join("; ")
                ))
            })?;
        }
        let size = serde_json::to_vec(&values).map_or(0, |v| v.len());
        if size > berth_proto::MAX_VALUES_BYTES {
            return Err(TaskError::retry(format!(
                "values patch of hook {hook}: the values would be {size} bytes, over the limit of {} bytes",
                berth_proto::MAX_VALUES_BYTES
            )));
        }
        let mut all = self.patches.clone();
        all.0.extend(patch.0);
        let changed = values != self.current;
        self.current = values;
        self.patches = all;
        Ok(changed)
    }
}

/// Reports the values now and the patch operations new in this task.
pub async fn report_values(
    cx: &TaskContext<'_>,
    values: &Values,
    inside_run: bool,
) -> Result<(), TaskError> {
    cx.report(Report::Values(berth_proto::lifecycle::Values {
        values: Some(berth_proto::json::to_struct(&values.current)),
        values_patch_json: values.new_ops_json(),
        patch_inside_run: inside_run,
    }))
    .await
    .map(|_| ())
}
