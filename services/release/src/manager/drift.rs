//! Drift: after an install, upgrade or rollback, each object of the release is watched; when
//! one is deleted, or changed so that re-applying it would change it back, the change is
//! recorded and the object re-applied. DESIGN.md leaves "when to repair" to the lifecycle;
//! until it decides, the release service repairs on its own, rate-limited per object with an
//! exponential backoff so a controller fighting berth over a field cannot cause an apply storm.
//!
//! "Would change it back" is decided by a server-side apply dry run, not by comparing fields
//! here: the API server knows defaulting and quantity normalisation (`1000m` == `1`), so only
//! real differences in what berth applied count, and the events caused by berth's own repair
//! (or by controllers writing status) compare equal and stop there.

use super::*;
use crate::apply::dry_run::DryRun;
use futures::StreamExt as _;
use kube::runtime::watcher::Event;
use std::collections::VecDeque;
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// Drift events kept per release (oldest dropped first).
const MAX_EVENTS: usize = 100;
/// Wait before the second repair of an object; doubles per repair while drift continues.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait between repairs of one object.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// Quiet time after which an object's backoff starts over.
const BACKOFF_RESET: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriftKind {
    /// The object was deleted.
    Deleted,
    /// A field berth applied was changed.
    Modified,
}

impl DriftKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DriftKind::Deleted => "deleted",
            DriftKind::Modified => "modified",
        }
    }
}

/// One observed drift and what was done about it.
#[derive(Debug, Clone)]
pub struct DriftEvent {
    pub object: ObjectKey,
    pub kind: DriftKind,
    /// The top-level fields that differed (for `Modified`).
    pub fields: Vec<String>,
    /// RFC 3339 time it was seen.
    pub at: String,
    pub repaired: bool,
    /// Why the repair failed, when it did.
    pub error: String,
}

type EventLog = Arc<Mutex<VecDeque<DriftEvent>>>;

struct Watched {
    cancel: CancellationToken,
    events: EventLog,
}

