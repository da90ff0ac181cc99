//! A release's health after its package reached Running, as its drift watch sees it: every
//! watch event re-computes that object's kstatus (issue #31.4), and drift repair that stops
//! because the release is no longer berth's deployed one says so (#31.5). Each change of the
//! release's health is sent to lifecycle (`ReportReleaseHealth`), which sets the package's
//! `Ready` condition from it while the package is Running.
//!
//! Sending is decoupled from the watches: a report waits in a map keyed by package, the newest
//! health of a package replacing an unsent older one, so the map holds at most one entry per
//! watched release and a slow lifecycle never holds a watch up. One task sends them.

use super::*;
use std::collections::BTreeMap;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Objects named in a NotReady message; the rest are counted.
const NAMED_OBJECTS: usize = 3;
/// Wait before sending a report again after lifecycle could not be reached.
const RETRY: Duration = Duration::from_secs(2);
/// Wait before offering lifecycle a report it did not apply (the package was not Running yet:
/// its Run is still reporting) once more, and how many times at most.
const NOT_RUNNING_RETRY: Duration = Duration::from_secs(5);
const NOT_RUNNING_ATTEMPTS: u32 = 24;

/// What the drift watch says of a release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Every object is Current.
    Ready,
    /// Some object is not Current: the message names them, with kstatus's reason.
    NotReady(String),
    /// Drift repair stopped: the message names the revision and who wrote it.
    RepairStopped(String),
    /// Some object now belongs to another release (its annotations say so): it is neither
    /// repaired nor counted as this release's; the message names it and its owner.
    NotOwned(String),
}

impl Health {
    pub fn ready(&self) -> bool {
        matches!(self, Health::Ready)
    }

    /// The reason of the package's `Ready` condition.
    pub fn reason(&self) -> &'static str {
        match self {
            Health::Ready => "Ready",
            Health::NotReady(_) => "NotReady",
            Health::RepairStopped(_) => "DriftRepairStopped",
            Health::NotOwned(_) => "NotOwned",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Health::Ready => "",
            Health::NotReady(m) | Health::RepairStopped(m) | Health::NotOwned(m) => m,
        }
    }
}

/// The kstatus of each object of one watched revision.
pub(super) struct Readiness {
    /// In the revision's order; `None` until the watch showed the object.
    outcomes: Vec<(ObjectKey, Option<kstatus::Outcome>)>,
    /// The objects whose drift check found them another release's, with why.
    taken: BTreeMap<ObjectKey, String>,
    /// The health last decided (none before every object was seen).
    last: Option<Health>,
}

impl Readiness {
    pub fn new(keys: impl IntoIterator<Item = ObjectKey>) -> Readiness {
        Readiness {
            outcomes: keys.into_iter().map(|k| (k, None)).collect(),
            taken: BTreeMap::new(),
            last: None,
        }
    }

    /// Records what the watch showed of `key`; the release's health when every object has
    /// been seen and it differs from the last one decided.
    pub fn observe(&mut self, key: &ObjectKey, outcome: kstatus::Outcome) -> Option<Health> {
        let slot = self.outcomes.iter_mut().find(|(k, _)| k == key)?;
        slot.1 = Some(outcome);
        self.decide()
    }

    /// Records what the drift check found of `key`'s owner: `Some(why)` when another release
    /// owns it, `None` when this one does; the release's health when that changes it.
    pub fn owned(&mut self, key: &ObjectKey, taken: Option<String>) -> Option<Health> {
        let changed = match taken {
            Some(why) => self.taken.insert(key.clone(), why.clone()).as_ref() != Some(&why),
            None => self.taken.remove(key).is_some(),
        };
        if changed { self.decide() } else { None }
    }

    /// The release's health from what is known; `None` when not every object was seen yet or
    /// it is the one last decided. An object another release took outweighs readiness.
    fn decide(&mut self) -> Option<Health> {
        if !self.taken.is_empty() {
            let message = some_named(self.taken.values().cloned(), "objects");
            return self.decided(Health::NotOwned(format!(
                "{message} (berth no longer repairs it)"
            )));
        }
        let mut not_ready = Vec::new();
        for (k, o) in &self.outcomes {
            match o {
                None => return None,
                Some(o) if o.status == ObjectStatus::Current => {}
                Some(o) => not_ready.push((k, o)),
            }
        }
        let health = if not_ready.is_empty() {
            Health::Ready
        } else {
            let described = not_ready.iter().map(|(k, o)| describe(k, o));
            Health::NotReady(some_named(described, "objects not ready"))
        };
        self.decided(health)
    }

