//! berth's gRPC contracts. Every service talks to the others only through these types.

/// Generated code, nested as the proto packages are so cross-package references resolve.
#[allow(clippy::all)]
mod generated {
    pub mod berth {
        pub mod v1 {
            tonic::include_proto!("berth.v1");
        }
        pub mod lifecycle {
            pub mod v1 {
                tonic::include_proto!("berth.lifecycle.v1");
            }
        }
        pub mod queue {
            pub mod v1 {
                tonic::include_proto!("berth.queue.v1");
            }
        }
        pub mod hookevent {
            pub mod v1 {
                tonic::include_proto!("berth.hookevent.v1");
            }
        }
        pub mod release {
            pub mod v1 {
                tonic::include_proto!("berth.release.v1");
            }
        }
        pub mod tasks {
            pub mod v1 {
                tonic::include_proto!("berth.tasks.v1");
            }
        }
    }
}

/// Internal API of the hookevent service (`berth.hookevent.v1`).
pub use generated::berth::hookevent::v1 as hookevent;
/// Internal API of the lifecycle service (`berth.lifecycle.v1`).
pub use generated::berth::lifecycle::v1 as lifecycle;
/// Internal API of the queue broker (`berth.queue.v1`).
pub use generated::berth::queue::v1 as queue;
/// Internal API of the release service (`berth.release.v1`).
pub use generated::berth::release::v1 as release;
/// The public API (`berth.v1`).
pub use generated::berth::v1;

/// Largest a package's values may grow (serialised as JSON): settings (at most 1 MiB), static
/// values and what hooks patch in. Workers refuse a hook's values patch past it, and lifecycle
/// does not store a report past it, so one package can never make the answers that carry its
/// values (Get, List, Dump, Watch) too large for a gRPC reply.
pub const MAX_VALUES_BYTES: usize = 2 << 20;

/// Most bytes of recorded hook configs (`lifecycle.HookConfigs`, paths and outputs together)
/// a Loaded report carries and lifecycle keeps for a package; past this the workers discover
/// the package's hooks themselves, as without a record.
pub const MAX_HOOK_CONFIGS_BYTES: usize = 256 * 1024;

impl lifecycle::HookConfigs {
    /// The bytes [`MAX_HOOK_CONFIGS_BYTES`] bounds: every answer's path and output.
    pub fn size(&self) -> usize {
        self.answers
            .iter()
            .map(|a| a.path.len() + a.output.len())
            .sum()
    }
}

/// The encoded descriptor set of every berth proto, for gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/berth_descriptor.bin"));

/// The encoded descriptor set of the public API (`berth.v1`, and the well-known types it
/// imports) alone: the gateway's reflection, which must not list the internal services.
pub const PUBLIC_FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/berth_public_descriptor.bin"));

/// Conversions between `google.protobuf.Struct`/`Value` and `serde_json::Value`: settings and
/// values travel as Structs on the wire and as JSON everywhere else.
pub mod json {
    use prost_types::value::Kind;
    use prost_types::{ListValue, Struct, Value};

    /// A Struct as a JSON object.
    pub fn from_struct(s: &Struct) -> serde_json::Value {
        serde_json::Value::Object(
            s.fields
                .iter()
                .map(|(k, v)| (k.clone(), from_value(v)))
                .collect(),
        )
    }

    /// An optional Struct as a JSON object (`{}` when absent).
    pub fn from_opt_struct(s: Option<&Struct>) -> serde_json::Value {
        s.map(from_struct)
            .unwrap_or_else(|| serde_json::Value::Object(Default::default()))
    }

