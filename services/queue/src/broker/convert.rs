//! Proto ↔ domain conversion, with the validation of everything a caller sends.

use berth_proto::queue as pb;

use super::BrokerConfig;
use super::model::{LeasedTask, Merge, MergeItem, NewTask, QueueSummary, TaskId};
use super::store::LeaseRef;

/// Longest accepted id, queue, package, kind or traceparent, in bytes.
const MAX_NAME_BYTES: usize = 512;

/// Why an enqueued task or a request was refused.
#[derive(Debug, thiserror::Error)]
pub enum InvalidTask {
    #[error("too many tasks in one Enqueue: {count} > limit {limit}")]
    TooMany { count: usize, limit: usize },
    #[error("task {index} ({id:?}): field {field} is empty")]
    Empty {
        index: usize,
        id: String,
        field: &'static str,
    },
    #[error("task {index} ({id:?}): field {field} is {len} bytes > limit {limit}")]
    TooLong {
        index: usize,
        id: String,
        field: &'static str,
        len: usize,
        limit: usize,
    },
    #[error("task {index} ({id:?}): payload and merge items are {len} bytes > limit {limit}")]
    TooBig {
        index: usize,
        id: String,
        len: usize,
        limit: usize,
    },
    #[error("missing field {0}")]
    Missing(&'static str),
    #[error("lease.task_id is {len} bytes > limit {limit}")]
    TooLongRef { len: usize, limit: usize },
    #[error("payload (the task's progress) is {len} bytes > limit {limit}")]
    TooLongProgress { len: usize, limit: usize },
    #[error("keep_kinds has {count} kinds > limit {limit}")]
    TooManyKinds { count: usize, limit: usize },
    #[error("keep_kinds[{index}] is empty or {len} bytes (limit {limit})")]
    BadKind {
        index: usize,
        len: usize,
        limit: usize,
    },
}

impl From<InvalidTask> for tonic::Status {
    fn from(err: InvalidTask) -> Self {
        tonic::Status::invalid_argument(err.to_string())
    }
}

/// Most kinds a Supersede may keep.
pub const MAX_KEEP_KINDS: usize = 16;

/// Checks a Supersede's `keep_kinds`: few, each a non-empty kind name.
pub fn keep_kinds(kinds: &[String]) -> Result<(), InvalidTask> {
    if kinds.len() > MAX_KEEP_KINDS {
        return Err(InvalidTask::TooManyKinds {
            count: kinds.len(),
            limit: MAX_KEEP_KINDS,
        });
    }
    match kinds
        .iter()
        .position(|k| k.is_empty() || k.len() > MAX_NAME_BYTES)
    {
        Some(index) => Err(InvalidTask::BadKind {
            index,
            len: kinds[index].len(),
            limit: MAX_NAME_BYTES,
        }),
        None => Ok(()),
    }
}

pub fn new_tasks(tasks: Vec<pb::Task>, config: &BrokerConfig) -> Result<Vec<NewTask>, InvalidTask> {
    if tasks.len() > config.max_enqueue_batch {
        return Err(InvalidTask::TooMany {
            count: tasks.len(),
            limit: config.max_enqueue_batch,
        });
    }
    // An id repeated within one call is accepted once, like an id sent again later.
    tasks
        .into_iter()
        .enumerate()
        .map(|(index, task)| new_task(index, task, config))
        .collect()
}

fn new_task(index: usize, task: pb::Task, config: &BrokerConfig) -> Result<NewTask, InvalidTask> {
    // Exhaustive destructuring: a new proto field breaks the build here, where it must be handled.
    // attempts, last_error and fence are the broker's to fill, so a caller's values are ignored.
    let pb::Task {
        id,
        queue,
        package,
        generation,
        kind,
        payload,
        merge,
        traceparent,
        allow_failure,
        attempts: _,
        last_error: _,
        fence: _,
    } = task;
    let check = |field: &'static str, value: &str, limit: usize, required: bool| {
        if required && value.is_empty() {
            return Err(InvalidTask::Empty {
                index,
                id: id.clone(),
                field,
            });
        }
        if value.len() > limit {
            return Err(InvalidTask::TooLong {
                index,
                id: id.clone(),
                field,
                len: value.len(),
                limit,
            });
        }
        Ok(())
    };
    check("id", &id, MAX_NAME_BYTES, true)?;
    check("queue", &queue, MAX_NAME_BYTES, true)?;
    check("package", &package, MAX_NAME_BYTES, true)?;
    check("kind", &kind, MAX_NAME_BYTES, true)?;
    check("traceparent", &traceparent, MAX_NAME_BYTES, false)?;
    if let Some(m) = &merge {
        check("merge.key", &m.key, MAX_NAME_BYTES, true)?;
    }
    let task = NewTask {
        id: TaskId::from_checked(id),
        queue,
        package,
        generation,
        kind,
        payload,
        merge: merge.map(self::merge),
        traceparent,
        allow_failure,
    };
    let size = task.size();
    if size > config.max_payload_bytes {
        return Err(InvalidTask::TooBig {
            index,
            id: task.id.into_string(),
            len: size,
            limit: config.max_payload_bytes,
        });
    }
    Ok(task)
}

