//! [`Work`]: what a state change asks of the queue broker, in the order it must be done. The
//! service writes it to its outbox in the change's transaction (with a task id and the trace
//! of the request), and the relay delivers it.

use crate::model::id::{Generation, PackageKey};

/// The kinds of task lifecycle queues on a package's queue (`berth.tasks.v1.TaskKind` on the
/// wire; workers run them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumIter)]
pub enum TaskKind {
    /// Download the package version and load it (Download's work included).
    Load,
    /// Stop the package's hooks' event bindings; its release is kept.
    Disable,
    /// ApplySettings, Startup and Run in one task, once the package is enabled.
    Start,
    ApplySettings,
    Run,
    Uninstall,
    Cleanup,
    /// The global package's afterAll hooks.
    AfterAll,
}

impl TaskKind {
    /// The kind's name (`Task.kind` on the queue).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One task on a package's main queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    pub key: PackageKey,
    /// The package generation the task converges; workers skip it once the package is newer.
    pub generation: Generation,
    pub kind: TaskKind,
    /// Why a Run runs again outside its flow (shown with the task); `None` for a flow's task.
    pub reason: Option<&'static str>,
}

/// Broker work, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Work {
    /// Drop the package's queued tasks older than `generation` and cancel its running ones.
    Supersede {
        key: PackageKey,
        generation: Generation,
    },
    Enqueue(Task),
}

impl Work {
    /// A task of `kind` for `key` at `generation`.
    pub fn task(key: &PackageKey, generation: Generation, kind: TaskKind) -> Work {
        Work::Enqueue(Task {
            key: key.clone(),
            generation,
            kind,
            reason: None,
        })
    }

    /// The package the work is for.
    pub fn key(&self) -> &PackageKey {
        match self {
            Work::Supersede { key, .. } => key,
            Work::Enqueue(task) => &task.key,
        }
    }

    /// `package kind` for an Enqueue (`Supersede` for a Supersede): what tests compare.
    pub fn describe(&self) -> String {
        match self {
            Work::Supersede { key, .. } => format!("{key} Supersede"),
            Work::Enqueue(t) => format!("{} {}", t.key, t.kind.as_str()),
        }
    }
}
