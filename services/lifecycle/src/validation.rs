//! Deep validation: candidate settings checked as an Update would apply them, by a worker.
//!
//! Lifecycle holds no package files and runs no hooks, so a ValidateSettings (or an Update
//! changing a loaded package's settings) queues a ValidateRun task on a queue of its own
//! (`<package>/validate/<id>`: it never waits behind the package's other work and is never
//! merged with another), sent to the broker directly, and waits for the worker's
//! AnswerValidation. The worker runs the package's settings check and asks release for the plan
//! of an install with the resulting values (render and server-side dry run). Bounded: at most
//! [`MAX_IN_FLIGHT`] validations wait at once, each at most the configured wait; one that gets
//! no answer in time is `Deferred` (the schema check alone stands, and the package's own
//! ApplySettings runs the settings check again).
//!
//! With several replicas on one PostgreSQL database, the worker's answer may reach a replica
//! that does not wait for it: that replica stores it (`validation_answers`) and NOTIFYs the
//! request id; the waiting replica hears it ([`Validations::notice`]) and takes the answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use berth_proto::lifecycle::AnswerValidationRequest;
use berth_proto::queue::{EnqueueRequest, Task};
use berth_proto::tasks::{self, ValidateRun};
use berth_proto::v1;
use serde_json::Value;
use tokio::sync::{Semaphore, oneshot};

use crate::store::Store;
use berth_lifecycle_core::{Generation, PackageKey};

/// Most validations waiting for workers at once; more are answered `Deferred` at once.
pub const MAX_IN_FLIGHT: usize = 64;
/// How long a validation waits for a worker by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);
/// Most plan entries and warnings kept from an answer (a reply must stay small).
const MAX_PLAN: usize = 2000;
const MAX_WARNINGS: usize = 100;

/// What a worker found.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Valid {
        plan: Vec<v1::PlannedChange>,
        warnings: Vec<String>,
    },
    /// Why the settings are refused.
    Invalid(String),
    /// No verdict was reached: only the schema was checked.
    Deferred(Deferral),
}

/// What a worker found of an Update's new version.
#[derive(Debug, Clone, PartialEq)]
pub enum Described {
    /// The version as its Load would report it.
    Loaded(Box<berth_proto::lifecycle::Loaded>),
    /// Its files do not load (why).
    Unloadable(String),
    /// No answer: the version is checked when it loads.
    Deferred(Deferral),
}

/// Why a validation reached no verdict (shown to the caller as the answer's reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Deferral {
    #[error("more than {MAX_IN_FLIGHT} validations are waiting for workers")]
    Busy,
    #[error("the broker refused the validation: {0}")]
    BrokerRefused(String),
    #[error("lifecycle is shutting down")]
    ShuttingDown,
    #[error("no worker answered within {}s", .0.as_secs())]
    NoAnswer(Duration),
    /// The worker answered that it could not run the check.
    #[error("the worker could not validate: {0}")]
    WorkerFailed(String),
}

struct Pending {
    package: PackageKey,
    tx: oneshot::Sender<AnswerValidationRequest>,
}

#[derive(Clone)]
pub struct Validations {
    broker: berth_clients::Broker,
    /// Where answers for other replicas are left (PostgreSQL).
    store: Store,
    pending: Arc<Mutex<HashMap<String, Pending>>>,
    in_flight: Arc<Semaphore>,
    wait: Duration,
}

impl Validations {
    pub fn new(broker: berth_clients::Broker, store: Store, wait: Duration) -> Validations {
        Validations {
            broker,
            store,
            pending: Arc::default(),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            wait,
        }
    }

