//! Worker reports: progress of a package's tasks, folded into its stored state.

use serde_json::Value;

use crate::conversion::AtLoad;
use crate::model::{
    ConditionSet, ConditionStatus, ConditionType, Generation, Phase, set_condition,
};
use crate::scheduler::LoadedSpec;
use crate::store::{HookState, PackageRow};
use crate::{flows, outbox};

/// Largest values patch list kept per package; older operations on the same path are compacted
/// away first (only the last operation per path matters on replay).
const MAX_PATCH_OPS: usize = 1000;

/// A worker's report, parsed (`convert::report`).
pub enum Report {
    /// The Cleanup task finished: forget the package unless it was re-created meanwhile.
    Removed,
    Change(Box<Change>),
}

/// What a report changes on the package; every field empty leaves it as it is.
#[derive(Clone)]
pub struct Change {
    pub generation: Generation,
    pub phase: Option<Phase>,
    pub conditions: Vec<ConditionSet>,
    pub settings_schema: Option<Option<Value>>,
    /// A Load: the package's settings conversions.
    pub conversions: Option<berth_package::Conversions>,
    /// A Load: what becomes of the stored settings (`service::report` converts them first;
    /// a failed conversion is set as the change's failure instead, see [`Change::failed`]).
    pub stored_settings: Option<crate::conversion::AtLoad>,
    /// A Load: what the scheduler needs of the package.
    pub loaded: Option<LoadedSpec>,
    pub hooks: Option<Vec<(String, Vec<String>)>>,
    /// A Load: the hooks' config answers as stored (`None` inside: not kept).
    pub hook_configs: Option<Option<String>>,
    pub values: Option<Value>,
    pub patch: Vec<Value>,
    pub patch_inside_run: bool,
    /// The settings after a hook's config values patch.
    pub settings: Option<Value>,
    pub hook_run: Option<(String, String)>,
    /// A RunSucceeded: the global package's one makes its afterAll due (see
    /// `store::after_all`).
    pub run_succeeded: bool,
    /// `Some("")` clears the package's error.
    pub error: Option<String>,
}

impl Change {
    /// A report of generation `generation` that changes nothing yet.
    pub fn new(generation: Generation) -> Change {
        Change {
            generation,
            phase: None,
            conditions: vec![],
            settings_schema: None,
            conversions: None,
            stored_settings: None,
            loaded: None,
            hooks: None,
            hook_configs: None,
            values: None,
            patch: vec![],
            patch_inside_run: false,
            settings: None,
            hook_run: None,
            run_succeeded: false,
            error: None,
        }
    }

    /// A Load whose stored settings could not be converted: instead of loading, the generation
    /// fails (phase Failed) with the message naming the conversion step and its error; the
    /// settings, their version and the last load stay as they were.
    pub fn failed(generation: Generation, message: String) -> Change {
        let mut c = Change::new(generation);
        c.phase = Some(Phase::Failed);
        let mut invalid = ConditionSet::new(
            ConditionType::SettingsValid,
            ConditionStatus::False,
            "ConversionFailed",
        );
        invalid.message = message.clone();
        let mut ready = ConditionSet::new(ConditionType::Ready, ConditionStatus::False, "Failed");
        ready.message = format!("{message} (fix the package or its settings, then Update)");
        c.conditions = vec![invalid, ready];
        c.error = Some(format!("Load: {message}"));
        c
    }

    /// Applies the report to `row`; returns the outbox rows it implies.
    pub fn apply(self, row: &mut PackageRow, now: &str) -> Vec<outbox::Row> {
        let mut outbox = vec![];
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
            row.schema_version = Some(row.version.clone());
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
            // `Change::failed` replaced the load with the failure.
            Some(AtLoad::Failed(_)) | None => {}
        }
        if let Some(loaded) = self.loaded {
            row.loaded = Some(loaded);
        }
        if let Some(configs) = self.hook_configs {
            row.hook_configs = configs;
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
                outbox.extend(flows::rerun(&row.key, self.generation));
            }
            row.values = values;
        }
        if let Some((name, error)) = self.hook_run
            && let Some(h) = row.hooks.iter_mut().find(|h| h.name == name)
        {
            h.runs += 1;
            h.last_run = Some(now.to_owned());
            h.last_error = error;
        }
        if let Some(error) = self.error {
            row.last_error = error;
        }
        if self.run_succeeded && row.is_global() {
            // Its beforeAll hooks ran: its afterAll hooks run once the packages waiting for it
            // converged (the store enqueues them and clears the flag in one transaction).
            row.after_all_due = true;
        }
        outbox
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
