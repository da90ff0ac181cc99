//! The engine: every change to package state is decided here, synchronously and without I/O.
//!
//! The engine owns the scheduler's index (every package's scheduling facts, a mirror of the
//! store kept exact by every write and, on PostgreSQL, by the store's catch-up with the other
//! replicas). A write is a unit of work the service runs in one transaction:
//!
//! 1. load (for write) the row [`Change::key`] names, if any;
//! 2. [`Engine::apply`]: the change on that row and the index, then one scheduling pass and
//!    the global afterAll check, returning [`Effects`]: the rows to write and the broker
//!    work to queue, in order;
//! 3. load the rows of the packages the pass decided about that were not loaded
//!    ([`Effects::rows_needed`]: only the pass knows which) and [`Effects::settle`] its
//!    verdicts on them;
//! 4. save the writes and queue the work (the outbox), then commit.
//!
//! A write that fails after step 2 leaves the index ahead of the store: the service rebuilds
//! the engine from the store then.

mod effects;
mod global;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use semver::Version;

pub use effects::{Effects, OutOfStep, Outcome, Write};

use crate::flows;
use crate::model::id::{Generation, PackageKey};
use crate::model::owner::Owner;
use crate::model::package::{Package, Phase};
use crate::model::time::Timestamp;
use crate::report::Report;
use crate::scheduler::{Scheduler, Verdict};
use crate::update::{self, NotPlanned, Planned, UpdateRefused, UpdateSpec};

/// The rows loaded for a write, by key.
pub type Rows = BTreeMap<PackageKey, Package>;

/// A change to package state: what a request or a worker's reports ask for.
#[derive(Clone, Debug)]
pub enum Change {
    /// An Update's spec, as the package's new `generation`. Both numbers are the store's to
    /// give: the generation (they only grow, across Remove and re-create) and, for a key
    /// stored for the first time, its `principal` number (the smallest free one).
    /// `owner` is the front door asking: a package it did not make refuses it.
    Update {
        spec: Box<UpdateSpec>,
        generation: Generation,
        principal: u32,
        owner: Owner,
    },
    /// A Remove as the package's new `generation`; refused while present packages need it
    /// mandatorily, unless forced, and when `owner` did not make the package.
    Remove {
        key: PackageKey,
        generation: Generation,
        force: bool,
        owner: Owner,
    },
    /// Suspends or resumes the package (no new generation): refused when `owner` did not
    /// make it.
    Suspend {
        key: PackageKey,
        owner: Owner,
        suspended: bool,
    },
    /// One task's reports, applied in order while the package is still at `generation`.
    Report {
        key: PackageKey,
        generation: Generation,
        reports: Vec<Report>,
    },
    /// The Cleanup of a Remove: the package goes if it is still at `generation` and being
    /// removed (no Update overtook the Remove).
    Delete {
        key: PackageKey,
        generation: Generation,
    },
    /// The cluster's Kubernetes version, as the release service reports it.
    ClusterVersion(Version),
}

impl Change {
    /// The package whose row the write loads (for write) before [`Engine::apply`]. A Delete
    /// needs none: the index knows whether its package is still the one being removed.
    pub fn key(&self) -> Option<PackageKey> {
        match self {
            Change::Update { spec, .. } => Some(spec.id.key()),
            Change::Remove { key, .. }
            | Change::Report { key, .. }
            | Change::Suspend { key, .. } => Some(key.clone()),
            Change::Delete { .. } | Change::ClusterVersion(_) => None,
        }
    }
}

/// Why a change was refused; nothing of it is written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(transparent)]
    Update(#[from] UpdateRefused),
    /// A Remove of a package present packages need mandatorily.
    #[error("{key} is a mandatory dependency of {}; remove them first, or remove with force", names(.dependents))]
    MandatoryDependency {
        key: PackageKey,
        dependents: Vec<PackageKey>,
    },
    /// A Load's reports whose settings conversion started from settings that are no longer
    /// the stored ones.
    #[error("the package's settings changed while they were converted; report again")]
    SettingsChangedWhileConverted { key: PackageKey },
    /// A change through a front door that did not make the package.
    #[error("package {key} belongs to {owner}: change or remove it there")]
    OtherOwner { key: PackageKey, owner: Owner },
    /// An Update that would start a new generation of a suspended package.
    #[error("package {key} is suspended: resume it first (berth resume, or spec.suspend: false)")]
    Suspended { key: PackageKey },
}

