//! [`Effects`]: what one applied change writes and queues.

use semver::Version;

use super::Rows;
use crate::flows;
use crate::model::id::{Generation, PackageKey};
use crate::model::package::Package;
use crate::model::time::Timestamp;
use crate::scheduler::Verdict;
use crate::task::Work;

/// What became of a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Decided: the writes and work are the change's.
    Applied,
    /// Nothing to do: the package is gone or at another generation (a stale report or
    /// Cleanup), there is no package to remove, or the cluster version is the one known.
    Stale,
    /// An Update identical to the current spec: nothing is written, and the package's current
    /// generation answers it.
    Unchanged(Generation),
}

/// One row write, in the store's terms.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// A package stored for the first time.
    Insert(Package),
    /// A package's new state.
    Save(Package),
    /// The package is gone (its Remove's Cleanup ran).
    Delete {
        key: PackageKey,
        generation: Generation,
    },
    /// The cluster's Kubernetes version, which every replica's scheduler decides on.
    ClusterVersion(Version),
}

/// A row the index has and the store does not: the index is out of step, and the write must
/// fail (the engine is rebuilt from the store).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("package {key} is in the scheduler's index but not in the store")]
pub struct OutOfStep {
    pub key: PackageKey,
}

/// A decision on a row that was not loaded for the write.
#[derive(Clone, Debug)]
enum Deferred {
    Verdict(PackageKey, Verdict),
    /// The global package's afterAll was enqueued: its flag is cleared.
    AfterAllEnqueued(PackageKey),
}

/// What one applied change writes and queues.
#[derive(Clone, Debug)]
pub struct Effects {
    pub outcome: Outcome,
    /// Row writes, in order.
    pub writes: Vec<Write>,
    /// Broker work, in the order the relay delivers it.
    pub work: Vec<Work>,
    /// Rows in hand the change changed, in order; `inserted`: the one that is new.
    touched: Vec<PackageKey>,
    inserted: Option<PackageKey>,
    deferred: Vec<Deferred>,
}

impl Effects {
    pub(super) fn new() -> Effects {
        Effects {
            outcome: Outcome::Applied,
            writes: vec![],
            work: vec![],
            touched: vec![],
            inserted: None,
            deferred: vec![],
        }
    }

    pub(super) fn write(&mut self, write: Write) {
        self.writes.push(write);
    }

    /// `key`'s row in hand changed.
    pub(super) fn touch(&mut self, key: &PackageKey) {
        if !self.touched.contains(key) {
            self.touched.push(key.clone());
        }
    }

    /// `key`'s row in hand is new.
    pub(super) fn insert(&mut self, key: &PackageKey) {
        self.inserted = Some(key.clone());
    }

    pub(super) fn touched(&self) -> Vec<PackageKey> {
        self.touched.clone()
    }

    pub(super) fn defer_verdict(&mut self, key: &PackageKey, verdict: &Verdict) {
        self.deferred
            .push(Deferred::Verdict(key.clone(), verdict.clone()));
    }

    pub(super) fn defer_after_all(&mut self, key: &PackageKey) {
        self.deferred.push(Deferred::AfterAllEnqueued(key.clone()));
    }

    /// The touched rows in hand become writes.
    pub(super) fn save_touched(&mut self, rows: &Rows) {
        for key in std::mem::take(&mut self.touched) {
            let row = rows[&key].clone();
            self.writes.push(match &self.inserted {
                Some(new) if *new == key => Write::Insert(row),
                _ => Write::Save(row),
            });
        }
    }

    /// The packages whose rows the decisions change and that were not loaded for the write:
    /// load them for write and [`Effects::settle`] the decisions on them.
    pub fn rows_needed(&self) -> Vec<PackageKey> {
        let mut keys: Vec<PackageKey> = vec![];
        for d in &self.deferred {
            let key = match d {
                Deferred::Verdict(key, _) | Deferred::AfterAllEnqueued(key) => key,
            };
            if !keys.contains(key) {
                keys.push(key.clone());
            }
        }
        keys
    }

    /// Applies the decisions on rows that were not loaded for the write to `loaded` (the rows
    /// [`Effects::rows_needed`] names), adding their writes and work. Pure: the index decided
    /// them already.
    pub fn settle(&mut self, loaded: Vec<Package>, now: Timestamp) -> Result<(), OutOfStep> {
        let mut rows: Rows = loaded.into_iter().map(|r| (r.key.clone(), r)).collect();
        let mut order: Vec<PackageKey> = vec![];
        for d in std::mem::take(&mut self.deferred) {
            let key = match &d {
                Deferred::Verdict(key, _) | Deferred::AfterAllEnqueued(key) => key.clone(),
            };
            let row = rows.get_mut(&key).ok_or(OutOfStep { key: key.clone() })?;
            match d {
                Deferred::Verdict(_, verdict) => {
                    self.work.extend(flows::schedule(row, &verdict, now));
                }
                Deferred::AfterAllEnqueued(_) => row.after_all_due = false,
            }
            if !order.contains(&key) {
                order.push(key);
            }
        }
        for key in order {
            if let Some(row) = rows.remove(&key) {
                self.writes.push(Write::Save(row));
            }
        }
        Ok(())
    }
}