/// The drift watches of every release this process installed.
#[derive(Clone, Default)]
pub struct DriftMonitor {
    // Std mutex: held only to insert, remove or copy entries, never across an await.
    releases: Arc<Mutex<HashMap<(String, String), Watched>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl DriftMonitor {
    /// Starts watching `objects` (the desired state) for the release, replacing any earlier
    /// watch of it. Earlier drift events are kept.
    pub fn watch(
        &self,
        applier: &Applier,
        release: &str,
        namespace: &str,
        objects: Vec<serde_json::Value>,
    ) {
        let cancel = CancellationToken::new();
        let events = {
            let mut map = lock(&self.releases);
            let id = (namespace.to_string(), release.to_string());
            let events = map.get(&id).map(|w| w.events.clone()).unwrap_or_default();
            if let Some(old) = map.insert(
                id,
                Watched {
                    cancel: cancel.clone(),
                    events: events.clone(),
                },
            ) {
                old.cancel.cancel();
            }
            events
        };
        for object in objects {
            if crate::apply::object::is_kept(&object) {
                continue;
            }
            tokio::spawn(watch_object(
                applier.clone(),
                release.to_string(),
                namespace.to_string(),
                object,
                events.clone(),
                cancel.clone(),
            ));
        }
    }

    /// Stops repairing the release but keeps its events: called before an upgrade or rollback
    /// applies and prunes, so the old watches do not resurrect what the new revision drops.
    pub fn pause(&self, release: &str, namespace: &str) {
        if let Some(w) = lock(&self.releases).get(&(namespace.to_string(), release.to_string())) {
            w.cancel.cancel();
        }
    }

    /// Stops watching the release and forgets its events (on uninstall).
    pub fn stop(&self, release: &str, namespace: &str) {
        if let Some(w) = lock(&self.releases).remove(&(namespace.to_string(), release.to_string()))
        {
            w.cancel.cancel();
        }
    }

    /// The release's drift events, oldest first.
    pub fn events(&self, release: &str, namespace: &str) -> Vec<DriftEvent> {
        lock(&self.releases)
            .get(&(namespace.to_string(), release.to_string()))
            .map(|w| lock(&w.events).iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Per-object repair pacing: the first repair is immediate, later ones wait 1s, 2s, 4s, ...
/// up to [`MAX_BACKOFF`], starting over after [`BACKOFF_RESET`] of quiet.
struct Pacing {
    last: Option<Instant>,
    next_wait: Duration,
}

impl Pacing {
    fn new() -> Self {
        Pacing {
            last: None,
            next_wait: Duration::ZERO,
        }
    }

    /// How long to wait before the next repair, and records that it happens.
    fn next(&mut self) -> Duration {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) > BACKOFF_RESET)
        {
            self.next_wait = Duration::ZERO;
        }
        let wait = self.next_wait;
        self.next_wait = (self.next_wait * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
        self.last = Some(now + wait);
        wait
    }
}

async fn watch_object(
    applier: Applier,
    release: String,
    namespace: String,
    desired: serde_json::Value,
    events: EventLog,
    cancel: CancellationToken,
) {
    let (key, stream) = match applier.watch_object(&desired, &namespace).await {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch a release object for drift");
            return;
        }
    };
    let mut stream = std::pin::pin!(stream);
    let mut pacing = Pacing::new();
    // Whether the object was seen during the watcher's current (re)list.
    let mut seen_in_list = false;
    loop {
        let event = tokio::select! {
            () = cancel.cancelled() => return,
            e = stream.next() => e,
        };
        let drift = match event {
            None => return,
            Some(Err(e)) => {
                // The watcher backs off and re-lists by itself.
                tracing::debug!(object = %key, error = %e, "drift watch error");
                continue;
            }
            Some(Ok(Event::Init)) => {
                seen_in_list = false;
                continue;
            }
            Some(Ok(Event::InitApply(_))) => {
                seen_in_list = true;
                None
            }
            // Deleted while no watch was open.
            Some(Ok(Event::InitDone)) if !seen_in_list => Some(DriftKind::Deleted),
            Some(Ok(Event::InitDone)) => continue,
            Some(Ok(Event::Delete(_))) => Some(DriftKind::Deleted),
            Some(Ok(Event::Apply(_))) => None,
        };
        // Modified (or listed): does re-applying change anything?
        let (kind, fields) = match drift {
            Some(kind) => (kind, Vec::new()),
            None => match applier.dry_run(&desired, &release, &namespace).await {
                Ok(DryRun { live: None, .. }) => (DriftKind::Deleted, Vec::new()),
                Ok(run) => {
                    let fields = run.changed_fields();
                    if fields.is_empty() {
                        continue;
                    }
                    (DriftKind::Modified, fields)
                }
                Err(e) => {
                    tracing::debug!(object = %key, error = %e, "drift check failed");
                    continue;
                }
            },
        };
        let wait = pacing.next();
        tracing::info!(object = %key, kind = kind.as_str(), ?fields, wait_ms = wait.as_millis() as u64, "drift detected");
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        let outcome = applier.apply(&desired, &release, &namespace).await;
        let event = DriftEvent {
            object: key.clone(),
            kind,
            fields,
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            repaired: outcome.is_ok(),
            error: outcome.err().map(|e| e.to_string()).unwrap_or_default(),
        };
        let mut log = lock(&events);
        if log.len() >= MAX_EVENTS {
            log.pop_front();
        }
        log.push_back(event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repairs_back_off_exponentially() {
        let mut p = Pacing::new();
        let waits: Vec<Duration> = (0..4).map(|_| p.next()).collect();
        assert_eq!(
            waits,
            vec![
                Duration::ZERO,
                Duration::from_secs(1),
                Duration::from_secs(2),
                Duration::from_secs(4)
            ]
        );
    }
}
