//! Compaction of hook runs, as shell-operator and addon-operator do it.
//!
//! When a `HookRun` task is leased, the queued tasks right behind it in the same queue that run
//! the same hook for the same binding type are folded into it: one hook process then sees all
//! their binding contexts at once instead of starting once per event. Only *consecutive* tasks are
//! merged so the order of different work in a queue never changes. After concatenation, adjacent
//! binding contexts of the same `group` collapse to the last one, because a group context carries
//! the complete snapshots and only the newest matters.
//!
//! The payload shape is `{"hook": "...", "binding_type": "...", "binding_contexts": [...]}`.

use serde_json::{Map, Value};

/// The task kind that compaction applies to.
pub const HOOK_RUN_KIND: &str = "HookRun";

/// Tasks merge only when they share this key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeKey {
    pub hook: String,
    pub binding_type: String,
}

/// A HookRun payload that can take part in a merge.
#[derive(Debug, Clone)]
pub struct HookRunPayload {
    pub key: MergeKey,
    fields: Map<String, Value>,
    contexts: Vec<Value>,
}

impl HookRunPayload {
    /// Reads a payload; `None` when it is not a mergeable HookRun payload (then it is never
    /// merged and runs on its own).
    pub fn parse(payload_json: &str) -> Option<Self> {
        let Value::Object(mut fields) = serde_json::from_str(payload_json).ok()? else {
            return None;
        };
        let hook = fields.get("hook")?.as_str()?.to_owned();
        let binding_type = fields.get("binding_type")?.as_str()?.to_owned();
        let contexts = match fields.remove("binding_contexts") {
            Some(Value::Array(items)) => items,
            None | Some(Value::Null) => Vec::new(),
            Some(_) => return None,
        };
        Some(Self {
            key: MergeKey { hook, binding_type },
            fields,
            contexts,
        })
    }

    /// Appends the binding contexts of a later task with the same key.
    pub fn absorb(&mut self, later: HookRunPayload) {
        self.contexts.extend(later.contexts);
    }

    /// The merged payload as JSON, with same-group neighbours reduced to the last one.
    pub fn into_json(self) -> String {
        let mut fields = self.fields;
        fields.insert(
            "binding_contexts".into(),
            Value::Array(collapse_groups(self.contexts)),
        );
        Value::Object(fields).to_string()
    }
}

fn group_of(context: &Value) -> Option<&str> {
    context
        .get("group")
        .and_then(Value::as_str)
        .filter(|g| !g.is_empty())
}

/// Keeps only the last of each run of adjacent contexts that share a non-empty `group`.
fn collapse_groups(contexts: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(contexts.len());
    for context in contexts {
        let same_group = match (out.last().and_then(group_of), group_of(&context)) {
            (Some(prev), Some(cur)) => prev == cur,
            _ => false,
        };
        if same_group {
            out.pop();
        }
        out.push(context);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn payload(hook: &str, ty: &str, contexts: Value) -> String {
        json!({"hook": hook, "binding_type": ty, "binding_contexts": contexts}).to_string()
    }

    #[test]
    fn merges_contexts_in_order_and_keeps_other_fields() {
        let head = json!({"hook": "h", "binding_type": "Kubernetes", "binding_contexts": [{"n": 1}], "extra": 7});
        let mut merged = HookRunPayload::parse(&head.to_string()).expect("head parses");
        let later = HookRunPayload::parse(&payload("h", "Kubernetes", json!([{"n": 2}, {"n": 3}])))
            .expect("later parses");
        assert_eq!(merged.key, later.key);
        merged.absorb(later);
        let out: Value = serde_json::from_str(&merged.into_json()).expect("valid JSON");
        assert_eq!(
            out["binding_contexts"],
            json!([{"n": 1}, {"n": 2}, {"n": 3}])
        );
        assert_eq!(out["extra"], json!(7));
    }

    #[test]
    fn adjacent_contexts_of_one_group_reduce_to_the_last() {
        let contexts = json!([
            {"group": "g", "n": 1}, {"group": "g", "n": 2}, {"n": 3}, {"group": "g", "n": 4}, {"group": "x", "n": 5}
        ]);
        let merged = HookRunPayload::parse(&payload("h", "Schedule", contexts)).expect("parses");
        let out: Value = serde_json::from_str(&merged.into_json()).expect("valid JSON");
        let ns: Vec<i64> = out["binding_contexts"]
            .as_array()
            .expect("array")
            .iter()
            .map(|c| c["n"].as_i64().expect("n"))
            .collect();
        assert_eq!(ns, vec![2, 3, 4, 5]);
    }

    #[test]
    fn payloads_without_hook_or_with_bad_contexts_are_not_mergeable() {
        assert!(HookRunPayload::parse("not json").is_none());
        assert!(HookRunPayload::parse(r#"{"binding_type": "Schedule"}"#).is_none());
        assert!(
            HookRunPayload::parse(r#"{"hook": "h", "binding_type": "S", "binding_contexts": 3}"#)
                .is_none()
        );
        assert!(HookRunPayload::parse(r#"{"hook": "h", "binding_type": "S"}"#).is_some());
    }
}
