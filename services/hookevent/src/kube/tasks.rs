//! HookRun tasks from the registry: a binding's event or Synchronization run with the
//! snapshots its hook asks for, the release of held events once a binding is synchronized, and
//! the task shape workers and the broker's compaction read.

use std::collections::BTreeMap;

use berth_hooks::binding_context::{self, BindingContext};
use berth_hooks::{KubernetesBinding, Snapshots};
use berth_names::{Generation, PackageKey};
use berth_proto::queue::Task;
use berth_proto::tasks::{BindingType, HookRun};
use serde_json::Value;

use super::binding::Change;
use super::registry::State;

/// Marks a binding synchronized and returns what to queue: its Synchronization run (when
/// `run_sync`, or when its buffer overflowed) followed by its held events.
pub(super) fn release(state: &mut State, id: u64, run_sync: bool) -> Vec<Task> {
    let Some(r) = state.bindings.get(&id) else {
        return vec![];
    };
    if r.state.synchronized {
        return vec![];
    }
    let wants_sync =
        (run_sync && r.state.spec.execute_hook_on_synchronization) || r.state.overflowed;
    let sync = if wants_sync {
        sync_task(state, id)
    } else {
        None
    };
    let Some(r) = state.bindings.get_mut(&id) else {
        return vec![];
    };
    r.state.synchronized = true;
    let held = std::mem::take(&mut r.state.buffer);
    let overflowed = std::mem::replace(&mut r.state.overflowed, false);
    let mut tasks: Vec<Task> = sync.into_iter().collect();
    if !overflowed {
        tasks.extend(held);
    }
    tasks
}

pub(super) fn hook_snapshots(state: &State, package: &str, hook: &str) -> Snapshots {
    let Some(pkg) = state.packages.get(package) else {
        return Snapshots::new();
    };
    pkg.bindings
        .iter()
        .filter_map(|id| state.bindings.get(id))
        .filter(|r| r.state.hook == hook)
        .map(|r| (r.state.spec.name.clone(), r.state.snapshot()))
        .collect::<BTreeMap<_, _>>()
}

fn needs_snapshots(spec: &KubernetesBinding) -> bool {
    spec.group.is_some() || !spec.include_snapshots_from.is_empty()
}

pub(super) fn event_task(state: &State, id: u64, change: &Change) -> Option<Task> {
    let r = state.bindings.get(&id)?;
    let b = &r.state;
    let pkg = state.packages.get(&b.package)?;
    let config = pkg.hooks.get(&b.hook)?;
    let snapshots = if needs_snapshots(&b.spec) {
        hook_snapshots(state, b.package.as_str(), &b.hook)
    } else {
        Snapshots::new()
    };
    let ctx = BindingContext::event(&b.spec, change.event, &change.object, config, &snapshots);
    Some(hook_run(
        &b.package,
        pkg.generation,
        &b.hook,
        BindingType::Kubernetes,
        &b.spec,
        vec![ctx],
    ))
}

pub(super) fn sync_task(state: &State, id: u64) -> Option<Task> {
    let r = state.bindings.get(&id)?;
    let b = &r.state;
    let pkg = state.packages.get(&b.package)?;
    let config = pkg.hooks.get(&b.hook)?;
    let snapshots = hook_snapshots(state, b.package.as_str(), &b.hook);
    let ctx = BindingContext::synchronization(&b.spec, &b.snapshot(), config, &snapshots);
    Some(hook_run(
        &b.package,
        pkg.generation,
        &b.hook,
        BindingType::Synchronization,
        &b.spec,
        vec![ctx],
    ))
}

/// The queue a binding's runs go to: the package's main queue or `<package>/<queue>`.
pub fn queue_name(package: &str, queue: Option<&str>) -> String {
    match queue {
        None | Some("") | Some("main") => package.to_owned(),
        Some(q) => format!("{package}/{q}"),
    }
}

fn hook_run(
    package: &PackageKey,
    generation: Generation,
    hook: &str,
    binding_type: BindingType,
    spec: &KubernetesBinding,
    contexts: Vec<BindingContext>,
) -> Task {
    hook_run_task(
        package,
        generation,
        hook,
        binding_type,
        spec.queue.as_deref(),
        spec.allow_failure,
        binding_context::to_json(&contexts),
    )
}

