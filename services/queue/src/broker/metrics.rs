//! Prometheus metrics of a broker.
//!
//! Counters and histograms are updated by the calls themselves; the per-queue depth gauge is a
//! snapshot refreshed by [`super::run_maintenance`], because depth changes with every call
//! (and on other brokers) and a scrape cannot query the database synchronously.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use super::model::{FailOutcome, LeasedTask, QueueSummary, Settled};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabel {
    queue: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FinishLabels {
    kind: String,
    /// done, dropped (failed for good) or cancelled (superseded while running).
    outcome: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// 5 ms … ~160 s in 16 doubling steps: task waits and runs span hook runs of milliseconds to
/// Helm releases of minutes.
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 16))
}

/// The broker's metrics. Cheap to clone: clones share the values.
#[derive(Clone, Debug)]
pub struct BrokerMetrics {
    depth: Family<QueueLabel, Gauge>,
    enqueued: Counter,
    wait: HistogramFamily<KindLabel>,
    run: HistogramFamily<KindLabel>,
    finished: Family<FinishLabels, Counter>,
    retries: Family<KindLabel, Counter>,
    superseded: Counter,
    cancellations: Counter,
    redeliveries: Counter,
    compacted: Counter,
    leases_waiting: Gauge,
}

impl Default for BrokerMetrics {
    fn default() -> Self {
        Self {
            depth: Family::default(),
            enqueued: Counter::default(),
            wait: Family::new_with_constructor(seconds_histogram),
            run: Family::new_with_constructor(seconds_histogram),
            finished: Family::default(),
            retries: Family::default(),
            superseded: Counter::default(),
            cancellations: Counter::default(),
            redeliveries: Counter::default(),
            compacted: Counter::default(),
            leases_waiting: Gauge::default(),
        }
    }
}

fn kind(kind: &str) -> KindLabel {
    KindLabel {
        kind: kind.to_owned(),
    }
}

impl BrokerMetrics {
    /// Adds every metric to `registry` under the `berth_queue_` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("berth_queue");
        r.register(
            "depth",
            "Tasks in each queue, queued or running",
            self.depth.clone(),
        );
        r.register(
            "enqueued",
            "Tasks accepted by Enqueue",
            self.enqueued.clone(),
        );
        r.register_with_unit(
            "wait",
            "Time from a task becoming ready to its lease",
            Unit::Seconds,
            self.wait.clone(),
        );
        r.register_with_unit(
            "run",
            "Time from lease to Complete or Fail",
            Unit::Seconds,
            self.run.clone(),
        );
        r.register(
            "finished",
            "Tasks that left the queue after running, by outcome",
            self.finished.clone(),
        );
        r.register(
            "retries",
            "Failures that were scheduled for a retry",
            self.retries.clone(),
        );
        r.register(
            "superseded",
            "Queued tasks dropped by Supersede",
            self.superseded.clone(),
        );
        r.register(
            "cancellations",
            "Running tasks cancelled by Supersede",
            self.cancellations.clone(),
        );
        r.register(
            "redeliveries",
            "Leases of tasks whose previous lease expired",
            self.redeliveries.clone(),
        );
        r.register(
            "compacted",
            "HookRun tasks merged into an earlier one",
            self.compacted.clone(),
        );
        r.register(
            "leases_waiting",
            "Lease calls parked until a task is ready or their wait ends",
            self.leases_waiting.clone(),
        );
    }

    /// Lease calls parked now (see [`BrokerMetrics::lease_parked`]).
    pub fn leases_waiting(&self) -> i64 {
        self.leases_waiting.get()
    }

    /// Counts a parked Lease call until the returned guard is dropped (the call woke, timed out
    /// or was abandoned by its client).
    pub(crate) fn lease_parked(&self) -> impl Drop + use<> {
        struct Parked(Gauge);
        impl Drop for Parked {
            fn drop(&mut self) {
                self.0.dec();
            }
        }
        self.leases_waiting.inc();
        Parked(self.leases_waiting.clone())
    }

    pub(crate) fn enqueued(&self, accepted: u64) {
        self.enqueued.inc_by(accepted);
    }

    pub(crate) fn leased(&self, task: &LeasedTask, now_ms: i64) {
        let waited = now_ms.saturating_sub(task.ready_since_ms).max(0) as f64 / 1000.0;
        self.wait
            .get_or_create(&kind(&task.task.kind))
            .observe(waited);
        if task.redelivered {
            self.redeliveries.inc();
        }
        self.compacted.inc_by(task.compacted);
    }

    pub(crate) fn settled(&self, settled: &Settled, failed: Option<FailOutcome>) {
        self.run
            .get_or_create(&kind(&settled.kind))
            .observe(settled.ran_ms as f64 / 1000.0);
        let outcome = match failed {
            Some(FailOutcome::RetryIn(_)) => {
                self.retries.get_or_create(&kind(&settled.kind)).inc();
                return;
            }
            _ if settled.cancelled => "cancelled",
            Some(FailOutcome::Dropped) => "dropped",
            None => "done",
        };
        self.finished
            .get_or_create(&FinishLabels {
                kind: settled.kind.clone(),
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    pub(crate) fn superseded(&self, dropped: u64, cancelled: u64) {
        self.superseded.inc_by(dropped);
        self.cancellations.inc_by(cancelled);
    }

    /// Replaces the depth gauges with `queues` (queues that emptied disappear).
    pub(crate) fn set_depths(&self, queues: &[QueueSummary]) {
        self.depth.clear();
        for queue in queues {
            self.depth
                .get_or_create(&QueueLabel {
                    queue: queue.name.clone(),
                })
                .set(queue.length);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    fn render(metrics: &BrokerMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut out = String::new();
        encode(&mut out, &registry).expect("encode metrics");
        out
    }

    #[test]
    fn settlements_are_counted_by_outcome() {
        let m = BrokerMetrics::default();
        let settled = |cancelled| Settled {
            kind: "Run".into(),
            ran_ms: 1500,
            cancelled,
        };
        m.settled(&settled(false), None);
        m.settled(&settled(false), Some(FailOutcome::RetryIn(100)));
        m.settled(&settled(false), Some(FailOutcome::Dropped));
        m.settled(&settled(true), Some(FailOutcome::Dropped));
        let text = render(&m);
        for line in [
            r#"berth_queue_finished_total{kind="Run",outcome="done"} 1"#,
            r#"berth_queue_finished_total{kind="Run",outcome="dropped"} 1"#,
            r#"berth_queue_finished_total{kind="Run",outcome="cancelled"} 1"#,
            r#"berth_queue_retries_total{kind="Run"} 1"#,
            r#"berth_queue_run_seconds_count{kind="Run"} 4"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn depth_gauges_follow_the_latest_snapshot() {
        let m = BrokerMetrics::default();
        let queue = |name: &str, length| QueueSummary {
            name: name.into(),
            length,
            head_kind: String::new(),
            head_id: String::new(),
            head_attempts: 0,
            head_last_error: String::new(),
            lease_holder: String::new(),
        };
        m.set_depths(&[queue("a", 3), queue("b", 1)]);
        m.set_depths(&[queue("b", 2)]);
        let text = render(&m);
        assert!(text.contains(r#"berth_queue_depth{queue="b"} 2"#), "{text}");
        assert!(
            !text.contains(r#"queue="a""#),
            "an emptied queue disappears:\n{text}"
        );
    }
}
