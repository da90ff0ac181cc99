//! One registered `kubernetes` binding: its cache of objects (or only their filter results), the
//! checksum dedupe, and the event buffer that holds events until its Synchronization ran.

use berth_names::PackageKey;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use berth_hooks::{KubernetesBinding, ObjectAndFilterResult, WatchEventType};
use berth_proto::queue::Task;
use serde_json::Value;

use crate::jq::{JqError, JqFilter};

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
    pub package: PackageKey,
    pub hook: String,
    pub spec: KubernetesBinding,
    jq: Option<Arc<JqFilter>>,
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
    pub fn new(
        package: &PackageKey,
        hook: &str,
        spec: KubernetesBinding,
        jq: Option<Arc<JqFilter>>,
        names: Vec<String>,
    ) -> Self {
        BindingState {
            package: package.clone(),
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

    /// The binding's jqFilter, if it has one.
    pub fn filter(&self) -> Option<&Arc<JqFilter>> {
        self.jq.as_ref()
    }

    pub fn listed(&self) -> bool {
        self.pending_lists == 0
    }

    fn selected(&self, key: &ObjKey) -> bool {
        self.names.is_empty() || self.names.contains(&key.1)
    }

    /// [`BindingState::observe_in`] for an object no other binding looks at, its filter run
    /// in process.
    #[cfg(test)]
    pub fn observe(&mut self, object: &Value) -> Option<Change> {
        let mut eval = Evaluation::new(object);
        eval.evaluate_in_process(self.jq.as_deref());
        self.observe_in(&mut eval)
    }

    /// Records an added or modified object, sharing its filter results with the other bindings
    /// of its watch through `eval`. Returns the change to report, or `None` when the binding is
    /// still listing or the filter result's checksum did not change.
    pub fn observe_in(&mut self, eval: &mut Evaluation<'_>) -> Option<Change> {
        let object = eval.object;
        let key = obj_key(object);
        if !self.selected(&key) {
            return None;
        }
        // A filter that fails on the object drops the event (logged), as in shell-operator: the
        // hook never sees a made-up `null`, and the cache keeps what it had.
        let (filter_result, checksum) = eval.result(self.jq.as_deref())?;
        let item = ObjectAndFilterResult {
            object: self.full(object),
            filter_result: filter_result.clone(),
        };
        let previous = self.entries.insert(key, Entry { item, checksum });
        let event = match previous {
            Some(p) if p.checksum == checksum => return None,
            Some(_) => WatchEventType::Modified,
            None => WatchEventType::Added,
        };
        self.listed().then(|| Change {
            event,
            object: ObjectAndFilterResult {
                object: self.full(object),
                filter_result,
            },
        })
    }

    /// Records a deletion; deletions always fire (once listed).
    pub fn forget(&mut self, object: &Value) -> Option<Change> {
        let key = obj_key(object);
        let previous = self.entries.remove(&key)?;
        let filter_result = previous.item.filter_result;
        self.listed().then(|| Change {
            event: WatchEventType::Deleted,
            object: ObjectAndFilterResult {
                object: self.full(object),
                filter_result,
            },
        })
    }

    /// A copy of `object` when the binding's contexts show objects (keepFullObjectsInMemory);
    /// otherwise no copy is made, since the hook would never see it.
    fn full(&self, object: &Value) -> Option<Value> {
        self.spec
            .keep_full_objects_in_memory
            .then(|| object.clone())
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
                let object = entry.item.object.unwrap_or_else(
                    || serde_json::json!({"metadata": {"namespace": key.0, "name": key.1}}),
                );
                if self.listed() {
                    changes.push(Change {
                        event: WatchEventType::Deleted,
                        object: ObjectAndFilterResult {
                            object: Some(object),
                            filter_result: entry.item.filter_result,
                        },
                    });
                }
            }
        }
        changes
    }

    /// Forgets the objects of `namespace` without reporting them (the binding no longer covers
    /// that namespace; the objects themselves are not gone).
    pub fn drop_namespace(&mut self, namespace: &str) {
        self.entries.retain(|k, _| k.0 != namespace);
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

/// One watched object's filter results, computed once per distinct jqFilter: bindings of many
/// packages that share a watch and a filter (the common case: the same hook installed many
/// times) cost one jq run and one checksum per event, not one per binding. The runs happen
/// before the bindings look at the results ([`Evaluation::missing`], [`Evaluation::record`]):
/// they go to the jq evaluators, which the manager does not wait for under its lock.
pub struct Evaluation<'a> {
    pub object: &'a Value,
    /// Filter source → (result, checksum of the result), or `None` where the filter failed.
    filtered: HashMap<String, Option<(Value, u64)>>,
    /// Checksum of the whole object, for bindings without a filter.
    whole: Option<u64>,
}

