//! Watching a set of objects, for readiness and drift. Every watch of the process is shared:
//! one kube-rs watcher per API resource and namespace ([`WatchHub`]), selecting the objects
//! berth and Helm stamp with [`MANAGED_BY`], serves every subscriber — the drift repairers of
//! all releases and every readiness wait — from the objects it keeps. A thousand releases of
//! ConfigMaps in one namespace hold one watch, not a thousand (kube-rs speaks HTTP/1.1, so each
//! watch is a connection of its own), and a readiness wait starts from what the watch already
//! knows instead of listing again.

use super::object::MANAGED_BY;
use super::{Applier, ObjectKey};
use futures::StreamExt as _;
use futures::stream::BoxStream;
use kube::api::{Api, DynamicObject, TypeMeta};
use kube::discovery::ApiResource;
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use prometheus_client::metrics::gauge::Gauge;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// What a watch saw of one of the watched objects.
#[derive(Debug, Clone)]
pub enum Seen {
    /// The object exists, in this form (listed, created or changed).
    Present(ObjectKey, Box<DynamicObject>),
    /// The object does not exist: deleted, missing from a (re)list, or no longer carrying the
    /// label the watch selects by.
    Absent(ObjectKey),
    /// A watch failed; it re-lists by itself after a backoff. `watch` names it.
    Error { watch: String, error: String },
}

/// Room in a subscriber's channel beyond one sighting per watched object. A subscriber that
/// falls further behind loses the sightings in between and gets the current state of all its
/// objects instead once it has room: sightings are states, not changes, so nothing is lost.
const SUBSCRIBER_SLACK: usize = 64;
/// How often a watch retries handing the current state to subscribers that fell behind.
const RESYNC_EVERY: Duration = Duration::from_secs(1);

/// (apiVersion, plural, namespace) of a shared watch; the namespace is empty for
/// cluster-scoped resources.
type WatchId = (String, String, String);

/// The process's shared watches, each running while it has subscribers.
#[derive(Clone, Default)]
pub struct WatchHub {
    // Std mutex: held only to look up, insert or remove, never across an await. Always
    // taken before a watch's own state lock.
    watches: Arc<Mutex<HashMap<WatchId, Arc<Shared>>>>,
    /// Set to the number of watches as it changes (`berth_release_watches`).
    gauge: Arc<Mutex<Gauge>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One shared watch: its state and the token that ends its task.
struct Shared {
    state: Mutex<State>,
    stop: CancellationToken,
}

struct State {
    describe: String,
    /// The resource's apiVersion and kind: a real API server sends list items without them,
    /// and readiness (kstatus) and drift checks go by kind.
    types: TypeMeta,
    /// The watched objects by name, once the first list has completed.
    objects: Option<HashMap<String, Arc<DynamicObject>>>,
    /// The list under way (between `Init` and `InitDone`).
    listing: HashMap<String, Arc<DynamicObject>>,
    subscribers: HashMap<u64, Subscriber>,
    /// Subscriber ids by the object names they watch.
    by_name: HashMap<String, Vec<u64>>,
    next_id: u64,
}

struct Subscriber {
    keys: BTreeMap<String, ObjectKey>,
    tx: mpsc::Sender<Seen>,
    /// Owed the current state of all its objects (new, or fell behind).
    resync: bool,
}

impl State {
    fn new(describe: String, types: TypeMeta) -> State {
        State {
            describe,
            types,
            objects: None,
            listing: HashMap::new(),
            subscribers: HashMap::new(),
            by_name: HashMap::new(),
            next_id: 0,
        }
    }

    /// The object with its apiVersion and kind filled in where the server left them out.
    fn typed(&self, mut o: DynamicObject) -> Arc<DynamicObject> {
        if o.types.as_ref().is_none_or(|t| t.kind.is_empty()) {
            o.types = Some(self.types.clone());
        }
        Arc::new(o)
    }

