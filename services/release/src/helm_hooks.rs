//! Helm chart hooks: objects annotated `helm.sh/hook` run around install, upgrade, rollback
//! and uninstall instead of being part of the release. Within an event they run in weight order
//! (`helm.sh/hook-weight`, then name); each is (re)created, awaited (Jobs until complete, Pods
//! until succeeded, anything else once created) and deleted per `helm.sh/hook-delete-policy`
//! (`before-hook-creation` is the default, as in Helm).

use crate::record::format::HelmRelease;
use berth_helm::render::Manifest;
use serde_json::Value;

pub const HOOK_ANNOTATION: &str = "helm.sh/hook";
pub const WEIGHT_ANNOTATION: &str = "helm.sh/hook-weight";
pub const DELETE_POLICY_ANNOTATION: &str = "helm.sh/hook-delete-policy";

#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub enum HookEvent {
    PreInstall,
    PostInstall,
    PreUpgrade,
    PostUpgrade,
    PreRollback,
    PostRollback,
    PreDelete,
    PostDelete,
}

impl HookEvent {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A `helm.sh/hook-delete-policy` value, named as Helm spells it (derived).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumString)]
#[strum(serialize_all = "kebab-case")]
pub enum DeletePolicy {
    BeforeHookCreation,
    HookSucceeded,
    HookFailed,
}

/// One hook object with its parsed annotations.
#[derive(Debug, Clone, PartialEq)]
pub struct Hook {
    pub name: String,
    pub kind: String,
    pub path: String,
    pub manifest: String,
    pub object: Value,
    pub events: Vec<String>,
    pub weight: i32,
    pub delete_policies: Vec<DeletePolicy>,
}

fn annotation<'a>(object: &'a Value, key: &str) -> &'a str {
    object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn split_list(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').map(str::trim).filter(|p| !p.is_empty())
}

impl Hook {
    pub fn from_manifest(m: &Manifest) -> Hook {
        Hook::from_parts(&m.source, &m.text, m.object.clone())
    }

    fn from_parts(path: &str, manifest: &str, object: Value) -> Hook {
        let mut delete_policies: Vec<DeletePolicy> =
            split_list(annotation(&object, DELETE_POLICY_ANNOTATION))
                .filter_map(|p| p.parse().ok())
                .collect();
        if delete_policies.is_empty() {
            delete_policies.push(DeletePolicy::BeforeHookCreation);
        }
        Hook {
            name: object
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            kind: object
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            path: path.to_string(),
            manifest: manifest.to_string(),
            events: split_list(annotation(&object, HOOK_ANNOTATION))
                .map(String::from)
                .collect(),
            weight: annotation(&object, WEIGHT_ANNOTATION)
                .trim()
                .parse()
                .unwrap_or(0),
            delete_policies,
            object,
        }
    }

    pub fn has_policy(&self, p: DeletePolicy) -> bool {
        self.delete_policies.contains(&p)
    }

    /// The record form (Helm's `release.Hook`).
    pub fn to_record(&self) -> Value {
        let policies: Vec<&str> = self
            .delete_policies
            .iter()
            .map(|p| match p {
                DeletePolicy::BeforeHookCreation => "before-hook-creation",
                DeletePolicy::HookSucceeded => "hook-succeeded",
                DeletePolicy::HookFailed => "hook-failed",
            })
            .collect();
        serde_json::json!({
            "name": self.name,
            "kind": self.kind,
            "path": self.path,
            "manifest": self.manifest,
            "events": self.events,
            "last_run": {"started_at": "", "completed_at": "", "phase": ""},
            "weight": self.weight,
            "delete_policies": policies,
        })
    }
}

/// The hooks kept in a release record, parsed back from their manifests.
pub fn from_record(release: &HelmRelease) -> Vec<Hook> {
    release
        .hooks
        .iter()
        .filter_map(|h| {
            let manifest = h.get("manifest")?.as_str()?;
            let path = h.get("path").and_then(Value::as_str).unwrap_or_default();
            let object = berth_helm::render::funcs::encoding::parse_yaml(manifest).ok()?;
            object
                .is_object()
                .then(|| Hook::from_parts(path, manifest, object))
        })
        .collect()
}

/// The hooks for `event`, in execution order.
pub fn for_event(hooks: &[Hook], event: HookEvent) -> Vec<&Hook> {
    let mut selected: Vec<&Hook> = hooks
        .iter()
        .filter(|h| h.events.iter().any(|e| e == event.as_str()))
        .collect();
    selected.sort_by(|a, b| a.weight.cmp(&b.weight).then_with(|| a.name.cmp(&b.name)));
    selected
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hook(name: &str, annotations: Value) -> Hook {
        let object = json!({"kind": "Job", "metadata": {"name": name, "annotations": annotations}});
        Hook::from_parts("c/templates/h.yaml", "", object)
    }

    #[test]
    fn hooks_run_in_weight_then_name_order_and_default_policy() {
        let hooks = vec![
            hook(
                "b",
                json!({"helm.sh/hook": "pre-install,pre-upgrade", "helm.sh/hook-weight": "5"}),
            ),
            hook(
                "a",
                json!({"helm.sh/hook": "pre-install", "helm.sh/hook-weight": "5"}),
            ),
            hook(
                "z",
                json!({"helm.sh/hook": "pre-install", "helm.sh/hook-weight": "-1", "helm.sh/hook-delete-policy": "hook-succeeded"}),
            ),
            hook("p", json!({"helm.sh/hook": "post-install"})),
        ];
        let names: Vec<&str> = for_event(&hooks, HookEvent::PreInstall)
            .iter()
            .map(|h| h.name.as_str())
            .collect();
        assert_eq!(names, vec!["z", "a", "b"]);
        assert!(hooks[0].has_policy(DeletePolicy::BeforeHookCreation));
        assert!(
            hooks[2].has_policy(DeletePolicy::HookSucceeded)
                && !hooks[2].has_policy(DeletePolicy::BeforeHookCreation)
        );
        assert_eq!(for_event(&hooks, HookEvent::PreUpgrade).len(), 1);
    }
}
