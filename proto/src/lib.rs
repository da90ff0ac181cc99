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
/// envelope (a kind name and a payload text). Producers (lifecycle, hookevent) and the workers
/// build and read tasks only through these types. Each task is idempotent: delivering it twice
/// converges to the same state.
pub mod tasks {
    pub use crate::generated::berth::tasks::v1::{
        BindingType, HookRun, TaskKind, ValidateRun, WebhookRun, WebhookType,
    };

    impl TaskKind {
        /// Every kind a task can have (not `Unspecified`).
        pub const ALL: [TaskKind; 13] = [
            TaskKind::Download,
            TaskKind::Load,
            TaskKind::ApplySettings,
            TaskKind::Startup,
            TaskKind::Run,
            TaskKind::HookRun,
            TaskKind::Disable,
            TaskKind::Uninstall,
            TaskKind::Cleanup,
            TaskKind::WebhookRun,
            TaskKind::ValidateRun,
            TaskKind::AfterAll,
            TaskKind::Start,
        ];

        /// The kind's name in the queue's `Task.kind` (and in Dump and task history).
        pub fn as_str(self) -> &'static str {
            match self {
                TaskKind::Unspecified => "Unspecified",
                TaskKind::Download => "Download",
                TaskKind::Load => "Load",
                TaskKind::ApplySettings => "ApplySettings",
                TaskKind::Startup => "Startup",
                TaskKind::Run => "Run",
                TaskKind::HookRun => "HookRun",
                TaskKind::Disable => "Disable",
                TaskKind::Uninstall => "Uninstall",
                TaskKind::Cleanup => "Cleanup",
                TaskKind::WebhookRun => "WebhookRun",
                TaskKind::ValidateRun => "ValidateRun",
                TaskKind::AfterAll => "AfterAll",
                TaskKind::Start => "Start",
            }
        }

