//! Domain values of the broker, free of gRPC and SQL types.

/// A task's id: chosen by its producer (unique per task; an id seen before is not enqueued
/// again), non-empty and bounded, checked once at the edge (`convert`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(String);

impl TaskId {
    /// Wraps an id the edge (or the store, reading back what the edge checked) vouches for.
    pub(crate) fn from_checked(id: String) -> TaskId {
        TaskId(id)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl PartialEq<str> for TaskId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for TaskId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

#[cfg(test)]
impl From<&str> for TaskId {
    fn from(id: &str) -> TaskId {
        TaskId(id.to_owned())
    }
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A task accepted by Enqueue, already validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTask {
    pub id: TaskId,
    pub queue: String,
    pub package: String,
    pub generation: i64,
    pub kind: String,
    /// The producer's encoding of the task's arguments; never read here.
    pub payload: Vec<u8>,
    /// How the task merges with the ones queued behind it (see `compaction`).
    pub merge: Option<Merge>,
    pub traceparent: String,
    pub allow_failure: bool,
}

impl NewTask {
    /// The bytes the task's payload and merge fields take: what the payload bound and a
    /// Lease response's budget count.
    pub fn size(&self) -> usize {
        self.payload.len() + self.merge.as_ref().map_or(0, Merge::size)
    }
}

/// A task's merge fields: tasks with the same key (and kind, generation and allow_failure)
/// queued back to back are merged by concatenating their items (see `compaction`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merge {
    pub key: String,
    pub items: Vec<MergeItem>,
}

impl Merge {
    pub fn size(&self) -> usize {
        self.key.len() + self.items.iter().map(MergeItem::size).sum::<usize>()
    }
}

/// One item of a merge: opaque data, and a group (adjacent items of one non-empty group
/// reduce to the last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeItem {
    pub group: String,
    pub data: Vec<u8>,
}

impl MergeItem {
    fn size(&self) -> usize {
        self.group.len() + self.data.len()
    }
}

/// A task as handed to a worker by Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeasedTask {
    pub task: NewTask,
    /// Failures so far (a lost lease does not count).
    pub attempts: i64,
    pub last_error: String,
    /// Fencing token of this lease; Complete, Fail and Heartbeat must present it.
    pub fence: i64,
    /// When the task became ready to run (enqueued, or its retry delay ended), ms since the
    /// epoch; the wait-time metric starts here.
    pub ready_since_ms: i64,
    /// The task had been leased before and that lease expired (its worker vanished).
    pub redelivered: bool,
    /// How many later tasks compaction merged into this one.
    pub compacted: u64,
}

/// The result of one Lease attempt.
#[derive(Debug, Default)]
pub struct LeaseBatch {
    pub tasks: Vec<LeasedTask>,
    /// When nothing was ready: the earliest time (ms since the epoch) at which a queue head may
    /// become ready without any new call (a retry delay ends or a lease expires).
    pub next_due_ms: Option<i64>,
}

/// Facts about a settled lease, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub kind: String,
    /// From lease to settlement, in milliseconds.
    pub ran_ms: i64,
    /// The task had been cancelled by Supersede while it ran.
    pub cancelled: bool,
}

/// How a leased task failed (a Fail call).
#[derive(Debug, Clone, Copy)]
pub struct Failure<'a> {
    pub error: &'a str,
    /// False for an error retrying cannot fix: the task is dropped.
    pub retry: bool,
    /// The task's payload from now on when it stays for a retry: how far it got.
    pub progress: Option<&'a [u8]>,
}

/// What Fail did with the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// The task stays at the head of its queue and becomes ready after this many milliseconds.
    RetryIn(i64),
    /// The task was removed (allowFailure, a permanent error, or it had been cancelled).
    Dropped,
}

/// One queue as Dump shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueSummary {
    pub name: String,
    pub length: i64,
    pub head_kind: String,
    pub head_id: String,
    pub head_attempts: i64,
    pub head_last_error: String,
    /// Empty when the head is not leased (or its lease expired).
    pub lease_holder: String,
}

/// Why a task left the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Outcome {
    Done,
    /// Failed and dropped: allowFailure or a permanent error.
    Dropped,
    /// Removed by Supersede before it ran.
    Superseded,
    /// Was running when superseded; removed once its holder reported or its lease expired.
    Cancelled,
    /// Merged into an earlier task by compaction.
    Compacted,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One finished task from the bounded history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    pub id: String,
    pub queue: String,
    pub package: String,
    pub kind: String,
    /// [`Outcome::as_str`].
    pub outcome: String,
    pub attempts: i64,
    pub error: String,
    pub finished_at_ms: i64,
}
