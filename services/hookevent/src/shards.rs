//! Shards: replicas of hookevent share the packages' watches and schedules. A package belongs
//! to shard `shard_of(package, N)`, and each shard is owned by one replica at a time through
//! the Lease `berth-hookevent-shard-<i>` (the shared `berth_lease::shards`: the shard function,
//! the shard and member Leases, the balancing `Coordinator`). Only the owner of a package's
//! shard watches for it, keeps its snapshots and queues its HookRuns; the other replicas
//! forward the package's RPCs to it (`service`), at the endpoint it advertises in the
//! annotation `berth.io/hookevent-endpoint` of the shard Leases it holds.
//!
//! Without a cluster (no kubeconfig) there are no Leases: the one replica owns every shard.

pub use berth_lease::shards::{
    Coordinator, DEFAULT_SHARDS, MAX_SHARDS, Route, ShardConfig, ShardHandler, ShardLeases,
    ShardNames, Shards, default_namespace, shard_of,
};

/// hookevent's shard Leases: `berth-hookevent-shard-<i>` (label `berth.io/hookevent-shard`),
/// member Leases `berth-hookevent-replica-<digest>` (label `berth.io/hookevent-replica`).
pub const NAMES: ShardNames = ShardNames::new("hookevent");
