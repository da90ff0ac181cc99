//! Ownership through `coordination.k8s.io/v1` Leases, shared by the services that run as
//! replicas: hookevent and release share their keys out in shards, each shard owned by one
//! replica at a time through a Lease (`shards`: the shard function, the shard and member Leases
//! and the balancing `Coordinator`); hookevent watches for its shards' packages, release
//! repairs the drift of its shards' releases.
//!
//! The rules are client-go's leader election, per Lease: the holder renews the Lease every
//! `renew` period; another replica takes it over only when it has watched the Lease record stay
//! unchanged for its `leaseDurationSeconds` (measured on the replica's own clock, so the
//! replicas' clocks need not agree), or when it has no holder. Every write is a create or a
//! replace carrying the `resourceVersion` last seen, so of two replicas racing for one Lease
//! the API server lets exactly one win (the other gets 409 Conflict and stays a candidate). A
//! holder within its renew deadline renews by replacing the record it last wrote, without
//! reading it first (one request per renewal instead of two); a 409 sends it back to reading.
//! kube-rs has no per-object leader elector (its `runtime` has none, and a single elector per
//! process would not do: these are many Leases per replica), so the loop is written here over
//! its `Api<Lease>`.

pub mod shards;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::{DeleteParams, ObjectMeta, PostParams, Preconditions};

/// Bound on one request about a Lease.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest replica identity kept (a Lease's holderIdentity is free text; keep it readable).
pub const MAX_IDENTITY_LEN: usize = 128;

/// How a replica takes part in Leases.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// This replica's identity, written as the holderIdentity of the Leases it holds.
    pub identity: String,
    /// How long a Lease stays valid after its last renewal (`leaseDurationSeconds`).
    pub duration: Duration,
    /// How often a holder renews, and a candidate tries again.
    pub renew: Duration,
}

impl LeaseConfig {
    /// Identity `identity`, the default timings (15 s valid, renewed every 5 s).
    pub fn new(identity: String) -> LeaseConfig {
        LeaseConfig {
            identity,
            duration: Duration::from_secs(15),
            renew: Duration::from_secs(5),
        }
    }

    /// Checks the configuration; the error names what is wrong.
    pub fn check(&self) -> Result<(), String> {
        if self.identity.is_empty() || self.identity.len() > MAX_IDENTITY_LEN {
            return Err(format!(
                "replica id {:?} must be 1-{MAX_IDENTITY_LEN} characters",
                self.identity
            ));
        }
        if self.identity.chars().any(char::is_control) {
            return Err(format!(
                "replica id {:?} must not hold control characters",
                self.identity
            ));
        }
        if self.renew.is_zero() || self.renew >= self.duration {
            return Err(format!(
                "the lease renew period ({:?}) must be positive and shorter than the lease duration ({:?})",
                self.renew, self.duration
            ));
        }
        if self.duration > Duration::from_secs(i32::MAX as u64) {
            return Err(format!("lease duration {:?} is too long", self.duration));
        }
        Ok(())
    }

    /// The renew deadline: how long after its last renewal a holder may still act as the
    /// holder (one renew period short of the duration, so it stops before anyone can take
    /// the Lease over).
    pub fn renew_deadline(&self) -> Duration {
        self.duration.saturating_sub(self.renew)
    }
}

/// The host's name (`fallback` when it has none) and a random suffix: unique per process,
/// readable in `kubectl get lease`.
pub fn default_identity(fallback: &str) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| fallback.to_owned());
    let host: String = host.chars().filter(|c| !c.is_control()).take(100).collect();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}", &suffix[..8])
}

/// What an attempt to acquire or renew a Lease found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// This replica holds the Lease.
    Held,
    /// Another replica holds it.
    Other,
    /// There is no Lease and this replica may not create one.
    Gone,
}

/// Another replica holding a Lease, as last read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub identity: String,
    /// The Lease's annotations (what the holder advertises there).
    pub annotations: BTreeMap<String, String>,
}

