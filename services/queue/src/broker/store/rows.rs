//! Decoding of `tasks` rows. Every integer column is 64-bit and no column is NULL (see the
//! migrations), so the same decoding works on SQLite and PostgreSQL rows.

use sqlx::Row;
use sqlx::any::AnyRow;

use crate::broker::model::{LeasedTask, NewTask, TaskId};

/// The columns [`leased_task`] reads, in a form to paste into a SELECT or RETURNING list.
macro_rules! task_columns {
    () => {
        "seq, id, queue, package, generation, kind, payload, traceparent, allow_failure, attempts, last_error, fence, \
         enqueued_at, not_before, redelivered"
    };
}
pub(crate) use task_columns;

pub(crate) fn leased_task(row: &AnyRow) -> Result<(i64, LeasedTask), sqlx::Error> {
    let task = NewTask {
        id: TaskId::from_checked(row.try_get("id")?),
        queue: row.try_get("queue")?,
        package: row.try_get("package")?,
        generation: row.try_get("generation")?,
        kind: row.try_get("kind")?,
        payload_json: row.try_get("payload")?,
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
