//! The worker's own metrics: how long each task ran and how it ended,
//! `berth_task_duration_seconds{kind,outcome}`. Per process, like the hook metrics.

use std::time::Duration;

use berth_proto::tasks::TaskKind;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// How a task ended on this worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "lowercase")]
pub enum Outcome {
    /// It ran to the end.
    Done,
    /// Not run: superseded by a newer generation, or a hook run of a package the scheduler has
    /// not enabled.
    Skipped,
    /// Handed back to the broker for later (a throttled hook run).
    Deferred,
    /// Stopped: superseded while running, its lease lost, or the worker stopping.
    Cancelled,
    /// Failed; the broker retries it.
    Retry,
    /// Failed for good.
    Failed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        self.into()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    /// A [`TaskKind`]'s name, or `unknown` for a task of no kind berth knows (the label set
    /// stays the fixed one whatever a broker hands out).
    kind: &'static str,
    outcome: &'static str,
}

/// 10 ms … ~5.5 min in 16 doubling steps: hook runs take milliseconds, a Run waits minutes for
/// readiness.
fn task_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 16))
}

/// The worker's task metrics. Cheap to clone: clones share the values.
#[derive(Clone, Debug)]
pub struct TaskMetrics {
    duration: Family<TaskLabels, Histogram, fn() -> Histogram>,
}

impl Default for TaskMetrics {
    fn default() -> Self {
        TaskMetrics {
            duration: Family::new_with_constructor(task_histogram),
        }
    }
}

impl TaskMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "berth_task_duration",
            "Time a worker spent on a task, from its lease to its outcome, by task kind and outcome",
            Unit::Seconds,
            self.duration.clone(),
        );
    }

    pub fn observe(&self, kind: Option<TaskKind>, outcome: Outcome, took: Duration) {
        let labels = TaskLabels {
            kind: kind.map_or("unknown", TaskKind::as_str),
            outcome: outcome.as_str(),
        };
        self.duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_kept_by_kind_and_outcome() {
        let metrics = TaskMetrics::default();
        metrics.observe(
            Some(TaskKind::Run),
            Outcome::Done,
            Duration::from_millis(1500),
        );
        metrics.observe(None, Outcome::Failed, Duration::ZERO);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for line in [
            r#"berth_task_duration_seconds_sum{kind="Run",outcome="done"} 1.5"#,
            r#"berth_task_duration_seconds_count{kind="unknown",outcome="failed"} 1"#,
        ] {
            assert!(text.contains(line), "no {line} in\n{text}");
        }
    }
}
