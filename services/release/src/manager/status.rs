//! Status: the latest revision's objects and their kstatus readiness.

use super::*;

impl ReleaseManager {
    /// The latest revision's objects (berth's newest record), whether each exists, and whether
    /// all are ready.
    pub async fn status(&self, release: &ReleaseId) -> Result<Observed, ReleaseError> {
        let (name, namespace) = (release.name(), release.namespace());
        let store = self.store(namespace);
        let records = store.stored(name).await?;
        let Some(latest) = records.newest() else {
            return Ok(Observed::default());
        };
        let mut out = Observed {
            found: true,
            revision: latest.release.version,
            ready: true,
            ..Default::default()
        };
        let mut statuses = Vec::new();
        let now = chrono::Utc::now();
        let objects = confine::recorded(
            &self.applier,
            latest,
            "status",
            recorded_objects(&latest.release.manifest),
        )
        .await?;
        for object in objects {
            let seen = self.applier.get(&object, namespace).await?;
            let outcome = match seen.object.as_ref().map(serde_json::to_value) {
                None => Ok(kstatus::Outcome {
                    status: ObjectStatus::NotFound,
                    reason: String::new(),
                    message: "Resource not found".into(),
                }),
                Some(Ok(live)) => kstatus::compute(&live, now),
                Some(Err(e)) => Err(e.to_string()),
            };
            let outcome = outcome.unwrap_or_else(|e| kstatus::Outcome {
                status: ObjectStatus::Unknown,
                reason: String::new(),
                message: e,
            });
            if outcome.status != ObjectStatus::Current {
                out.not_ready.push(format!(
                    "{}: {:?} {} {}",
                    seen.key, outcome.status, outcome.reason, outcome.message
                ));
            }
            statuses.push(outcome.status);
            out.objects.push(seen.key);
        }
        out.ready = kstatus::aggregate(&statuses, ObjectStatus::Current) == ObjectStatus::Current;
        if out.ready {
            self.metrics.ready(namespace, name, out.revision);
        }
        out.drift = self.drift.events(name, namespace);
        Ok(out)
    }
}
