//! hookevent's watch metrics: `berth_watches` (the Kubernetes watches held open, read from the
//! manager at each scrape) and `berth_watch_events_total{kind}` (objects the watches
//! delivered, by Kubernetes kind), and the packages' operators: `berth_operator_packages` (packages
//! whose operators run) and `berth_operator_controllers{ready}` (their controllers by the status
//! of their Ready condition).
//!
//! Kinds come from the packages' bindings, which are untrusted, so the label set is capped:
//! the first [`MAX_KINDS`] kinds seen get a series of their own, any later one counts as
//! `other`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric as _};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use super::manager::KubeManager;

/// Kinds with a series of their own.
const MAX_KINDS: usize = 64;
/// The label of every kind past [`MAX_KINDS`].
const OTHER: &str = "other";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

/// The watch metrics. Cheap to clone: clones share the values.
#[derive(Clone, Debug, Default)]
pub struct WatchMetrics {
    events: Family<KindLabel, Counter>,
    /// The counter of each kind with a series (at most [`MAX_KINDS`]), so counting an event
    /// allocates nothing.
    kinds: Arc<Mutex<HashMap<String, Counter>>>,
    /// The manager whose watches `berth_watches` counts (none: no cluster, no watches).
    manager: Arc<Mutex<Weak<KubeManager>>>,
}

impl WatchMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "berth_watch_events",
            "Objects Kubernetes watches delivered (added, modified, deleted, listed), by kind",
            self.events.clone(),
        );
        registry.register_collector(Box::new(Watches {
            manager: self.manager.clone(),
        }));
    }

    /// Counts `berth_watches` from `manager` from now on.
    pub(super) fn watch(&self, manager: &Arc<KubeManager>) {
        *self.manager.lock().unwrap_or_else(|p| p.into_inner()) = Arc::downgrade(manager);
    }

    /// Counts one object delivered by a watch of `kind`.
    pub(super) fn event(&self, kind: &str) {
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(counter) = kinds.get(kind) {
            counter.inc();
            return;
        }
        let label = if kinds.len() < MAX_KINDS { kind } else { OTHER };
        let counter = self
            .events
            .get_or_create(&KindLabel {
                kind: label.to_owned(),
            })
            .clone();
        counter.inc();
        if label == kind {
            kinds.insert(kind.to_owned(), counter);
        }
    }
}

/// `berth_watches`, read at each scrape.
#[derive(Debug)]
struct Watches {
    manager: Arc<Mutex<Weak<KubeManager>>>,
}

impl Collector for Watches {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let manager = self
            .manager
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .upgrade();
        let open = manager.as_ref().map_or(0, |m| m.watch_count());
        let gauge = ConstGauge::new(i64::try_from(open).unwrap_or(i64::MAX));
        let metric = encoder.encode_descriptor(
            "berth_watches",
            "Kubernetes watches held open for kubernetes bindings (shared by the bindings with the same resource, namespace and selectors) and the namespaces they follow",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)?;
        let (packages, by_readiness) = manager.map_or((0, [0; 3]), |m| m.operator_figures());
        let gauge = ConstGauge::new(i64::try_from(packages).unwrap_or(i64::MAX));
        let metric = encoder.encode_descriptor(
            "berth_operator_packages",
            "Packages whose declarative operators run",
            None,
            gauge.metric_type(),
        )?;
        gauge.encode(metric)?;
        let mut family = encoder.encode_descriptor(
            "berth_operator_controllers",
            "Controllers of running operators, by their Ready condition's status",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (ready, n) in ["True", "False", "Unknown"].into_iter().zip(by_readiness) {
            let gauge = ConstGauge::new(i64::try_from(n).unwrap_or(i64::MAX));
            let labels = [("ready", ready)];
            gauge.encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_past_the_cap_fold_into_other() {
        let metrics = WatchMetrics::default();
        for i in 0..MAX_KINDS + 10 {
            metrics.event(&format!("Kind{i}"));
        }
        metrics.event("Kind0");
        metrics.event(&format!("Kind{}", MAX_KINDS + 1));
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(
            text.contains(r#"berth_watch_events_total{kind="Kind0"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(r#"berth_watch_events_total{kind="other"} 11"#),
            "{text}"
        );
        let series = text
            .lines()
            .filter(|l| l.starts_with("berth_watch_events_total{"))
            .count();
        assert_eq!(series, MAX_KINDS + 1, "{text}");
        assert!(
            text.contains("berth_watches 0"),
            "no manager, no watches: {text}"
        );
    }
}
