//! Decoding of `tasks` rows. Every integer column is 64-bit and no column is NULL (see the
//! migrations), so the same decoding works on SQLite and PostgreSQL rows.

use berth_proto::queue as pb;

use sqlx::Row;
use sqlx::any::AnyRow;

use super::legacy;
use crate::broker::model::{LeasedTask, Merge, MergeItem, NewTask, TaskId};

/// The row format this broker writes (see the `payload_bytes` migration): the payload's bytes
/// in `body`, the merge fields in `merge_fields`.
pub(crate) const FORMAT: i64 = 2;

/// The columns [`leased_task`] reads, in a form to paste into a SELECT or RETURNING list.
macro_rules! task_columns {
    () => {
        "seq, id, queue, package, generation, kind, format, payload, body, merge_fields, traceparent, \
         allow_failure, attempts, last_error, fence, enqueued_at, not_before, redelivered"
    };
}
pub(crate) use task_columns;

/// A row this broker cannot read: written by a newer broker, or damaged. An error, never
/// skipped: skipping would lose the task.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RowError {
    #[error("task row format {0} is unknown (this broker reads 1 and {FORMAT})")]
    Format(i64),
    #[error("task merge fields: {0}")]
    Merge(#[from] prost::DecodeError),
}

pub(crate) fn leased_task(row: &AnyRow) -> Result<(i64, LeasedTask), sqlx::Error> {
    let kind: String = row.try_get("kind")?;
    let (payload, merge) = match row.try_get::<i64, _>("format")? {
        1 => legacy::read(&kind, &row.try_get::<String, _>("payload")?),
        FORMAT => (
            row.try_get("body")?,
            decode_merge(&row.try_get::<Vec<u8>, _>("merge_fields")?)
                .map_err(|e| sqlx::Error::Decode(Box::new(RowError::Merge(e))))?,
        ),
        other => return Err(sqlx::Error::Decode(Box::new(RowError::Format(other)))),
    };
    let task = NewTask {
        id: TaskId::from_checked(row.try_get("id")?),
        queue: row.try_get("queue")?,
        package: row.try_get("package")?,
        generation: row.try_get("generation")?,
        kind,
        payload,
        merge,
        traceparent: row.try_get("traceparent")?,
        allow_failure: row.try_get::<i64, _>("allow_failure")? != 0,
    };
    let leased = LeasedTask {
        task,
        attempts: row.try_get("attempts")?,
        last_error: row.try_get("last_error")?,
        fence: row.try_get("fence")?,
        ready_since_ms: row
            .try_get::<i64, _>("enqueued_at")?
            .max(row.try_get("not_before")?),
        redelivered: row.try_get::<i64, _>("redelivered")? != 0,
        compacted: 0,
    };
    Ok((row.try_get("seq")?, leased))
}

/// The `merge_fields` column of a task: the prost encoding of its `berth.queue.v1.Merge`, empty
/// when it has none.
pub(crate) fn encode_merge(merge: Option<&Merge>) -> Vec<u8> {
    merge.map_or_else(Vec::new, |m| prost::Message::encode_to_vec(&to_proto(m)))
}

fn decode_merge(bytes: &[u8]) -> Result<Option<Merge>, prost::DecodeError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    Ok(Some(from_proto(<pb::Merge as prost::Message>::decode(
        bytes,
    )?)))
}

/// The stored form is the contract's message, so what a producer sent is what is stored.
fn to_proto(merge: &Merge) -> pb::Merge {
    pb::Merge {
        key: merge.key.clone(),
        items: merge
            .items
            .iter()
            .map(|i| pb::MergeItem {
                group: i.group.clone(),
                data: i.data.clone(),
            })
            .collect(),
    }
}

pub(crate) fn from_proto(merge: pb::Merge) -> Merge {
    let pb::Merge { key, items } = merge;
    Merge {
        key,
        items: items
            .into_iter()
            .map(|pb::MergeItem { group, data }| MergeItem { group, data })
            .collect(),
    }
}

// A task id is stored as the text it is: these let `bind`/`try_get` take a `TaskId` directly
// (written here, not derived in `model`, which knows no SQL).
impl<DB: sqlx::Database> sqlx::Type<DB> for TaskId
where
    String: sqlx::Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <String as sqlx::Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <String as sqlx::Type<DB>>::compatible(ty)
    }
}

impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for TaskId
where
    String: sqlx::Encode<'q, DB>,
{
    fn encode_by_ref(
        &self,
        buf: &mut <DB as sqlx::Database>::ArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        self.as_str().to_owned().encode(buf)
    }
}

impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for TaskId
where
    String: sqlx::Decode<'r, DB>,
{
    fn decode(
        value: <DB as sqlx::Database>::ValueRef<'r>,
    ) -> Result<TaskId, sqlx::error::BoxDynError> {
        String::decode(value).map(TaskId::from_checked)
    }
}
