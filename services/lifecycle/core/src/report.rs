//! Worker reports: progress of a package's tasks, folded into its state.

use serde_json::Value;

use crate::conversion::AtLoad;
use crate::flows;
use crate::model::condition::{ConditionSet, ConditionStatus, ConditionType, set_condition};
use crate::model::id::Generation;
use crate::model::package::{HookState, Package, Phase};
use crate::model::time::Timestamp;
use crate::scheduler::LoadedSpec;
use crate::task::Work;

/// Largest values patch list kept per package; older operations on the same path are compacted
/// away first (only the last operation per path matters on replay).
const MAX_PATCH_OPS: usize = 1000;

/// What one worker report changes on the package; every field empty leaves it as it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub generation: Generation,
    pub phase: Option<Phase>,
    pub conditions: Vec<ConditionSet>,
    pub settings_schema: Option<Option<Value>>,
    /// A Load: the package's settings conversions.
    pub conversions: Option<berth_package::Conversions>,
    /// A Load: what becomes of the stored settings (the service converts them before the
    /// write; a failed conversion is set as the report's failure instead, see
    /// [`Report::failed`]).
    pub stored_settings: Option<AtLoad>,
    /// A Load whose stored settings were converted: the settings and version the conversion
    /// started from. The report applies only while they are still the stored ones.
    pub converted_from: Option<(Value, u32)>,
    /// A Load: what the scheduler needs of the package.
    pub loaded: Option<LoadedSpec>,
    pub hooks: Option<Vec<(String, Vec<String>)>>,
    /// A Load: the hooks' config answers as stored (`None` inside: not kept).
    pub hook_configs: Option<Option<String>>,
    /// A Load: the package's `rbac:` as stored.
    pub rbac: Option<String>,
    pub values: Option<Value>,
    pub patch: Vec<Value>,
    pub patch_inside_run: bool,
    /// The settings after a hook's config values patch.
    pub settings: Option<Value>,
    /// A hook ran: its name and its error (empty: it succeeded).
    pub hook_run: Option<(String, String)>,
    /// A RunSucceeded: the global package's one makes its afterAll due (see
    /// `engine::after_all`). It also marks the package started (a worker from before
    /// `StartupDone` reports only this).
    pub run_succeeded: bool,
    /// A StartupDone: this enable's Synchronization and onStartup hooks succeeded.
    pub startup_done: bool,
    /// `Some("")` clears the package's error.
    pub error: Option<String>,
}

impl Report {
    /// A report of generation `generation` that changes nothing yet.
    pub fn new(generation: Generation) -> Report {
        Report {
            generation,
            phase: None,
            conditions: vec![],
            settings_schema: None,
            conversions: None,
            stored_settings: None,
            converted_from: None,
            loaded: None,
            hooks: None,
            hook_configs: None,
            rbac: None,
            values: None,
            patch: vec![],
            patch_inside_run: false,
            settings: None,
            hook_run: None,
            run_succeeded: false,
            startup_done: false,
            error: None,
        }
    }

    /// A Load whose stored settings could not be converted: instead of loading, the generation
    /// fails (phase Failed) with the message naming the conversion step and its error; the
    /// settings, their version and the last load stay as they were.
    pub fn failed(generation: Generation, message: String) -> Report {
        let mut r = Report::new(generation);
        r.phase = Some(Phase::Failed);
        let invalid = ConditionSet::new(
            ConditionType::SettingsValid,
            ConditionStatus::False,
            "ConversionFailed",
        )
        .with_message(message.clone());
        let ready = ConditionSet::new(ConditionType::Ready, ConditionStatus::False, "Failed")
            .with_message(format!(
                "{message} (fix the package or its settings, then Update)"
            ));
        r.conditions = vec![invalid, ready];
        r.error = Some(format!("Load: {message}"));
        r
    }

    /// Whether the settings this report's conversion started from are still `row`'s.
    pub fn converted_from_stored(&self, row: &Package) -> bool {
        self.converted_from
            .as_ref()
            .is_none_or(|(settings, version)| {
                row.settings == *settings && row.settings_version == *version
            })
    }

