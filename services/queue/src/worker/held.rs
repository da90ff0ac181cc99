//! The leases a worker currently holds, shared by its task runners and its heartbeat loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One running task's lease.
#[derive(Debug, Clone)]
struct Lease {
    fence: i64,
    /// Cancelled when the broker says the task must stop, when the lease is known to be lost,
    /// or at the end of the shutdown grace period.
    cancel: CancellationToken,
    /// Until when the broker has confirmed the lease, by our clock.
    valid_until: Instant,
}

/// Task id → lease. A std mutex: every critical section is a few map operations with no await.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeldLeases {
    inner: Arc<Mutex<HashMap<String, Lease>>>,
}

impl HeldLeases {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Lease>> {
        // A panic while holding this lock cannot leave the map half-updated (single inserts and
        // removes), so a poisoned lock is safe to keep using.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn insert(
        &self,
        task_id: String,
        fence: i64,
        ttl: Duration,
        sent_at: Instant,
    ) -> CancellationToken {
        let cancel = CancellationToken::new();
        let lease = Lease {
            fence,
            cancel: cancel.clone(),
            valid_until: sent_at + ttl,
        };
        self.map().insert(task_id, lease);
        cancel
    }

    pub fn remove(&self, task_id: &str, fence: i64) {
        let mut map = self.map();
        if map.get(task_id).is_some_and(|l| l.fence == fence) {
            map.remove(task_id);
        }
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// (task id, fence) of every lease, for a heartbeat.
    pub fn snapshot(&self) -> Vec<(String, i64)> {
        self.map()
            .iter()
            .map(|(id, l)| (id.clone(), l.fence))
            .collect()
    }

    /// Records that the broker extended these leases at `sent_at` for `ttl`.
    pub fn confirm(&self, leases: &[(String, i64)], ttl: Duration, sent_at: Instant) {
        let mut map = self.map();
        for (id, fence) in leases {
            if let Some(lease) = map.get_mut(id).filter(|l| l.fence == *fence) {
                lease.valid_until = sent_at + ttl;
            }
        }
    }

    /// Cancels the task holding `task_id` with `fence` (a lease the broker says is over).
    /// True when this call cancelled it (not when it already was).
    pub fn cancel(&self, task_id: &str, fence: i64) -> bool {
        match self.map().get(task_id) {
            Some(lease) if lease.fence == fence && !lease.cancel.is_cancelled() => {
                lease.cancel.cancel();
                true
            }
            _ => false,
        }
    }

    /// Cancels every task whose lease ran out without a confirmed heartbeat: the broker may
    /// already have handed it to another worker. Returns the ids.
    pub fn cancel_expired(&self, now: Instant) -> Vec<String> {
        self.map()
            .iter()
            .filter(|(_, l)| l.valid_until <= now && !l.cancel.is_cancelled())
            .map(|(id, l)| {
                l.cancel.cancel();
                id.clone()
            })
            .collect()
    }

    pub fn cancel_all(&self) {
        for lease in self.map().values() {
            lease.cancel.cancel();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_needs_the_matching_fence() {
        let held = HeldLeases::default();
        let token = held.insert("t".into(), 2, Duration::from_secs(10), Instant::now());
        assert!(!held.cancel("t", 1));
        assert!(!token.is_cancelled());
        assert!(held.cancel("t", 2));
        assert!(token.is_cancelled());
        assert!(!held.cancel("t", 2), "reported once");
    }

    #[test]
    fn unconfirmed_leases_expire() {
        let held = HeldLeases::default();
        let start = Instant::now();
        let old = held.insert("old".into(), 1, Duration::from_secs(1), start);
        let fresh = held.insert("fresh".into(), 1, Duration::from_secs(1), start);
        held.confirm(&[("fresh".into(), 1)], Duration::from_secs(5), start);
        let expired = held.cancel_expired(start + Duration::from_secs(2));
        assert_eq!(expired, vec!["old".to_owned()]);
        assert!(old.is_cancelled());
        assert!(!fresh.is_cancelled());
    }
}