    fn decided(&mut self, health: Health) -> Option<Health> {
        if self.last.as_ref() == Some(&health) {
            return None;
        }
        self.last = Some(health.clone());
        Some(health)
    }
}

/// The first `NAMED_OBJECTS` of `named`, joined, and how many more `what` there are.
/// (Only those are made: a release may have many objects, and this runs on every watch event.)
fn some_named(named: impl ExactSizeIterator<Item = String>, what: &str) -> String {
    let more = named.len().saturating_sub(NAMED_OBJECTS);
    let mut named: Vec<String> = named.take(NAMED_OBJECTS).collect();
    if more > 0 {
        named.push(format!("and {more} more {what}"));
    }
    named.join("; ")
}

/// `apps/v1/Deployment ns/web: InProgress (reason): message`, the message cut at 300 bytes.
fn describe(key: &ObjectKey, o: &kstatus::Outcome) -> String {
    let mut message = o.message.clone();
    if message.len() > 300 {
        let mut cut = 300;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push('…');
    }
    let reason = if o.reason.is_empty() {
        String::new()
    } else {
        format!(" ({})", o.reason)
    };
    format!("{key}: {:?}{reason}: {message}", o.status)
}

/// The package key of release `name` in `namespace` (lifecycle's key).
pub(super) fn package_key(name: &str, namespace: &str) -> String {
    match berth_clients::scope::PackageScope::of_release(name, namespace) {
        berth_clients::scope::PackageScope::Module { name } => name,
        berth_clients::scope::PackageScope::App { name, namespace } => {
            format!("{namespace}.{name}")
        }
    }
}

struct Pending {
    health: Health,
    /// Times lifecycle did not apply it (the package was not Running).
    not_applied: u32,
    /// Its place among the package's reports: one offered again later goes back only if it is
    /// still the newest (an older health must not overwrite a newer one lifecycle applied).
    seq: u64,
}

/// Sends releases' health to lifecycle, newest per package.
#[derive(Clone)]
pub struct HealthReporter {
    // A std mutex: held only to insert or take entries, never across an await.
    pending: Arc<Mutex<HashMap<String, Pending>>>,
    /// Per package, the sequence number of its newest report.
    latest: Arc<Mutex<HashMap<String, u64>>>,
    next: Arc<std::sync::atomic::AtomicU64>,
    wake: Arc<Notify>,
}

impl HealthReporter {
    /// A reporter sending to `lifecycle` until `shutdown`.
    pub fn start(lifecycle: berth_clients::Lifecycle, shutdown: CancellationToken) -> Self {
        let reporter = HealthReporter {
            pending: Arc::default(),
            latest: Arc::default(),
            next: Arc::default(),
            wake: Arc::default(),
        };
        berth_runtime::spawn_in(
            tracing::info_span!(parent: None, "release.health"),
            reporter.clone().send_all(lifecycle, shutdown),
        );
        reporter
    }