    /// Applies the report to `row`; returns the work it implies.
    pub fn apply(self, row: &mut Package, now: Timestamp) -> Vec<Work> {
        let mut work = vec![];
        if let Some(phase) = self.phase {
            row.phase = phase;
            if phase == Phase::Running {
                row.observed_generation = self.generation;
            }
        }
        for c in &self.conditions {
            set_condition(&mut row.conditions, c, self.generation, now);
        }
        if let Some(schema) = self.settings_schema {
            row.settings_schema = Some(schema);
            row.schema_version = Some(row.version.as_str().to_owned());
        }
        if let Some(conversions) = self.conversions {
            row.conversions = Some(conversions);
        }
        match self.stored_settings {
            Some(AtLoad::Keep(version)) => row.settings_version = version,
            Some(AtLoad::Converted(c)) => {
                row.settings = c.settings;
                row.settings_version = c.version;
            }
            // `Report::failed` replaced the load with the failure.
            Some(AtLoad::Failed(_)) | None => {}
        }
        if let Some(loaded) = self.loaded {
            row.loaded = Some(loaded);
        }
        if let Some(configs) = self.hook_configs {
            row.hook_configs = configs;
        }
        if let Some(rbac) = self.rbac {
            row.rbac = Some(rbac);
        }
        if let Some(hooks) = self.hooks {
            row.hooks = hooks
                .into_iter()
                .map(|(name, bindings)| {
                    let old = row
                        .hooks
                        .iter()
                        .find(|h| h.name == name)
                        .cloned()
                        .unwrap_or_default();
                    HookState {
                        name,
                        bindings,
                        ..old
                    }
                })
                .collect();
        }
        if !self.patch.is_empty() {
            row.values_patch.extend(self.patch);
            compact(&mut row.values_patch);
        }
        if let Some(settings) = self.settings {
            // A hook changed the persisted config values (addon-operator's ConfigMap patch):
            // they are the package's settings from now on, until the next Update sets others.
            row.settings = settings;
        }
        if let Some(values) = self.values {
            if values != row.values && !self.patch_inside_run && row.phase == Phase::Running {
                work.push(flows::rerun_for(
                    &row.key,
                    self.generation,
                    flows::VALUES_CHANGED,
                ));
            }
            row.values = values;
        }
        if let Some((name, error)) = self.hook_run
            && let Some(h) = row.hooks.iter_mut().find(|h| h.name == name)
        {
            h.runs += 1;
            h.last_run = Some(now);
            h.last_error = error;
        }
        if let Some(error) = self.error {
            row.last_error = error;
        }
        if (self.startup_done || self.run_succeeded) && row.enabled {
            row.started = true;
        }
        if self.run_succeeded && row.is_global() {
            // Its beforeAll hooks ran: its afterAll hooks run once the packages waiting for it
            // converged (the engine enqueues them and clears the flag in one write).
            row.after_all_due = true;
        }
        work
    }
}

/// Keeps only the last operation per path once the list is long.
fn compact(ops: &mut Vec<Value>) {
    if ops.len() <= MAX_PATCH_OPS {
        return;
    }
    let mut seen = std::collections::HashSet::new();
    let mut kept: Vec<Value> = ops
        .iter()
        .rev()
        .filter(|op| seen.insert(op["path"].as_str().unwrap_or_default().to_owned()))
        .cloned()
        .collect();
    kept.reverse();
    let excess = kept.len().saturating_sub(MAX_PATCH_OPS);
    kept.drain(..excess);
    *ops = kept;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::id::{Kind, PackageId};
    use crate::model::version::VersionRequest;
    use serde_json::json;

    fn running() -> Package {
        let id = PackageId::new(Kind::App, "web", "").unwrap();
        let mut p = Package::new(id, VersionRequest::parse("1.0.0"), Generation::new(1), 1);
        p.phase = Phase::Running;
        p.hooks = vec![HookState {
            name: "a.sh".into(),
            bindings: vec!["beforeHelm".into()],
            ..Default::default()
        }];
        p
    }

    /// Values a hook changed outside a Run run the package again; inside one they are the
    /// Run's own. A hook run counts, with its time and error.
    #[test]
    fn values_changed_outside_a_run_run_the_package_again() {
        let mut p = running();
        let mut r = Report::new(Generation::new(1));
        r.values = Some(json!({"web": {"x": 1}}));
        r.hook_run = Some(("a.sh".into(), "boom".into()));
        let work = r.apply(&mut p, Timestamp::from_unix(5));
        assert_eq!(
            work.iter().map(Work::describe).collect::<Vec<_>>(),
            ["default.web Run"]
        );
        assert_eq!(
            (
                p.hooks[0].runs,
                p.hooks[0].last_run,
                p.hooks[0].last_error.as_str()
            ),
            (1, Some(Timestamp::from_unix(5)), "boom")
        );
        let mut inside = Report::new(Generation::new(1));
        inside.values = Some(json!({"web": {"x": 2}}));
        inside.patch_inside_run = true;
        assert!(inside.apply(&mut p, Timestamp::from_unix(6)).is_empty());
        assert_eq!(p.values, json!({"web": {"x": 2}}));
    }

    #[test]
    fn a_long_patch_list_keeps_the_last_operation_per_path() {
        let mut p = running();
        let mut r = Report::new(Generation::new(1));
        r.patch = (0..MAX_PATCH_OPS + 10)
            .map(|i| json!({"op": "add", "path": format!("/p{}", i % 20), "value": i}))
            .collect();
        r.apply(&mut p, Timestamp::from_unix(0));
        assert_eq!(p.values_patch.len(), 20);
        assert_eq!(p.values_patch[19]["value"], json!(MAX_PATCH_OPS + 9));
    }
}
