//! The global package's part in a write: the Runs its values changing implies, and its
//! afterAll once the packages ordered after it converged.

use super::{Effects, Engine, Rows};
use crate::flows;
use crate::model::id::{PackageKey, global_key};
use crate::model::package::Phase;
use crate::task::Work;

impl Engine {
    /// A Run for every package whose chart reads the global values, when they changed: running
    /// (a package on its way there renders with the new ones anyway), enabled, not being
    /// removed. Packages that do not read them are left alone. By key.
    pub(super) fn global_readers(&self) -> Vec<Work> {
        let mut readers: Vec<(&PackageKey, _)> = self
            .index
            .nodes()
            .filter(|(_, n)| {
                n.loaded.as_ref().is_some_and(|l| l.reads_global)
                    && n.phase == Phase::Running
                    && !n.removing
                    && n.enabled
                    && !n.id.is_global()
            })
            .map(|(k, n)| (k, n.generation))
            .collect();
        readers.sort();
        readers
            .into_iter()
            .map(|(key, generation)| {
                flows::rerun_for(key, generation, flows::GLOBAL_VALUES_CHANGED)
            })
            .collect()
    }

    /// Enqueues the global package's AfterAll (its afterAll hooks) when it is due and every
    /// package ordered after it has converged, clearing the due flag in the same write, so a
    /// due afterAll survives a restart and is enqueued once.
    ///
    /// Due: the global package's Run (its beforeAll hooks) succeeded at its current generation
    /// and the package is Running. Converged: every package ordered after it
    /// ([`crate::scheduler::Scheduler::ordered_after`]: its nested packages' implied
    /// conditional dependency, and any other dependency on it or on them) that is enabled and
    /// not being removed is Running at its current generation, or Failed. Without such
    /// packages, the AfterAll follows the Run at once.
    pub(super) fn after_all(&mut self, rows: &mut Rows, fx: &mut Effects) {
        let key = global_key();
        let Some(global) = self.index.node(&key) else {
            return;
        };
        let running =
            global.phase == Phase::Running && global.observed_generation == global.generation;
        if !global.id.is_global() || !global.after_all_due || global.removing || !running {
            return;
        }
        let converged = self
            .index
            .ordered_after(&key)
            .iter()
            .all(|k| self.index.node(k).is_none_or(|n| n.converged()));
        if !converged {
            return;
        }
        let mut node = global.clone();
        node.after_all_due = false;
        let generation = node.generation;
        self.index.upsert(key.clone(), node);
        fx.work.push(flows::after_all(&key, generation));
        match rows.get_mut(&key) {
            Some(row) => {
                row.after_all_due = false;
                fx.touch(&key);
            }
            None => fx.defer_after_all(&key),
        }
        tracing::info!(
            generation = generation.get(),
            "the packages waiting for the global package converged: afterAll enqueued"
        );
    }
}
