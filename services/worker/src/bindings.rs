//! What a worker tells hookevent about a package's hooks (bindings at Load, Synchronization done),
//! what it asks of it (snapshots), and the hook outputs it hands over (object operations).

use std::collections::BTreeMap;

use berth_hooks::{Hook, ObjectAndFilterResult, ObjectOperation, Snapshots};
use berth_proto::hookevent as pb;
use serde_json::Value;

use berth_queue::worker::TaskError;

use crate::client::CallError;
use crate::context::TaskContext;

/// Whether the package has anything hookevent serves: hooks binding schedules, Kubernetes
/// events, admission or conversion webhooks, or operators.
///
/// A package whose hooks bind none of them never needs hookevent: hookevent holds nothing of
/// it, because every Load follows a Disable of its key (the start-over flows: Disable → Load)
/// or is the first Load of a key whose last Remove ran Disable before its Cleanup (Disable
/// is retried until hookevent answers; removal never skips it). So Load registers no bindings
/// for it and ApplySettings adopts none: two hookevent calls and their database writes fewer
/// per such package.
pub fn event_bound(hooks: &[Hook], operators: &[berth_operator::Operator]) -> bool {
    !operators.is_empty()
        || hooks.iter().any(|h| {
            let c = &h.config;
            !c.schedule.is_empty()
                || !c.kubernetes.is_empty()
                || !c.admission.is_empty()
                || !c.conversion.is_empty()
        })
}

/// The SetBindings request for a package's hooks and operators. Hookevent looks the package's
/// kind and namespace up itself (an app's bindings are locked to its namespace), so none is
/// sent.
pub fn set_bindings_request(
    cx: &TaskContext<'_>,
    hooks: &[Hook],
    operators: &[berth_operator::Operator],
) -> pb::SetBindingsRequest {
    let mut schedules = vec![];
    let mut kubernetes = vec![];
    let mut webhooks = vec![];
    for hook in hooks {
        for a in &hook.config.admission {
            webhooks.push(pb::WebhookBinding {
                hook: hook.name.clone(),
                key: a.kind.key().to_owned(),
                config: Some(berth_proto::json::to_struct(&a.to_value())),
            });
        }
        for c in &hook.config.conversion {
            webhooks.push(pb::WebhookBinding {
                hook: hook.name.clone(),
                key: "kubernetesCustomResourceConversion".to_owned(),
                config: Some(berth_proto::json::to_struct(&c.to_value())),
            });
        }
        for s in &hook.config.schedule {
            schedules.push(pb::ScheduleBinding {
                hook: hook.name.clone(),
                binding: s.name.clone(),
                crontab: s.crontab.clone(),
                allow_failure: s.allow_failure,
                queue: s.queue.clone().unwrap_or_default(),
                include_snapshots_from: s.include_snapshots_from.clone(),
                group: s.group.clone().unwrap_or_default(),
            });
        }
        for k in &hook.config.kubernetes {
            let namespace = k.namespace.clone().unwrap_or_default();
            kubernetes.push(pb::KubernetesBinding {
                hook: hook.name.clone(),
                binding: k.name.clone(),
                api_version: k.api_version.clone().unwrap_or_default(),
                kind: k.kind.clone(),
                namespaces: namespace
                    .name_selector
                    .map(|n| n.match_names)
                    .unwrap_or_default(),
                namespace_label_selector: namespace
                    .label_selector
                    .map(|l| l.to_query())
                    .unwrap_or_default(),
                names: k
                    .name_selector
                    .clone()
                    .map(|n| n.match_names)
                    .unwrap_or_default(),
                label_selector: k
                    .label_selector
                    .as_ref()
                    .map(|l| l.to_query())
                    .unwrap_or_default(),
                field_selector: k
                    .field_selector
                    .as_ref()
                    .map(|f| f.to_query())
                    .unwrap_or_default(),
                jq_filter: k.jq_filter.clone().unwrap_or_default(),
                execute_hook_on_event: k
                    .execute_hook_on_event
                    .iter()
                    .map(|e| e.as_str().to_owned())
                    .collect(),
                execute_hook_on_synchronization: k.execute_hook_on_synchronization,
                wait_for_synchronization: k.wait_for_synchronization,
                keep_full_objects_in_memory: k.keep_full_objects_in_memory,
                include_snapshots_from: k.include_snapshots_from.clone(),
                group: k.group.clone().unwrap_or_default(),
                queue: k.queue.clone().unwrap_or_default(),
                allow_failure: k.allow_failure,
                resynchronization_period_ms: k
                    .resynchronization_period
                    .map(|p| u64::try_from(p.as_millis()).unwrap_or(u64::MAX))
                    .unwrap_or_default(),
            });
        }
    }
    pb::SetBindingsRequest {
        package: cx.key().to_owned(),
        generation: cx.spec.generation,
        schedules,
        kubernetes,
        app_namespace: String::new(),
        webhooks,
        operators: operators
            .iter()
            .map(|o| berth_proto::json::to_struct(&o.document))
            .collect(),
    }
}

