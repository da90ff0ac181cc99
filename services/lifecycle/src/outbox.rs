//! Outbox rows: the broker work a state change implies, stored in the same transaction as the
//! change and delivered by the relay. A row is a versioned serde enum; a row this lifecycle
//! cannot read (unknown version or shape, written by a newer lifecycle or damaged) is an error
//! that stops the relay at that row, never something to skip: skipping would lose queued work.
//!
//! Version 2 keeps a task's payload as the bytes the broker gets (hex in the row's JSON);
//! version 1 rows, written by the lifecycle whose tasks carried JSON text, are still read: their
//! payload through `berth_proto::tasks::legacy`.

use berth_lifecycle_core::task::{self, Work};
use berth_proto::tasks::{self, legacy};
use serde::{Deserialize, Serialize};

/// The version written by this lifecycle.
pub const VERSION: u32 = 2;

/// One outbox row as stored (JSON text in `outbox.body`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    #[serde(rename = "v")]
    pub version: u32,
    #[serde(flatten)]
    pub op: Op,
}

/// What the relay asks of the broker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// Drop the package's queued tasks older than `generation` and cancel its running ones.
    Supersede { package: String, generation: i64 },
    /// Enqueue one task.
    Enqueue { task: QueuedTask },
}

/// A task as the outbox keeps it until the broker accepts it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueuedTask {
    pub id: String,
    pub queue: String,
    pub package: String,
    pub generation: i64,
    pub kind: String,
    /// The task's payload (`berth_proto::tasks`), hex-encoded in the row.
    #[serde(with = "hex::serde")]
    pub payload: Vec<u8>,
    pub traceparent: String,
}

/// A row as lifecycle wrote it before version 2 (with or without `"v": 1`).
#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum OpV1 {
    Supersede { package: String, generation: i64 },
    Enqueue { task: QueuedTaskV1 },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QueuedTaskV1 {
    id: String,
    queue: String,
    package: String,
    generation: i64,
    kind: String,
    payload_json: String,
    traceparent: String,
}

impl From<OpV1> for Op {
    fn from(op: OpV1) -> Op {
        match op {
            OpV1::Supersede {
                package,
                generation,
            } => Op::Supersede {
                package,
                generation,
            },
            OpV1::Enqueue { task } => Op::Enqueue {
                task: QueuedTask {
                    payload: legacy::upgrade(&task.kind, &task.payload_json).payload,
                    id: task.id,
                    queue: task.queue,
                    package: task.package,
                    generation: task.generation,
                    kind: task.kind,
                    traceparent: task.traceparent,
                },
            },
        }
    }
}

/// A row the relay cannot deliver.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("outbox row {id}: {source}")]
    Malformed { id: i64, source: serde_json::Error },
    #[error("outbox row {id}: unknown version {version} (this lifecycle reads 1 and {VERSION})")]
    Version { id: i64, version: u64 },
}

impl Row {
    pub fn new(op: Op) -> Row {
        Row {
            version: VERSION,
            op,
        }
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("outbox rows serialize")
    }

    /// Reads the stored body of row `id`, of this version or version 1.
    pub fn decode(id: i64, body: &str) -> Result<Row, DecodeError> {
        let malformed = |source| DecodeError::Malformed { id, source };
        let mut value: serde_json::Value = serde_json::from_str(body).map_err(malformed)?;
        // Rows written before the field existed are version 1.
        let version = match value.as_object_mut().and_then(|o| o.remove("v")) {
            None => 1,
            Some(v) => serde_json::from_value::<u64>(v).map_err(malformed)?,
        };
        let op = match version {
            1 => serde_json::from_value::<OpV1>(value)
                .map_err(malformed)?
                .into(),
            2 => serde_json::from_value::<Op>(value).map_err(malformed)?,
            version => return Err(DecodeError::Version { id, version }),
        };
        Ok(Row::new(op))
    }
}

impl Row {
    /// The row for `work` the engine decided: a task gets a fresh id (the broker's Enqueue is
    /// idempotent by it) and the trace of the request that queued it.
    pub fn from_work(work: &Work, traceparent: &str) -> Row {
        Row::new(match work {
            Work::Supersede { key, generation } => Op::Supersede {
                package: key.to_string(),
                generation: generation.get(),
            },
            Work::Enqueue(t) => {
                // The kind and payload as the task contract encodes them.
                let contract = match t.reason {
                    Some(reason) => tasks::task(&tasks::Run {
                        reason: reason.to_owned(),
                    }),
                    None => tasks::bare(kind(t.kind)),
                };
                Op::Enqueue {
                    task: QueuedTask {
                        id: uuid::Uuid::new_v4().to_string(),
                        queue: t.key.to_string(),
                        package: t.key.to_string(),
                        generation: t.generation.get(),
                        kind: contract.kind,
                        payload: contract.payload,
                        traceparent: traceparent.to_owned(),
                    },
                }
            }
        })
    }
}

