//! Tasks written by berth before payloads were prost messages: the queue's `Task.payload_json`
//! was JSON text, and berth's kinds filled it with these shapes. Queued tasks and outbox rows
//! stored by that version are still read, through [`upgrade`] only: the one place that knows
//! the old shapes, so nothing else reads JSON payloads.
//!
//! - HookRun: `{"hook", "binding_type": "Schedule", "binding_contexts": [...]}`;
//! - WebhookRun: `{"hook", "webhook_type": "Validating", "binding_contexts": [...],
//!   "request_id", "deadline_unix_ms", "objects"}`;
//! - ValidateRun: `{"request_id", "deadline_unix_ms", "settings": {...}}`;
//! - Start: `{}`, or the steps a failed attempt finished, `{"done": ["ApplySettings"]}`;
//! - Run: `{}`, or why lifecycle queued it, `{"reason": "..."}`;
//! - every other berth kind: `{}`.

use prost::Message;
use serde::Deserialize;
use serde_json::Value;

use super::{BindingType, HookRun, Run, Start, TaskKind, ValidateRun, WebhookRun, WebhookType};
use crate::queue;

/// What an old task's payload text becomes in the current envelope.
#[derive(Debug, Clone, PartialEq)]
pub struct Upgraded {
    pub payload: Vec<u8>,
    pub merge: Option<queue::Merge>,
}

/// The payload and merge fields of a task of `kind` whose payload an earlier berth stored as
/// the JSON text `payload_json`.
///
/// Never fails, so no stored task is lost: a payload that is not the old shape of its kind,
/// and the payload of a kind berth does not know (another producer's), keep their text as
/// their bytes; a worker then refuses a berth task it cannot read with an error naming it, as
/// the old version's worker did.
pub fn upgrade(kind: &str, payload_json: &str) -> Upgraded {
    let known = TaskKind::parse(kind).and_then(|kind| upgrade_known(kind, payload_json));
    known.unwrap_or_else(|| Upgraded {
        payload: payload_json.as_bytes().to_vec(),
        merge: None,
    })
}

fn upgrade_known(kind: TaskKind, json: &str) -> Option<Upgraded> {
    let plain = |payload: Vec<u8>| {
        Some(Upgraded {
            payload,
            merge: None,
        })
    };
    match kind {
        TaskKind::HookRun => {
            let old: OldHookRun = serde_json::from_str(json).ok()?;
            let binding_type = old.binding_type.parse::<BindingType>().ok()?;
            let contexts = match old.binding_contexts {
                Value::Array(contexts) => contexts,
                Value::Null => Vec::new(),
                _ => return None,
            };
            let task = HookRun::task(&old.hook, binding_type, &contexts);
            Some(Upgraded {
                payload: task.payload,
                merge: task.merge,
            })
        }
        TaskKind::WebhookRun => {
            let old: OldWebhookRun = serde_json::from_str(json).ok()?;
            let webhook_type = old.webhook_type.parse::<WebhookType>().ok()?;
            let Value::Array(contexts) = old.binding_contexts else {
                return None;
            };
            let run = WebhookRun {
                hook: old.hook,
                webhook_type: webhook_type as i32,
                request_id: old.request_id,
                deadline_unix_ms: old.deadline_unix_ms,
                objects: old.objects,
                binding_contexts: contexts.iter().map(crate::json::to_struct).collect(),
            };
            plain(run.encode_to_vec())
        }
        TaskKind::ValidateRun => {
            let old: OldValidateRun = serde_json::from_str(json).ok()?;
            let run = ValidateRun {
                request_id: old.request_id,
                deadline_unix_ms: old.deadline_unix_ms,
                settings: Some(crate::json::to_struct(&old.settings)),
                ..Default::default()
            };
            plain(run.encode_to_vec())
        }
        TaskKind::Start => {
            let old: OldStart = serde_json::from_str(json).ok()?;
            let done = old
                .done
                .iter()
                .map(|step| TaskKind::parse(step).map(|k| k as i32))
                .collect::<Option<_>>()?;
            plain(Start { done }.encode_to_vec())
        }
        TaskKind::Run => {
            let old: OldRun = serde_json::from_str(json).ok()?;
            plain(Run { reason: old.reason }.encode_to_vec())
        }
        _ => {
            // `{}`: the kinds that took no arguments.
            serde_json::from_str::<serde::de::IgnoredAny>(json).ok()?;
            plain(Vec::new())
        }
    }
}

