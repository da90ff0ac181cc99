//! Binding contexts (`configVersion: v1`): the JSON array a hook reads from
//! `BINDING_CONTEXT_PATH`.
//!
//! The constructors encode the rules of the contract, so every caller
//! (lifecycle runs, schedules, watch events) produces the same shapes:
//! - `onStartup` is only `{"binding":"onStartup"}`;
//! - other lifecycle bindings carry all of the hook's kubernetes snapshots;
//! - a binding with a `group` yields a `Group` context (`groupName`, the
//!   snapshots of every kubernetes binding of that group, no `object(s)`);
//! - otherwise `snapshots` appear only for `includeSnapshotsFrom`;
//! - with `keepFullObjectsInMemory: false` the `object` is left out, and
//!   `filterResult` appears only when the binding has a `jqFilter`.

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::config::{
    AdmissionBinding, AdmissionKind, ConversionBinding, ConversionRule, HookConfig,
    KubernetesBinding, LifecycleBinding, ScheduleBinding, WatchEventType,
};

/// One cached object of a kubernetes binding, as hookevent keeps it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectAndFilterResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_result: Option<Value>,
}

/// Snapshots of a hook's kubernetes bindings, by binding name.
pub type Snapshots = BTreeMap<String, Vec<ObjectAndFilterResult>>;

/// The `type` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ContextType {
    Schedule,
    Synchronization,
    Event,
    Group,
    Validating,
    Mutating,
    Conversion,
}

/// One element of the binding-context array.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingContext {
    pub binding: String,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub context_type: Option<ContextType>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "watch_event"
    )]
    pub watch_event: Option<WatchEventType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter_result: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub objects: Option<Vec<ObjectAndFilterResult>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshots: Option<Snapshots>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_name: Option<String>,
    /// Admission and conversion bindings: the AdmissionReview or ConversionReview request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_version: Option<String>,
}

impl BindingContext {
    fn bare(binding: &str) -> Self {
        Self {
            binding: binding.to_owned(),
            context_type: None,
            watch_event: None,
            object: None,
            filter_result: None,
            objects: None,
            snapshots: None,
            group_name: None,
            review: None,
            from_version: None,
            to_version: None,
        }
    }

    /// An admission request for a `kubernetesValidating` or `kubernetesMutating` binding:
    /// `review` is the AdmissionReview as the API server sent it. Snapshots the binding
    /// includes are listed empty here; the worker fills them when the hook runs.
    pub fn admission(binding: &AdmissionBinding, review: Value, config: &HookConfig) -> Self {
        let mut ctx = Self::bare(&binding.name);
        ctx.context_type = Some(match binding.kind {
            AdmissionKind::Validating => ContextType::Validating,
            AdmissionKind::Mutating => ContextType::Mutating,
        });
        ctx.snapshots = webhook_snapshots(&binding.include_snapshots_from, &binding.group, config);
        ctx.review = Some(review);
        ctx
    }

    /// A conversion request for a `kubernetesCustomResourceConversion` binding.
    pub fn conversion(
        binding: &ConversionBinding,
        rule: &ConversionRule,
        review: Value,
        config: &HookConfig,
    ) -> Self {
        let mut ctx = Self::bare(&binding.name);
        ctx.context_type = Some(ContextType::Conversion);
        ctx.snapshots = webhook_snapshots(&binding.include_snapshots_from, &binding.group, config);
        ctx.from_version = Some(rule.from_version.clone());
        ctx.to_version = Some(rule.to_version.clone());
        ctx.review = Some(review);
        ctx
    }

    /// A lifecycle binding: `onStartup` gets nothing else, the others get
    /// every kubernetes snapshot of the hook (an empty map included).
    pub fn lifecycle(
        binding: LifecycleBinding,
        config: &HookConfig,
        snapshots: &Snapshots,
    ) -> Self {
        let mut ctx = Self::bare(binding.as_str());
        if binding != LifecycleBinding::OnStartup {
            let names = config.kubernetes.iter().map(|k| k.name.as_str());
            ctx.snapshots = Some(select(snapshots, names));
        }
        ctx
    }