/// A task kind of the engine as the task contract names it.
fn kind(k: task::TaskKind) -> berth_proto::tasks::TaskKind {
    use berth_proto::tasks::TaskKind as Pb;
    match k {
        task::TaskKind::Load => Pb::Load,
        task::TaskKind::Disable => Pb::Disable,
        task::TaskKind::Start => Pb::Start,
        task::TaskKind::ApplySettings => Pb::ApplySettings,
        task::TaskKind::Run => Pb::Run,
        task::TaskKind::Uninstall => Pb::Uninstall,
        task::TaskKind::Cleanup => Pb::Cleanup,
        task::TaskKind::AfterAll => Pb::AfterAll,
    }
}

impl From<QueuedTask> for berth_proto::queue::Task {
    fn from(t: QueuedTask) -> Self {
        berth_proto::queue::Task {
            id: t.id,
            queue: t.queue,
            package: t.package,
            generation: t.generation,
            kind: t.kind,
            payload: t.payload,
            traceparent: t.traceparent,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_and_old_rows_read_as_version_one() {
        let row = Row::new(Op::Supersede {
            package: "default.hello".into(),
            generation: 3,
        });
        assert_eq!(Row::decode(1, &row.encode()).unwrap(), row);
        let old = r#"{"op":"supersede","package":"default.hello","generation":3}"#;
        assert_eq!(Row::decode(1, old).unwrap(), row);
        let old = r#"{"v":1,"op":"supersede","package":"default.hello","generation":3}"#;
        assert_eq!(Row::decode(1, old).unwrap(), row);
    }

    #[test]
    fn tasks_keep_their_payload_bytes_and_old_json_payloads_are_upgraded() {
        let task = |payload: Vec<u8>| QueuedTask {
            id: "t".into(),
            queue: "default.hello".into(),
            package: "default.hello".into(),
            generation: 2,
            kind: "Run".into(),
            payload,
            traceparent: String::new(),
        };
        let reason = berth_proto::tasks::Run {
            reason: "values changed by a hook".into(),
        };
        let row = Row::new(Op::Enqueue {
            task: task(prost::Message::encode_to_vec(&reason)),
        });
        assert_eq!(Row::decode(1, &row.encode()).unwrap(), row);
        // As the previous lifecycle wrote it.
        let old = r#"{"v":1,"op":"enqueue","task":{"id":"t","queue":"default.hello","package":"default.hello","generation":2,"kind":"Run","payload_json":"{\"reason\":\"values changed by a hook\"}","traceparent":""}}"#;
        assert_eq!(Row::decode(1, old).unwrap(), row);
        let old = r#"{"op":"enqueue","task":{"id":"t","queue":"default.hello","package":"default.hello","generation":2,"kind":"Run","payload_json":"{}","traceparent":""}}"#;
        assert_eq!(
            Row::decode(1, old).unwrap(),
            Row::new(Op::Enqueue { task: task(vec![]) })
        );
    }

    /// Every kind the engine queues is the task contract's kind of that name, and a Run for a
    /// reason says why.
    #[test]
    fn work_becomes_rows_of_the_task_contract() {
        use berth_lifecycle_core::{Generation, PackageKey};
        use strum::IntoEnumIterator as _;
        let key = PackageKey::from_issued("default.hello".into());
        for k in task::TaskKind::iter() {
            assert_eq!(kind(k).as_str(), k.as_str());
        }
        let run = berth_lifecycle_core::flows::rerun_for(&key, Generation::new(2), "why");
        let Op::Enqueue { task } = Row::from_work(&run, "00-trace").op else {
            panic!("an Enqueue")
        };
        assert_eq!(
            (task.kind.as_str(), task.traceparent.as_str()),
            ("Run", "00-trace")
        );
        let run: tasks::Run = tasks::decode(&task.kind, &task.payload).unwrap();
        assert_eq!(run.reason, "why");
        assert_eq!(task.generation, 2);
        let start = Work::task(&key, Generation::new(2), task::TaskKind::Start);
        let Op::Enqueue { task } = Row::from_work(&start, "").op else {
            panic!("an Enqueue")
        };
        assert_eq!(task.kind, "Start");
        assert!(task.payload.is_empty(), "a flow's task carries no payload");
    }

    #[test]
    fn unknown_versions_and_shapes_are_errors() {
        let newer = r#"{"v":3,"op":"supersede","package":"p","generation":1}"#;
        assert!(matches!(
            Row::decode(7, newer),
            Err(DecodeError::Version { id: 7, version: 3 })
        ));
        for body in [
            "null",
            "{}",
            r#"{"op":"explode"}"#,
            "not json",
            r#"{"v":"x"}"#,
        ] {
            assert!(
                matches!(Row::decode(7, body), Err(DecodeError::Malformed { .. })),
                "{body}"
            );
        }
        // A version 2 row with a version 1 task is not read as either.
        let mixed = r#"{"v":2,"op":"enqueue","task":{"id":"t","queue":"q","package":"p","generation":1,"kind":"Run","payload_json":"{}","traceparent":""}}"#;
        assert!(matches!(
            Row::decode(7, mixed),
            Err(DecodeError::Malformed { .. })
        ));
    }
}
