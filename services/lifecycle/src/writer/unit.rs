//! The unit of work: one transaction for a batch of writes, each loaded, decided by the engine
//! and saved with its outbox rows; a batch that fails is undone, the engine rebuilt from the
//! store, and its writes tried again one by one.

use berth_lifecycle_core::engine::{Change, Outcome, Refused, Rows};
use berth_lifecycle_core::update::UpdateSpec;
use berth_lifecycle_core::{Engine, Generation, Owner, PackageKey, Timestamp};
use tracing::Instrument as _;

use crate::outbox;
use crate::store::{Store, StoreError, WriteTx};

/// A write the service asks for.
#[derive(Clone, Debug)]
pub enum Op {
    /// An Update through `owner`'s front door; its generation is allocated in the write.
    Update(Box<UpdateSpec>, Owner),
    /// A Remove; its generation is allocated in the write, when the package exists.
    Remove {
        key: PackageKey,
        force: bool,
        owner: Owner,
    },
    /// Anything else, as the engine takes it.
    Change(Change),
}

/// What became of one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    pub outcome: Outcome,
    /// The generation allocated to an Update or a Remove (its answer once applied); for any
    /// other change, the generation it named (0 for a cluster version).
    pub generation: Generation,
}

/// Why a write was not made.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Refused(#[from] Refused),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The writes of one batch and what their transaction decided.
pub(super) struct Committed {
    pub results: Vec<Result<Written, Refused>>,
    /// The packages whose scheduling verdict the batch wrote.
    pub settled: Vec<PackageKey>,
}

/// Writes `ops` (each with the span it runs in: the tasks it queues carry that span's trace)
/// in order, in one transaction: each as it would be written alone. Writers serialise (the
/// engine's mutex, and on PostgreSQL the replicas' advisory lock), so what each write costs on
/// its own — the transaction, the lock, catching up with the other replicas, the commit — is
/// paid once per batch.
///
/// When the transaction fails, the engine is rebuilt from what is committed and each write is
/// tried again alone, so one that cannot be written does not fail the others: the result has
/// one entry per write, in order.
pub(crate) async fn write_batch(
    store: &Store,
    engine: &mut Engine,
    ops: &[(Op, tracing::Span)],
    now: Timestamp,
) -> (Vec<Result<Written, WriteError>>, Vec<PackageKey>) {
    let failed = match try_batch(store, engine, ops, now).await {
        Ok(done) => return (into_results(done.results), done.settled),
        Err(e) => e,
    };
    reindex(store, engine).await;
    if ops.len() == 1 {
        return (vec![Err(failed.into())], vec![]);
    }
    tracing::warn!(error = %failed, writes = ops.len(), "a batch of writes failed; writing each alone");
    let (mut each, mut settled) = (Vec::with_capacity(ops.len()), vec![]);
    for op in ops {
        match try_batch(store, engine, std::slice::from_ref(op), now).await {
            Ok(done) => {
                each.extend(into_results(done.results));
                settled.extend(done.settled);
            }
            Err(e) => {
                reindex(store, engine).await;
                each.push(Err(e.into()));
            }
        }
    }
    (each, settled)
}

fn into_results(results: Vec<Result<Written, Refused>>) -> Vec<Result<Written, WriteError>> {
    results
        .into_iter()
        .map(|r| r.map_err(WriteError::from))
        .collect()
}

async fn try_batch(
    store: &Store,
    engine: &mut Engine,
    ops: &[(Op, tracing::Span)],
    now: Timestamp,
) -> Result<Committed, StoreError> {
    let mut tx = store.begin_write(engine).await?;
    let mut queued = vec![];
    let mut results = Vec::with_capacity(ops.len());
    for (op, span) in ops {
        let written = write_one(&mut tx, engine, op.clone(), now, &mut queued)
            .instrument(span.clone())
            .await?;
        results.push(written);
    }
    let applied = results
        .iter()
        .any(|r| matches!(r, Ok(w) if w.outcome == Outcome::Applied));
    // A batch that writes nothing is undone: an Update that changes nothing or is refused
    // gives its generation back.
    if !applied {
        return Ok(Committed {
            results,
            settled: vec![],
        });
    }
    tx.insert_outbox(&queued).await?;
    tx.commit(engine).await?;
    Ok(Committed {
        results,
        settled: engine.take_settled(),
    })
}