        /// The kind a `Task.kind` names; `None` for anything else (never `Unspecified`).
        pub fn parse(s: &str) -> Option<TaskKind> {
            TaskKind::ALL.into_iter().find(|k| k.as_str() == s)
        }
    }

    impl BindingType {
        fn json_name(self) -> &'static str {
            match self {
                BindingType::Unspecified => "",
                BindingType::Schedule => "Schedule",
                BindingType::Kubernetes => "Kubernetes",
                BindingType::Synchronization => "Synchronization",
            }
        }

        fn from_json_name(s: &str) -> Option<BindingType> {
            [
                BindingType::Schedule,
                BindingType::Kubernetes,
                BindingType::Synchronization,
            ]
            .into_iter()
            .find(|b| b.json_name() == s)
        }
    }

    /// The JSON form of a ValidateRun in `Task.payload_json`: the settings as JSON, not as
    /// text holding JSON.
    #[derive(serde::Serialize, serde::Deserialize)]
    struct ValidateRunJson {
        request_id: String,
        deadline_unix_ms: i64,
        settings: serde_json::Value,
    }

    impl ValidateRun {
        /// The payload text of a ValidateRun task.
        pub fn to_payload_json(&self) -> String {
            let settings = serde_json::from_str(&self.settings_json)
                .unwrap_or(serde_json::Value::Object(Default::default()));
            serde_json::to_string(&ValidateRunJson {
                request_id: self.request_id.clone(),
                deadline_unix_ms: self.deadline_unix_ms,
                settings,
            })
            .expect("a ValidateRun serializes")
        }

        /// Reads the payload text of a ValidateRun task.
        pub fn from_payload_json(json: &str) -> Result<ValidateRun, PayloadError> {
            let raw: ValidateRunJson = serde_json::from_str(json)?;
            Ok(ValidateRun {
                request_id: raw.request_id,
                deadline_unix_ms: raw.deadline_unix_ms,
                settings_json: raw.settings.to_string(),
            })
        }
    }

    /// The JSON form of a WebhookRun in `Task.payload_json`.
    #[derive(serde::Serialize, serde::Deserialize)]
    struct WebhookRunJson {
        hook: String,
        webhook_type: String,
        binding_contexts: serde_json::Value,
        request_id: String,
        deadline_unix_ms: i64,
        #[serde(default)]
        objects: u32,
    }

    impl WebhookType {
        fn json_name(self) -> &'static str {
            match self {
                WebhookType::Unspecified => "",
                WebhookType::Validating => "Validating",
                WebhookType::Mutating => "Mutating",
                WebhookType::Conversion => "Conversion",
            }
        }
    }

    impl WebhookRun {
        /// The payload text of a WebhookRun task.
        pub fn to_payload_json(&self) -> String {
            let contexts = serde_json::from_str(&self.binding_contexts_json)
                .unwrap_or(serde_json::Value::Array(vec![]));
            serde_json::to_string(&WebhookRunJson {
                hook: self.hook.clone(),
                webhook_type: self.webhook_type().json_name().to_owned(),
                binding_contexts: contexts,
                request_id: self.request_id.clone(),
                deadline_unix_ms: self.deadline_unix_ms,
                objects: self.objects,
            })
            .expect("a WebhookRun serializes")
        }

        /// Reads the payload text of a WebhookRun task.
        pub fn from_payload_json(json: &str) -> Result<WebhookRun, PayloadError> {
            let raw: WebhookRunJson = serde_json::from_str(json)?;
            let webhook_type = [
                WebhookType::Validating,
                WebhookType::Mutating,
                WebhookType::Conversion,
            ]
            .into_iter()
            .find(|t| t.json_name() == raw.webhook_type)
            .ok_or(PayloadError::BindingType(raw.webhook_type))?;
            if !raw.binding_contexts.is_array() {
                return Err(PayloadError::Contexts);
            }
            Ok(WebhookRun {
                hook: raw.hook,
                webhook_type: webhook_type as i32,
                binding_contexts_json: raw.binding_contexts.to_string(),
                request_id: raw.request_id,
                deadline_unix_ms: raw.deadline_unix_ms,
                objects: raw.objects,
            })
        }
    }

    /// The JSON form of a HookRun in `Task.payload_json`. The broker's compaction reads this
    /// shape (it merges `binding_contexts` of consecutive runs of one hook and binding type),
    /// so it is kept stable: `{"hook": ..., "binding_type": "Schedule", "binding_contexts": [...]}`.
    #[derive(serde::Deserialize)]
    struct HookRunJson {
        #[serde(default)]
        hook: String,
        #[serde(default)]
        binding_type: String,
        #[serde(default = "no_contexts")]
        binding_contexts: serde_json::Value,
    }

    fn no_contexts() -> serde_json::Value {
        serde_json::Value::Array(vec![])
    }

    /// A HookRun payload that is not a HookRun.
    #[derive(Debug, thiserror::Error)]
    pub enum PayloadError {
        #[error("not a task payload: {0}")]
        Json(#[from] serde_json::Error),
        #[error("HookRun binding_type: unknown value {0:?}")]
        BindingType(String),
        #[error("HookRun binding_contexts: expected a JSON array")]
        Contexts,
    }

    impl HookRun {
        /// A HookRun for `hook`'s `binding_type` with these binding contexts (a JSON array).
        pub fn new(hook: &str, binding_type: BindingType, contexts: &serde_json::Value) -> Self {
            HookRun {
                hook: hook.to_owned(),
                binding_type: binding_type as i32,
                binding_contexts_json: contexts.to_string(),
            }
        }

        /// The binding contexts as a JSON array (what the hook reads).
        pub fn binding_contexts(&self) -> Result<serde_json::Value, PayloadError> {
            match serde_json::from_str(&self.binding_contexts_json)? {
                v @ serde_json::Value::Array(_) => Ok(v),
                _ => Err(PayloadError::Contexts),
            }
        }

        /// The payload text of a HookRun task. Written on every Kubernetes event, so the
        /// contexts (already JSON) are checked in place and copied, not parsed into a tree and
        /// written again; text that is not JSON becomes `[]`, as an empty list of contexts.
        pub fn to_payload_json(&self) -> String {
            let contexts =
                match serde_json::from_str::<serde::de::IgnoredAny>(&self.binding_contexts_json) {
                    Ok(_) => self.binding_contexts_json.trim(),
                    Err(_) => "[]",
                };
            let text = |s: &str| serde_json::to_string(s).expect("a string serializes");
            format!(
                r#"{{"hook":{},"binding_type":{},"binding_contexts":{contexts}}}"#,
                text(&self.hook),
                text(self.binding_type().json_name()),
            )
        }

        /// Reads the payload text of a HookRun task.
        pub fn from_payload_json(json: &str) -> Result<HookRun, PayloadError> {
            let raw: HookRunJson = serde_json::from_str(json)?;
            let binding_type = BindingType::from_json_name(&raw.binding_type)
                .ok_or(PayloadError::BindingType(raw.binding_type))?;
            if !raw.binding_contexts.is_array() {
                return Err(PayloadError::Contexts);
            }
            Ok(HookRun::new(&raw.hook, binding_type, &raw.binding_contexts))
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn hook_run_payloads_keep_their_json_shape() {
            let run = HookRun::new(
                "h",
                BindingType::Schedule,
                &serde_json::json!([{"binding": "every"}]),
            );
            let json = run.to_payload_json();
            assert_eq!(
                json,
                r#"{"hook":"h","binding_type":"Schedule","binding_contexts":[{"binding":"every"}]}"#
            );
            let back = HookRun::from_payload_json(&json).unwrap();
            assert_eq!(back, run);
            assert_eq!(
                back.binding_contexts().unwrap(),
                serde_json::json!([{"binding": "every"}])
            );
            let not_json = HookRun {
                binding_contexts_json: "nope".into(),
                ..run.clone()
            };
            assert_eq!(
                not_json.to_payload_json(),
                r#"{"hook":"h","binding_type":"Schedule","binding_contexts":[]}"#
            );
            let quoted = HookRun::new("a \"b\"", BindingType::Kubernetes, &serde_json::json!([]));
            assert_eq!(
                HookRun::from_payload_json(&quoted.to_payload_json()).unwrap(),
                quoted
            );
            let bare =
                HookRun::from_payload_json(r#"{"hook":"h","binding_type":"Kubernetes"}"#).unwrap();
            assert_eq!(bare.binding_contexts().unwrap(), serde_json::json!([]));
        }

        #[test]
        fn malformed_hook_run_payloads_name_what_is_wrong() {
            let err = HookRun::from_payload_json(r#"{"hook":"h","binding_type":"cron"}"#)
                .unwrap_err()
                .to_string();
            assert!(err.contains("\"cron\""), "{err}");
            let err = HookRun::from_payload_json(
                r#"{"hook":"h","binding_type":"Schedule","binding_contexts":{}}"#,
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains("expected a JSON array"), "{err}");
            assert!(HookRun::from_payload_json("[]").is_err());
        }

        #[test]
        fn task_kind_names_round_trip() {
            for kind in TaskKind::ALL {
                assert_eq!(TaskKind::parse(kind.as_str()), Some(kind));
            }
            assert_eq!(TaskKind::parse("Unspecified"), None);
            assert_eq!(TaskKind::parse("hookrun"), None);
        }
    }
}
