//! One reconcile of an Application or a Module: its finalizer, the change it asks of
//! lifecycle (as its owner), its status and its events.

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_proto::v1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Api, ResourceExt as _};

use crate::client::CallError;
use crate::error::Error;
use crate::events::{Kind, Recorder, Subject};
use crate::front::{Desired, Front};
use crate::packages::Packages;
use crate::resources::{FINALIZER, PackageStatus};
use crate::status::{self, Reason, Verdict};

/// How often a converged resource is looked at again without any change.
const RESYNC: Duration = Duration::from_secs(300);
/// How soon a refused Remove is tried again (its dependents may be gone).
const BLOCKED_RETRY: Duration = Duration::from_secs(15);

/// What every reconcile shares.
pub struct Context {
    pub client: kube::Client,
    pub lifecycle: crate::client::Lifecycle,
    pub packages: Packages,
    pub recorder: Recorder,
    pub accepted: Accepted,
}

/// How long an accepted spec is taken as such without the resource's status or lifecycle's
/// Watch showing it: long enough for both to catch up, short enough that a resync asks again.
const ACCEPTED_FOR: Duration = Duration::from_secs(30);
/// Most accepted specs remembered; past it, all are forgotten at once (they are then sent
/// again, which changes nothing).
const MAX_ACCEPTED: usize = 16_384;

/// The specs this controller had lifecycle accept a moment ago: resource uid → its generation
/// and the package generation lifecycle answered. A reconcile right after an install (the
/// finalizer's or the status's own event) may see the resource before its status and the
/// package before lifecycle's Watch has it; without this it sent the same Update again (0.8
/// more per package in a burst of 1,000 Applications).
#[derive(Default)]
pub struct Accepted(std::sync::Mutex<std::collections::HashMap<String, (i64, i64, Instant)>>);