    fn handle(&mut self, event: Result<Event<DynamicObject>, watcher::Error>) {
        match event {
            Err(e) => {
                let error = e.to_string();
                let watch = self.describe.clone();
                for sub in self.subscribers.values_mut() {
                    send(
                        sub,
                        Seen::Error {
                            watch: watch.clone(),
                            error: error.clone(),
                        },
                    );
                }
            }
            Ok(Event::Init) => self.listing.clear(),
            Ok(Event::InitApply(o)) => {
                if let Some(name) = o.metadata.name.clone() {
                    let o = self.typed(o);
                    self.listing.insert(name, o);
                }
            }
            Ok(Event::InitDone) => {
                self.objects = Some(std::mem::take(&mut self.listing));
                for sub in self.subscribers.values_mut() {
                    sub.resync = true;
                }
                self.flush();
            }
            Ok(Event::Apply(o)) => {
                let Some(name) = o.metadata.name.clone() else {
                    return;
                };
                let o = self.typed(o);
                if let Some(objects) = &mut self.objects {
                    objects.insert(name.clone(), o.clone());
                }
                self.tell(&name, |key| {
                    Seen::Present(key.clone(), Box::new(DynamicObject::clone(&o)))
                });
            }
            Ok(Event::Delete(o)) => {
                let Some(name) = o.metadata.name.clone() else {
                    return;
                };
                if let Some(objects) = &mut self.objects {
                    objects.remove(&name);
                }
                self.tell(&name, |key| Seen::Absent(key.clone()));
            }
        }
    }

    /// Sends what `seen` makes of the object `name` to each subscriber watching it.
    fn tell(&mut self, name: &str, seen: impl Fn(&ObjectKey) -> Seen) {
        let Some(ids) = self.by_name.get(name) else {
            return;
        };
        for id in ids {
            if let Some(sub) = self.subscribers.get_mut(id)
                && let Some(key) = sub.keys.get(name)
            {
                let s = seen(key);
                send(sub, s);
            }
        }
    }

    /// Hands the current state of all their objects to the subscribers owed it, as far as
    /// their channels have room (once the first list is complete).
    fn flush(&mut self) {
        let Some(objects) = &self.objects else {
            return;
        };
        for sub in self.subscribers.values_mut() {
            if !sub.resync || sub.tx.capacity() < sub.keys.len() {
                continue;
            }
            sub.resync = false;
            for (name, key) in &sub.keys {
                let seen = match objects.get(name) {
                    Some(o) => Seen::Present(key.clone(), Box::new(DynamicObject::clone(o))),
                    None => Seen::Absent(key.clone()),
                };
                // Room was checked, and only this task sends.
                let _ = sub.tx.try_send(seen);
            }
        }
    }

    fn subscribe(&mut self, keys: BTreeMap<String, ObjectKey>, tx: mpsc::Sender<Seen>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        for name in keys.keys() {
            self.by_name.entry(name.clone()).or_default().push(id);
        }
        self.subscribers.insert(
            id,
            Subscriber {
                keys,
                tx,
                resync: true,
            },
        );
        self.flush();
        id
    }

    fn unsubscribe(&mut self, id: u64) {
        let Some(sub) = self.subscribers.remove(&id) else {
            return;
        };
        for name in sub.keys.keys() {
            if let Some(ids) = self.by_name.get_mut(name) {
                ids.retain(|i| *i != id);
                if ids.is_empty() {
                    self.by_name.remove(name);
                }
            }
        }
    }
}

/// Queues `seen` for `sub`, or, when its channel is full, owes it a resync instead.
fn send(sub: &mut Subscriber, seen: Seen) {
    if sub.resync {
        return;
    }
    if let Err(mpsc::error::TrySendError::Full(_)) = sub.tx.try_send(seen) {
        sub.resync = true;
    }
}

/// Runs one shared watch until it has no subscribers (or the stream ends).
async fn run(shared: Arc<Shared>, api: Api<DynamicObject>) {
    let config = watcher::Config::default().labels(&format!("{}={}", MANAGED_BY.0, MANAGED_BY.1));
    let stream = watcher::watcher(api, config).default_backoff();
    tokio::pin!(stream);
    let mut resync = tokio::time::interval(RESYNC_EVERY);
    loop {
        tokio::select! {
            () = shared.stop.cancelled() => return,
            event = stream.next() => match event {
                Some(event) => lock(&shared.state).handle(event),
                None => return,
            },
            _ = resync.tick() => lock(&shared.state).flush(),
        }
    }
}

/// One subscription to one shared watch; dropping it unsubscribes, and the last one to go
/// stops the watch.
struct Subscription {
    hub: WatchHub,
    id: WatchId,
    shared: Arc<Shared>,
    sub: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut watches = lock(&self.hub.watches);
        let mut state = lock(&self.shared.state);
        state.unsubscribe(self.sub);
        if state.subscribers.is_empty() {
            self.shared.stop.cancel();
            if watches
                .get(&self.id)
                .is_some_and(|w| Arc::ptr_eq(w, &self.shared))
            {
                watches.remove(&self.id);
                lock(&self.hub.gauge).set(watches.len() as i64);
            }
        }
    }
}

