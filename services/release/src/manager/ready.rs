//! Waiting for readiness from watches: the latest revision's objects are watched (one watch
//! per kind and namespace, see `apply::watch`) and each event re-computes that object's
//! kstatus, so the wait ends on the event that makes the last object Current instead of at
//! the next poll.

use super::*;
use crate::apply::Seen;
use futures::StreamExt as _;
use std::collections::BTreeMap;

fn not_observed(message: &str) -> kstatus::Outcome {
    kstatus::Outcome {
        status: ObjectStatus::NotFound,
        reason: String::new(),
        message: message.into(),
    }
}

impl ReleaseManager {
    /// Waits up to `timeout` until every object of the release's latest revision is Current
    /// (kstatus), and returns what was seen last: `ready` is false when the time ran out, with
    /// the objects that were not ready in `not_ready`. A Failed object does not end the wait
    /// (it may recover, as with `helm install --wait`). `NotFound` when there is no release.
    pub async fn wait_ready(
        &self,
        release: &ReleaseId,
        timeout: Duration,
    ) -> Result<Observed, ReleaseError> {
        let (name, namespace) = (release.name(), release.namespace());
        let deadline = tokio::time::Instant::now() + timeout;
        let store = self.store(namespace);
        let records = store.stored(name).await?;
        let Some(latest) = records.newest() else {
            return Err(ReleaseError::NotFound(format!(
                "release {name:?} in namespace {namespace:?}"
            )));
        };
        let objects = confine::recorded(
            &self.applier,
            latest,
            "readiness",
            recorded_objects(&latest.release.manifest),
        )
        .await?;
        self.wait_objects(release, latest.release.version, objects, deadline)
            .await
    }

    /// [`Self::wait_ready`] for a revision whose manifest the caller holds (Install's, just
    /// applied): no read of the release records.
    pub async fn wait_revision(
        &self,
        release: &ReleaseId,
        revision: i32,
        manifest: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Observed, ReleaseError> {
        self.wait_objects(release, revision, recorded_objects(manifest), deadline)
            .await
    }

    /// [`Self::wait_revision`] for the revision's objects.
    async fn wait_objects(
        &self,
        release: &ReleaseId,
        revision: i32,
        objects: Vec<serde_json::Value>,
        deadline: tokio::time::Instant,
    ) -> Result<Observed, ReleaseError> {
        let (name, namespace) = (release.name(), release.namespace());
        let mut order = Vec::new();
        let mut outcomes = BTreeMap::new();
        let mut watched = Vec::new();
        for object in objects {
            let (key, outcome) = match self.applier.key_for(&object, namespace).await {
                Ok((key, ar)) => {
                    watched.push((key.clone(), ar));
                    (key, not_observed("not observed yet"))
                }
                Err(ApplyError::UnknownKind { api_version, kind }) => {
                    let key = ObjectKey {
                        api_version,
                        kind,
                        namespace: object::str_at(&object, "/metadata/namespace").to_string(),
                        name: object::str_at(&object, "/metadata/name").to_string(),
                    };
                    (key, not_observed("its kind is not served by the cluster"))
                }
                Err(e) => return Err(e.into()),
            };
            order.push(key.clone());
            outcomes.insert(key, outcome);
        }
        let mut events = self.applier.watch_objects(&watched);
        let mut watch_error = None;
        let all_current = |o: &BTreeMap<ObjectKey, kstatus::Outcome>| {
            o.values().all(|x| x.status == ObjectStatus::Current)
        };
        while !all_current(&outcomes) {
            let seen = match tokio::time::timeout_at(deadline, events.next()).await {
                Ok(Some(seen)) => seen,
                // The stream never ends while held; either way the wait is over.
                Ok(None) | Err(_) => break,
            };
            match seen {
                Seen::Present(key, live) => {
                    let outcome = serde_json::to_value(&*live)
                        .map_err(|e| e.to_string())
                        .and_then(|v| kstatus::compute(&v, chrono::Utc::now()))
                        .unwrap_or_else(|e| kstatus::Outcome {
                            status: ObjectStatus::Unknown,
                            reason: String::new(),
                            message: e,
                        });
                    outcomes.insert(key, outcome);
                }
                Seen::Absent(key) => {
                    outcomes.insert(key, not_observed("Resource not found"));
                }
                Seen::Error { watch, error } => {
                    watch_error = Some(format!("watch {watch}: {error}"))
                }
            }
        }
        let ready = all_current(&outcomes);
        let mut not_ready: Vec<String> = order
            .iter()
            .filter_map(|k| {
                let o = outcomes.get(k)?;
                (o.status != ObjectStatus::Current)
                    .then(|| format!("{k}: {:?} {} {}", o.status, o.reason, o.message))
            })
            .collect();
        if let (false, Some(e)) = (ready, watch_error) {
            not_ready.push(e);
        }
        if ready {
            self.metrics.ready(namespace, name, revision);
        }
        Ok(Observed {
            found: true,
            revision,
            objects: order,
            ready,
            not_ready,
            drift: self.drift.events(name, namespace),
        })
    }
}
