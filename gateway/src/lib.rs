//! berth-gateway