/// Hands a webhook run's answer to hookevent, which holds the request open.
pub async fn answer_webhook(
    cx: &TaskContext<'_>,
    request: pb::AnswerWebhookRequest,
) -> Result<(), TaskError> {
    cx.services
        .hookevent
        .clone()
        .answer_webhook(request)
        .await
        .map_err(|s| CallError::new("hookevent AnswerWebhook", s))?;
    Ok(())
}

/// One binding's objects as hookevent holds them.
pub struct BindingObjects {
    pub objects: Vec<ObjectAndFilterResult>,
    pub synchronized: bool,
}

/// Every kubernetes binding's objects, by hook then binding name. Empty (and no call) when no
/// hook has a kubernetes binding.
pub async fn snapshots(
    cx: &TaskContext<'_>,
    hooks: &[Hook],
    for_synchronization: bool,
) -> Result<BTreeMap<String, BTreeMap<String, BindingObjects>>, TaskError> {
    if hooks.iter().all(|h| h.config.kubernetes.is_empty()) {
        return Ok(BTreeMap::new());
    }
    let answer = cx
        .services
        .hookevent
        .clone()
        .get_snapshots(pb::GetSnapshotsRequest {
            package: cx.key().to_owned(),
            for_synchronization,
        })
        .await
        .map_err(|s| CallError::new("hookevent GetSnapshots", s))?
        .into_inner();
    let mut out: BTreeMap<String, BTreeMap<String, BindingObjects>> = BTreeMap::new();
    for b in answer.bindings {
        let objects = objects_of(b.objects.as_ref());
        out.entry(b.hook).or_default().insert(
            b.binding,
            BindingObjects {
                objects,
                synchronized: b.synchronized,
            },
        );
    }
    Ok(out)
}

