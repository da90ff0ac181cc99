//! One registered `kubernetes` binding: its cache of objects (or only their filter results), the
//! checksum dedupe, and the event buffer that holds events until its Synchronization ran.

use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};

use berth_hooks::{KubernetesBinding, ObjectAndFilterResult, WatchEventType};
use berth_proto::queue::Task;
use serde_json::Value;

use crate::jq::JqProgram;

/// Events one binding buffers before its Synchronization ran. Past this, the buffer is dropped
/// and replaced by one Synchronization run with the objects current at release time: the hook
/// sees the same end state without hookevent holding an unbounded backlog.
pub const BUFFER_LIMIT: usize = 1024;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type ObjKey = (String, String);

pub fn obj_key(object: &Value) -> ObjKey {
    let meta = &object["metadata"];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (s(&meta["namespace"]), s(&meta["name"]))
}

struct Entry {
    /// Shaped as snapshots show it: `object` only with keepFullObjectsInMemory, `filterResult`
    /// only with a jqFilter.
    item: ObjectAndFilterResult,
    checksum: u64,
}

/// A change the hook may need to see: the event type and the object at the time of the event.
pub struct Change {
    pub event: WatchEventType,
    pub object: ObjectAndFilterResult,
}

pub struct BindingState {
    pub package: String,
    pub hook: String,
    pub spec: KubernetesBinding,
    jq: Option<JqProgram>,
    /// nameSelector with several names (one name is a field selector on the server).
    names: Vec<String>,
    entries: BTreeMap<ObjKey, Entry>,
    /// Watches whose initial list has not completed yet.
    pub pending_lists: usize,
    /// The Synchronization ran (or is queued ahead of every event): events flow.
    pub synchronized: bool,
    pub buffer: Vec<Task>,
    pub overflowed: bool,
}

impl BindingState {
    pub fn new(package: &str, hook: &str, spec: KubernetesBinding, jq: Option<JqProgram>, names: Vec<String>) -> Self {
        BindingState {
            package: package.to_owned(),
            hook: hook.to_owned(),
            spec,
            jq,
            names,
            entries: BTreeMap::new(),
            pending_lists: 0,
            synchronized: false,
            buffer: Vec::new(),
            overflowed: false,
        }
    }

    pub fn listed(&self) -> bool {
        self.pending_lists == 0
    }

    fn selected(&self, key: &ObjKey) -> bool {
        self.names.is_empty() || self.names.contains(&key.1)
    }

    /// Records an added or modified object. Returns the change to report, or `None` when the
    /// binding is still listing or the filter result's checksum did not change.
    pub fn observe(&mut self, object: &Value) -> Option<Change> {
        let key = obj_key(object);
        if !self.selected(&key) {
            return None;
        }
        let filter_result = self.jq.as_ref().map(|jq| {
            jq.run(object).unwrap_or_else(|e| {
                tracing::warn!(hook = %self.hook, binding = %self.spec.name, error = %e, "jqFilter failed; using null");
                Value::Null
            })
        });
        // Without a filter the whole object is compared, so every change fires (as in
        // shell-operator).
        let checksum = checksum(filter_result.as_ref().unwrap_or(object));
        let item = ObjectAndFilterResult {
            object: self.spec.keep_full_objects_in_memory.then(|| object.clone()),
            filter_result: filter_result.clone(),
        };
        let previous = self.entries.insert(key, Entry { item, checksum });
        let event = match previous {
            Some(p) if p.checksum == checksum => return None,
            Some(_) => WatchEventType::Modified,
            None => WatchEventType::Added,
        };
        self.listed().then(|| Change { event, object: ObjectAndFilterResult { object: Some(object.clone()), filter_result } })
    }

    /// Records a deletion; deletions always fire (once listed).
    pub fn forget(&mut self, object: &Value) -> Option<Change> {
        let key = obj_key(object);
        let previous = self.entries.remove(&key)?;
        let filter_result = previous.item.filter_result;
        self.listed().then(|| Change { event: WatchEventType::Deleted, object: ObjectAndFilterResult { object: Some(object.clone()), filter_result } })
    }