    /// A schedule firing.
    pub fn schedule(binding: &ScheduleBinding, config: &HookConfig, snapshots: &Snapshots) -> Self {
        if let Some(group) = &binding.group {
            return Self::group(&binding.name, group, config, snapshots);
        }
        let mut ctx = Self::bare(&binding.name);
        ctx.context_type = Some(ContextType::Schedule);
        ctx.snapshots = included(&binding.include_snapshots_from, snapshots);
        ctx
    }

    /// The first run of a kubernetes binding, with its current objects.
    pub fn synchronization(
        binding: &KubernetesBinding,
        objects: &[ObjectAndFilterResult],
        config: &HookConfig,
        snapshots: &Snapshots,
    ) -> Self {
        if let Some(group) = &binding.group {
            return Self::group(&binding.name, group, config, snapshots);
        }
        let mut ctx = Self::bare(&binding.name);
        ctx.context_type = Some(ContextType::Synchronization);
        ctx.objects = Some(objects.iter().map(|o| shape(binding, o)).collect());
        ctx.snapshots = included(&binding.include_snapshots_from, snapshots);
        ctx
    }

    /// One watch event on a kubernetes binding.
    pub fn event(
        binding: &KubernetesBinding,
        watch_event: WatchEventType,
        object: &ObjectAndFilterResult,
        config: &HookConfig,
        snapshots: &Snapshots,
    ) -> Self {
        if let Some(group) = &binding.group {
            return Self::group(&binding.name, group, config, snapshots);
        }
        let shaped = shape(binding, object);
        let mut ctx = Self::bare(&binding.name);
        ctx.context_type = Some(ContextType::Event);
        ctx.watch_event = Some(watch_event);
        ctx.object = shaped.object;
        ctx.filter_result = shaped.filter_result;
        ctx.snapshots = included(&binding.include_snapshots_from, snapshots);
        ctx
    }

    fn group(binding: &str, group: &str, config: &HookConfig, snapshots: &Snapshots) -> Self {
        let members = config
            .kubernetes
            .iter()
            .filter(|k| k.group.as_deref() == Some(group));
        let mut ctx = Self::bare(binding);
        ctx.context_type = Some(ContextType::Group);
        ctx.group_name = Some(group.to_owned());
        ctx.snapshots = Some(select(snapshots, members.map(|k| k.name.as_str())));
        ctx
    }
}

/// Serializes contexts as the array written to `BINDING_CONTEXT_PATH`.
/// Adjacent contexts of the same group are reduced to the last one, as
/// shell-operator does: they carry the same snapshots, so one run suffices.
pub fn to_json(contexts: &[BindingContext]) -> Value {
    let mut kept: Vec<&BindingContext> = Vec::with_capacity(contexts.len());
    for ctx in contexts {
        let same_group =
            |prev: &&BindingContext| prev.group_name.is_some() && prev.group_name == ctx.group_name;
        if kept.last().is_some_and(same_group) {
            kept.pop();
        }
        kept.push(ctx);
    }
    // Serializing these plain structs cannot fail (string keys, JSON values only).
    serde_json::to_value(kept).unwrap_or(Value::Array(Vec::new()))
}

/// Fills the `snapshots` of serialized contexts (as [`to_json`] wrote them when the event was
/// queued) from `current`: as in shell-operator, a hook sees the snapshots as they are when it
/// runs, not as they were when its event was queued behind other work. Each context keeps its
/// own selection of bindings; contexts without snapshots are left as they are. True when any
/// context has snapshots.
pub fn refresh_snapshots(contexts: &mut Value, current: &Snapshots) -> bool {
    let mut any = false;
    for ctx in contexts.as_array_mut().into_iter().flatten() {
        let Some(Value::Object(snapshots)) = ctx.get_mut("snapshots") else {
            continue;
        };
        any = true;
        for (binding, objects) in snapshots.iter_mut() {
            let fresh = current.get(binding).map(Vec::as_slice).unwrap_or_default();
            *objects = serde_json::to_value(fresh).unwrap_or(Value::Array(Vec::new()));
        }
    }
    any
}