impl<'a> Evaluation<'a> {
    pub fn new(object: &'a Value) -> Self {
        Evaluation {
            object,
            filtered: HashMap::new(),
            whole: None,
        }
    }

    /// The filters of `bindings` this evaluation has no result for yet, each once, with the
    /// hook and binding of its first user (for the log line when it fails).
    pub fn missing<'b>(
        &self,
        bindings: impl IntoIterator<Item = &'b BindingState>,
    ) -> Vec<(Arc<JqFilter>, String, String)> {
        let mut missing: Vec<(Arc<JqFilter>, String, String)> = vec![];
        for b in bindings {
            if let Some(f) = b.filter()
                && !self.filtered.contains_key(f.source())
                && !missing.iter().any(|(m, _, _)| m.source() == f.source())
            {
                missing.push((f.clone(), b.hook.clone(), b.spec.name.clone()));
            }
        }
        missing
    }

    /// Records `filter`'s result on the object; a failure is logged (naming `hook` and
    /// `binding`) and drops the event for every binding using the filter.
    pub fn record(
        &mut self,
        filter: &JqFilter,
        result: Result<Value, JqError>,
        hook: &str,
        binding: &str,
    ) {
        let done = match result {
            Ok(value) => {
                let sum = checksum(&value);
                Some((value, sum))
            }
            Err(e) => {
                let (namespace, name) = obj_key(self.object);
                tracing::error!(%hook, %binding, %namespace, %name, error = %e, "jqFilter failed on the object; event dropped");
                None
            }
        };
        self.filtered.insert(filter.source().to_owned(), done);
    }

    /// Runs `filter` with the engine in this process (tests only: it is not bounded).
    #[cfg(test)]
    pub fn evaluate_in_process(&mut self, filter: Option<&JqFilter>) {
        let Some(filter) = filter else { return };
        if self.filtered.contains_key(filter.source()) {
            return;
        }
        let result = crate::jq::JqProgram::compile(filter.source())
            .and_then(|p| p.run(self.object))
            .map_err(|reason| JqError::Run {
                program: filter.source().to_owned(),
                reason,
            });
        self.record(filter, result, "test", "test");
    }

    /// The filter result (`None` without a filter) and the checksum compared between events;
    /// `None` when the filter failed on the object or was not run.
    fn result(&mut self, jq: Option<&JqFilter>) -> Option<(Option<Value>, u64)> {
        let Some(jq) = jq else {
            // Without a filter the whole object is compared, so every change fires (as in
            // shell-operator).
            let object = self.object;
            return Some((None, *self.whole.get_or_insert_with(|| checksum(object))));
        };
        self.filtered
            .get(jq.source())?
            .as_ref()
            .map(|(value, sum)| (Some(value.clone()), *sum))
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
        let jq = spec
            .jq_filter
            .as_deref()
            .map(|f| Arc::new(JqFilter::unchecked(f)));
        let mut b = BindingState::new(&PackageKey::from_issued("p".into()), "h", spec, jq, vec![]);
        b.pending_lists = 1;
        b
    }

    fn cm(name: &str, value: &str, rv: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "ns", "name": name, "resourceVersion": rv}, "data": {"v": value}})
    }

    #[test]
    fn listing_is_silent_then_events_fire_and_unchanged_filter_results_are_dropped() {
        let mut b = binding(
            r#"{"kubernetes":[{"name":"cms","kind":"ConfigMap","jqFilter":".data.v","keepFullObjectsInMemory":false}]}"#,
        );
        assert!(
            b.observe(&cm("a", "1", "1")).is_none(),
            "initial list emits nothing"
        );
        b.pending_lists = 0;
        let c = b.observe(&cm("b", "1", "2")).expect("added");
        assert_eq!(c.event, WatchEventType::Added);
        assert!(
            b.observe(&cm("b", "1", "3")).is_none(),
            "same filter result: dropped"
        );
        let c = b.observe(&cm("b", "2", "4")).expect("modified");
        assert_eq!(
            (c.event, c.object.filter_result),
            (WatchEventType::Modified, Some(json!("2")))
        );
        let c = b.forget(&cm("b", "2", "5")).expect("deleted");
        assert_eq!(c.event, WatchEventType::Deleted);
        assert_eq!(
            b.snapshot(),
            vec![ObjectAndFilterResult {
                object: None,
                filter_result: Some(json!("1"))
            }]
        );
    }

    #[test]
    fn bindings_sharing_a_filter_run_it_once_per_event() {
        let by_value = r#"{"kubernetes":[{"name":"cms","kind":"ConfigMap","jqFilter":".data.v","keepFullObjectsInMemory":false}]}"#;
        let mut bindings = [
            binding(by_value),
            binding(by_value),
            binding(
                r#"{"kubernetes":[{"name":"cms","kind":"ConfigMap","jqFilter":".metadata.name"}]}"#,
            ),
            binding(r#"{"kubernetes":[{"name":"cms","kind":"ConfigMap"}]}"#),
        ];
        for b in &mut bindings {
            b.pending_lists = 0;
        }
        let object = cm("x", "1", "1");
        let mut eval = Evaluation::new(&object);
        assert_eq!(
            eval.missing(&bindings).len(),
            2,
            "one run per distinct filter"
        );
        for b in &bindings {
            eval.evaluate_in_process(b.filter().map(|f| &**f));
        }
        let changes: Vec<Change> = bindings
            .iter_mut()
            .map(|b| b.observe_in(&mut eval).expect("added"))
            .collect();
        let results: Vec<Option<Value>> = changes
            .iter()
            .map(|c| c.object.filter_result.clone())
            .collect();
        assert_eq!(
            results,
            [Some(json!("1")), Some(json!("1")), Some(json!("x")), None]
        );
        assert!(eval.missing(&bindings).is_empty(), "all results recorded");
        assert!(
            changes[0].object.object.is_none(),
            "keepFullObjectsInMemory: false copies no object"
        );
        assert_eq!(changes[2].object.object.as_ref(), Some(&object));

        // A change outside `.data.v` fires only for the bindings that see it.
        let renamed = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "ns", "name": "x", "resourceVersion": "2", "labels": {"a": "b"}}, "data": {"v": "1"}});
        let mut eval = Evaluation::new(&renamed);
        for b in &bindings {
            eval.evaluate_in_process(b.filter().map(|f| &**f));
        }
        let fired: Vec<bool> = bindings
            .iter_mut()
            .map(|b| b.observe_in(&mut eval).is_some())
            .collect();
        assert_eq!(fired, [false, false, false, true]);
    }

    #[test]
    fn a_filter_that_fails_on_an_object_drops_its_event() {
        // `.data.v | tonumber` fails on "x": shell-operator logs it and drops the event.
        let mut b = binding(
            r#"{"kubernetes":[{"name":"cms","kind":"ConfigMap","jqFilter":".data.v | tonumber"}]}"#,
        );
        assert!(b.observe(&cm("a", "x", "1")).is_none(), "listed, left out");
        b.pending_lists = 0;
        assert!(
            b.observe(&cm("b", "x", "2")).is_none(),
            "no event with a null filterResult"
        );
        assert_eq!(b.len(), 0, "nothing cached for the snapshots either");
        let c = b
            .observe(&cm("b", "7", "3"))
            .expect("added once the filter works");
        assert_eq!(
            (c.event, c.object.filter_result),
            (WatchEventType::Added, Some(json!(7)))
        );
        assert!(
            b.observe(&cm("b", "y", "4")).is_none(),
            "a failing change is dropped"
        );
        assert_eq!(
            b.snapshot()[0].filter_result,
            Some(json!(7)),
            "the cache keeps the last good result"
        );
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
        assert_eq!(
            gone[0].object.object.as_ref().unwrap()["metadata"]["name"],
            "b"
        );
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
