//! Proto ⇄ domain: the hook-contract view of the bindings a package registers.

use berth_names::{Generation, PackageKey};
use std::time::Duration;

use berth_hooks::{KubernetesBinding, ScheduleBinding, WatchEventType};
use berth_proto::hookevent as pb;

use crate::kube::BindingObjects;
use crate::schedule::{Schedule, parse_crontab};

/// Shortest accepted `resynchronizationPeriod`: a shorter one would flood the package's queue.
const MIN_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// The hook-contract view of a registered binding.
pub fn spec_of(b: &pb::KubernetesBinding) -> Result<KubernetesBinding, String> {
    if b.kind.is_empty() {
        return Err("kind: required".into());
    }
    let events = b
        .execute_hook_on_event
        .iter()
        .map(|e| {
            WatchEventType::ALL
                .into_iter()
                .find(|t| t.as_str() == e)
                .ok_or_else(|| {
                    format!("executeHookOnEvent: {e:?} is not one of Added, Modified, Deleted")
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let non_empty = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    Ok(KubernetesBinding {
        name: non_empty(&b.binding).unwrap_or_else(|| "kubernetes".into()),
        api_version: non_empty(&b.api_version),
        kind: b.kind.clone(),
        execute_hook_on_event: events,
        execute_hook_on_synchronization: b.execute_hook_on_synchronization,
        wait_for_synchronization: b.wait_for_synchronization,
        keep_full_objects_in_memory: b.keep_full_objects_in_memory,
        resynchronization_period: (b.resynchronization_period_ms > 0)
            .then(|| Duration::from_millis(b.resynchronization_period_ms).max(MIN_RESYNC_PERIOD)),
        name_selector: None,
        label_selector: None,
        field_selector: None,
        namespace: None,
        jq_filter: non_empty(&b.jq_filter),
        include_snapshots_from: b.include_snapshots_from.clone(),
        allow_failure: b.allow_failure,
        queue: non_empty(&b.queue),
        group: non_empty(&b.group),
    })
}

/// The hook-contract view of a registered schedule.
pub fn schedule_spec_of(s: &pb::ScheduleBinding) -> ScheduleBinding {
    ScheduleBinding {
        name: if s.binding.is_empty() {
            "schedule".into()
        } else {
            s.binding.clone()
        },
        crontab: s.crontab.clone(),
        allow_failure: s.allow_failure,
        queue: (!s.queue.is_empty()).then(|| s.queue.clone()),
        include_snapshots_from: s.include_snapshots_from.clone(),
        group: (!s.group.is_empty()).then(|| s.group.clone()),
    }
}

/// A registered schedule binding, parsed for the scheduler. The error names the crontab's
/// problem.
pub fn schedule_of(
    package: &PackageKey,
    generation: Generation,
    b: &pb::ScheduleBinding,
) -> Result<Schedule, String> {
    let cron = parse_crontab(&b.crontab)?;
    Ok(Schedule {
        package: package.clone(),
        generation,
        hook: b.hook.clone(),
        binding: schedule_spec_of(b).name,
        crontab: b.crontab.clone(),
        allow_failure: b.allow_failure,
        queue: b.queue.clone(),
        include_snapshots_from: b.include_snapshots_from.clone(),
        group: b.group.clone(),
        cron,
    })
}

/// The hook-contract view of a scheduled binding, for its binding context.
pub fn schedule_binding(s: &Schedule) -> ScheduleBinding {
    ScheduleBinding {
        name: s.binding.clone(),
        crontab: s.crontab.clone(),
        allow_failure: s.allow_failure,
        queue: (!s.queue.is_empty()).then(|| s.queue.clone()),
        include_snapshots_from: s.include_snapshots_from.clone(),
        group: (!s.group.is_empty()).then(|| s.group.clone()),
    }
}

/// A binding's objects as GetSnapshots returns them.
pub fn binding_snapshot(b: BindingObjects) -> pb::BindingSnapshot {
    pb::BindingSnapshot {
        hook: b.hook,
        binding: b.binding,
        objects: Some(prost_types::ListValue {
            values: b
                .objects
                .iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .map(|o| berth_proto::json::to_value(&o))
                .collect(),
        }),
        synchronized: b.synchronized,
    }
}
