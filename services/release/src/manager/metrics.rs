//! The release service's metrics: how long installs and upgrades take to apply
//! (`berth_release_apply_duration_seconds{outcome}`), how long a release then takes to become
//! ready (`berth_release_ready_duration_seconds`), and drift repairs
//! (`berth_drift_repairs_total{outcome}`), and the shared watches open (`berth_release_watches`:
//! one per API resource and namespace watched, however many releases it serves).
//!
//! Readiness is timed from a successful install or upgrade to the first Status (with or
//! without `wait_ms`) that finds that revision ready: the worker asks until it is, so that is
//! when berth knew. A revision nobody asks about is never observed; the entries waiting are
//! bounded ([`MAX_PENDING_READY`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::record::store::RecordReads;

/// (namespace, name) of each release applied but not yet seen ready → the revision applied
/// and when.
type AwaitingReady = HashMap<(String, String), (i32, Instant)>;

/// Releases whose readiness is awaited at once; past it, the oldest applied is forgotten.
const MAX_PENDING_READY: usize = 4096;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    /// `success` or `failure`.
    outcome: &'static str,
}

fn outcome(ok: bool) -> OutcomeLabel {
    OutcomeLabel {
        outcome: if ok { "success" } else { "failure" },
    }
}

/// 10 ms … ~5.5 min in 16 doubling steps: a small chart applies in a fraction of a second,
/// a workload becomes ready in minutes.
fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 16))
}

/// The release service's metrics. Cheap to clone: clones share the values.
#[derive(Clone, Debug)]
pub struct ReleaseMetrics {
    apply: Family<OutcomeLabel, Histogram, fn() -> Histogram>,
    ready: Histogram,
    repairs: Family<OutcomeLabel, Counter>,
    watches: Gauge,
    reads: RecordReads,
    awaiting_ready: Arc<Mutex<AwaitingReady>>,
}

impl Default for ReleaseMetrics {
    fn default() -> Self {
        ReleaseMetrics {
            apply: Family::new_with_constructor(seconds_histogram),
            ready: seconds_histogram(),
            repairs: Family::default(),
            watches: Gauge::default(),
            reads: RecordReads::default(),
            awaiting_ready: Arc::default(),
        }
    }
}

impl ReleaseMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "berth_release_apply_duration",
            "Time an install or upgrade took: CRDs, render, hooks, apply and prune, by outcome",
            Unit::Seconds,
            self.apply.clone(),
        );
        registry.register_with_unit(
            "berth_release_ready_duration",
            "Time from a successful install or upgrade to the first status that found it ready",
            Unit::Seconds,
            self.ready.clone(),
        );
        registry.register(
            "berth_drift_repairs",
            "Objects re-applied after they drifted (deleted or changed), by outcome",
            self.repairs.clone(),
        );
        registry.register(
            "berth_release_watches",
            "Watches of the Kubernetes API open for drift and readiness: one per API resource and namespace, shared by every release",
            self.watches.clone(),
        );
        registry.register(
            "berth_release_record_reads",
            "Reads of a release's records (its Helm release Secrets): from the API server's watch cache, checked by one GET (cache), or consistent LISTs, which read the whole namespace's Secrets from etcd (quorum)",
            self.reads.family(),
        );
    }

    /// The counts of release record reads by where they were served from.
    pub fn record_reads(&self) -> &RecordReads {
        &self.reads
    }

    /// The gauge of shared watches open (the applier's watch hub keeps it).
    pub(super) fn watches(&self) -> Gauge {
        self.watches.clone()
    }

    fn awaiting(&self) -> std::sync::MutexGuard<'_, AwaitingReady> {
        self.awaiting_ready
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// An install or upgrade of the release ended after `took`; when it succeeded, `revision`
    /// is what is now deployed, whose readiness is timed from now.
    pub(super) fn applied(
        &self,
        namespace: &str,
        name: &str,
        took: Duration,
        revision: Option<i32>,
    ) {
        self.apply
            .get_or_create(&outcome(revision.is_some()))
            .observe(took.as_secs_f64());
        let Some(revision) = revision else {
            return;
        };
        let mut awaiting = self.awaiting();
        if awaiting.len() >= MAX_PENDING_READY
            && let Some(oldest) = awaiting
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
        {
            awaiting.remove(&oldest);
        }
        awaiting.insert(
            (namespace.to_owned(), name.to_owned()),
            (revision, Instant::now()),
        );
    }

    /// A status found `revision` of the release ready.
    pub(super) fn ready(&self, namespace: &str, name: &str, revision: i32) {
        let key = (namespace.to_owned(), name.to_owned());
        let mut awaiting = self.awaiting();
        if let Some((awaited, at)) = awaiting.get(&key).copied()
            && awaited == revision
        {
            awaiting.remove(&key);
            drop(awaiting);
            self.ready.observe(at.elapsed().as_secs_f64());
        }
    }

    /// The release is gone: nothing to wait for.
    pub(super) fn forget(&self, namespace: &str, name: &str) {
        self.awaiting()
            .remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// A drift repair ran.
    pub(super) fn repaired(&self, ok: bool) {
        self.repairs.get_or_create(&outcome(ok)).inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(m: &ReleaseMetrics) -> String {
        let mut registry = Registry::default();
        m.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        text
    }

    #[test]
    fn readiness_is_timed_once_per_applied_revision() {
        let m = ReleaseMetrics::default();
        m.applied("ns", "a", Duration::from_secs(2), Some(1));
        m.applied("ns", "b", Duration::from_secs(1), None);
        // Another revision, another release: not what was applied.
        m.ready("ns", "a", 2);
        m.ready("ns", "b", 1);
        assert!(render(&m).contains("berth_release_ready_duration_seconds_count 0"));
        m.ready("ns", "a", 1);
        m.ready("ns", "a", 1);
        let text = render(&m);
        for line in [
            "berth_release_ready_duration_seconds_count 1",
            r#"berth_release_apply_duration_seconds_sum{outcome="success"} 2.0"#,
            r#"berth_release_apply_duration_seconds_count{outcome="failure"} 1"#,
        ] {
            assert!(text.contains(line), "no {line} in\n{text}");
        }
    }

    #[test]
    fn releases_awaiting_readiness_are_bounded() {
        let m = ReleaseMetrics::default();
        for i in 0..MAX_PENDING_READY + 5 {
            m.applied("ns", &format!("r{i}"), Duration::ZERO, Some(1));
        }
        assert_eq!(m.awaiting().len(), MAX_PENDING_READY);
        m.forget("ns", &format!("r{}", MAX_PENDING_READY + 4));
        assert_eq!(m.awaiting().len(), MAX_PENDING_READY - 1);
    }
}
