//! Watch fan-out and the recent-event log that lets watches resume from a resourceVersion.
//!
//! Every committed change becomes a [`StoredEvent`] in a bounded log. A watch that starts
//! from resourceVersion R replays the log after R; when R is older than the oldest kept
//! event the client gets `410 Gone` and must re-list, exactly the contract kube-rs'
//! `watcher` and client-go's reflector are written against.
//!
//! Live events go to each watcher over its own bounded channel. A watcher that does not
//! keep up is disconnected rather than buffered without limit; like a real apiserver
//! closing a slow watch, the client re-watches from the last resourceVersion it saw.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::resources::GroupResource;
use crate::selectors::{FieldSelector, LabelSelector};

/// How many recent events are kept for resuming watches. At a few hundred bytes to a few
/// kilobytes per object this bounds the log to tens of megabytes; a dev cluster seldom
/// sees more than this many writes within one client's reconnect window.
pub const EVENT_LOG_CAPACITY: usize = 10_000;

/// Per-watcher buffer. Large enough to absorb a namespace deletion or a chart install
/// arriving in one burst while the client is parsing; a client further behind than this
/// is disconnected and re-watches.
pub const WATCHER_CHANNEL_CAPACITY: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
            EventType::Bookmark => "BOOKMARK",
            EventType::Error => "ERROR",
        }
    }
}

/// One committed change, with the object before it (for selector transitions).
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub rv: u64,
    pub gr: GroupResource,
    pub kind: EventType,
    pub object: Arc<Value>,
    pub old: Option<Arc<Value>>,
    /// The event's wire line, rendered by the first watcher that sends it unchanged and
    /// reused by the others (see [`RenderedLine`]).
    pub rendered: Arc<RenderedLine>,
}

/// One event's serialized watch line, keyed by the apiVersion it was rendered at:
/// watchers of the same resource at the same version send identical bytes, so fifty
/// watchers cost one serialization, not fifty.
#[derive(Debug, Default)]
pub struct RenderedLine(OnceLock<(String, Bytes)>);

impl RenderedLine {
    /// The line at `api_version`, rendering it with `render` unless it is cached at
    /// that version (a watcher at another version renders its own).
    pub fn get_or_render(&self, api_version: &str, render: impl FnOnce() -> Bytes) -> Bytes {
        if let Some((v, bytes)) = self.0.get() {
            if v == api_version {
                return bytes.clone();
            }
            return render();
        }
        let bytes = render();
        let _ = self.0.set((api_version.to_string(), bytes.clone()));
        bytes
    }
}

/// An event as a watcher receives it.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    pub kind: EventType,
    /// Shared with the store and the other watchers (see `store::Collection`).
    pub object: Arc<Value>,
    /// Set when the event reaches this watcher as committed (same type), so the line
    /// can be shared with the other watchers.
    pub rendered: Option<Arc<RenderedLine>>,
}

/// What one watch is interested in.
#[derive(Debug, Clone)]
pub struct WatchFilter {
    pub gr: GroupResource,
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl WatchFilter {
    pub fn matches(&self, object: &Value) -> bool {
        let ns_ok = match &self.namespace {
            Some(ns) => {
                object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    == Some(ns.as_str())
            }
            None => true,
        };
        ns_ok && self.labels.matches(object) && self.fields.matches(object)
    }

    /// What this watcher sees of a change: selector transitions turn a MODIFIED into an
    /// ADDED (starts matching) or DELETED (stops matching), as the apiserver's watch cache does.
    pub fn translate(&self, event: &StoredEvent) -> Option<WatchEvent> {
        if event.gr != self.gr {
            return None;
        }
        let now = self.matches(&event.object);
        let before = event.old.as_ref().is_some_and(|o| self.matches(o));
        let kind = match event.kind {
            EventType::Added if now => EventType::Added,
            EventType::Modified if now && before => EventType::Modified,
            EventType::Modified if now => EventType::Added,
            EventType::Modified if before => EventType::Deleted,
            EventType::Deleted if now || before => EventType::Deleted,
            _ => return None,
        };
        Some(WatchEvent {
            kind,
            object: event.object.clone(),
            rendered: (kind == event.kind).then(|| event.rendered.clone()),
        })
    }
}

/// A registered watcher.
struct Subscriber {
    filter: WatchFilter,
    tx: mpsc::Sender<WatchEvent>,
}

/// The event log plus the live subscribers.
pub struct Hub {
    log: VecDeque<StoredEvent>,
    /// Every event with rv > `floor` is still in the log; older ones are gone.
    floor: u64,
    subscribers: Vec<Subscriber>,
}

/// Why a watch could not start from the requested resourceVersion.
#[derive(Debug, PartialEq, Eq)]
pub struct TooOld {
    pub requested: u64,
    pub oldest: u64,
}

impl Hub {
    pub fn new(start_rv: u64) -> Hub {
        Hub {
            log: VecDeque::with_capacity(1024),
            floor: start_rv,
            subscribers: Vec::new(),
        }
    }