/// One write inside the batch's transaction: load, apply, load what the pass needs, settle,
/// save; the work it queues joins `queued`.
async fn write_one(
    tx: &mut WriteTx,
    engine: &mut Engine,
    op: Op,
    now: Timestamp,
    queued: &mut Vec<outbox::Row>,
) -> Result<Result<Written, Refused>, StoreError> {
    let mut rows = Rows::new();
    let (change, generation) = match op {
        Op::Update(spec, owner) => {
            let key = spec.id.key();
            // The generation first: its upsert makes a concurrent Update of the same package
            // (another lifecycle on the same PostgreSQL database) wait until this one commits,
            // so the row read next is the one this Update replaces.
            let generation = tx.next_generation(&key).await?;
            load(tx, &mut rows, &key).await?;
            // A key keeps its principal for as long as its row exists; a new row takes the
            // smallest free one.
            let principal = match rows.get(&key) {
                Some(row) => row.principal,
                None => tx.free_principal().await?,
            };
            let update = Change::Update {
                spec,
                generation,
                principal,
                owner,
            };
            (update, generation)
        }
        Op::Remove { key, force, owner } => {
            load(tx, &mut rows, &key).await?;
            if rows.is_empty() {
                let nothing = Written {
                    outcome: Outcome::Stale,
                    generation: Generation::new(0),
                };
                return Ok(Ok(nothing));
            }
            let generation = tx.next_generation(&key).await?;
            let remove = Change::Remove {
                key,
                generation,
                force,
                owner,
            };
            (remove, generation)
        }
        Op::Change(change) => {
            if let Some(key) = change.key() {
                load(tx, &mut rows, &key).await?;
            }
            let generation = match &change {
                Change::Update { generation, .. }
                | Change::Remove { generation, .. }
                | Change::Report { generation, .. }
                | Change::Delete { generation, .. } => *generation,
                Change::ClusterVersion(_) | Change::Suspend { .. } => Generation::new(0),
            };
            (change, generation)
        }
    };
    let mut effects = match engine.apply(&mut rows, change, now) {
        Ok(effects) => effects,
        Err(refused) => return Ok(Err(refused)),
    };
    let mut needed = vec![];
    for key in effects.rows_needed() {
        needed.extend(tx.load_for_write(&key).await?);
    }
    effects
        .settle(needed, now)
        .map_err(|e| StoreError::OutOfStep { key: e.key })?;
    tx.save(&effects.writes).await?;
    // In the write's span: its tasks continue the trace of the request that made them.
    let traceparent = berth_runtime::current_traceparent();
    queued.extend(
        effects
            .work
            .iter()
            .map(|w| outbox::Row::from_work(w, &traceparent)),
    );
    Ok(Ok(Written {
        outcome: effects.outcome,
        generation,
    }))
}

async fn load(tx: &mut WriteTx, rows: &mut Rows, key: &PackageKey) -> Result<(), StoreError> {
    if let Some(row) = tx.load_for_write(key).await? {
        rows.insert(key.clone(), row);
    }
    Ok(())
}

/// After a failed write (perhaps half-way through a pass): the engine rebuilt from what is
/// committed, keeping the cluster version it knew when the store records none.
pub(super) async fn reindex(store: &Store, engine: &mut Engine) {
    let platform = engine.scheduler().platform().clone();
    match store.engine(platform).await {
        Ok(mut fresh) => {
            if fresh.scheduler().kubernetes().is_none()
                && let Some(v) = engine.scheduler().kubernetes()
            {
                fresh.adopt_kubernetes(v.clone());
            }
            *engine = fresh;
        }
        Err(e) => tracing::error!(error = %e, "rebuilding the scheduler's index failed"),
    }
}
