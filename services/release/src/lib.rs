//! berth-release