    /// Whether continue tokens and watches from `rv` can still be served.
    pub fn check_rv(&self, rv: u64) -> Result<(), TooOld> {
        if rv < self.floor {
            Err(TooOld {
                requested: rv,
                oldest: self.floor,
            })
        } else {
            Ok(())
        }
    }

    /// Records an event and delivers it to live subscribers, dropping the ones that are
    /// full or gone.
    pub fn publish(&mut self, event: StoredEvent) {
        self.subscribers
            .retain(|s| match s.filter.translate(&event) {
                Some(e) => s.tx.try_send(e).is_ok(),
                None => !s.tx.is_closed(),
            });
        if self.log.len() == EVENT_LOG_CAPACITY
            && let Some(evicted) = self.log.pop_front()
        {
            self.floor = evicted.rv;
        }
        self.log.push_back(event);
    }

    /// Registers a watcher and returns the events after `from_rv` it must see first.
    pub fn subscribe(
        &mut self,
        filter: WatchFilter,
        from_rv: Option<u64>,
    ) -> Result<(Vec<WatchEvent>, mpsc::Receiver<WatchEvent>), TooOld> {
        let backlog = match from_rv {
            Some(rv) => {
                self.check_rv(rv)?;
                self.log
                    .iter()
                    .filter(|e| e.rv > rv)
                    .filter_map(|e| filter.translate(e))
                    .collect()
            }
            None => Vec::new(),
        };
        let (tx, rx) = mpsc::channel(WATCHER_CHANNEL_CAPACITY);
        self.subscribers.push(Subscriber { filter, tx });
        Ok((backlog, rx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn filter(labels: &str) -> WatchFilter {
        WatchFilter {
            gr: GroupResource {
                group: String::new(),
                resource: "configmaps".into(),
            },
            namespace: Some("ns".into()),
            labels: LabelSelector::parse(labels).expect("selector"),
            fields: FieldSelector::default(),
        }
    }

    fn event(rv: u64, kind: EventType, app: &str, old_app: Option<&str>) -> StoredEvent {
        let obj = |a: &str| json!({ "metadata": { "namespace": "ns", "name": "x", "labels": { "app": a } } });
        StoredEvent {
            rv,
            gr: GroupResource {
                group: String::new(),
                resource: "configmaps".into(),
            },
            kind,
            object: Arc::new(obj(app)),
            old: old_app.map(|a| Arc::new(obj(a))),
            rendered: Arc::default(),
        }
    }

    #[test]
    fn selector_transitions_become_added_and_deleted() {
        let f = filter("app=web");
        assert_eq!(
            f.translate(&event(1, EventType::Modified, "web", Some("api")))
                .map(|e| e.kind),
            Some(EventType::Added)
        );
        assert_eq!(
            f.translate(&event(2, EventType::Modified, "api", Some("web")))
                .map(|e| e.kind),
            Some(EventType::Deleted)
        );
        assert!(
            f.translate(&event(3, EventType::Modified, "api", Some("api")))
                .is_none()
        );
    }

    #[test]
    fn resuming_replays_and_too_old_is_refused() {
        let mut hub = Hub::new(0);
        for rv in 1..=(EVENT_LOG_CAPACITY as u64 + 5) {
            hub.publish(event(rv, EventType::Added, "web", None));
        }
        assert!(hub.subscribe(filter(""), Some(1)).is_err());
        let (backlog, _rx) = hub
            .subscribe(filter(""), Some(EVENT_LOG_CAPACITY as u64))
            .expect("recent");
        assert_eq!(backlog.len(), 5);
    }

    #[test]
    fn a_full_watcher_is_disconnected() {
        let mut hub = Hub::new(0);
        let (_, mut rx) = hub.subscribe(filter(""), None).expect("subscribe");
        for rv in 1..=(WATCHER_CHANNEL_CAPACITY as u64 + 1) {
            hub.publish(event(rv, EventType::Added, "web", None));
        }
        let mut received = 0;
        while rx.try_recv().is_ok() {
            received += 1;
        }
        assert_eq!(received, WATCHER_CHANNEL_CAPACITY);
        assert!(matches!(
            rx.try_recv(),
            Err(mpsc::error::TryRecvError::Disconnected)
        ));
    }
}