/// The `snapshots` map of one hook.
pub fn hook_snapshots(
    all: &BTreeMap<String, BTreeMap<String, BindingObjects>>,
    hook: &str,
) -> Snapshots {
    all.get(hook)
        .map(|bindings| {
            bindings
                .iter()
                .map(|(name, b)| (name.clone(), b.objects.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn objects_of(list: Option<&prost_types::ListValue>) -> Vec<ObjectAndFilterResult> {
    let items = list.map(|l| l.values.as_slice()).unwrap_or_default();
    items
        .iter()
        .map(|item| {
            let mut item = berth_proto::json::from_value(item);
            ObjectAndFilterResult {
                object: item.get_mut("object").map(Value::take),
                filter_result: item.get_mut("filterResult").map(Value::take),
            }
        })
        .collect()
}

/// Tells hookevent that the package's Synchronization ran, releasing the held events.
pub async fn synchronization_done(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    cx.services
        .hookevent
        .clone()
        .synchronization_done(pb::SynchronizationDoneRequest {
            package: cx.key().to_owned(),
            generation: cx.spec.generation,
        })
        .await
        .map_err(|s| CallError::new("hookevent SynchronizationDone", s))?;
    Ok(())
}

/// Tells hookevent that the package is Running: its operators start.
pub async fn start_operators(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    cx.services
        .hookevent
        .clone()
        .start_operators(pb::StartOperatorsRequest {
            package: cx.key().to_owned(),
            generation: cx.spec.generation,
        })
        .await
        .map_err(|s| CallError::new("hookevent StartOperators", s))?;
    Ok(())
}

/// Has hookevent execute a hook's object operations as one batch. An invalid batch (unknown
/// kind, a namespace outside the app's) is a permanent failure naming the operation.
pub async fn apply_operations(
    cx: &TaskContext<'_>,
    hook: &str,
    operations: &[ObjectOperation],
) -> Result<(), TaskError> {
    if operations.is_empty() {
        return Ok(());
    }
    let request = pb::ApplyObjectOperationsRequest {
        package: cx.key().to_owned(),
        hook: hook.to_owned(),
        operations: operations.iter().map(to_proto).collect(),
    };
    match cx
        .services
        .hookevent
        .clone()
        .apply_object_operations(request)
        .await
        .map_err(|s| CallError::new("hookevent ApplyObjectOperations", s))
    {
        Ok(answer) => {
            for line in answer.into_inner().results {
                tracing::info!(hook, result = %line, "object operation");
            }
            Ok(())
        }
        Err(e) if e.is_invalid() => Err(TaskError::permanent(format!(
            "object operations: {}",
            e.message()
        ))),
        Err(e) => Err(e.into()),
    }
}

fn to_proto(op: &ObjectOperation) -> pb::ObjectOperation {
    let create = |name: &str, object: &Value, subresource: &Option<String>| pb::ObjectOperation {
        operation: name.to_owned(),
        body: Some(berth_proto::json::to_value(object)),
        subresource: subresource.clone().unwrap_or_default(),
        ..Default::default()
    };
    let target = |name: &str, t: &berth_hooks::ObjectRef| pb::ObjectOperation {
        operation: name.to_owned(),
        api_version: t.api_version.clone().unwrap_or_default(),
        kind: t.kind.clone(),
        namespace: t.namespace.clone().unwrap_or_default(),
        name: t.name.clone(),
        subresource: t.subresource.clone().unwrap_or_default(),
        ..Default::default()
    };
    match op {
        ObjectOperation::Create {
            object,
            subresource,
        } => create("Create", object, subresource),
        ObjectOperation::CreateOrUpdate {
            object,
            subresource,
        } => create("CreateOrUpdate", object, subresource),
        ObjectOperation::CreateIfNotExists {
            object,
            subresource,
        } => create("CreateIfNotExists", object, subresource),
        ObjectOperation::Delete { target: t } => target("Delete", t),
        ObjectOperation::DeleteInBackground { target: t } => target("DeleteInBackground", t),
        ObjectOperation::DeleteNonCascading { target: t } => target("DeleteNonCascading", t),
        ObjectOperation::MergePatch {
            target: t,
            merge_patch,
            ignore_missing_object,
            ..
        } => pb::ObjectOperation {
            body: Some(berth_proto::json::to_value(merge_patch)),
            ignore_missing_object: *ignore_missing_object,
            ..target("MergePatch", t)
        },
        ObjectOperation::JsonPatch {
            target: t,
            json_patch,
            ignore_missing_object,
            ..
        } => pb::ObjectOperation {
            body: serde_json::to_value(json_patch)
                .ok()
                .map(|p| berth_proto::json::to_value(&p)),
            ignore_missing_object: *ignore_missing_object,
            ..target("JSONPatch", t)
        },
        ObjectOperation::JqPatch {
            target: t,
            jq_filter,
            ignore_missing_object,
            ..
        } => pb::ObjectOperation {
            jq_filter: jq_filter.clone(),
            ignore_missing_object: *ignore_missing_object,
            ..target("JQPatch", t)
        },
    }
}