    /// After a relist of the watch on `namespace` (`None`: all namespaces): the objects that
    /// were not seen again are gone.
    pub fn relisted(&mut self, namespace: Option<&str>, seen: &HashSet<ObjKey>) -> Vec<Change> {
        let gone: Vec<ObjKey> = self
            .entries
            .keys()
            .filter(|k| namespace.is_none_or(|ns| k.0 == ns) && !seen.contains(*k))
            .cloned()
            .collect();
        let mut changes = vec![];
        for key in gone {
            if let Some(entry) = self.entries.remove(&key) {
                // The last known state stands in for the object: the deletion was not seen.
                let object = entry.item.object.unwrap_or_else(|| serde_json::json!({"metadata": {"namespace": key.0, "name": key.1}}));
                if self.listed() {
                    changes.push(Change { event: WatchEventType::Deleted, object: ObjectAndFilterResult { object: Some(object), filter_result: entry.item.filter_result } });
                }
            }
        }
        changes
    }

    /// The cached objects in (namespace, name) order.
    pub fn snapshot(&self) -> Vec<ObjectAndFilterResult> {
        self.entries.values().map(|e| e.item.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Holds a task until the Synchronization ran; bounded by [`BUFFER_LIMIT`].
    pub fn hold(&mut self, task: Task) {
        if self.overflowed {
            return;
        }
        if self.buffer.len() >= BUFFER_LIMIT {
            self.buffer = Vec::new();
            self.overflowed = true;
            return;
        }
        self.buffer.push(task);
    }
}

fn checksum(value: &Value) -> u64 {
    // A stable hash of the canonical text; only compared within this process.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    value.to_string().hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn binding(config: &str) -> BindingState {
        let c = berth_hooks::HookConfig::parse(config).unwrap();
        let spec = c.kubernetes[0].clone();
        let jq = spec.jq_filter.as_deref().map(|f| JqProgram::compile(f).unwrap());
        let mut b = BindingState::new("p", "h", spec, jq, vec![]);
        b.pending_lists = 1;
        b
    }

    fn cm(name: &str, value: &str, rv: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}, "data": {"v": value}})
    }

    #[test]
    fn listing_is_silent_then_events_fire_and_unchanged_filter_results_are_dropped() {
        let mut b = binding(r#"{"kubernetes":[{"name":"cms","kind":"ConfigMap","jqFilter":".data.v","keepFullObjectsInMemory":false}]}"#);
        assert!(b.observe(&cm("a", "1", "1")).is_none(), "initial list emits nothing");
        b.pending_lists = 0;
        let c = b.observe(&cm("b", "1", "2")).expect("added");
        assert_eq!(c.event, WatchEventType::Added);
        assert!(b.observe(&cm("b", "1", "3")).is_none(), "same filter result: dropped");
        let c = b.observe(&cm("b", "2", "4")).expect("modified");
        assert_eq!((c.event, c.object.filter_result), (WatchEventType::Modified, Some(json!("2"))));
        let c = b.forget(&cm("b", "2", "5")).expect("deleted");
        assert_eq!(c.event, WatchEventType::Deleted);
        assert_eq!(b.snapshot(), vec![ObjectAndFilterResult { object: None, filter_result: Some(json!("1")) }]);
    }

    #[test]
    fn relist_reports_vanished_objects() {
        let mut b = binding(r#"{"kubernetes":[{"name":"cms","kind":"ConfigMap"}]}"#);
        b.observe(&cm("a", "1", "1"));
        b.observe(&cm("b", "1", "1"));
        b.pending_lists = 0;
        let seen = HashSet::from([("ns".to_owned(), "a".to_owned())]);
        let gone = b.relisted(Some("ns"), &seen);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].object.object.as_ref().unwrap()["metadata"]["name"], "b");
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn buffer_overflow_turns_into_a_resync() {
        let mut b = binding(r#"{"kubernetes":[{"name":"cms","kind":"ConfigMap"}]}"#);
        for _ in 0..=BUFFER_LIMIT {
            b.hold(Task::default());
        }
        assert!(b.overflowed && b.buffer.is_empty());
    }
}