/// Refuses a change to `row` through a front door other than the one that made it.
fn check_owner(row: &Package, owner: &Owner) -> Result<(), Refused> {
    if row.owner == *owner {
        return Ok(());
    }
    Err(Refused::OtherOwner {
        key: row.key.clone(),
        owner: row.owner.clone(),
    })
}

fn names(keys: &[PackageKey]) -> String {
    let names: Vec<&str> = keys.iter().map(PackageKey::as_str).collect();
    names.join(", ")
}

/// Lifecycle's decisions over the scheduler's index it owns.
#[derive(Clone, Debug)]
pub struct Engine {
    index: Scheduler,
}

impl Engine {
    /// An engine knowing no package yet, for berth `platform` (the version requirements name).
    pub fn new(platform: Version) -> Engine {
        Engine {
            index: Scheduler::new(platform),
        }
    }

    /// The scheduler's index (read-only: Dump, and the store's bookkeeping).
    pub fn scheduler(&self) -> &Scheduler {
        &self.index
    }

    /// Brings `key`'s entry in step with its stored row (`None`: gone): the store rebuilding
    /// the index, or catching up with what other replicas wrote.
    pub fn refresh(&mut self, key: &PackageKey, row: Option<&Package>) {
        match row {
            Some(row) => self.index.upsert(key.clone(), row.node()),
            None => self.index.remove(key),
        }
    }

    /// Adopts the cluster version another replica recorded (it decided on it already).
    pub fn adopt_kubernetes(&mut self, version: Version) {
        self.index.set_kubernetes(version);
    }

    /// The last change-log entry the index reflects (PostgreSQL's replicas).
    pub fn changes_seen(&self) -> i64 {
        self.index.changes_seen()
    }

    pub fn set_changes_seen(&mut self, seq: i64) {
        self.index.set_changes_seen(seq);
    }

    /// The packages verdicts were decided for since the last call (for watchers).
    pub fn take_settled(&mut self) -> Vec<PackageKey> {
        self.index.take_settled()
    }

    /// Decides `change` on `rows` (the row [`Change::key`] names, loaded for write, when it
    /// exists) and the index: the rows change in place, the index with them, and the returned
    /// effects say what to write and queue. Refused, the index is as it was and `rows` are
    /// not to be written.
    pub fn apply(
        &mut self,
        rows: &mut Rows,
        change: Change,
        now: Timestamp,
    ) -> Result<Effects, Refused> {
        let mut fx = Effects::new();
        match change {
            Change::Update {
                spec,
                generation,
                principal,
                owner,
            } => self.update(rows, &spec, generation, principal, owner, now, &mut fx)?,
            Change::Remove {
                key,
                generation,
                force,
                owner,
            } => {
                self.remove(rows, &key, generation, force, &owner, &mut fx)?;
                if let Some(row) = rows.get_mut(&key)
                    && row.removing
                    && row.generation == generation
                {
                    flows::removing(row, now);
                }
            }
            Change::Suspend {
                key,
                owner,
                suspended,
            } => Self::suspend(rows, &key, &owner, suspended, &mut fx)?,
            Change::Report {
                key,
                generation,
                reports,
            } => self.report(rows, &key, generation, reports, now, &mut fx)?,
            Change::Delete { key, generation } => self.delete(rows, &key, generation, &mut fx),
            Change::ClusterVersion(version) => {
                if self.index.set_kubernetes(version.clone()) {
                    fx.write(Write::ClusterVersion(version));
                } else {
                    fx.outcome = Outcome::Stale;
                }
            }
        }
        if fx.outcome != Outcome::Applied {
            return Ok(fx);
        }
        self.pass(rows, &mut fx, now);
        // After the pass: the packages it enabled are waited for too.
        self.after_all(rows, &mut fx);
        for key in fx.touched() {
            let row = &rows[&key];
            self.index.upsert(key, row.node());
        }
        fx.save_touched(rows);
        Ok(fx)
    }

    #[allow(clippy::too_many_arguments)]
    fn update(
        &mut self,
        rows: &mut Rows,
        spec: &UpdateSpec,
        generation: Generation,
        principal: u32,
        owner: Owner,
        now: Timestamp,
        fx: &mut Effects,
    ) -> Result<(), Refused> {
        let key = spec.id.key();
        let previous = rows.get(&key);
        if let Some(p) = previous {
            check_owner(p, &owner)?;
        }
        let planned = update::plan(spec, previous, generation, principal, now);
        if planned.is_ok() && previous.is_some_and(|p| p.suspended) {
            return Err(Refused::Suspended { key });
        }
        let Planned { mut row, work } = match planned {
            Ok(planned) => planned,
            Err(NotPlanned::Unchanged(current)) => {
                fx.outcome = Outcome::Unchanged(current);
                return Ok(());
            }
            Err(NotPlanned::Refused(refused)) => return Err(refused.into()),
        };
        if previous.is_none() {
            row.owner = owner;
            fx.insert(&key);
        }
        self.index.upsert(key.clone(), row.node());
        rows.insert(key.clone(), row);
        fx.touch(&key);
        fx.work.extend(work);
        Ok(())
    }

