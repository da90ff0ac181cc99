//! `kubernetes` bindings: run a hook on watch events of selected objects.
//!
//! Only parsed and validated here; the watching itself lives in the
//! hookevent service, which reads these typed fields.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::schedule::non_empty;
use super::selectors::{FieldSelector, LabelSelector, NameSelector, NamespaceSelector};
use super::{ConfigError, from_value_at, join, parse_go_duration};

/// A watch event type a binding can fire on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WatchEventType {
    Added,
    Modified,
    Deleted,
}

impl WatchEventType {
    pub const ALL: [WatchEventType; 3] = [Self::Added, Self::Modified, Self::Deleted];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "Added",
            Self::Modified => "Modified",
            Self::Deleted => "Deleted",
        }
    }
}

/// One `kubernetes[]` entry with shell-operator's defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct KubernetesBinding {
    /// The `binding` value and the key in `snapshots`; `"kubernetes"` when unset.
    pub name: String,
    /// `None`: the API server's preferred version for `kind`.
    pub api_version: Option<String>,
    /// Required. Plural, short name and case variants are resolved by discovery later.
    pub kind: String,
    /// Events that run the hook; all three by default, empty = snapshot only.
    pub execute_hook_on_event: Vec<WatchEventType>,
    pub execute_hook_on_synchronization: bool,
    /// Whether package start waits for this binding's Synchronization run.
    pub wait_for_synchronization: bool,
    /// `false`: only `filterResult` is kept and sent, never the full object.
    pub keep_full_objects_in_memory: bool,
    pub resynchronization_period: Option<Duration>,
    pub name_selector: Option<NameSelector>,
    pub label_selector: Option<LabelSelector>,
    pub field_selector: Option<FieldSelector>,
    pub namespace: Option<NamespaceSelector>,
    pub jq_filter: Option<String>,
    pub include_snapshots_from: Vec<String>,
    pub allow_failure: bool,
    /// Named queue; `None` means the package's `main` queue.
    pub queue: Option<String>,
    pub group: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawKubernetes {
    name: Option<String>,
    api_version: Option<String>,
    kind: Option<String>,
    execute_hook_on_event: Option<Vec<String>>,
    /// shell-operator's older name of `executeHookOnEvent`; that one wins when both are given.
    watch_event: Option<Vec<String>>,
    execute_hook_on_synchronization: Option<bool>,
    wait_for_synchronization: Option<bool>,
    keep_full_objects_in_memory: Option<bool>,
    resynchronization_period: Option<String>,
    name_selector: Option<NameSelector>,
    label_selector: Option<Value>,
    field_selector: Option<Value>,
    namespace: Option<Value>,
    jq_filter: Option<String>,
    #[serde(default)]
    include_snapshots_from: Vec<String>,
    #[serde(default)]
    allow_failure: bool,
    queue: Option<String>,
    group: Option<String>,
}

impl KubernetesBinding {
    pub(crate) fn from_value(value: Value, path: &str) -> Result<Self, ConfigError> {
        let raw: RawKubernetes = from_value_at(value, path)?;
        let kind = non_empty(raw.kind)
            .ok_or_else(|| ConfigError::invalid(join(path, "kind"), "is required"))?;
        let queue = non_empty(raw.queue);
        let wait_for_synchronization = raw.wait_for_synchronization.unwrap_or(true);
        // Without a dedicated queue, a non-waiting Synchronization would sit in
        // `main` behind the lifecycle work it is meant not to block.
        if !wait_for_synchronization && queue.is_none() {
            return Err(ConfigError::invalid(
                join(path, "waitForSynchronization"),
                "false is allowed only together with an explicit queue",
            ));
        }
        Ok(Self {
            name: non_empty(raw.name).unwrap_or_else(|| "kubernetes".to_owned()),
            api_version: non_empty(raw.api_version),
            kind,
            execute_hook_on_event: match (raw.execute_hook_on_event, raw.watch_event) {
                (None, Some(old)) => events(Some(old), &join(path, "watchEvent"))?,
                (current, _) => events(current, &join(path, "executeHookOnEvent"))?,
            },
            execute_hook_on_synchronization: raw.execute_hook_on_synchronization.unwrap_or(true),
            wait_for_synchronization,
            keep_full_objects_in_memory: raw.keep_full_objects_in_memory.unwrap_or(true),
            resynchronization_period: raw
                .resynchronization_period
                .filter(|s| !s.is_empty())
                .map(|s| parse_go_duration(&s))
                .transpose()
                .map_err(|r| ConfigError::invalid(join(path, "resynchronizationPeriod"), r))?,
            name_selector: raw.name_selector,
            label_selector: raw
                .label_selector
                .map(|v| LabelSelector::from_value(v, &join(path, "labelSelector")))
                .transpose()?,
            field_selector: raw
                .field_selector
                .map(|v| FieldSelector::from_value(v, &join(path, "fieldSelector")))
                .transpose()?,
            namespace: raw
                .namespace
                .map(|v| NamespaceSelector::from_value(v, &join(path, "namespace")))
                .transpose()?,
            jq_filter: non_empty(raw.jq_filter),
            include_snapshots_from: raw.include_snapshots_from,
            allow_failure: raw.allow_failure,
            queue,
            group: non_empty(raw.group),
        })
    }