    /// Has a worker validate `settings` for the package at `generation`.
    pub async fn validate(
        &self,
        package: &PackageKey,
        generation: Generation,
        settings: &Value,
    ) -> Outcome {
        let run = ValidateRun {
            settings: Some(berth_proto::json::to_struct(settings)),
            ..Default::default()
        };
        match self.ask(package, generation, run).await {
            Err(why) => Outcome::Deferred(why),
            Ok(a) if !a.error.is_empty() => Outcome::Deferred(Deferral::WorkerFailed(a.error)),
            Ok(a) if !a.invalid.is_empty() => Outcome::Invalid(a.invalid),
            Ok(a) => Outcome::Valid {
                plan: a.plan.into_iter().take(MAX_PLAN).collect(),
                warnings: a.warnings.into_iter().take(MAX_WARNINGS).collect(),
            },
        }
    }

    /// Has a worker fetch and load `version` of `repository`'s `package` for the package at
    /// `generation` and describe it as its Load would (an Update changing the version checks
    /// the settings against it before it is accepted).
    pub async fn describe(
        &self,
        key: &PackageKey,
        generation: Generation,
        (repository, repository_definition): (
            &str,
            Option<berth_proto::lifecycle::RepositoryDefinition>,
        ),
        package: &str,
        version: &str,
    ) -> Described {
        let run = ValidateRun {
            repository: repository.to_owned(),
            repository_definition,
            package: package.to_owned(),
            version: version.to_owned(),
            ..Default::default()
        };
        match self.ask(key, generation, run).await {
            Err(why) => Described::Deferred(why),
            Ok(a) if !a.error.is_empty() => Described::Deferred(Deferral::WorkerFailed(a.error)),
            Ok(a) if !a.invalid.is_empty() => Described::Unloadable(a.invalid),
            Ok(a) => match a.loaded {
                Some(loaded) => Described::Loaded(Box::new(loaded)),
                None => Described::Deferred(Deferral::WorkerFailed(
                    "the worker described no version (is it older than lifecycle?)".into(),
                )),
            },
        }
    }

    /// Queues `run` (its request id and deadline filled in here) and waits for its answer.
    async fn ask(
        &self,
        package: &PackageKey,
        generation: Generation,
        mut run: ValidateRun,
    ) -> Result<AnswerValidationRequest, Deferral> {
        let Ok(_permit) = self.in_flight.clone().try_acquire_owned() else {
            return Err(Deferral::Busy);
        };
        let request_id = uuid::Uuid::new_v4().to_string();
        run.request_id.clone_from(&request_id);
        run.deadline_unix_ms = now_ms() + self.wait.as_millis() as i64;
        let (tx, rx) = oneshot::channel();
        self.lock().insert(
            request_id.clone(),
            Pending {
                package: package.clone(),
                tx,
            },
        );
        let task = Task {
            id: request_id.clone(),
            queue: format!("{package}/validate/{request_id}"),
            package: package.to_string(),
            generation: generation.get(),
            traceparent: berth_runtime::current_traceparent(),
            allow_failure: true,
            ..tasks::task(&run)
        };
        let wait = self.wait;
        let answered = tokio::time::timeout(wait, async {
            self.broker
                .clone()
                .enqueue(EnqueueRequest { tasks: vec![task] })
                .await
                .map_err(|s| Deferral::BrokerRefused(s.message().to_owned()))?;
            rx.await.map_err(|_| Deferral::ShuttingDown)
        })
        .await
        .unwrap_or(Err(Deferral::NoAnswer(wait)));
        self.lock().remove(&request_id);
        answered
    }

    /// A worker's answer, given to the validation waiting for it here. Handed back when
    /// nobody here waits for it: it came late, is another replica's, or names another package
    /// than the one validated.
    pub fn answer(&self, answer: AnswerValidationRequest) -> Option<AnswerValidationRequest> {
        let mut pending = self.lock();
        match pending.get(&answer.request_id) {
            Some(p) if p.package.as_str() == answer.package => {}
            _ => return Some(answer),
        }
        let Some(p) = pending.remove(&answer.request_id) else {
            return Some(answer);
        };
        // A receiver gone (its validation timed out at this instant) is a late answer.
        let _ = p.tx.send(answer);
        None
    }

