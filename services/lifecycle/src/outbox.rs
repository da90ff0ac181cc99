//! Outbox rows: the broker work a state change implies, stored in the same transaction as the
//! change and delivered by the relay. A row is a versioned serde enum; a row this lifecycle
//! cannot read (unknown version or shape, written by a newer lifecycle or damaged) is an error
//! that stops the relay at that row, never something to skip: skipping would lose queued work.

use serde::{Deserialize, Serialize};

/// The version written by this lifecycle. Rows written before the field existed have the same
/// shape and read as version 1.
pub const VERSION: u32 = 1;

/// One outbox row as stored (JSON text in `outbox.body`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    #[serde(rename = "v", default = "version_one")]
    pub version: u32,
    #[serde(flatten)]
    pub op: Op,
}

fn version_one() -> u32 {
    1
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
    pub payload_json: String,
    pub traceparent: String,
}

/// A row the relay cannot deliver.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("outbox row {id}: {source}")]
    Malformed { id: i64, source: serde_json::Error },
    #[error("outbox row {id}: unknown version {version} (this lifecycle writes {VERSION})")]
    Version { id: i64, version: u32 },
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

    /// Reads the stored body of row `id`.
    pub fn decode(id: i64, body: &str) -> Result<Row, DecodeError> {
        let row: Row =
            serde_json::from_str(body).map_err(|source| DecodeError::Malformed { id, source })?;
        if row.version != VERSION {
            return Err(DecodeError::Version {
                id,
                version: row.version,
            });
        }
        Ok(row)
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
            payload_json: t.payload_json,
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
    }

    #[test]
    fn unknown_versions_and_shapes_are_errors() {
        let newer = r#"{"v":2,"op":"supersede","package":"p","generation":1}"#;
        assert!(matches!(
            Row::decode(7, newer),
            Err(DecodeError::Version { id: 7, version: 2 })
        ));
        for body in ["null", "{}", r#"{"op":"explode"}"#, "not json"] {
            assert!(
                matches!(Row::decode(7, body), Err(DecodeError::Malformed { .. })),
                "{body}"
            );
        }
    }
}