/// A HookRun task (its contexts as the merge items the broker's compaction concatenates).
pub fn hook_run_task(
    package: &PackageKey,
    generation: Generation,
    hook: &str,
    binding_type: BindingType,
    queue: Option<&str>,
    allow_failure: bool,
    contexts: Value,
) -> Task {
    let contexts = match contexts {
        Value::Array(contexts) => contexts,
        other => vec![other],
    };
    Task {
        id: uuid::Uuid::new_v4().to_string(),
        queue: queue_name(package.as_str(), queue),
        package: package.to_string(),
        generation: generation.get(),
        traceparent: berth_runtime::current_traceparent(),
        allow_failure,
        ..HookRun::task(hook, binding_type, &contexts)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use berth_hooks::HookConfig;
    use berth_proto::hookevent as pb;
    use serde_json::json;

    use super::super::binding::BindingState;
    use super::super::registry::{PackageState, Registered};
    use super::*;
    use crate::convert::spec_of;

    /// A package with one hook holding two bindings: `pods` (grouped with `nodes`) and `cms`,
    /// which includes the snapshots of `pods`.
    fn state() -> State {
        let binding = |name: &str, extra: Value| pb::KubernetesBinding {
            hook: "h.sh".into(),
            binding: name.into(),
            kind: "ConfigMap".into(),
            execute_hook_on_event: vec!["Added".into(), "Modified".into(), "Deleted".into()],
            execute_hook_on_synchronization: true,
            wait_for_synchronization: true,
            keep_full_objects_in_memory: true,
            include_snapshots_from: extra["include"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default(),
            group: extra["group"].as_str().unwrap_or_default().to_owned(),
            ..Default::default()
        };
        let protos = [
            binding("pods", json!({"group": "g"})),
            binding("nodes", json!({"group": "g"})),
            binding("cms", json!({"include": ["pods"]})),
        ];
        let mut state = State::default();
        let mut ids = vec![];
        let mut hooks: HashMap<String, HookConfig> = HashMap::new();
        for (id, p) in protos.iter().enumerate() {
            let spec = spec_of(p).unwrap();
            hooks
                .entry("h.sh".into())
                .or_default()
                .kubernetes
                .push(spec.clone());
            let b = BindingState::new(
                &PackageKey::from_issued("ns.app".into()),
                "h.sh",
                spec,
                None,
                vec![],
            );
            state.bindings.insert(
                id as u64,
                Registered {
                    state: b,
                    keys: vec![],
                    pending: HashSet::new(),
                    follow: None,
                },
            );
            ids.push(id as u64);
        }
        state.packages.insert(
            PackageKey::from_issued("ns.app".into()),
            PackageState {
                generation: Generation::new(3),
                bindings: ids,
                hooks,
            },
        );
        state
    }

    fn cm(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "ns", "name": name}})
    }

    fn contexts(task: &Task) -> Value {
        berth_proto::tasks::binding_contexts(task).unwrap()
    }

    #[test]
    fn events_carry_included_and_group_snapshots() {
        let mut s = state();
        let pods = s.bindings.get_mut(&0).unwrap();
        pods.state.observe(&cm("p1"));
        let cms = s.bindings.get_mut(&2).unwrap();
        let change = cms.state.observe(&cm("c1")).expect("an Added event");
        let task = event_task(&s, 2, &change).unwrap();
        assert_eq!(
            (task.queue.as_str(), task.generation, task.kind.as_str()),
            ("ns.app", 3, "HookRun")
        );
        let ctx = &contexts(&task)[0];
        assert_eq!(
            (ctx["type"].as_str(), ctx["watchEvent"].as_str()),
            (Some("Event"), Some("Added"))
        );
        assert_eq!(ctx["object"]["metadata"]["name"], "c1");
        assert_eq!(
            ctx["snapshots"]["pods"][0]["object"]["metadata"]["name"], "p1",
            "{ctx}"
        );
        assert!(
            ctx["snapshots"].get("cms").is_none(),
            "only the included bindings: {ctx}"
        );

        let pods = s.bindings.get_mut(&0).unwrap();
        let change = pods.state.observe(&cm("p2")).unwrap();
        let ctx = &contexts(&event_task(&s, 0, &change).unwrap())[0];
        assert_eq!(
            (ctx["type"].as_str(), ctx["groupName"].as_str()),
            (Some("Group"), Some("g"))
        );
        assert_eq!(ctx["snapshots"]["pods"].as_array().unwrap().len(), 2);
        assert_eq!(
            ctx["snapshots"]["nodes"],
            json!([]),
            "every group member, even empty: {ctx}"
        );
    }

    #[test]
    fn held_events_follow_the_synchronization_in_order() {
        let mut s = state();
        let cms = s.bindings.get_mut(&2).unwrap();
        cms.state.observe(&cm("c1"));
        let change = cms
            .state
            .observe(&json!({"metadata": {"namespace": "ns", "name": "c1"}, "data": {"x": "1"}}))
            .unwrap();
        let held = event_task(&s, 2, &change).unwrap();
        s.bindings.get_mut(&2).unwrap().state.hold(held.clone());
        let tasks = release(&mut s, 2, true);
        assert_eq!(tasks.len(), 2);
        let sync = &contexts(&tasks[0])[0];
        assert_eq!(sync["type"], "Synchronization");
        assert_eq!(
            sync["objects"][0]["object"]["data"]["x"], "1",
            "current objects: {sync}"
        );
        assert_eq!(tasks[1].id, held.id);
        assert!(release(&mut s, 2, true).is_empty(), "released once");
    }

    #[test]
    fn queues_follow_the_binding() {
        assert_eq!(queue_name("ns.app", None), "ns.app");
        assert_eq!(queue_name("ns.app", Some("main")), "ns.app");
        assert_eq!(queue_name("ns.app", Some("slow")), "ns.app/slow");
    }
}