    /// A protobuf Value as JSON. Whole numbers come back as integers: protobuf carries every
    /// number as a double, and settings such as `replicas: 2` must stay integers for schemas.
    pub fn from_value(v: &Value) -> serde_json::Value {
        match &v.kind {
            None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
            Some(Kind::BoolValue(b)) => serde_json::Value::Bool(*b),
            Some(Kind::NumberValue(n)) => {
                if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
                    serde_json::Value::from(*n as i64)
                } else {
                    serde_json::Number::from_f64(*n)
                        .map(serde_json::Value::Number)
                        .unwrap_or(serde_json::Value::Null)
                }
            }
            Some(Kind::StringValue(s)) => serde_json::Value::String(s.clone()),
            Some(Kind::StructValue(s)) => from_struct(s),
            Some(Kind::ListValue(l)) => {
                serde_json::Value::Array(l.values.iter().map(from_value).collect())
            }
        }
    }

    /// A JSON value as a protobuf Value.
    pub fn to_value(v: &serde_json::Value) -> Value {
        let kind = match v {
            serde_json::Value::Null => Kind::NullValue(0),
            serde_json::Value::Bool(b) => Kind::BoolValue(*b),
            serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or_default()),
            serde_json::Value::String(s) => Kind::StringValue(s.clone()),
            serde_json::Value::Array(a) => Kind::ListValue(ListValue {
                values: a.iter().map(to_value).collect(),
            }),
            serde_json::Value::Object(_) => Kind::StructValue(to_struct(v)),
        };
        Value { kind: Some(kind) }
    }

    /// A JSON object as a Struct; anything else becomes an empty Struct.
    pub fn to_struct(v: &serde_json::Value) -> Struct {
        match v {
            serde_json::Value::Object(map) => Struct {
                fields: map.iter().map(|(k, v)| (k.clone(), to_value(v))).collect(),
            },
            _ => Struct::default(),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn round_trip_keeps_integers_and_nesting() {
            let v = serde_json::json!({"replicas": 2, "ratio": 0.5, "tags": ["a", null], "nested": {"on": true}});
            assert_eq!(from_struct(&to_struct(&v)), v);
        }
    }
}

/// berth's task contract (`berth.tasks.v1`) and how it travels in the generic queue's `Task`
/// envelope: a kind name, a payload (the prost encoding of the kind's message) and, for a
/// HookRun, merge fields the broker compacts runs by. Producers (lifecycle, hookevent) and the
/// workers build and read tasks only through these functions. Each task is idempotent:
/// delivering it twice converges to the same state.
pub mod tasks {
    use prost::Message;

    pub use crate::generated::berth::tasks::v1::{
        BindingType, HookRun, Run, Start, TaskKind, ValidateRun, WebhookRun, WebhookType,
    };
    use crate::queue;

    pub mod legacy;

    impl TaskKind {
        /// Every kind a task can have (not `Unspecified`).
        pub fn all() -> impl Iterator<Item = TaskKind> {
            <TaskKind as strum::IntoEnumIterator>::iter().filter(|k| *k != TaskKind::Unspecified)
        }

        /// The kind's name in the queue's `Task.kind` (and in Dump and task history): the
        /// variant's name, `HookRun` (derived).
        pub fn as_str(self) -> &'static str {
            self.into()
        }

