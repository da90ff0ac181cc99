//! Typed clients of berth's internal services, made the one way every caller needs them: over
//! [`berth_runtime::connect_lazy`] (lazy, bounded, traced, mutual TLS with the server's role
//! checked) and with [`MAX_MESSAGE_BYTES`] both ways. Also [`scope`]: what a package may touch,
//! as lifecycle answers it; [`repositories`]: a PackageRepository's definition as the package
//! crate reads it.
//!
//! This is the only shared crate that depends on `berth-proto`: the runtime and SQL plumbing
//! build without berth's contracts.

pub mod repositories;
pub mod scope;

use berth_proto::hookevent::hook_events_client::HookEventsClient;
use berth_proto::lifecycle::lifecycle_client::LifecycleClient;
use berth_proto::queue::broker_client::BrokerClient;
use berth_proto::release::releases_client::ReleasesClient;
use berth_runtime::{Channel, MAX_MESSAGE_BYTES, Role, Tls, connect_lazy};

/// An endpoint that cannot be used (a malformed address, or TLS that cannot be set up).
pub type ConnectError = tonic::transport::Error;

/// A client of the queue broker.
pub type Broker = BrokerClient<Channel>;
/// A client of lifecycle.
pub type Lifecycle = LifecycleClient<Channel>;
/// A client of a hookevent replica.
pub type HookEvents = HookEventsClient<Channel>;
/// A client of the release service.
pub type Releases = ReleasesClient<Channel>;

/// The broker at `endpoint` (one or several replicas, see [`connect_lazy`]).
pub fn broker(endpoint: &str, tls: Option<&Tls>) -> Result<Broker, ConnectError> {
    let channel = connect_lazy(endpoint, tls, Role::Broker)?;
    Ok(BrokerClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES))
}

/// Lifecycle at `endpoint`.
pub fn lifecycle(endpoint: &str, tls: Option<&Tls>) -> Result<Lifecycle, ConnectError> {
    let channel = connect_lazy(endpoint, tls, Role::Lifecycle)?;
    Ok(LifecycleClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES))
}

/// The hookevent replica (or replicas) at `endpoint`.
pub fn hookevent(endpoint: &str, tls: Option<&Tls>) -> Result<HookEvents, ConnectError> {
    let channel = connect_lazy(endpoint, tls, Role::Hookevent)?;
    Ok(HookEventsClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES))
}

/// The release service at `endpoint`.
pub fn release(endpoint: &str, tls: Option<&Tls>) -> Result<Releases, ConnectError> {
    let channel = connect_lazy(endpoint, tls, Role::Release)?;
    Ok(ReleasesClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES))
}