    /// The queue this binding's runs go to.
    pub fn queue_name(&self) -> &str {
        self.queue.as_deref().unwrap_or("main")
    }
}

fn events(raw: Option<Vec<String>>, path: &str) -> Result<Vec<WatchEventType>, ConfigError> {
    let Some(raw) = raw else {
        return Ok(WatchEventType::ALL.to_vec());
    };
    raw.iter()
        .map(|name| {
            WatchEventType::ALL
                .into_iter()
                .find(|e| e.as_str() == name)
                .ok_or_else(|| {
                    ConfigError::invalid(
                        path,
                        format!("{name:?} is not one of Added, Modified, Deleted"),
                    )
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_follow_shell_operator() {
        let b =
            KubernetesBinding::from_value(json!({"kind": "Pod"}), "kubernetes[0]").expect("valid");
        assert_eq!(b.name, "kubernetes");
        assert_eq!(b.execute_hook_on_event, WatchEventType::ALL.to_vec());
        assert!(
            b.execute_hook_on_synchronization
                && b.wait_for_synchronization
                && b.keep_full_objects_in_memory
        );
        assert_eq!(b.queue_name(), "main");
    }

    #[test]
    fn validation_errors_name_the_key() {
        let cases = [
            (json!({"name": "x"}), "kubernetes[0].kind"),
            (
                json!({"kind": "Pod", "executeHookOnEvent": ["Updated"]}),
                "kubernetes[0].executeHookOnEvent",
            ),
            (
                json!({"kind": "Pod", "waitForSynchronization": false}),
                "kubernetes[0].waitForSynchronization",
            ),
            (
                json!({"kind": "Pod", "resynchronizationPeriod": "soon"}),
                "kubernetes[0].resynchronizationPeriod",
            ),
            (
                json!({"kind": "Pod", "labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}),
                "kubernetes[0].labelSelector.matchExpressions[0].values",
            ),
        ];
        for (value, path) in cases {
            let e = KubernetesBinding::from_value(value, "kubernetes[0]")
                .unwrap_err()
                .to_string();
            assert!(e.contains(path), "expected {path} in {e}");
        }
        let ok = json!({"kind": "Pod", "waitForSynchronization": false, "queue": "pods", "executeHookOnEvent": []});
        let b = KubernetesBinding::from_value(ok, "kubernetes[0]").expect("valid with queue");
        assert!(b.execute_hook_on_event.is_empty());
    }

    #[test]
    fn watch_event_is_the_older_name_of_execute_hook_on_event() {
        // shell-operator hooks written before `executeHookOnEvent` still say `watchEvent`.
        let old = json!({"kind": "Pod", "watchEvent": ["Added", "Deleted"]});
        let b = KubernetesBinding::from_value(old, "kubernetes[0]").expect("watchEvent accepted");
        assert_eq!(
            b.execute_hook_on_event,
            vec![WatchEventType::Added, WatchEventType::Deleted]
        );
        let both =
            json!({"kind": "Pod", "watchEvent": ["Added"], "executeHookOnEvent": ["Modified"]});
        let b = KubernetesBinding::from_value(both, "kubernetes[0]").expect("valid");
        assert_eq!(b.execute_hook_on_event, vec![WatchEventType::Modified]);
        let bad = json!({"kind": "Pod", "watchEvent": ["Updated"]});
        let e = KubernetesBinding::from_value(bad, "kubernetes[0]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("kubernetes[0].watchEvent"), "{e}");
    }
}
