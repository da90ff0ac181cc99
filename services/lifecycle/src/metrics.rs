//! Lifecycle's metrics: `berth_packages{phase}`, how many packages are in each phase.
//!
//! A snapshot from the store, refreshed after package changes (the same notifications Watch
//! streams get, coalesced so a burst of writes costs one query) and every
//! [`REFRESH_PERIOD`]: a scrape cannot query the database, and counting in memory would
//! duplicate the store's bookkeeping.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::store::Store;
use berth_lifecycle_core::{PackageKey, Phase};

/// Refresh even without notifications (a missed one, a write by another lifecycle).
const REFRESH_PERIOD: Duration = Duration::from_secs(30);
/// Least time between two refreshes: the changes in between wait and share one query.
const MIN_INTERVAL: Duration = Duration::from_millis(500);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: &'static str,
}

/// Lifecycle's metrics. Cheap to clone: clones share the values.
#[derive(Clone, Debug, Default)]
pub struct LifecycleMetrics {
    packages: Family<PhaseLabel, Gauge>,
}

impl LifecycleMetrics {
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "berth_packages",
            "Packages in each phase",
            self.packages.clone(),
        );
    }

    /// Sets every phase's gauge from `counts` (phases not in it have no packages).
    fn set(&self, counts: &[(Phase, i64)]) {
        for phase in <Phase as strum::IntoEnumIterator>::iter() {
            let n = counts
                .iter()
                .filter(|(p, _)| *p == phase)
                .map(|(_, n)| n)
                .sum();
            self.packages
                .get_or_create(&PhaseLabel {
                    phase: phase.as_str(),
                })
                .set(n);
        }
    }

    /// Keeps the gauges current until `shutdown`: a refresh at start, after changes, and
    /// every [`REFRESH_PERIOD`].
    pub async fn run(
        self,
        store: Store,
        mut changes: broadcast::Receiver<Option<PackageKey>>,
        shutdown: CancellationToken,
    ) {
        loop {
            match store.count_by_phase().await {
                Ok(counts) => self.set(&counts),
                Err(e) => tracing::warn!(error = %e, "cannot count packages by phase"),
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(MIN_INTERVAL) => {}
            }
            let changed = async {
                match changes.recv().await {
                    // Lagged: there were changes.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => true,
                    Err(broadcast::error::RecvError::Closed) => false,
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                open = changed => if !open {
                    return;
                },
                () = tokio::time::sleep(REFRESH_PERIOD) => {}
            }
            // Everything up to now is in the next count.
            while !matches!(
                changes.try_recv(),
                Err(broadcast::error::TryRecvError::Empty | broadcast::error::TryRecvError::Closed)
            ) {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_has_a_gauge() {
        let metrics = LifecycleMetrics::default();
        metrics.set(&[(Phase::Running, 2), (Phase::Failed, 1)]);
        metrics.set(&[(Phase::Running, 3)]);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        for line in [
            r#"berth_packages{phase="Running"} 3"#,
            r#"berth_packages{phase="Failed"} 0"#,
            r#"berth_packages{phase="Pending"} 0"#,
        ] {
            assert!(text.contains(line), "no {line} in\n{text}");
        }
    }
}
