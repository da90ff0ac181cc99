//! The lifecycle service: the single source of truth of package state. It accepts Updates and
//! Removes, turns each into a new generation plus the tasks that converge it (written to an outbox
//! in the same transaction and relayed to the queue broker), folds worker reports into the state,
//! and answers Get/List/Watch/Dump/ValidateSettings.
//!
//! The decisions are `berth_lifecycle_core`'s (the engine); this crate is its adapters:
//!
//! - `service` (the gRPC adapter), `convert` (proto ⇄ domain, exhaustive), `error` (its
//!   errors, mapped to a `Status` in one place);
//! - `writer`: every write of package state as a unit of work (load, the engine's `apply`,
//!   save and outbox in one transaction), reports batched;
//! - `store`: SQL (SQLite or PostgreSQL), a repository over the write transaction, and the
//!   reads; `outbox` and `relay`: broker work from the outbox to the queue broker;
//! - `conversion` (settings conversions on the jq evaluators), `validation` (a worker's
//!   verdict on candidate settings), `dump`, `metrics`.

pub mod conversion;
mod convert;
mod dump;
mod error;
mod metrics;
mod outbox;
mod relay;
mod service;
mod store;
#[cfg(test)]
mod test_db;
mod validation;
mod writer;

use std::sync::Arc;

use berth_proto::lifecycle::lifecycle_server::LifecycleServer;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use service::LifecycleService;
pub use store::{Store, StoreError};
pub use validation::DEFAULT_WAIT as DEFAULT_VALIDATION_WAIT;

/// Everything the lifecycle service needs, parsed and validated before any port is bound.
#[derive(Clone, Debug)]
pub struct Config {
    /// `sqlite://PATH` (created when missing), `sqlite::memory:` or `postgres://…`.
    pub database_url: String,
    /// The queue broker, e.g. `http://127.0.0.1:7071`.
    pub broker_endpoint: String,
    /// This service's identity (mutual TLS, calls authorised by role); `None`: plain gRPC.
    pub tls: Option<berth_runtime::Tls>,
    /// The repositories an Update may name (names, and roots under which it may name a
    /// directory); anything else is refused.
    pub repositories: Arc<berth_package::Repositories>,
    /// How long a ValidateSettings (or an Update of a loaded package's settings) waits for a
    /// worker's verdict before settling for the schema check.
    pub validation_wait: std::time::Duration,
    /// Bounds on settings conversions (jq). They run in evaluator processes started from this
    /// executable, whose `main` must call [`berth_jq::run_if_requested`] first.
    pub jq: berth_jq::JqLimits,
    /// Where the service's metrics go (RPC metrics and `berth_packages`).
    pub metrics: berth_runtime::Metrics,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("broker endpoint {endpoint}: {source}")]
    Broker {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("the jq evaluator executable: {0}")]
    JqEvaluator(std::io::Error),
    #[error("serving gRPC: {0}")]
    Serve(#[from] tonic::transport::Error),
}

/// Runs the service on `listener` until `shutdown` fires.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let jq = berth_jq::Jq::current_exe(config.jq).map_err(Error::JqEvaluator)?;
    let store = Store::open(&config.database_url).await?;
    let tls = config.tls.as_ref();
    let broker =
        berth_clients::broker(&config.broker_endpoint, tls).map_err(|source| Error::Broker {
            endpoint: config.broker_endpoint.clone(),
            source,
        })?;
    let wake = Arc::new(tokio::sync::Notify::new());
    let relay = berth_runtime::spawn_in(
        tracing::info_span!(parent: None, "lifecycle.relay"),
        relay::run(
            store.clone(),
            broker.clone(),
            wake.clone(),
            shutdown.clone(),
        ),
    );
    let version = berth_package::parse_version(env!("CARGO_PKG_VERSION"))
        .expect("the crate's version is semver");
    let engine = store.engine(version).await?;
    let writer = writer::Writer::new(
        store.clone(),
        engine,
        writer::Changes::new(wake, store.dialect()),
    );
    let validations =
        validation::Validations::new(broker.clone(), store.clone(), config.validation_wait);
    let service = LifecycleService::new(
        store.clone(),
        writer,
        broker,
        config.repositories.clone(),
        validations,
        jq,
    );
    let listening = (store.dialect() == berth_sql::Dialect::Postgres).then(|| {
        let service = service.clone();
        let shutdown = shutdown.clone();
        berth_runtime::spawn_in(
            tracing::info_span!(parent: None, "lifecycle.listen"),
            async move { service.listen(shutdown).await },
        )
    });
    let metrics = metrics::LifecycleMetrics::default();
    config.metrics.register(|r| metrics.register(r));
    let counting = berth_runtime::spawn_in(
        tracing::info_span!(parent: None, "lifecycle.metrics"),
        metrics.run(store, service.subscribe_changes(), shutdown.clone()),
    );
    let router = berth_runtime::grpc_server(
        berth_runtime::Role::Lifecycle,
        tls,
        &config.metrics,
        berth_proto::FILE_DESCRIPTOR_SET,
    )?
    .add_service(
        LifecycleServer::new(service)
            .max_decoding_message_size(berth_runtime::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(berth_runtime::MAX_MESSAGE_BYTES),
    );
    let served = berth_runtime::serve_router(
        router,
        listener,
        berth_proto::FILE_DESCRIPTOR_SET,
        &["berth.lifecycle.v1.Lifecycle"],
        shutdown.clone(),
    )
    .await;
    shutdown.cancel();
    let _ = relay.await;
    let _ = counting.await;
    if let Some(listening) = listening {
        let _ = listening.await;
    }
    Ok(served?)
}
