//! berth-tests
