//! Worker reports: progress of a package's tasks, folded into its stored state.

use berth_proto::lifecycle::ReportRequest;
use serde_json::Value;

use crate::model::{Phase, set_condition};
use crate::store::{HookState, PackageRow};
use crate::{flows, outbox};

/// Largest values patch list kept per package; older operations on the same path are compacted
/// away first (only the last operation per path matters on replay).
const MAX_PATCH_OPS: usize = 1000;

/// A parsed report.
pub struct Change {
    generation: i64,
    phase: Option<Phase>,
    conditions: Vec<berth_proto::lifecycle::ConditionUpdate>,
    settings_schema: Option<Option<Value>>,
    hooks: Option<Vec<(String, Vec<String>)>>,
    values: Option<Value>,
    patch: Vec<Value>,
    patch_inside_run: bool,
    hook_run: Option<(String, String)>,
    error: Option<String>,
}

impl Change {
    pub fn parse(req: &ReportRequest) -> Result<Change, String> {
        let phase = match req.phase.as_str() {
            "" => None,
            p => Some(Phase::parse(p).ok_or_else(|| format!("phase: unknown phase {p:?}"))?),
        };
        let settings_schema = if req.has_settings_schema {
            Some(if req.settings_schema_json.is_empty() {
                None
            } else {
                Some(
                    serde_json::from_str(&req.settings_schema_json)
                        .map_err(|e| format!("settings_schema_json: {e}"))?,
                )
            })
        } else {
            None
        };
        let patch = if req.values_patch_json.is_empty() {
            vec![]
        } else {
            match serde_json::from_str(&req.values_patch_json)
                .map_err(|e| format!("values_patch_json: {e}"))?
            {
                Value::Array(ops) => ops,
                _ => return Err("values_patch_json: must be a JSON array of operations".into()),
            }
        };
        Ok(Change {
            generation: req.generation,
            phase,
            conditions: req.conditions.clone(),
            settings_schema,
            hooks: req.has_hooks.then(|| {
                req.hooks
                    .iter()
                    .map(|h| (h.name.clone(), h.bindings.clone()))
                    .collect()
            }),
            values: req.values.as_ref().map(berth_proto::json::from_struct),
            patch,
            patch_inside_run: req.patch_inside_run,
            hook_run: req
                .hook_run
                .as_ref()
                .map(|h| (h.name.clone(), h.error.clone())),
            error: if req.clear_error {
                Some(String::new())
            } else if req.error.is_empty() {
                None
            } else {
                Some(req.error.clone())
            },
        })
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
            set_condition(
                &mut row.conditions,
                &c.r#type,
                &c.status,
                &c.reason,
                &c.message,
                self.generation,
                now,
            );
        }
        if let Some(schema) = self.settings_schema {
            row.settings_schema = Some(schema);
            row.schema_version = Some(row.version.clone());
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
