//! Workload simulation, in the manner of kwok: Deployments, ReplicaSets, StatefulSets,
//! DaemonSets and Jobs get the status their controllers would write once their pods
//! were running, `delay` after each spec change; Deployments also get their current
//! ReplicaSet (see the `rollout` module). No pods are created; DaemonSets act as
//! if the cluster had one node.
//!
//! Pods that a real scheduler would never place — the pod template has `schedulingGates` —
//! stay Pending: such a Deployment or ReplicaSet gets the status a real controller writes
//! for pods that exist but are not running (observed, every replica unavailable), so a
//! readiness wait can be tested against a rollout that never finishes, on the dev cluster as
//! on a real one.
//!
//! An object needs simulating while `status.observedGeneration` lags
//! `metadata.generation` (Jobs: while they have no completionTime and are not
//! suspended). The controller remembers when it first saw each generation and writes the
//! status once the delay has passed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::store::{Part, Store, meta_str, now};

pub(super) const MANAGER: &str = "berth-devcluster-simulator";

/// The simulated kinds, all in `apps/v1` except Job.
const KINDS: &[(&str, &str)] = &[
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("batch", "jobs"),
];

type Key = (String, String, String, String);

pub async fn run(store: Arc<Store>, delay: Duration, shutdown: CancellationToken) {
    let mut changes = store.subscribe_changes();
    // (generation, when it is due) per object awaiting its status.
    let mut pending: HashMap<Key, (i64, Instant)> = HashMap::new();
    loop {
        changes.borrow_and_update();
        let next_due = pass(&store, delay, &mut pending);
        let sleep = async {
            match next_due {
                Some(due) => tokio::time::sleep_until(due).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                // Let a burst of writes land before looking at the whole store again
                // (the same trade as the garbage collector's `SETTLE`).
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(SETTLE) => {}
                }
            }
            _ = sleep => {}
        }
    }
}

/// After a change, how long the simulator waits for more before its next pass over the
/// store: one pass per burst instead of one per write.
const SETTLE: Duration = Duration::from_millis(20);

/// Schedules new work, writes what is due, and returns when the next item is due.
fn pass(
    store: &Store,
    delay: Duration,
    pending: &mut HashMap<Key, (i64, Instant)>,
) -> Option<Instant> {
    let now_instant = Instant::now();
    let mut seen = Vec::new();
    for o in store.shared_snapshot() {
        if !KINDS.iter().any(|(g, r)| *g == o.group && *r == o.resource) {
            continue;
        }
        let key = (
            o.group.clone(),
            o.resource.clone(),
            meta_str(&o.object, "namespace"),
            meta_str(&o.object, "name"),
        );
        if !needs_status(&o.resource, &o.object) {
            pending.remove(&key);
            continue;
        }
        let generation = o
            .object
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let entry = pending
            .entry(key.clone())
            .or_insert((generation, now_instant + delay));
        if entry.0 != generation {
            *entry = (generation, now_instant + delay);
        }
        seen.push(key);
    }
    pending.retain(|k, _| seen.contains(k));
    let due: Vec<Key> = pending
        .iter()
        .filter(|(_, (_, at))| *at <= now_instant)
        .map(|(k, _)| k.clone())
        .collect();
    for key in due {
        pending.remove(&key);
        write_status(store, &key);
    }
    pending.values().map(|(_, at)| *at).min()
}

fn needs_status(resource: &str, o: &Value) -> bool {
    if o.pointer("/metadata/deletionTimestamp").is_some() {
        return false;
    }
    if resource == "jobs" {
        let suspended = o.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
        return !suspended && o.pointer("/status/completionTime").is_none();
    }
    let generation = o
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    o.pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        != Some(generation)
}

fn write_status(store: &Store, (group, resource, namespace, name): &Key) {
    let Some(rt) = store.resolve(group, "v1", resource) else {
        return;
    };
    if resource == "deployments" {
        // The Deployment's ReplicaSets first, so a client that sees the Deployment ready
        // also finds its current ReplicaSet ready (see `rollout`).
        let synced = store
            .get(&rt, namespace, name)
            .and_then(|d| super::rollout::sync(store, &d));
        if let Err(e) = synced {
            tracing::warn!(k8s.name = %name, error = %e, "simulating the Deployment's ReplicaSet failed");
        }
    }
    let result = store.mutate(&rt, namespace, name, Part::Status, MANAGER, |o| {
        let status = simulated_status(resource, o);
        o["status"] = status;
    });
    if let Err(e) = result {
        tracing::warn!(k8s.resource = %resource, k8s.name = %name, error = %e, "writing simulated status failed");
    }
}