        /// The kind a `Task.kind` names; `None` for anything else (never `Unspecified`).
        pub fn parse(s: &str) -> Option<TaskKind> {
            s.parse().ok().filter(|k| *k != TaskKind::Unspecified)
        }
    }

    /// A message that is the payload of the tasks of one kind.
    pub trait Payload: Message + Default {
        const KIND: TaskKind;
    }

    impl Payload for HookRun {
        const KIND: TaskKind = TaskKind::HookRun;
    }

    impl Payload for WebhookRun {
        const KIND: TaskKind = TaskKind::WebhookRun;
    }

    impl Payload for ValidateRun {
        const KIND: TaskKind = TaskKind::ValidateRun;
    }

    impl Payload for Start {
        const KIND: TaskKind = TaskKind::Start;
    }

    impl Payload for Run {
        const KIND: TaskKind = TaskKind::Run;
    }

    /// A task payload that is not what its kind says.
    #[derive(Debug, thiserror::Error)]
    pub enum PayloadError {
        #[error("a {expected} payload read from a task of kind {found:?}")]
        Kind {
            expected: &'static str,
            found: String,
        },
        #[error("{kind} task payload: {source}")]
        Decode {
            kind: &'static str,
            #[source]
            source: prost::DecodeError,
        },
        #[error("HookRun binding context {index}: {source}")]
        Context {
            index: usize,
            #[source]
            source: prost::DecodeError,
        },
    }

    /// A task of `P`'s kind carrying `payload`; the producer fills the rest of the envelope.
    pub fn task<P: Payload>(payload: &P) -> queue::Task {
        queue::Task {
            kind: P::KIND.as_str().to_owned(),
            payload: payload.encode_to_vec(),
            ..Default::default()
        }
    }

    /// A task of `kind` with no payload (the kinds whose message is not in this module).
    pub fn bare(kind: TaskKind) -> queue::Task {
        queue::Task {
            kind: kind.as_str().to_owned(),
            ..Default::default()
        }
    }

    /// The payload of `task`, which must be of `P`'s kind.
    pub fn payload<P: Payload>(task: &queue::Task) -> Result<P, PayloadError> {
        decode(&task.kind, &task.payload)
    }

    /// `bytes` as the payload of a task of kind `kind`, which must be `P`'s.
    pub fn decode<P: Payload>(kind: &str, bytes: &[u8]) -> Result<P, PayloadError> {
        let expected = P::KIND.as_str();
        if kind != expected {
            return Err(PayloadError::Kind {
                expected,
                found: kind.to_owned(),
            });
        }
        P::decode(bytes).map_err(|source| PayloadError::Decode {
            kind: expected,
            source,
        })
    }

    impl HookRun {
        /// A HookRun task: `hook`'s `binding_type` run with these binding contexts (JSON
        /// objects, the shell-operator contract), as merge items the broker can compact.
        pub fn task(
            hook: &str,
            binding_type: BindingType,
            contexts: &[serde_json::Value],
        ) -> queue::Task {
            let run = HookRun {
                hook: hook.to_owned(),
                binding_type: binding_type as i32,
            };
            let items = contexts.iter().map(context_item).collect();
            queue::Task {
                merge: Some(queue::Merge {
                    key: run.merge_key(),
                    items,
                }),
                ..task(&run)
            }
        }

        /// Runs merge only with runs of the same hook and binding type: `<type>/<hook>` (the
        /// type's name has no `/`, so no two runs share a key by accident).
        pub fn merge_key(&self) -> String {
            format!("{}/{}", self.binding_type().as_str(), self.hook)
        }
    }

    impl BindingType {
        /// The type's name in binding contexts and merge keys, `Schedule` (derived).
        pub fn as_str(self) -> &'static str {
            self.into()
        }
    }

    /// One binding context as a merge item: its data the context as a Struct, its group the
    /// context's `group` (a group's context carries complete snapshots, so only the newest of
    /// adjacent ones matters).
    fn context_item(context: &serde_json::Value) -> queue::MergeItem {
        queue::MergeItem {
            group: context
                .get("group")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            data: crate::json::to_struct(context).encode_to_vec(),
        }
    }

    /// The binding contexts of a HookRun task (its merge items), oldest first, as the JSON
    /// array the hook reads.
    pub fn binding_contexts(task: &queue::Task) -> Result<serde_json::Value, PayloadError> {
        let items = task.merge.as_ref().map(|m| m.items.as_slice());
        let contexts = items
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(index, item)| {
                prost_types::Struct::decode(item.data.as_slice())
                    .map(|s| crate::json::from_struct(&s))
                    .map_err(|source| PayloadError::Context { index, source })
            })
            .collect::<Result<_, _>>()?;
        Ok(serde_json::Value::Array(contexts))
    }

    impl WebhookRun {
        /// The binding contexts as the JSON array the hook reads.
        pub fn contexts_json(&self) -> serde_json::Value {
            serde_json::Value::Array(
                self.binding_contexts
                    .iter()
                    .map(crate::json::from_struct)
                    .collect(),
            )
        }
    }

    impl ValidateRun {
        /// The candidate settings as JSON.
        pub fn settings_json(&self) -> serde_json::Value {
            crate::json::from_opt_struct(self.settings.as_ref())
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use serde_json::json;

        #[test]
        fn hook_runs_carry_their_contexts_as_merge_items() {
            let contexts = [
                json!({"binding": "every", "n": 1}),
                json!({"binding": "pods", "group": "g"}),
            ];
            let task = HookRun::task("hooks/a b.sh", BindingType::Schedule, &contexts);
            assert_eq!(task.kind, "HookRun");
            let run: HookRun = payload(&task).unwrap();
            assert_eq!(
                (run.hook.as_str(), run.binding_type()),
                ("hooks/a b.sh", BindingType::Schedule)
            );
            let merge = task.merge.as_ref().unwrap();
            assert_eq!(merge.key, "Schedule/hooks/a b.sh");
            let groups: Vec<&str> = merge.items.iter().map(|i| i.group.as_str()).collect();
            assert_eq!(groups, ["", "g"]);
            assert_eq!(binding_contexts(&task).unwrap(), json!(contexts));
            let other = HookRun::task("hooks/a b.sh", BindingType::Kubernetes, &[]);
            assert_ne!(other.merge.unwrap().key, merge.key);
        }

        #[test]
        fn payloads_are_read_only_as_their_kind() {
            let start = Start {
                done: vec![TaskKind::ApplySettings as i32],
            };
            let task = task(&start);
            assert_eq!(payload::<Start>(&task).unwrap(), start);
            let err = payload::<ValidateRun>(&task).unwrap_err().to_string();
            assert!(
                err.contains("ValidateRun") && err.contains("\"Start\""),
                "{err}"
            );
            let garbage = queue::Task {
                payload: vec![0xff, 0xff],
                ..bare(TaskKind::Start)
            };
            let err = payload::<Start>(&garbage).unwrap_err().to_string();
            assert!(err.starts_with("Start task payload"), "{err}");
            // An empty payload is the message with nothing set: lifecycle's Start.
            assert_eq!(
                payload::<Start>(&bare(TaskKind::Start)).unwrap(),
                Start::default()
            );
        }

        #[test]
        fn task_kind_names_round_trip() {
            assert_eq!(TaskKind::all().count(), 13);
            for kind in TaskKind::all() {
                assert_eq!(TaskKind::parse(kind.as_str()), Some(kind));
            }
            assert_eq!(TaskKind::HookRun.as_str(), "HookRun");
            assert_eq!(TaskKind::ApplySettings.as_str(), "ApplySettings");
            assert_eq!(TaskKind::parse("Unspecified"), None);
            assert_eq!(TaskKind::parse("hookrun"), None);
        }
    }
}