/// A subscriber's sightings from all its watches; unsubscribes when dropped.
struct Sightings {
    stream: futures::stream::SelectAll<tokio_stream::wrappers::ReceiverStream<Seen>>,
    _subscriptions: Vec<Subscription>,
}

impl futures::Stream for Sightings {
    type Item = Seen;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Seen>> {
        self.stream.poll_next_unpin(cx)
    }
}

impl WatchHub {
    /// Keeps `gauge` at the number of watches running from now on.
    pub fn count_in(&self, gauge: Gauge) {
        let watches = lock(&self.watches);
        gauge.set(watches.len() as i64);
        *lock(&self.gauge) = gauge;
    }

    /// Subscribes to the objects `keys` (by name) of the watch of `resource` in `namespace`,
    /// starting the watch when none runs.
    fn subscribe(
        &self,
        api: Api<DynamicObject>,
        resource: &ApiResource,
        namespace: &str,
        keys: BTreeMap<String, ObjectKey>,
    ) -> (Subscription, mpsc::Receiver<Seen>) {
        let (tx, rx) = mpsc::channel(keys.len() + SUBSCRIBER_SLACK);
        let id: WatchId = (
            resource.api_version.clone(),
            resource.plural.clone(),
            namespace.to_owned(),
        );
        let mut watches = lock(&self.watches);
        let shared = watches
            .entry(id.clone())
            .or_insert_with(|| {
                let describe = if namespace.is_empty() {
                    format!("{}/{}", resource.api_version, resource.kind)
                } else {
                    format!("{}/{} in {namespace}", resource.api_version, resource.kind)
                };
                let types = TypeMeta {
                    api_version: resource.api_version.clone(),
                    kind: resource.kind.clone(),
                };
                let shared = Arc::new(Shared {
                    state: Mutex::new(State::new(describe.clone(), types)),
                    stop: CancellationToken::new(),
                });
                // Not a trace of its own: the watch serves many flows.
                berth_runtime::spawn_in(
                    tracing::debug_span!(parent: None, "release.watch", watch = %describe),
                    run(shared.clone(), api),
                );
                shared
            })
            .clone();
        lock(&self.gauge).set(watches.len() as i64);
        let sub = lock(&shared.state).subscribe(keys, tx);
        drop(watches);
        (
            Subscription {
                hub: self.clone(),
                id,
                shared,
                sub,
            },
            rx,
        )
    }
}