#[derive(Deserialize)]
struct OldHookRun {
    #[serde(default)]
    hook: String,
    #[serde(default)]
    binding_type: String,
    #[serde(default)]
    binding_contexts: Value,
}

#[derive(Deserialize)]
struct OldWebhookRun {
    hook: String,
    webhook_type: String,
    binding_contexts: Value,
    request_id: String,
    deadline_unix_ms: i64,
    #[serde(default)]
    objects: u32,
}

#[derive(Deserialize)]
struct OldValidateRun {
    request_id: String,
    deadline_unix_ms: i64,
    settings: Value,
}

#[derive(Deserialize)]
struct OldRun {
    #[serde(default)]
    reason: String,
}

#[derive(Deserialize)]
struct OldStart {
    #[serde(default)]
    done: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::{binding_contexts, decode};
    use serde_json::json;

    fn as_task(kind: &str, up: Upgraded) -> queue::Task {
        queue::Task {
            kind: kind.to_owned(),
            payload: up.payload,
            merge: up.merge,
            ..Default::default()
        }
    }

    #[test]
    fn old_hook_runs_become_hook_runs_that_merge_with_new_ones() {
        // As the previous version's hookevent wrote it.
        let old = r#"{"hook":"h.sh","binding_type":"Kubernetes","binding_contexts":[{"binding":"pods","group":"g"},{"binding":"cms"}]}"#;
        let task = as_task("HookRun", upgrade("HookRun", old));
        let run: HookRun = crate::tasks::payload(&task).unwrap();
        assert_eq!(
            (run.hook.as_str(), run.binding_type()),
            ("h.sh", BindingType::Kubernetes)
        );
        assert_eq!(
            binding_contexts(&task).unwrap(),
            json!([{"binding": "pods", "group": "g"}, {"binding": "cms"}])
        );
        let new = HookRun::task("h.sh", BindingType::Kubernetes, &[]);
        assert_eq!(task.merge.unwrap().key, new.merge.unwrap().key);
        let bare = as_task(
            "HookRun",
            upgrade("HookRun", r#"{"hook":"h","binding_type":"Schedule"}"#),
        );
        assert_eq!(binding_contexts(&bare).unwrap(), json!([]));
    }

    #[test]
    fn old_webhook_validate_and_start_payloads_keep_their_fields() {
        let old = r#"{"hook":"w","webhook_type":"Conversion","binding_contexts":[{"review":{"a":1}}],"request_id":"r","deadline_unix_ms":5,"objects":2}"#;
        let run: WebhookRun = decode("WebhookRun", &upgrade("WebhookRun", old).payload).unwrap();
        assert_eq!(run.webhook_type(), WebhookType::Conversion);
        assert_eq!(
            (run.request_id.as_str(), run.deadline_unix_ms, run.objects),
            ("r", 5, 2)
        );
        assert_eq!(run.contexts_json(), json!([{"review": {"a": 1}}]));

        let old = r#"{"request_id":"v","deadline_unix_ms":9,"settings":{"replicas":2}}"#;
        let run: ValidateRun = decode("ValidateRun", &upgrade("ValidateRun", old).payload).unwrap();
        assert_eq!(run.settings_json(), json!({"replicas": 2}));

        let start: Start = decode(
            "Start",
            &upgrade("Start", r#"{"done":["ApplySettings","Startup"]}"#).payload,
        )
        .unwrap();
        assert_eq!(
            start.done,
            [TaskKind::ApplySettings as i32, TaskKind::Startup as i32]
        );
        assert_eq!(upgrade("Start", "{}").payload, Vec::<u8>::new());
        let run: Run = decode(
            "Run",
            &upgrade("Run", r#"{"reason":"values changed"}"#).payload,
        )
        .unwrap();
        assert_eq!(run.reason, "values changed");
        assert_eq!(upgrade("Run", "{}").payload, Vec::<u8>::new());
        assert_eq!(
            upgrade("Download", "{}"),
            Upgraded {
                payload: vec![],
                merge: None
            }
        );
    }

    #[test]
    fn what_is_not_an_old_berth_payload_keeps_its_text() {
        for (kind, json) in [
            ("queue-test", r#"{"sleep_ms": 5}"#),
            ("HookRun", r#"{"hook":"h","binding_type":"cron"}"#),
            ("Start", r#"{"done":["Dance"]}"#),
            ("Run", "not json"),
        ] {
            assert_eq!(
                upgrade(kind, json),
                Upgraded {
                    payload: json.as_bytes().to_vec(),
                    merge: None
                },
                "{kind} {json}"
            );
        }
    }
}