/// Why a call failed, as a machine reads it: a `google.rpc.ErrorInfo` in the status details
/// (`grpc-status-details-bin`), domain [`failure::DOMAIN`], one of the reasons here. A caller
/// acts on the reason, never on a gRPC code that several errors share, nor on the message.
pub mod failure {
    use tonic_types::{ErrorDetails, StatusExt as _};

    pub const DOMAIN: &str = "berth.io";
    /// Release Uninstall: objects stay, held by finalizers nobody removes.
    pub const REMOVE_BLOCKED: &str = "REMOVE_BLOCKED";
    /// Release Install, Rollback or Plan: an object the chart renders is another release's,
    /// or no release's (issue #31.2).
    pub const OBJECT_TAKEN: &str = "OBJECT_TAKEN";

    /// A status of `code` and `message` carrying `reason`.
    pub fn status(code: tonic::Code, message: String, reason: &str) -> tonic::Status {
        tonic::Status::with_error_details(
            code,
            message,
            ErrorDetails::with_error_info(reason, DOMAIN, std::collections::HashMap::new()),
        )
    }

    /// The reason `status` carries, when berth's.
    pub fn reason(status: &tonic::Status) -> Option<String> {
        let info = status.get_error_details().error_info()?.clone();
        (info.domain == DOMAIN).then_some(info.reason)
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn a_reason_survives_the_status() {
            let s = super::status(
                tonic::Code::FailedPrecondition,
                "held".into(),
                super::REMOVE_BLOCKED,
            );
            assert_eq!(super::reason(&s).as_deref(), Some(super::REMOVE_BLOCKED));
            assert_eq!(super::reason(&tonic::Status::internal("x")), None);
        }
    }
}
