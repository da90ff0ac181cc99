//! berth-hookevent