    /// A worker's answer as the RPC receives it: given to the validation waiting here, or, on
    /// PostgreSQL, left for the replica that waits for it. Returns whether it was delivered or
    /// stored.
    pub async fn receive(&self, answer: AnswerValidationRequest) -> bool {
        let Some(answer) = self.answer(answer) else {
            return true;
        };
        if self.store.dialect() != berth_sql::Dialect::Postgres {
            return false;
        }
        let encoded = hex::encode(prost::Message::encode_to_vec(&answer));
        match self
            .store
            .put_validation_answer(&answer.request_id, &answer.package, &encoded, now_ms())
            .await
        {
            Ok(stored) => stored,
            Err(e) => {
                tracing::warn!(error = %e, "storing a validation answer for another replica failed");
                false
            }
        }
    }

    /// A notice of the replicas' database: a stored answer (`Some(request_id)`), or a
    /// reconnection (`None`: notices may have been missed, so every pending request is looked
    /// up). Answers to requests waiting here are taken and delivered; the rest are left.
    pub async fn notice(&self, request_id: Option<String>) {
        let ids: Vec<String> = match request_id {
            Some(id) if self.lock().contains_key(&id) => vec![id],
            Some(_) => return,
            None => self.lock().keys().cloned().collect(),
        };
        for id in ids {
            let taken = match self.store.take_validation_answer(&id).await {
                Ok(Some(encoded)) => encoded,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "taking a stored validation answer failed");
                    continue;
                }
            };
            let decoded = hex::decode(&taken)
                .ok()
                .and_then(|b| <AnswerValidationRequest as prost::Message>::decode(&b[..]).ok());
            match decoded {
                Some(answer) => {
                    let _ = self.answer(answer);
                }
                None => {
                    tracing::warn!(request_id = %id, "a stored validation answer is corrupt; dropped")
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn validations(wait: Duration) -> Validations {
        // Port 9 (discard) refuses connections on loopback: enqueueing fails at once.
        let broker = berth_clients::broker("http://127.0.0.1:9", None).unwrap();
        let store = Store::open("sqlite::memory:").await.unwrap();
        Validations::new(broker, store, wait)
    }

    fn waiting(
        v: &Validations,
        id: &str,
        package: &str,
    ) -> oneshot::Receiver<AnswerValidationRequest> {
        let (tx, rx) = oneshot::channel();
        v.lock().insert(
            id.to_owned(),
            Pending {
                package: PackageKey::from_issued(package.to_owned()),
                tx,
            },
        );
        rx
    }

    #[tokio::test]
    async fn an_answer_reaches_only_the_validation_of_its_package() {
        let v = validations(DEFAULT_WAIT).await;
        let mut rx = waiting(&v, "r1", "ns.app");
        let answer = |package: &str| AnswerValidationRequest {
            request_id: "r1".into(),
            package: package.into(),
            invalid: "no".into(),
            ..Default::default()
        };
        assert!(
            v.answer(answer("other.app")).is_some(),
            "another package's answer is dropped"
        );
        assert!(rx.try_recv().is_err());
        assert!(v.answer(answer("ns.app")).is_none());
        assert_eq!(rx.try_recv().unwrap().invalid, "no");
        assert!(
            v.answer(answer("ns.app")).is_some(),
            "a second answer finds nobody"
        );
        assert!(
            !v.receive(AnswerValidationRequest {
                request_id: "unknown".into(),
                ..Default::default()
            })
            .await,
            "on SQLite (one replica) an answer nobody waits for is dropped"
        );
    }

    #[tokio::test]
    async fn without_a_broker_the_validation_is_deferred_and_forgotten() {
        let v = validations(Duration::from_secs(5)).await;
        let key = PackageKey::from_issued("ns.app".into());
        let outcome = v
            .validate(&key, Generation::new(1), &serde_json::json!({}))
            .await;
        match outcome {
            Outcome::Deferred(why @ Deferral::BrokerRefused(_)) => {
                assert!(why.to_string().starts_with("the broker refused"), "{why}")
            }
            other => panic!("expected Deferred, got {other:?}"),
        }
        assert!(v.lock().is_empty(), "nothing left waiting");
    }
}