    fn remove(
        &mut self,
        rows: &mut Rows,
        key: &PackageKey,
        generation: Generation,
        force: bool,
        owner: &Owner,
        fx: &mut Effects,
    ) -> Result<(), Refused> {
        let Some(row) = rows.get_mut(key) else {
            fx.outcome = Outcome::Stale;
            return Ok(());
        };
        check_owner(row, owner)?;
        let dependents = self.index.dependents(key);
        if !dependents.is_empty() {
            if !force {
                return Err(Refused::MandatoryDependency {
                    key: key.clone(),
                    dependents,
                });
            }
            tracing::warn!(package.key = %key, dependents = %names(&dependents), "forced removal of a mandatory dependency");
        }
        row.generation = generation;
        row.phase = Phase::Removing;
        row.removing = true;
        row.last_error.clear();
        self.index.upsert(key.clone(), row.node());
        fx.touch(key);
        fx.work.extend(flows::remove(key, generation));
        Ok(())
    }

    /// Suspends or resumes a package: its row only (no generation, no work). Nothing to do
    /// when it is so already, or gone.
    fn suspend(
        rows: &mut Rows,
        key: &PackageKey,
        owner: &Owner,
        suspended: bool,
        fx: &mut Effects,
    ) -> Result<(), Refused> {
        let Some(row) = rows.get_mut(key) else {
            fx.outcome = Outcome::Stale;
            return Ok(());
        };
        check_owner(row, owner)?;
        if row.suspended == suspended {
            fx.outcome = Outcome::Unchanged(row.generation);
            return Ok(());
        }
        row.suspended = suspended;
        fx.touch(key);
        Ok(())
    }

    fn report(
        &mut self,
        rows: &mut Rows,
        key: &PackageKey,
        generation: Generation,
        reports: Vec<Report>,
        now: Timestamp,
        fx: &mut Effects,
    ) -> Result<(), Refused> {
        let Some(row) = rows.get_mut(key).filter(|r| r.generation == generation) else {
            fx.outcome = Outcome::Stale;
            return Ok(());
        };
        let global_before = row.is_global().then(|| row.global_values().cloned());
        for report in reports {
            // Checked against the row as each report finds it: all of them apply, or none
            // (the rows of a refused change are not written).
            if !report.converted_from_stored(row) {
                return Err(Refused::SettingsChangedWhileConverted { key: key.clone() });
            }
            fx.work.extend(report.apply(row, now));
        }
        if let Some(before) = global_before
            && row.global_values() != before.as_ref()
        {
            fx.work.extend(self.global_readers());
        }
        self.index.upsert(key.clone(), row.node());
        fx.touch(key);
        Ok(())
    }

    fn delete(
        &mut self,
        rows: &mut Rows,
        key: &PackageKey,
        generation: Generation,
        fx: &mut Effects,
    ) {
        let removed = self
            .index
            .node(key)
            .is_some_and(|n| n.generation == generation && n.removing);
        if !removed {
            fx.outcome = Outcome::Stale;
            return;
        }
        let global = self.index.node(key).is_some_and(|n| n.id.is_global());
        self.index.remove(key);
        rows.remove(key);
        if global {
            // The global values are gone: their readers render again without them.
            fx.work.extend(self.global_readers());
        }
        fx.write(Write::Delete {
            key: key.clone(),
            generation,
        });
    }

    /// One scheduling pass: each package whose verdict changed gets its condition, phase and
    /// (once enabled) its remaining tasks, in the pass's order. A verdict on a row in hand
    /// changes it now; on any other, once it is loaded ([`Effects::settle`]).
    fn pass(&mut self, rows: &mut Rows, fx: &mut Effects, now: Timestamp) {
        for (key, verdict) in self.index.pass() {
            match rows.get_mut(&key) {
                Some(row) => {
                    fx.work.extend(flows::schedule(row, &verdict, now));
                    fx.touch(&key);
                }
                None => fx.defer_verdict(&key, &verdict),
            }
            self.index.settle(&key, &verdict);
            if let Verdict::Enable = verdict {
                tracing::info!(package.key = %key, "requirements met: package enabled");
            }
        }
    }
}
