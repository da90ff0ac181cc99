//! The worker runtime's side of the broker's gRPC API: the client it calls and what the
//! broker's refusals mean to it. The rest of the runtime speaks in these terms only.

use berth_proto::queue::broker_client::BrokerClient;

/// The broker as the runtime calls it (a lazily connected channel; cheap to clone).
pub(super) type Broker = BrokerClient<tonic::transport::Channel>;

/// A broker call that failed: its status as the broker (or the transport) gave it.
pub(super) type CallError = tonic::Status;

/// True when the broker refused a report because the task's lease is someone else's now (ours
/// expired): the other holder's result counts, ours is dropped.
pub(super) fn lease_lost(error: &CallError) -> bool {
    error.code() == tonic::Code::FailedPrecondition
}