fn replicas(o: &Value) -> i64 {
    o.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

fn condition(kind: &str, reason: &str, message: &str, at: &str) -> Value {
    json!({ "type": kind, "status": "True", "reason": reason, "message": message, "lastUpdateTime": at, "lastTransitionTime": at })
}

/// Whether the pod template holds its pods back from scheduling (non-empty
/// `schedulingGates`): a real cluster leaves such pods Pending.
fn gated(o: &Value) -> bool {
    o.pointer("/spec/template/spec/schedulingGates")
        .and_then(Value::as_array)
        .is_some_and(|gates| !gates.is_empty())
}

/// The status a healthy controller would report for `o` (for a Deployment or ReplicaSet
/// whose pods can never be scheduled, the status of pods left Pending).
pub fn simulated_status(resource: &str, o: &Value) -> Value {
    let generation = o
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let at = now();
    let n = replicas(o);
    let name = meta_str(o, "name");
    match resource {
        "deployments" if gated(o) => json!({
            "observedGeneration": generation,
            "replicas": n, "updatedReplicas": n, "unavailableReplicas": n, "terminatingReplicas": 0,
            "conditions": [
                { "type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable", "message": "Deployment does not have minimum availability.", "lastUpdateTime": at, "lastTransitionTime": at },
                condition("Progressing", "ReplicaSetUpdated", &format!("ReplicaSet \"{name}\" is progressing."), &at),
            ],
        }),
        "replicasets" if gated(o) => json!({
            "observedGeneration": generation,
            "replicas": n, "fullyLabeledReplicas": n, "terminatingReplicas": 0,
        }),
        "deployments" => json!({
            "observedGeneration": generation,
            "replicas": n, "updatedReplicas": n, "readyReplicas": n, "availableReplicas": n,
            "conditions": [
                condition("Available", "MinimumReplicasAvailable", "Deployment has minimum availability.", &at),
                condition("Progressing", "NewReplicaSetAvailable", &format!("ReplicaSet \"{name}\" has successfully progressed."), &at),
            ],
        }),
        "replicasets" => json!({
            "observedGeneration": generation,
            "replicas": n, "fullyLabeledReplicas": n, "readyReplicas": n, "availableReplicas": n,
        }),
        "statefulsets" => json!({
            "observedGeneration": generation,
            "replicas": n, "readyReplicas": n, "currentReplicas": n, "updatedReplicas": n, "availableReplicas": n,
            "currentRevision": format!("{name}-{generation}"), "updateRevision": format!("{name}-{generation}"),
            "collisionCount": 0,
        }),
        "daemonsets" => json!({
            "observedGeneration": generation,
            "desiredNumberScheduled": 1, "currentNumberScheduled": 1, "updatedNumberScheduled": 1,
            "numberReady": 1, "numberAvailable": 1, "numberMisscheduled": 0,
        }),
        "jobs" => {
            let completions = o
                .pointer("/spec/completions")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let started = o
                .pointer("/status/startTime")
                .and_then(Value::as_str)
                .map(String::from)
                .unwrap_or_else(|| at.clone());
            json!({
                "startTime": started, "completionTime": at,
                "succeeded": completions, "active": 0, "ready": 0, "terminating": 0,
                "uncountedTerminatedPods": {},
                "conditions": [
                    { "type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastProbeTime": at, "lastTransitionTime": at },
                    { "type": "Complete", "status": "True", "reason": "CompletionsReached", "message": "Reached expected number of succeeded pods", "lastProbeTime": at, "lastTransitionTime": at },
                ],
            })
        }
        _ => Value::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deployment_status_reports_ready_replicas_for_its_generation() {
        let d =
            json!({ "metadata": { "name": "web", "generation": 3 }, "spec": { "replicas": 2 } });
        assert!(needs_status("deployments", &d));
        let s = simulated_status("deployments", &d);
        assert_eq!(
            (
                s["readyReplicas"].as_i64(),
                s["observedGeneration"].as_i64()
            ),
            (Some(2), Some(3))
        );
        let mut done = d.clone();
        done["status"] = s;
        assert!(!needs_status("deployments", &done));
    }

    #[test]
    fn a_deployment_whose_pods_cannot_be_scheduled_reports_them_unavailable() {
        let d = json!({ "metadata": { "name": "web", "generation": 1 }, "spec": { "replicas": 2,
            "template": { "spec": { "schedulingGates": [{ "name": "example.com/hold" }] } } } });
        let s = simulated_status("deployments", &d);
        assert_eq!(s["unavailableReplicas"], 2);
        assert_eq!(s.get("availableReplicas"), None);
        assert_eq!(s["conditions"][0]["status"], "False");
        let mut done = d.clone();
        done["status"] = s;
        assert!(
            !needs_status("deployments", &done),
            "observed, so not written again"
        );
    }

    #[test]
    fn jobs_complete_once() {
        let j = json!({ "metadata": { "name": "j" }, "spec": { "completions": 2 } });
        let mut done = j.clone();
        done["status"] = simulated_status("jobs", &j);
        assert_eq!(done["status"]["succeeded"], 2);
        assert!(needs_status("jobs", &j) && !needs_status("jobs", &done));
    }
}
