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

/// The kinds of queued task, shared by their producers (lifecycle, hookevent) and their consumer
/// (the queue workers). Each is idempotent: delivering it twice converges to the same state.
pub mod tasks {
    /// A task kind as stored in `Task.kind`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum TaskKind {
        /// Fetch the package version into the worker's package cache (skipped when present).
        Download,
        /// Read the package, discover its hooks, report its schema and hooks, register its bindings.
        Load,
        /// Validate the settings and compute the values.
        ApplySettings,
        /// Run onStartup hooks.
        Startup,
        /// beforeHelm hooks → release install/upgrade → afterHelm hooks → readiness.
        Run,
        /// One hook run for schedule or Kubernetes events.
        HookRun,
        /// Stop the package's bindings (before a version change or removal).
        Disable,
        /// beforeDeleteHelm hooks → release uninstall → afterDeleteHelm hooks.
        Uninstall,
        /// Forget the package's state and files.
        Cleanup,
    }

    impl TaskKind {
        pub const ALL: [TaskKind; 9] = [
            TaskKind::Download,
            TaskKind::Load,
            TaskKind::ApplySettings,
            TaskKind::Startup,
            TaskKind::Run,
            TaskKind::HookRun,
            TaskKind::Disable,
            TaskKind::Uninstall,
            TaskKind::Cleanup,
        ];

        pub fn as_str(self) -> &'static str {
            match self {
                TaskKind::Download => "Download",
                TaskKind::Load => "Load",
                TaskKind::ApplySettings => "ApplySettings",
                TaskKind::Startup => "Startup",
                TaskKind::Run => "Run",
                TaskKind::HookRun => "HookRun",
                TaskKind::Disable => "Disable",
                TaskKind::Uninstall => "Uninstall",
                TaskKind::Cleanup => "Cleanup",
            }
        }

        pub fn parse(s: &str) -> Option<TaskKind> {
            TaskKind::ALL.into_iter().find(|k| k.as_str() == s)
        }
    }

    /// The payload of a `HookRun` task (`Task.payload_json`), written by hookevent and read by
    /// workers. The broker's compaction reads the same shape generically (it merges
    /// `binding_contexts` of consecutive runs of one hook and binding type). The binding
    /// contexts stay JSON: they are the shell-operator contract handed to the hook as is.
    #[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    pub struct HookRunPayload {
        /// The hook's name within its package.
        #[serde(default)]
        pub hook: String,
        /// `schedule` or `kubernetes`; runs merge only with runs of the same binding type.
        #[serde(default)]
        pub binding_type: String,
        /// A JSON array of binding contexts.
        #[serde(default = "no_contexts")]
        pub binding_contexts: serde_json::Value,
    }

    fn no_contexts() -> serde_json::Value {
        serde_json::Value::Array(vec![])
    }

    impl HookRunPayload {
        pub fn to_json(&self) -> String {
            serde_json::to_string(self).expect("a HookRun payload serializes")
        }

        pub fn from_json(json: &str) -> Result<HookRunPayload, serde_json::Error> {
            serde_json::from_str(json)
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn hook_run_payloads_keep_their_json_shape() {
            let payload = HookRunPayload {
                hook: "h".into(),
                binding_type: "schedule".into(),
                binding_contexts: serde_json::json!([{"binding": "every"}]),
            };
            let json = payload.to_json();
            assert_eq!(
                json,
                r#"{"hook":"h","binding_type":"schedule","binding_contexts":[{"binding":"every"}]}"#
            );
            assert_eq!(HookRunPayload::from_json(&json).unwrap(), payload);
            let bare = HookRunPayload::from_json(r#"{"hook":"h"}"#).unwrap();
            assert_eq!(bare.binding_contexts, serde_json::json!([]));
        }
    }
}
