//! berth-devcluster