/// One replica's view of one Lease.
pub struct Elector {
    api: Api<Lease>,
    name: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    config: LeaseConfig,
    /// The Lease record as last seen held by another replica, and when it was first seen so.
    observed: Option<(String, Instant)>,
    /// When this replica last held the Lease, renewed.
    renewed: Option<Instant>,
    /// The other replica last seen holding the Lease.
    holder: Option<Holder>,
    /// The Lease as this replica last wrote it, while it holds it: a renewal replaces it
    /// without reading it first (its resourceVersion makes a write by anyone else since a
    /// 409, and the renewal then reads), halving the requests every held Lease costs.
    written: Option<Lease>,
}

fn conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

async fn bounded<T>(call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, kube::Error> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .unwrap_or_else(|_| {
            Err(kube::Error::Service(
                "the API server did not answer a Lease request in time".into(),
            ))
        })
}

impl Elector {
    /// The Lease `namespace/name`, created (when asked to) and kept with `labels`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        name: &str,
        labels: BTreeMap<String, String>,
        config: LeaseConfig,
    ) -> Self {
        Elector {
            api: Api::namespaced(client, namespace),
            name: name.to_owned(),
            labels,
            annotations: BTreeMap::new(),
            config,
            observed: None,
            renewed: None,
            holder: None,
            written: None,
        }
    }

    /// Writes `annotations` on the Lease whenever this replica acquires or renews it (what
    /// the holder advertises to the others, e.g. its endpoint).
    pub fn with_annotations(mut self, annotations: BTreeMap<String, String>) -> Self {
        self.annotations = annotations;
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// True while the last renewal is recent enough that no other replica can have taken the
    /// Lease over (the renew deadline: one renew period short of the duration).
    pub fn still_held(&self) -> bool {
        self.renewed
            .is_some_and(|t| t.elapsed() < self.config.renew_deadline())
    }

    /// When the renew deadline passes (`None`: not held).
    pub fn held_until(&self) -> Option<Instant> {
        self.renewed.map(|t| t + self.config.renew_deadline())
    }

    /// The other replica last seen holding the Lease (`None` when this one holds it, or it
    /// had no holder).
    pub fn holder(&self) -> Option<&Holder> {
        self.holder.as_ref()
    }

    /// Acquires or renews the Lease: `Ok(Held)` when this replica holds it now, `Ok(Other)`
    /// when another replica does (or won a race for it). A missing Lease is created only
    /// with `create`; else it is `Gone`.
    pub async fn acquire(&mut self, create: bool) -> Result<Claim, kube::Error> {
        // A conflict while the Lease is this replica's own (an earlier renewal racing this
        // one) is retried once with the fresh record.
        for _ in 0..2 {
            match self.attempt(create).await {
                Err(e) if conflict(&e) => continue,
                other => return other,
            }
        }
        Ok(Claim::Other)
    }

    async fn attempt(&mut self, create: bool) -> Result<Claim, kube::Error> {
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let duration = i32::try_from(self.config.duration.as_secs()).unwrap_or(i32::MAX);
        if self.still_held()
            && let Some(mut lease) = self.written.take()
        {
            let spec = lease.spec.get_or_insert_default();
            spec.renew_time = Some(now);
            spec.lease_duration_seconds = Some(duration);
            // A 409 (someone wrote it since) leaves `written` empty: the retry reads.
            let renewed =
                bounded(self.api.replace(&self.name, &PostParams::default(), &lease)).await?;
            self.written = Some(renewed);
            return Ok(self.held());
        }
        self.written = None;
        let Some(mut lease) = bounded(self.api.get_opt(&self.name)).await? else {
            self.holder = None;
            if !create {
                return Ok(Claim::Gone);
            }
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    labels: Some(self.labels.clone()),
                    annotations: (!self.annotations.is_empty()).then(|| self.annotations.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match bounded(self.api.create(&PostParams::default(), &lease)).await {
                Ok(created) => {
                    self.written = Some(created);
                    Ok(self.held())
                }
                // Another replica created it first.
                Err(e) if conflict(&e) => Ok(Claim::Other),
                Err(e) => Err(e),
            };
        };
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        let annotations = lease.metadata.annotations.clone().unwrap_or_default();
        let spec = lease.spec.get_or_insert_default();
        let holder = spec.holder_identity.clone().unwrap_or_default();
        if holder != self.config.identity {
            if !holder.is_empty() {
                self.holder = Some(Holder {
                    identity: holder.clone(),
                    annotations,
                });
                let valid = spec
                    .lease_duration_seconds
                    .and_then(|s| u64::try_from(s).ok())
                    .map_or(self.config.duration, Duration::from_secs);
                match &self.observed {
                    Some((seen, since)) if *seen == version => {
                        if since.elapsed() < valid {
                            return Ok(Claim::Other);
                        }
                    }
                    _ => {
                        self.observed = Some((version, Instant::now()));
                        self.renewed = None;
                        return Ok(Claim::Other);
                    }
                }
                tracing::info!(lease = %self.name, previous = %holder, "lease expired; taking it over");
            }
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.holder_identity = Some(self.config.identity.clone());
        spec.lease_duration_seconds = Some(duration);
        spec.renew_time = Some(now);
        let labels = lease.metadata.labels.get_or_insert_default();
        labels.extend(self.labels.clone());
        if !self.annotations.is_empty() {
            let annotations = lease.metadata.annotations.get_or_insert_default();
            annotations.extend(self.annotations.clone());
        }
        // `replace` sends the resourceVersion read above: a concurrent writer makes it 409.
        let written = bounded(self.api.replace(&self.name, &PostParams::default(), &lease)).await?;
        self.written = Some(written);
        Ok(self.held())
    }

    fn held(&mut self) -> Claim {
        self.observed = None;
        self.holder = None;
        self.renewed = Some(Instant::now());
        Claim::Held
    }

    /// Gives the Lease up (no holder) if this replica holds it, so another takes over at once.
    pub async fn release(&mut self) {
        self.renewed = None;
        self.written = None;
        let given_up = async {
            let Some(mut lease) = bounded(self.api.get_opt(&self.name)).await? else {
                return Ok(());
            };
            let spec = lease.spec.get_or_insert_default();
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(());
            }
            spec.holder_identity = None;
            bounded(self.api.replace(&self.name, &PostParams::default(), &lease))
                .await
                .map(drop)
        };
        if let Err(e) = given_up.await {
            tracing::debug!(lease = %self.name, error = %e, "giving the lease up failed");
        }
    }

    /// Deletes the Lease if this replica holds it (what it owned is gone).
    pub async fn delete_if_held(&mut self) {
        self.renewed = None;
        self.written = None;
        let deleted = async {
            let Some(lease) = bounded(self.api.get_opt(&self.name)).await? else {
                return Ok(());
            };
            let holder = lease
                .spec
                .as_ref()
                .and_then(|s| s.holder_identity.as_deref());
            if holder != Some(self.config.identity.as_str()) {
                return Ok(());
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: lease.metadata.resource_version.clone(),
                    uid: lease.metadata.uid.clone(),
                }),
                ..DeleteParams::default()
            };
            bounded(self.api.delete(&self.name, &params))
                .await
                .map(drop)
        };
        if let Err(e) = deleted.await {
            tracing::debug!(lease = %self.name, error = %e, "deleting the lease failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_are_unique_and_checked() {
        let (a, b) = (default_identity("x"), default_identity("x"));
        assert_ne!(a, b);
        let good = LeaseConfig::new(a);
        assert!(good.check().is_ok());
        let bad = LeaseConfig {
            renew: Duration::from_secs(15),
            ..good.clone()
        };
        assert!(bad.check().unwrap_err().contains("renew period"));
        let bad = LeaseConfig {
            identity: String::new(),
            ..good
        };
        assert!(bad.check().unwrap_err().contains("replica id"));
    }
}