impl Applier {
    /// Watches the given objects (keys resolved by [`Applier::key_for`]) through the process's
    /// shared watches. Every object is reported once its watch has listed (present or absent),
    /// then on every change. The watches back off and re-list by themselves after errors, so
    /// the stream only ends when dropped.
    pub fn watch_objects(&self, objects: &[(ObjectKey, ApiResource)]) -> BoxStream<'static, Seen> {
        let mut groups: BTreeMap<WatchId, (ApiResource, BTreeMap<String, ObjectKey>)> =
            BTreeMap::new();
        for (key, ar) in objects {
            let id = (
                ar.api_version.clone(),
                ar.plural.clone(),
                key.namespace.clone(),
            );
            groups
                .entry(id)
                .or_insert_with(|| (ar.clone(), BTreeMap::new()))
                .1
                .insert(key.name.clone(), key.clone());
        }
        let mut subscriptions = Vec::new();
        let mut receivers = Vec::new();
        for ((_, _, namespace), (resource, keys)) in groups {
            let api = self.api_in(&namespace, &resource);
            let (subscription, rx) = self.watches.subscribe(api, &resource, &namespace, keys);
            subscriptions.push(subscription);
            receivers.push(tokio_stream::wrappers::ReceiverStream::new(rx));
        }
        Sightings {
            stream: futures::stream::select_all(receivers),
            _subscriptions: subscriptions,
        }
        .boxed()
    }

    /// Keeps `gauge` at the number of shared watches running.
    pub fn count_watches_in(&self, gauge: Gauge) {
        self.watches.count_in(gauge);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn object(name: &str) -> DynamicObject {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        DynamicObject::new(name, &ar)
    }

    fn names(seen: &[Seen]) -> Vec<String> {
        seen.iter()
            .map(|s| match s {
                Seen::Present(k, _) => format!("+{}", k.name),
                Seen::Absent(k) => format!("-{}", k.name),
                Seen::Error { .. } => "!".into(),
            })
            .collect()
    }

    fn state() -> State {
        State::new(
            "v1/ConfigMap in ns".into(),
            TypeMeta {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
            },
        )
    }

    /// A subscriber to `names`, with a channel of `room` sightings.
    fn subscribe(s: &mut State, names: &[&str], room: usize) -> mpsc::Receiver<Seen> {
        let (tx, rx) = mpsc::channel(room);
        s.subscribe(names.iter().map(|n| (n.to_string(), key(n))).collect(), tx);
        rx
    }

    fn drain(rx: &mut mpsc::Receiver<Seen>) -> Vec<Seen> {
        std::iter::from_fn(|| rx.try_recv().ok()).collect()
    }

    fn list(s: &mut State, names: &[&str]) {
        s.handle(Ok(Event::Init));
        for n in names {
            s.handle(Ok(Event::InitApply(object(n))));
        }
        s.handle(Ok(Event::InitDone));
    }

    #[test]
    fn list_items_without_api_version_and_kind_are_reported_with_the_watch_s() {
        // A real API server leaves apiVersion and kind out of list items; kstatus needs them.
        let mut s = state();
        let mut rx = subscribe(&mut s, &["a"], 8);
        let mut bare = object("a");
        bare.types = None;
        s.handle(Ok(Event::Init));
        s.handle(Ok(Event::InitApply(bare)));
        s.handle(Ok(Event::InitDone));
        let seen = drain(&mut rx);
        let [Seen::Present(_, live)] = &seen[..] else {
            panic!("{seen:?}")
        };
        let types = live.types.as_ref().expect("types filled in");
        assert_eq!(
            (types.api_version.as_str(), types.kind.as_str()),
            ("v1", "ConfigMap")
        );
    }

    #[test]
    fn a_relist_reports_missing_objects_absent_and_ignores_others() {
        let mut s = state();
        let mut rx = subscribe(&mut s, &["a", "b"], 8);
        list(&mut s, &["a", "other"]);
        s.handle(Ok(Event::Apply(object("other"))));
        s.handle(Ok(Event::Delete(object("a"))));
        assert_eq!(names(&drain(&mut rx)), vec!["+a", "-b", "-a"]);
        // A re-list that finds `b` reports it present, and `a` (still gone) absent.
        list(&mut s, &["b"]);
        assert_eq!(names(&drain(&mut rx)), vec!["-a", "+b"]);
    }

    #[test]
    fn a_late_subscriber_starts_from_what_the_watch_knows() {
        let mut s = state();
        let mut first = subscribe(&mut s, &["a"], 8);
        list(&mut s, &["a", "b"]);
        s.handle(Ok(Event::Apply(object("c"))));
        // No list of its own: the state is handed over at once.
        let mut late = subscribe(&mut s, &["b", "c", "d"], 8);
        assert_eq!(names(&drain(&mut late)), vec!["+b", "+c", "-d"]);
        // Each hears only of its own objects.
        s.handle(Ok(Event::Delete(object("b"))));
        assert_eq!(names(&drain(&mut late)), vec!["-b"]);
        assert_eq!(names(&drain(&mut first)), vec!["+a"]);
        s.unsubscribe(0);
        s.unsubscribe(1);
        assert!(s.subscribers.is_empty() && s.by_name.is_empty());
    }

    #[test]
    fn a_subscriber_that_falls_behind_gets_the_current_state_when_it_has_room() {
        let mut s = state();
        // Room for its two objects and one more sighting.
        let mut rx = subscribe(&mut s, &["a", "b"], 3);
        list(&mut s, &["a", "b"]);
        s.handle(Ok(Event::Apply(object("a"))));
        // Full: these are not queued, a resync is owed instead.
        s.handle(Ok(Event::Delete(object("b"))));
        s.handle(Ok(Event::Apply(object("a"))));
        assert_eq!(names(&drain(&mut rx)), vec!["+a", "+b", "+a"]);
        s.flush();
        assert_eq!(names(&drain(&mut rx)), vec!["+a", "-b"]);
        // Caught up: changes flow again.
        s.handle(Ok(Event::Apply(object("b"))));
        assert_eq!(names(&drain(&mut rx)), vec!["+b"]);
    }
}