/// True when any serialized context carries snapshots (so [`refresh_snapshots`] has work).
pub fn has_snapshots(contexts: &Value) -> bool {
    contexts.as_array().is_some_and(|all| {
        all.iter()
            .any(|c| c.get("snapshots").is_some_and(Value::is_object))
    })
}

fn shape(binding: &KubernetesBinding, item: &ObjectAndFilterResult) -> ObjectAndFilterResult {
    ObjectAndFilterResult {
        object: item
            .object
            .clone()
            .filter(|_| binding.keep_full_objects_in_memory),
        filter_result: binding.jq_filter.as_ref().map(|_| {
            item.filter_result
                .clone()
                .unwrap_or_else(|| Value::from(""))
        }),
    }
}

/// The snapshots a webhook binding includes (by name, or its group's kubernetes bindings),
/// listed with no objects: [`refresh_snapshots`] fills them when the hook runs.
fn webhook_snapshots(
    names: &[String],
    group: &Option<String>,
    config: &HookConfig,
) -> Option<Snapshots> {
    let mut wanted: Vec<&str> = names.iter().map(String::as_str).collect();
    if let Some(group) = group {
        wanted.extend(
            config
                .kubernetes
                .iter()
                .filter(|k| k.group.as_ref() == Some(group))
                .map(|k| k.name.as_str()),
        );
    }
    (!wanted.is_empty() || group.is_some()).then(|| select(&Snapshots::new(), wanted.into_iter()))
}

fn included(names: &[String], snapshots: &Snapshots) -> Option<Snapshots> {
    (!names.is_empty()).then(|| select(snapshots, names.iter().map(String::as_str)))
}

/// The named snapshots; a binding with no cached objects maps to `[]`.
fn select<'a>(snapshots: &Snapshots, names: impl Iterator<Item = &'a str>) -> Snapshots {
    names
        .map(|n| (n.to_owned(), snapshots.get(n).cloned().unwrap_or_default()))
        .collect()
}