    /// Queues `health` of the package `key`, replacing what was not sent yet.
    pub fn report(&self, key: String, health: Health) {
        let seq = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.latest).insert(key.clone(), seq);
        lock(&self.pending).insert(
            key,
            Pending {
                health,
                not_applied: 0,
                seq,
            },
        );
        self.wake.notify_one();
    }

    async fn send_all(self, lifecycle: berth_clients::Lifecycle, shutdown: CancellationToken) {
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.wake.notified() => {}
            }
            let batch: Vec<(String, Pending)> = lock(&self.pending).drain().collect();
            for (key, p) in batch {
                let request = berth_proto::lifecycle::ReleaseHealth {
                    key: key.clone(),
                    ready: p.health.ready(),
                    reason: p.health.reason().to_owned(),
                    message: p.health.message().to_owned(),
                };
                match lifecycle.clone().report_release_health(request).await {
                    Ok(answer) if answer.get_ref().applied || p.health.ready() => {}
                    Ok(_) if p.not_applied + 1 >= NOT_RUNNING_ATTEMPTS => {
                        tracing::debug!(package.key = %key, "release health not applied: the package did not reach Running");
                    }
                    Ok(_) => self.later(
                        key,
                        Pending {
                            not_applied: p.not_applied + 1,
                            ..p
                        },
                        NOT_RUNNING_RETRY,
                    ),
                    Err(status) => {
                        tracing::debug!(package.key = %key, error = %status, "reporting release health failed; retrying");
                        self.later(key, p, RETRY);
                    }
                }
            }
        }
    }

    /// Offers `p` again after `wait`, unless a newer report of the package came meanwhile.
    fn later(&self, key: String, p: Pending, wait: Duration) {
        let this = self.clone();
        berth_runtime::spawn_in(tracing::Span::current(), async move {
            tokio::time::sleep(wait).await;
            if lock(&this.latest).get(&key) != Some(&p.seq) {
                return;
            }
            if let std::collections::hash_map::Entry::Vacant(slot) = lock(&this.pending).entry(key)
            {
                slot.insert(p);
                this.wake.notify_one();
            }
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn outcome(status: ObjectStatus, message: &str) -> kstatus::Outcome {
        kstatus::Outcome {
            status,
            reason: String::new(),
            message: message.into(),
        }
    }

    /// Nothing is decided before every object was seen; then each change is reported once,
    /// naming the objects not ready, and recovery reports Ready again.
    #[test]
    fn health_follows_every_object_and_reports_changes_once() {
        let mut r = Readiness::new([key("a"), key("b")]);
        assert_eq!(
            r.observe(&key("a"), outcome(ObjectStatus::Current, "")),
            None
        );
        assert_eq!(
            r.observe(&key("b"), outcome(ObjectStatus::Current, "")),
            Some(Health::Ready)
        );
        assert_eq!(
            r.observe(&key("b"), outcome(ObjectStatus::Current, "")),
            None
        );
        let lost = r.observe(
            &key("b"),
            outcome(ObjectStatus::InProgress, "Available: 1/2"),
        );
        assert_eq!(
            lost,
            Some(Health::NotReady(
                "apps/v1/Deployment ns/b: InProgress: Available: 1/2".into()
            ))
        );
        assert_eq!(r.reason_of_last(), Some("NotReady"));
        assert_eq!(
            r.observe(&key("b"), outcome(ObjectStatus::Current, "")),
            Some(Health::Ready)
        );
        assert_eq!(
            r.observe(&key("other"), outcome(ObjectStatus::Failed, "")),
            None
        );
    }

    #[test]
    fn many_objects_not_ready_are_counted_past_the_first_three() {
        let keys: Vec<ObjectKey> = (0..5).map(|i| key(&format!("d{i}"))).collect();
        let mut r = Readiness::new(keys.clone());
        let mut last = None;
        for k in &keys {
            last = r.observe(k, outcome(ObjectStatus::NotFound, "Resource not found"));
        }
        let Some(Health::NotReady(m)) = last else {
            panic!("{last:?}")
        };
        assert!(m.contains("ns/d2") && !m.contains("ns/d3"), "{m}");
        assert!(m.ends_with("and 2 more objects not ready"), "{m}");
    }

    /// An object another release took outweighs readiness until it is given back; each
    /// change is reported once.
    #[test]
    fn a_taken_object_is_reported_until_given_back() {
        let mut r = Readiness::new([key("d1"), key("d2")]);
        r.observe(&key("d1"), outcome(ObjectStatus::Current, ""));
        assert_eq!(
            r.observe(&key("d2"), outcome(ObjectStatus::Current, "")),
            Some(Health::Ready)
        );
        let taken = r.owned(&key("d2"), Some("d2 belongs to release ns/other".into()));
        let Some(Health::NotOwned(m)) = taken else {
            panic!("{taken:?}")
        };
        assert!(m.contains("d2 belongs to release ns/other"), "{m}");
        assert_eq!(
            r.owned(&key("d2"), Some("d2 belongs to release ns/other".into())),
            None
        );
        assert_eq!(
            r.observe(&key("d1"), outcome(ObjectStatus::InProgress, "rolling")),
            None
        );
        assert_eq!(r.owned(&key("d1"), None), None, "d1 was never taken");
        let back = r.owned(&key("d2"), None);
        assert!(
            matches!(back, Some(Health::NotReady(ref m)) if m.contains("ns/d1")),
            "{back:?}"
        );
    }

    impl Readiness {
        fn reason_of_last(&self) -> Option<&'static str> {
            self.last.as_ref().map(Health::reason)
        }
    }
}