fn merge(merge: pb::Merge) -> Merge {
    let pb::Merge { key, items } = merge;
    Merge {
        key,
        items: items
            .into_iter()
            .map(|pb::MergeItem { group, data }| MergeItem { group, data })
            .collect(),
    }
}

fn merge_proto(merge: Merge) -> pb::Merge {
    let Merge { key, items } = merge;
    pb::Merge {
        key,
        items: items
            .into_iter()
            .map(|MergeItem { group, data }| pb::MergeItem { group, data })
            .collect(),
    }
}

pub fn lease_ref(lease: Option<pb::LeaseRef>) -> Result<LeaseRef, InvalidTask> {
    let pb::LeaseRef { task_id, fence } = lease.ok_or(InvalidTask::Missing("lease"))?;
    if task_id.is_empty() {
        return Err(InvalidTask::Missing("lease.task_id"));
    }
    if task_id.len() > MAX_NAME_BYTES {
        return Err(InvalidTask::TooLongRef {
            len: task_id.len(),
            limit: MAX_NAME_BYTES,
        });
    }
    Ok(LeaseRef {
        task_id: TaskId::from_checked(task_id),
        fence,
    })
}

/// A Fail's `payload`: `None` when unset (the payload stays), else within the payload bound.
pub fn progress(payload: Option<Vec<u8>>, limit: usize) -> Result<Option<Vec<u8>>, InvalidTask> {
    match payload {
        Some(p) if p.len() > limit => Err(InvalidTask::TooLongProgress {
            len: p.len(),
            limit,
        }),
        p => Ok(p),
    }
}

pub fn leased_task(leased: LeasedTask) -> pb::Task {
    let LeasedTask {
        task,
        attempts,
        last_error,
        fence,
        ready_since_ms: _,
        redelivered: _,
        compacted: _,
    } = leased;
    let NewTask {
        id,
        queue,
        package,
        generation,
        kind,
        payload,
        merge,
        traceparent,
        allow_failure,
    } = task;
    pb::Task {
        id: id.into_string(),
        queue,
        package,
        generation,
        kind,
        payload,
        merge: merge.map(merge_proto),
        traceparent,
        allow_failure,
        attempts: saturate(attempts),
        last_error,
        fence,
    }
}

pub fn queue_info(summary: QueueSummary) -> pb::QueueInfo {
    let QueueSummary {
        name,
        length,
        head_kind,
        head_id,
        head_attempts,
        head_last_error,
        lease_holder,
    } = summary;
    pb::QueueInfo {
        name,
        length: saturate(length),
        head_kind,
        head_id,
        head_attempts: saturate(head_attempts),
        head_last_error,
        lease_holder,
    }
}

/// Counts are 64-bit in the store and 32-bit on the wire.
pub fn saturate(n: impl TryInto<i32>) -> i32 {
    n.try_into().unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: &str) -> pb::Task {
        pb::Task {
            id: id.into(),
            queue: "q".into(),
            package: "p".into(),
            kind: "Run".into(),
            ..Default::default()
        }
    }

    #[test]
    fn lease_refs_name_a_bounded_task_id() {
        let lease = |task_id: String| lease_ref(Some(pb::LeaseRef { task_id, fence: 3 }));
        let ok = lease("t-1".into()).expect("a plain id");
        assert_eq!((ok.task_id.as_str(), ok.fence), ("t-1", 3));
        let err = lease(String::new()).expect_err("empty id");
        assert!(err.to_string().contains("lease.task_id"), "{err}");
        let err = lease("x".repeat(MAX_NAME_BYTES + 1)).expect_err("id too long");
        assert!(err.to_string().contains("limit 512"), "{err}");
    }

    #[test]
    fn limits_are_named_in_errors() {
        let config = BrokerConfig {
            max_enqueue_batch: 2,
            max_payload_bytes: 8,
            ..Default::default()
        };
        let err =
            new_tasks(vec![task("a"), task("b"), task("c")], &config).expect_err("batch too big");
        assert!(err.to_string().contains("limit 2"), "{err}");
        let mut big = task("a");
        big.payload = b"0123456789".to_vec();
        let err = new_tasks(vec![big], &config).expect_err("payload too big");
        assert!(
            err.to_string().contains("payload") && err.to_string().contains("limit 8"),
            "{err}"
        );
        // Merge items count against the same bound.
        let mut merged = task("a");
        merged.merge = Some(pb::Merge {
            key: "k".into(),
            items: vec![pb::MergeItem {
                group: String::new(),
                data: vec![0; 8],
            }],
        });
        let err = new_tasks(vec![merged], &config).expect_err("items too big");
        assert!(err.to_string().contains("merge items"), "{err}");
    }

    #[test]
    fn rejects_empty_fields() {
        let config = BrokerConfig::default();
        let err = new_tasks(
            vec![pb::Task {
                queue: String::new(),
                ..task("a")
            }],
            &config,
        )
        .expect_err("empty queue");
        assert!(err.to_string().contains("queue"), "{err}");
        let err = new_tasks(
            vec![pb::Task {
                merge: Some(pb::Merge::default()),
                ..task("a")
            }],
            &config,
        )
        .expect_err("empty merge key");
        assert!(err.to_string().contains("merge.key"), "{err}");
        let ok = new_tasks(vec![task("a")], &config).expect("valid task");
        assert!(ok[0].payload.is_empty() && ok[0].merge.is_none());
    }
}
