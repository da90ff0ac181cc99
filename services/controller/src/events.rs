//! Events on berth's resources (`kubectl describe`, `kubectl events`): core/v1 Events, as
//! client-go's recorder writes them, so both clusters and every kubectl read them alike.
//!
//! Rate-limited as client-go's recorder is: an identical event (same object, type, reason and
//! message) within ten minutes bumps the stored one's `count` and `lastTimestamp` instead of
//! adding one, and each object gets a burst of 25 events refilled one per five minutes
//! (client-go's spam filter), so a package failing in a loop cannot flood the API server.
//! kube's runtime has a recorder of events.k8s.io/v1 Events, without the per-object budget;
//! the budget and the aggregation are the few lines below (a bounded map; no crate bounds
//! its keyed limiter's memory).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};

/// Events an object may have at once before the budget applies.
const BURST: f64 = 25.0;
/// One event of budget comes back every this long.
const REFILL: Duration = Duration::from_secs(300);
/// An identical event within this long is counted on the stored one.
const AGGREGATE_WITHIN: Duration = Duration::from_secs(600);
/// Objects whose budgets and last events are remembered; past this the oldest go.
const MAX_TRACKED: usize = 4096;

pub const COMPONENT: &str = "berth-controller";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Normal,
    Warning,
}

/// The object an event is about.
#[derive(Clone, Debug)]
pub struct Subject {
    pub kind: &'static str,
    pub name: String,
    /// Empty for a cluster-scoped object (its events go to `default`, as client-go does).
    pub namespace: String,
    pub uid: String,
    pub resource_version: Option<String>,
}

/// An event's type, reason and message: what makes two events the same.
type What = (Kind, String, String);

/// The last event written about an object: its name and namespace, count, when, and what.
type Last = (String, String, u32, Instant, What);

struct Tracked {
    tokens: f64,
    refilled: Instant,
    last: Option<Last>,
    seen: Instant,
}

#[derive(Clone)]
pub struct Recorder {
    client: Client,
    instance: String,
    tracked: Arc<Mutex<HashMap<String, Tracked>>>,
}

/// What to write for one event, decided under the lock.
enum Plan {
    Create,
    Count {
        name: String,
        namespace: String,
        count: u32,
    },
    Drop,
}

impl Recorder {
    pub fn new(client: Client, instance: String) -> Recorder {
        Recorder {
            client,
            instance,
            tracked: Arc::default(),
        }
    }

    /// Records an event on `subject`; failures are logged, never returned (an event is
    /// best-effort, as everywhere in Kubernetes).
    pub async fn publish(&self, subject: &Subject, kind: Kind, reason: &str, message: &str) {
        let message: String = message.chars().take(1024).collect();
        let what = (kind, reason.to_owned(), message.clone());
        let plan = self.plan(&subject.uid, &what);
        let namespace = if subject.namespace.is_empty() {
            "default".to_owned()
        } else {
            subject.namespace.clone()
        };
        let now = chrono::Utc::now();
        let time = now.to_rfc3339().parse().ok().map(Time);
        let result = match plan {
            Plan::Drop => {
                tracing::debug!(object = %subject.name, reason, "event dropped: the object's event budget is spent");
                return;
            }
            Plan::Count {
                name,
                namespace,
                count,
            } => {
                let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
                let patch = serde_json::json!({"count": count, "lastTimestamp": time});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(drop)
            }
            Plan::Create => {
                let name = format!(
                    "{}.{:x}",
                    subject.name,
                    now.timestamp_nanos_opt().unwrap_or_default()
                );
                let event = Event {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    involved_object: ObjectReference {
                        api_version: Some(crate::resources::API_VERSION.into()),
                        kind: Some(subject.kind.into()),
                        name: Some(subject.name.clone()),
                        namespace: (!subject.namespace.is_empty())
                            .then(|| subject.namespace.clone()),
                        uid: Some(subject.uid.clone()),
                        resource_version: subject.resource_version.clone(),
                        field_path: None,
                    },
                    reason: Some(reason.to_owned()),
                    message: Some(message),
                    type_: Some(
                        match kind {
                            Kind::Normal => "Normal",
                            Kind::Warning => "Warning",
                        }
                        .into(),
                    ),
                    count: Some(1),
                    first_timestamp: time.clone(),
                    last_timestamp: time,
                    source: Some(EventSource {
                        component: Some(COMPONENT.into()),
                        host: None,
                    }),
                    reporting_component: Some(COMPONENT.into()),
                    reporting_instance: Some(self.instance.clone()),
                    event_time: None::<MicroTime>,
                    ..Event::default()
                };
                let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
                let created = api.create(&PostParams::default(), &event).await;
                if created.is_ok() {
                    self.remember(&subject.uid, name, namespace, what);
                }
                created.map(drop)
            }
        };
        if let Err(e) = result {
            tracing::warn!(object = %subject.name, reason, error = %e, "writing an event failed");
        }
    }

    fn plan(&self, uid: &str, what: &What) -> Plan {
        let mut tracked = self.tracked.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if tracked.len() >= MAX_TRACKED && !tracked.contains_key(uid) {
            // Forget the object seen longest ago.
            if let Some(oldest) = tracked
                .iter()
                .min_by_key(|(_, t)| t.seen)
                .map(|(k, _)| k.clone())
            {
                tracked.remove(&oldest);
            }
        }
        let t = tracked.entry(uid.to_owned()).or_insert(Tracked {
            tokens: BURST,
            refilled: now,
            last: None,
            seen: now,
        });
        t.seen = now;
        if let Some((name, namespace, count, at, last)) = &mut t.last
            && last == what
            && at.elapsed() < AGGREGATE_WITHIN
        {
            *count += 1;
            *at = now;
            return Plan::Count {
                name: name.clone(),
                namespace: namespace.clone(),
                count: *count,
            };
        }
        let refill = t.refilled.elapsed().as_secs_f64() / REFILL.as_secs_f64();
        t.tokens = (t.tokens + refill).min(BURST);
        t.refilled = now;
        if t.tokens < 1.0 {
            return Plan::Drop;
        }
        t.tokens -= 1.0;
        Plan::Create
    }

    fn remember(&self, uid: &str, name: String, namespace: String, what: What) {
        let mut tracked = self.tracked.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = tracked.get_mut(uid) {
            t.last = Some((name, namespace, 1, Instant::now(), what));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorder() -> Recorder {
        // A client that is never called: `plan` is pure bookkeeping.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        Recorder::new(Client::try_from(config).unwrap(), "test".into())
    }

    #[tokio::test]
    async fn identical_events_are_counted_and_each_object_has_a_budget() {
        let r = recorder();
        let what = |i: usize| (Kind::Warning, "Failed".to_owned(), format!("attempt {i}"));
        for i in 0..25 {
            assert!(matches!(r.plan("a", &what(i)), Plan::Create), "{i}");
        }
        assert!(matches!(r.plan("a", &what(99)), Plan::Drop));
        assert!(
            matches!(r.plan("b", &what(0)), Plan::Create),
            "budgets are per object"
        );
        r.remember("b", "b.1".into(), "default".into(), what(0));
        match r.plan("b", &what(0)) {
            Plan::Count { name, count, .. } => assert_eq!((name.as_str(), count), ("b.1", 2)),
            _ => panic!("an identical event is counted"),
        }
    }
}
