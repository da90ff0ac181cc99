//! The YAML snapshot behind `Dump`: everything an operator needs to see why a package is where
//! it is, in one document.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::model::Condition;
use crate::store::{HookState, PackageRow};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DumpDoc<'a> {
    packages: Vec<PackageDoc<'a>>,
    queues: Vec<QueueDoc>,
    /// Why `queues` (and each package's `queues`) is empty because the broker did not answer;
    /// absent when it answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    queues_unavailable: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PackageDoc<'a> {
    key: &'a str,
    kind: &'a str,
    name: &'a str,
    namespace: &'a str,
    repository: &'a str,
    package: &'a str,
    version: &'a str,
    generation: i64,
    observed_generation: i64,
    phase: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    last_error: &'a str,
    conditions: &'a [Condition],
    settings: &'a Value,
    values: &'a Value,
    hooks: &'a [HookState],
    queues: BTreeMap<String, i32>,
}

/// A queue as the broker reports it.
#[derive(Serialize, Clone)]
#[serde(rename_all = "camelCase")]
pub struct QueueDoc {
    pub name: String,
    pub length: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub head: String,
    pub head_attempts: i32,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub head_last_error: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub lease_holder: String,
}

/// Renders the dump. When the broker did not answer, `queues` is empty and `broker_error` says
/// why, so a reader can tell "no tasks" from "unknown".
pub fn render(
    rows: &[PackageRow],
    queues: &[QueueDoc],
    broker_error: Option<&str>,
) -> Result<String, String> {
    render_with_queues(rows, queues, queues, broker_error)
}

/// [`render`] for one page: each package shows its own queues from `queues`, and the
/// document's `queues` list is `listed` (every queue on the first page, none after).
pub fn render_with_queues(
    rows: &[PackageRow],
    queues: &[QueueDoc],
    listed: &[QueueDoc],
    broker_error: Option<&str>,
) -> Result<String, String> {
    let packages = rows
        .iter()
        .map(|r| PackageDoc {
            key: r.key.as_str(),
            kind: r.id.kind.as_str(),
            name: &r.id.name,
            namespace: &r.id.namespace,
            repository: &r.repository,
            package: &r.package,
            version: &r.version,
            generation: r.generation.get(),
            observed_generation: r.observed_generation.get(),
            phase: r.phase.as_str(),
            last_error: &r.last_error,
            conditions: &r.conditions,
            settings: &r.settings,
            values: &r.values,
            hooks: &r.hooks,
            queues: queues
                .iter()
                .filter(|q| q.name == r.key.as_str() || q.name.starts_with(&format!("{}/", r.key)))
                .map(|q| (q.name.clone(), q.length))
                .collect(),
        })
        .collect();
    let doc = DumpDoc {
        packages,
        queues: listed.to_vec(),
        queues_unavailable: broker_error,
    };
    serde_saphyr::to_string(&doc).map_err(|e| e.to_string())
}