fn watch_event<S: Serializer>(event: &Option<WatchEventType>, s: S) -> Result<S::Ok, S::Error> {
    match event {
        Some(e) => s.serialize_str(e.as_str()),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config(text: &str) -> HookConfig {
        HookConfig::parse(text).expect("valid config")
    }

    fn snapshots() -> Snapshots {
        let pod = ObjectAndFilterResult {
            object: Some(json!({"kind": "Pod"})),
            filter_result: Some(json!("p")),
        };
        Snapshots::from([("pods".to_owned(), vec![pod])])
    }

    #[test]
    fn snapshots_are_refreshed_per_context_selection() {
        let mut contexts = json!([
            {"binding": "cms", "type": "Event", "watchEvent": "Modified",
             "object": {"v": 1}, "snapshots": {"pods": [{"filterResult": "old"}]}},
            {"binding": "every", "type": "Schedule"},
        ]);
        assert!(has_snapshots(&contexts));
        let fresh = Snapshots::from([
            (
                "pods".to_owned(),
                vec![ObjectAndFilterResult {
                    object: None,
                    filter_result: Some(json!("new")),
                }],
            ),
            ("other".to_owned(), vec![]),
        ]);
        assert!(refresh_snapshots(&mut contexts, &fresh));
        assert_eq!(
            contexts,
            json!([
                {"binding": "cms", "type": "Event", "watchEvent": "Modified",
                 "object": {"v": 1}, "snapshots": {"pods": [{"filterResult": "new"}]}},
                {"binding": "every", "type": "Schedule"},
            ]),
            "the event's own object stays as queued; only the snapshots it selected change"
        );
        let mut gone = json!([{"binding": "g", "snapshots": {"pods": [{"filterResult": "x"}]}}]);
        refresh_snapshots(&mut gone, &Snapshots::new());
        assert_eq!(gone, json!([{"binding": "g", "snapshots": {"pods": []}}]));
        assert!(!has_snapshots(&json!([{"binding": "every"}])));
    }

    #[test]
    fn lifecycle_contexts() {
        let c = config(
            r#"{"kubernetes":[{"name":"pods","kind":"Pod"},{"name":"cms","kind":"ConfigMap"}]}"#,
        );
        let start = BindingContext::lifecycle(LifecycleBinding::OnStartup, &c, &snapshots());
        assert_eq!(to_json(&[start]), json!([{"binding": "onStartup"}]));
        let before = BindingContext::lifecycle(LifecycleBinding::BeforeHelm, &c, &snapshots());
        assert_eq!(
            to_json(&[before]),
            json!([{"binding": "beforeHelm", "snapshots": {
                "cms": [], "pods": [{"object": {"kind": "Pod"}, "filterResult": "p"}]}}])
        );
    }

    #[test]
    fn event_respects_keep_full_objects_and_jq_filter() {
        let c = config(
            r#"{"kubernetes":[{"name":"pods","kind":"Pod","keepFullObjectsInMemory":false,"jqFilter":".x"}]}"#,
        );
        let item = ObjectAndFilterResult {
            object: Some(json!({"kind": "Pod"})),
            filter_result: None,
        };
        let ctx = BindingContext::event(
            &c.kubernetes[0],
            WatchEventType::Deleted,
            &item,
            &c,
            &Snapshots::new(),
        );
        assert_eq!(
            to_json(&[ctx]),
            json!([{"binding": "pods", "type": "Event", "watchEvent": "Deleted", "filterResult": ""}])
        );
        let plain = config(r#"{"kubernetes":[{"name":"pods","kind":"Pod"}]}"#);
        let ctx = BindingContext::synchronization(
            &plain.kubernetes[0],
            &[item],
            &plain,
            &Snapshots::new(),
        );
        assert_eq!(
            to_json(&[ctx]),
            json!([{"binding": "pods", "type": "Synchronization", "objects": [{"object": {"kind": "Pod"}}]}])
        );
    }

    #[test]
    fn groups_carry_group_snapshots_and_compact() {
        let c = config(
            r#"{"schedule":[{"name":"tick","crontab":"* * * * *","group":"g"}],
                "kubernetes":[{"name":"pods","kind":"Pod","group":"g"},{"name":"other","kind":"Node"}]}"#,
        );
        let tick = BindingContext::schedule(&c.schedule[0], &c, &snapshots());
        let item = ObjectAndFilterResult {
            object: None,
            filter_result: None,
        };
        let event = BindingContext::event(
            &c.kubernetes[0],
            WatchEventType::Added,
            &item,
            &c,
            &snapshots(),
        );
        let json = to_json(&[tick, event]);
        assert_eq!(
            json,
            json!([{"binding": "pods", "type": "Group", "groupName": "g",
                    "snapshots": {"pods": [{"object": {"kind": "Pod"}, "filterResult": "p"}]}}])
        );
    }

    #[test]
    fn schedule_includes_only_named_snapshots() {
        let c = config(
            r#"{"schedule":[{"crontab":"* * * * *","includeSnapshotsFrom":["pods"]},{"name":"bare","crontab":"* * * * *"}],
                "kubernetes":[{"name":"pods","kind":"Pod"}]}"#,
        );
        let with = BindingContext::schedule(&c.schedule[0], &c, &snapshots());
        let without = BindingContext::schedule(&c.schedule[1], &c, &snapshots());
        let json = to_json(&[with, without]);
        assert_eq!(json[0]["snapshots"]["pods"][0]["filterResult"], "p");
        assert_eq!(json[1], json!({"binding": "bare", "type": "Schedule"}));
    }
}