impl Accepted {
    fn map(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, (i64, i64, Instant)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers that `uid`'s `generation` was accepted as package generation `package`.
    pub fn put(&self, uid: &str, generation: i64, package: i64, now: Instant) {
        let mut map = self.map();
        if map.len() >= MAX_ACCEPTED {
            map.clear();
        }
        map.insert(uid.to_owned(), (generation, package, now));
    }

    /// The package generation `uid`'s `generation` was accepted as, if that was within
    /// [`ACCEPTED_FOR`] of `now`.
    pub fn get(&self, uid: &str, generation: i64, now: Instant) -> Option<i64> {
        self.map()
            .get(uid)
            .filter(|(g, _, at)| {
                *g == generation && now.saturating_duration_since(*at) < ACCEPTED_FOR
            })
            .map(|(_, package, _)| *package)
    }
}

fn api<K: Front>(client: &kube::Client, obj: &K) -> Api<K> {
    obj.api(client.clone())
}

fn subject<K: Front>(obj: &K) -> Subject {
    Subject {
        kind: K::KIND,
        name: obj.name_any(),
        namespace: obj.namespace().unwrap_or_default(),
        uid: obj.uid().unwrap_or_default(),
        resource_version: obj.resource_version(),
    }
}

/// Now, to the second (as the API server stores times), so a status read back equals the
/// one written.
pub(crate) fn now() -> Time {
    let now = k8s_openapi::jiff::Timestamp::now();
    Time(k8s_openapi::jiff::Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// The reconcile kube's controller runs for each trigger of a resource: work the cluster
/// started, so a trace of its own (`controller.reconcile`, a root) that lifecycle's calls join.
pub async fn reconcile<K: Front>(obj: Arc<K>, cx: Arc<Context>) -> Result<Action, Error> {
    let span = tracing::info_span!(
        parent: None,
        "controller.reconcile",
        kind = K::KIND,
        name = %obj.name_any(),
        namespace = obj.namespace().unwrap_or_default(),
    );
    tracing::Instrument::instrument(reconcile_one(obj.as_ref(), &cx), span).await
}

async fn reconcile_one<K: Front>(obj: &K, cx: &Arc<Context>) -> Result<Action, Error> {
    let cx = cx.clone();
    let key = obj.key();
    if obj.meta().deletion_timestamp.is_some() {
        return deleting(obj, &cx, &key).await;
    }
    if !obj.finalizers().iter().any(|f| f == FINALIZER) {
        let mut finalizers = obj.finalizers().to_vec();
        finalizers.push(FINALIZER.to_owned());
        set_finalizers(&cx, obj, finalizers).await?;
    }
    let mut package = cx.packages.get(&key);
    let ours = package.as_ref().map(|p| p.owner == obj.owner());
    let generation = obj.meta().generation.unwrap_or_default();
    let previous = obj.status().cloned();
    let verdict = if obj.suspend() {
        if let Some(p) = package
            .as_ref()
            .filter(|p| ours == Some(true) && !p.suspended)
        {
            suspend(&cx, obj, p, true).await?;
            cx.recorder
                .publish(
                    &subject(obj),
                    Kind::Normal,
                    "Suspended",
                    "no new generations and no drift repair until resumed",
                )
                .await;
            package = refreshed(&cx, obj).await?;
        }
        Verdict::Suspended { generation }
    } else {
        if let Some(p) = package
            .as_ref()
            .filter(|p| ours == Some(true) && p.suspended)
        {
            suspend(&cx, obj, p, false).await?;
            cx.recorder
                .publish(
                    &subject(obj),
                    Kind::Normal,
                    "Resumed",
                    "the package takes new generations again",
                )
                .await;
            package = refreshed(&cx, obj).await?;
        }
        match obj.desired() {
            Desired::Incomplete(message) => Verdict::Refused {
                generation,
                reason: Reason::Incomplete,
                message,
            },
            Desired::Absent => {
                let owned_elsewhere = package
                    .as_ref()
                    .filter(|_| ours == Some(false))
                    .map(owner_text);
                let to_remove =
                    ours == Some(true) && package.as_ref().is_some_and(|p| p.phase != "Removing");
                if let Some(by) = owned_elsewhere {
                    Verdict::Refused {
                        generation,
                        reason: Reason::OwnedElsewhere,
                        message: format!(
                            "package {key} belongs to {by}: this Module does not remove it"
                        ),
                    }
                } else {
                    if to_remove {
                        remove(&cx, obj).await?;
                        cx.recorder
                            .publish(
                                &subject(obj),
                                Kind::Normal,
                                "Disabled",
                                "enabled: false; removing the module",
                            )
                            .await;
                        package = refreshed(&cx, obj).await?;
                    }
                    Verdict::Disabled { generation }
                }
            }
            Desired::Install(update) => {
                let accepted = previous.as_ref().and_then(|s| {
                    let g = s.package_generation?;
                    let current = package.as_ref()?;
                    (s.observed_generation == Some(generation)
                        && ours == Some(true)
                        && current.generation == g)
                        .then_some(g)
                });
                // Just accepted here, and lifecycle's Watch shows no other generation (or not
                // yet the package at all).
                let uid = obj.uid().unwrap_or_default();
                let accepted = accepted.or_else(|| {
                    let g = cx.accepted.get(&uid, generation, Instant::now())?;
                    package
                        .as_ref()
                        .is_none_or(|p| ours == Some(true) && p.generation == g)
                        .then_some(g)
                });
                match accepted {
                    Some(g) => Verdict::Accepted {
                        generation,
                        package_generation: g,
                    },
                    None => install(&cx, obj, update, generation).await?,
                }
            }
        }
    };
    let status = status::compute(&verdict, package.as_ref(), previous.as_ref(), &now());
    announce(
        &cx.recorder,
        obj,
        previous.as_ref(),
        &status,
        package.as_ref(),
    )
    .await;
    if previous.as_ref() != Some(&status) {
        write_status(&cx, obj, &status).await?;
    }
    Ok(Action::requeue(RESYNC))
}

/// Deletion: Remove the package (once), keep the finalizer until lifecycle has forgotten it.
async fn deleting<K: Front>(obj: &K, cx: &Context, key: &str) -> Result<Action, Error> {
    if !obj.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let previous = obj.status().cloned();
    // Asked, not cached: the finalizer goes only once lifecycle has no such package.
    let package = refreshed(cx, obj).await?;
    let gone = package.is_none();
    let Some(p) = package.filter(|p| p.owner == obj.owner()) else {
        // Gone, or never this resource's: nothing to wait for.
        let rest: Vec<String> = obj
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        set_finalizers(cx, obj, rest).await?;
        if gone {
            cx.recorder
                .publish(
                    &subject(obj),
                    Kind::Normal,
                    "Removed",
                    &format!("package {key} removed"),
                )
                .await;
        }
        return Ok(Action::await_change());
    };
    let mut blocked = None;
    if p.phase != "Removing" {
        match remove(cx, obj).await {
            Ok(()) => {
                cx.recorder
                    .publish(
                        &subject(obj),
                        Kind::Normal,
                        "Removing",
                        &format!("removing package {key}"),
                    )
                    .await;
            }
            Err(Error::Lifecycle(CallError::Refused(why))) => blocked = Some(why),
            Err(e) => return Err(e),
        }
    } else {
        // A removal under way that objects' finalizers hold says so on the package
        // (`Ready=False RemoveBlocked`, naming them): the resource says the same.
        blocked = p
            .conditions
            .iter()
            .find(|c| c.r#type == "Ready" && c.status == "False" && c.reason == "RemoveBlocked")
            .map(|c| c.message.clone());
    }
    let verdict = Verdict::Deleting {
        blocked: blocked.clone(),
    };
    let status = status::compute(&verdict, Some(&p), previous.as_ref(), &now());
    announce(&cx.recorder, obj, previous.as_ref(), &status, Some(&p)).await;
    if previous.as_ref() != Some(&status) {
        write_status(cx, obj, &status).await?;
    }
    Ok(Action::requeue(if blocked.is_some() {
        BLOCKED_RETRY
    } else {
        // The Watch's tombstone triggers the next reconcile; this is a fallback.
        Duration::from_secs(30)
    }))
}

fn owner_text(p: &v1::Package) -> String {
    if p.owner.is_empty() {
        "the gRPC API (berth update/remove)".into()
    } else {
        format!("the berth.io resource {}", p.owner)
    }
}

/// Sends the spec as the package's Update: the verdict lifecycle's answer means.
async fn install<K: Front>(
    cx: &Context,
    obj: &K,
    update: v1::UpdateRequest,
    generation: i64,
) -> Result<Verdict, Error> {
    match cx.lifecycle.update_owned(&obj.owner(), update).await {
        Ok(answer) => {
            tracing::info!(resource = %obj.owner(), package.key = %answer.key, generation = answer.generation, "spec accepted");
            cx.accepted.put(
                &obj.uid().unwrap_or_default(),
                generation,
                answer.generation,
                Instant::now(),
            );
            Ok(Verdict::Accepted {
                generation,
                package_generation: answer.generation,
            })
        }
        Err(CallError::Invalid(message)) => Ok(Verdict::Refused {
            generation,
            reason: Reason::InvalidSpec,
            message,
        }),
        Err(CallError::Refused(message)) => Ok(Verdict::Refused {
            generation,
            reason: Reason::OwnedElsewhere,
            message,
        }),
        Err(e) => Err(Error::Lifecycle(e)),
    }
}

async fn remove<K: Front>(cx: &Context, obj: &K) -> Result<(), Error> {
    cx.lifecycle
        .remove_owned(&obj.owner(), obj.package_ref())
        .await?;
    Ok(())
}

async fn suspend<K: Front>(
    cx: &Context,
    obj: &K,
    _package: &v1::Package,
    suspended: bool,
) -> Result<(), Error> {
    cx.lifecycle
        .suspend_owned(&obj.owner(), obj.package_ref(), suspended)
        .await?;
    Ok(())
}

/// The package as lifecycle has it now (and the cache with it).
async fn refreshed<K: Front>(cx: &Context, obj: &K) -> Result<Option<v1::Package>, Error> {
    match cx.lifecycle.get(obj.package_ref()).await? {
        Some(p) => {
            cx.packages.put(p.clone());
            Ok(Some(p))
        }
        None => {
            cx.packages.forget(&obj.key());
            Ok(None)
        }
    }
}

async fn set_finalizers<K: Front>(
    cx: &Context,
    obj: &K,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    // The resourceVersion makes it a compare-and-swap: a concurrent edit of the list
    // conflicts (409) and the next reconcile starts from the fresh object.
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()},
    });
    api(&cx.client, obj)
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

async fn write_status<K: Front>(
    cx: &Context,
    obj: &K,
    status: &PackageStatus,
) -> Result<(), Error> {
    // A merge patch keeps fields it does not name: the fields the new status leaves out are
    // named as null, so the stored status is exactly this one.
    let mut value = serde_json::to_value(status).unwrap_or_default();
    if let (Some(fields), Some(before)) = (
        value.as_object_mut(),
        obj.status()
            .and_then(|s| serde_json::to_value(s).ok())
            .and_then(|v| v.as_object().cloned()),
    ) {
        for key in before.keys() {
            fields.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    let patch = serde_json::json!({ "status": value });
    api(&cx.client, obj)
        .patch_status(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// The events a status change means: installed, upgraded or updated once Ready at a new
/// package generation; Stalled (failed, refused, a blocked Remove) and hook failures as
/// warnings. Each is rate-limited by the recorder.
async fn announce<K: Front>(
    recorder: &Recorder,
    obj: &K,
    previous: Option<&PackageStatus>,
    next: &PackageStatus,
    package: Option<&v1::Package>,
) {
    let subject = subject(obj);
    let was_ready_here = previous.is_some_and(|p| {
        p.package_generation == next.package_generation
            && status::find(p, status::READY).is_some_and(|c| c.status == "True")
    });
    let ready = status::find(next, status::READY).is_some_and(|c| c.status == "True");
    if ready && !was_ready_here && next.phase == "Running" {
        // What was last Ready: nothing before the first install.
        let before = previous
            .map(|p| p.ready_version.as_str())
            .unwrap_or_default();
        let (reason, message) = if before.is_empty() {
            (
                "Installed",
                format!("installed {} {}", next.package, next.resolved_version),
            )
        } else if before != next.resolved_version {
            (
                "Upgraded",
                format!(
                    "upgraded {} from {before} to {}",
                    next.package, next.resolved_version
                ),
            )
        } else {
            (
                "Updated",
                format!(
                    "{} {} converged at generation {}",
                    next.package,
                    next.resolved_version,
                    next.package_generation.unwrap_or_default()
                ),
            )
        };
        recorder
            .publish(&subject, Kind::Normal, reason, &message)
            .await;
    }
    if let Some(stalled) = status::find(next, status::STALLED).filter(|c| c.status == "True") {
        let same = previous
            .and_then(|p| status::find(p, status::STALLED))
            .is_some_and(|c| c.status == "True" && c.message == stalled.message);
        if !same {
            recorder
                .publish(&subject, Kind::Warning, &stalled.reason, &stalled.message)
                .await;
        }
    }
    let hook_failed = |s: &PackageStatus| {
        s.conditions
            .iter()
            .find(|c| {
                c.type_ == "HooksProcessed"
                    && matches!(c.reason.as_str(), "HookFailed" | "StartupHookFailed")
                    && c.status == "False"
            })
            .map(|c| c.message.clone())
    };
    if let Some(message) = hook_failed(next)
        && previous.and_then(hook_failed).as_ref() != Some(&message)
        && package.is_some()
    {
        recorder
            .publish(&subject, Kind::Warning, "HookFailed", &message)
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An accepted spec counts for its resource's generation only, and only for a while.
    #[test]
    fn an_accepted_spec_is_remembered_for_its_generation_for_a_while() {
        let accepted = Accepted::default();
        let at = Instant::now();
        accepted.put("uid-1", 3, 7, at);
        assert_eq!(accepted.get("uid-1", 3, at), Some(7));
        assert_eq!(accepted.get("uid-1", 3, at + ACCEPTED_FOR / 2), Some(7));
        assert_eq!(accepted.get("uid-1", 4, at), None, "another generation");
        assert_eq!(accepted.get("uid-2", 3, at), None, "another resource");
        assert_eq!(
            accepted.get("uid-1", 3, at + ACCEPTED_FOR),
            None,
            "past its time"
        );
    }
}
