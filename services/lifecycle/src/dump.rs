//! The YAML snapshot behind `Dump`: everything an operator needs to see why a package is where
//! it is, in one document.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use berth_lifecycle_core::condition::{self, Condition, ConditionStatus, ConditionType};
use berth_lifecycle_core::scheduler::Scheduler;
use berth_lifecycle_core::{HookState, Package, PackageKey};

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DumpDoc<'a> {
    /// On the first page only.
    #[serde(skip_serializing_if = "Option::is_none")]
    scheduler: Option<&'a SchedulerDoc>,
    /// The repositories PackageRepository resources define, on the first page only (never
    /// their credentials).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    repositories: &'a [RepositoryDoc],
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
    /// The key's principal number (its hooks' OS identity derives from it).
    principal: u32,
    phase: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    last_error: &'a str,
    conditions: &'a [Condition],
    settings: &'a Value,
    /// 0 while a new version loads with settings given for it.
    settings_version: u32,
    values: &'a Value,
    hooks: &'a [HookState],
    queues: BTreeMap<String, i32>,
    scheduler: PackageScheduling<'a>,
}

/// Whether the scheduler enabled the package, and why not.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PackageScheduling<'a> {
    enabled: bool,
    #[serde(skip_serializing_if = "str::is_empty")]
    reason: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    message: &'a str,
}

impl<'a> PackageScheduling<'a> {
    fn of(row: &'a Package) -> Self {
        let waiting = |reason, message| PackageScheduling {
            enabled: false,
            reason,
            message,
        };
        if row.enabled {
            return PackageScheduling {
                enabled: true,
                reason: "",
                message: "",
            };
        }
        if row.loaded.is_none() {
            return waiting(
                "NotLoaded",
                "requirements are checked once the package is loaded",
            );
        }
        match condition::find(&row.conditions, ConditionType::RequirementsMet)
            .filter(|c| c.status == ConditionStatus::False)
        {
            Some(c) => waiting(&c.reason, &c.message),
            None => waiting("", ""),
        }
    }
}

/// The scheduler as a whole: the versions it checks requirements against and the order it
/// enables packages in (dependencies first, then weight, then key).
#[derive(Serialize, Clone, Debug)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerDoc {
    /// Absent while lifecycle has not learned it from the release service yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    pub platform_version: String,
    pub order: Vec<String>,
}

impl SchedulerDoc {
    pub fn of(s: &Scheduler) -> SchedulerDoc {
        SchedulerDoc {
            kubernetes_version: s.kubernetes().map(ToString::to_string),
            platform_version: s.platform().to_string(),
            order: s.order().into_iter().map(PackageKey::into_string).collect(),
        }
    }
}

/// A repository a PackageRepository resource defines, as lifecycle holds it.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RepositoryDoc {
    pub name: String,
    /// What the source resolves to, or why it cannot be used now.
    pub source: String,
    pub plain_http: bool,
    /// Whether credentials are stored (never what they are).
    pub credentials: bool,
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
    rows: &[Package],
    queues: &[QueueDoc],
    broker_error: Option<&str>,
) -> Result<String, RenderError> {
    render_with_queues(rows, queues, queues, broker_error, None, &[])
}

/// [`render`] for one page: each package shows its own queues from `queues`, and the
/// document's `queues` list is `listed` (every queue on the first page, none after).
pub fn render_with_queues(
    rows: &[Package],
    queues: &[QueueDoc],
    listed: &[QueueDoc],
    broker_error: Option<&str>,
    scheduler: Option<&SchedulerDoc>,
    repositories: &[RepositoryDoc],
) -> Result<String, RenderError> {
    let packages = rows
        .iter()
        .map(|r| PackageDoc {
            key: r.key.as_str(),
            kind: r.id.kind.as_str(),
            name: &r.id.name,
            namespace: &r.id.namespace,
            repository: &r.repository,
            package: &r.package,
            version: r.version.as_str(),
            generation: r.generation.get(),
            observed_generation: r.observed_generation.get(),
            principal: r.principal,
            phase: r.phase.as_str(),
            last_error: &r.last_error,
            conditions: &r.conditions,
            settings: &r.settings,
            settings_version: r.settings_version,
            values: &r.values,
            hooks: &r.hooks,
            queues: queues
                .iter()
                .filter(|q| q.name == r.key.as_str() || q.name.starts_with(&format!("{}/", r.key)))
                .map(|q| (q.name.clone(), q.length))
                .collect(),
            scheduler: PackageScheduling::of(r),
        })
        .collect();
    let doc = DumpDoc {
        scheduler,
        repositories,
        packages,
        queues: listed.to_vec(),
        queues_unavailable: broker_error,
    };
    serde_saphyr::to_string(&doc).map_err(RenderError)
}

/// A dump that cannot be written as YAML (lifecycle's own data at fault, never a request's).
#[derive(Debug, thiserror::Error)]
#[error("rendering the dump as YAML: {0}")]
pub struct RenderError(#[source] serde_saphyr::ser::Error);
