//! Object readiness by the kstatus rules (kubernetes-sigs/cli-utils `pkg/kstatus`): one pure
//! function of an object, generic checks first (deletion, generation, Reconciling/Stalled),
//! then per-kind rules for built-in workloads, then the `Ready` condition.

use chrono::{DateTime, Utc};
use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    InProgress,
    Failed,
    Current,
    Terminating,
    NotFound,
    Unknown,
}

/// What `compute` decided and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub status: Status,
    /// The `Reconciling`/`Stalled` reason for InProgress and Failed results.
    pub reason: String,
    pub message: String,
}

fn outcome(status: Status, reason: &str, message: impl Into<String>) -> Result<Outcome, String> {
    Ok(Outcome {
        status,
        reason: reason.to_string(),
        message: message.into(),
    })
}

fn in_progress(reason: &str, message: impl Into<String>) -> Result<Outcome, String> {
    outcome(Status::InProgress, reason, message)
}

fn current(message: impl Into<String>) -> Result<Outcome, String> {
    outcome(Status::Current, "", message)
}

/// Integer at `pointer`, or `default` when absent or not an integer.
fn int(o: &Value, pointer: &str, default: i64) -> i64 {
    o.pointer(pointer)
        .and_then(Value::as_i64)
        .unwrap_or(default)
}

fn string<'a>(o: &'a Value, pointer: &str) -> Option<&'a str> {
    o.pointer(pointer).and_then(Value::as_str)
}

/// `metadata.generation` / `status.observedGeneration`: absent is fine, a non-integer is an
/// error (which readers report as Unknown).
fn strict_int(o: &Value, pointer: &str) -> Result<Option<i64>, String> {
    match o.pointer(pointer) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .map(Some)
            .ok_or_else(|| format!("{pointer} is not an integer")),
    }
}

fn conditions(o: &Value) -> Vec<&Value> {
    o.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map(|c| c.iter().collect())
        .unwrap_or_default()
}

fn cond_field<'a>(c: &'a Value, f: &str) -> &'a str {
    c.get(f).and_then(Value::as_str).unwrap_or_default()
}

fn find_condition<'a>(o: &'a Value, kind: &str) -> Option<&'a Value> {
    conditions(o)
        .into_iter()
        .find(|c| cond_field(c, "type") == kind)
}

/// Computes the status of one object observed at `now`.
pub fn compute(o: &Value, now: DateTime<Utc>) -> Result<Outcome, String> {
    if string(o, "/metadata/deletionTimestamp").is_some_and(|s| !s.is_empty()) {
        return outcome(Status::Terminating, "", "Resource scheduled for deletion");
    }
    let kind = string(o, "/kind").unwrap_or_default();
    let generation = strict_int(o, "/metadata/generation")?;
    let observed = strict_int(o, "/status/observedGeneration")?;
    if let (Some(g), Some(og)) = (generation, observed)
        && g != og
    {
        return in_progress(
            "LatestGenerationNotObserved",
            format!("{kind} generation is {g}, but latest observed generation is {og}"),
        );
    }
    for c in conditions(o) {
        if cond_field(c, "status") != "True" {
            continue;
        }
        match cond_field(c, "type") {
            "Reconciling" => return in_progress(cond_field(c, "reason"), cond_field(c, "message")),
            "Stalled" => {
                return outcome(
                    Status::Failed,
                    cond_field(c, "reason"),
                    cond_field(c, "message"),
                );
            }
            _ => {}
        }
    }
    let group = string(o, "/apiVersion")
        .and_then(|v| v.split_once('/'))
        .map_or("", |(g, _)| g);
    if let Some(result) = kind_rule(group, kind, o, now) {
        return result;
    }
    if let Some(ready) = find_condition(o, "Ready") {
        return if cond_field(ready, "status") == "True" {
            current("Resource is Ready")
        } else {
            in_progress(cond_field(ready, "reason"), cond_field(ready, "message"))
        };
    }
    current("Resource is current")
}

fn kind_rule(
    group: &str,
    kind: &str,
    o: &Value,
    now: DateTime<Utc>,
) -> Option<Result<Outcome, String>> {
    let workloads = matches!(group, "apps" | "extensions");
    Some(match (group, kind) {
        ("", "ConfigMap")
        | ("", "Secret")
        | ("batch", "CronJob")
        | ("policy", "PodDisruptionBudget") => current("Resource is always ready"),
        ("", "Service") => service(o),
        ("", "PersistentVolumeClaim") => pvc(o),
        ("", "Pod") => pod(o, now),
        ("batch", "Job") => job(o),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd(o),
        (_, "Deployment") if workloads => deployment(o),
        (_, "DaemonSet") if workloads => daemon_set(o),
        (_, "ReplicaSet") if workloads => replica_set(o),
        ("apps", "StatefulSet") => stateful_set(o),
        _ => return None,
    })
}

fn service(o: &Value) -> Result<Outcome, String> {
    let kind = string(o, "/spec/type").unwrap_or("ClusterIP");
    if kind == "LoadBalancer" && string(o, "/spec/clusterIP").is_none_or(str::is_empty) {
        return in_progress(
            "NoIPAssigned",
            "ClusterIP not set. Service type: LoadBalancer",
        );
    }
    current("Service is ready")
}

fn pvc(o: &Value) -> Result<Outcome, String> {
    let phase = string(o, "/status/phase").unwrap_or("unknown");
    if phase != "Bound" {
        return in_progress("NotBound", format!("PVC is not Bound. phase: {phase}"));
    }
    current("PVC is Bound")
}

fn pod(o: &Value, now: DateTime<Utc>) -> Result<Outcome, String> {
    match string(o, "/status/phase").unwrap_or_default() {
        "Succeeded" => current("Pod has completed successfully"),
        "Failed" => current("Pod has completed, but not successfully"),
        "Running" => {
            if find_condition(o, "Ready").is_some_and(|c| cond_field(c, "status") == "True") {
                return current("Pod is Ready");
            }
            let crashing: Vec<&str> = o
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .map(|cs| {
                    cs.iter()
                        .filter(|c| string(c, "/state/waiting/reason") == Some("CrashLoopBackOff"))
                        .filter_map(|c| string(c, "/name"))
                        .collect()
                })
                .unwrap_or_default();
            if !crashing.is_empty() {
                return outcome(
                    Status::Failed,
                    "ContainerCrashLooping",
                    format!("Containers in CrashLoop state: {}", crashing.join(",")),
                );
            }
            in_progress("PodRunningNotReady", "Pod is running but is not Ready")
        }
        "Pending" => {
            let unschedulable = find_condition(o, "PodScheduled").is_some_and(|c| {
                cond_field(c, "status") == "False" && cond_field(c, "reason") == "Unschedulable"
            });
            if unschedulable {
                let created = string(o, "/metadata/creationTimestamp")
                    .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t.with_timezone(&Utc));
                let young = created.is_none_or(|t| now.signed_duration_since(t).num_seconds() < 15);
                return if young {
                    in_progress("PodNotScheduled", "Pod has not been scheduled")
                } else {
                    outcome(
                        Status::Failed,
                        "PodUnschedulable",
                        "Pod could not be scheduled",
                    )
                };
            }
            in_progress("PodPending", "Pod is in the Pending phase")
        }
        "" => in_progress("PodNotObserved", "Pod phase not available"),
        other => Err(format!("unknown Pod phase {other:?}")),
    }
}

fn job(o: &Value) -> Result<Outcome, String> {
    let parallelism = int(o, "/spec/parallelism", 1);
    let completions = int(o, "/spec/completions", parallelism);
    for c in conditions(o) {
        let is_true = cond_field(c, "status") == "True";
        match cond_field(c, "type") {
            "Complete" if is_true => {
                let s = int(o, "/status/succeeded", 0);
                return current(format!("Job Completed. succeeded: {s}/{completions}"));
            }
            "Failed" if is_true => {
                let f = int(o, "/status/failed", 0);
                return outcome(
                    Status::Failed,
                    "JobFailed",
                    format!("Job Failed. failed: {f}/{completions}"),
                );
            }
            "Suspended"
                if is_true && o.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) =>
            {
                return current("Job is suspended");
            }
            _ => {}
        }
    }
    if o.pointer("/status/startTime").is_none() {
        return in_progress("JobNotStarted", "Job not started");
    }
    current("Job in progress")
}

fn crd(o: &Value) -> Result<Outcome, String> {
    for c in conditions(o) {
        let (status, reason) = (cond_field(c, "status"), cond_field(c, "reason"));
        match cond_field(c, "type") {
            "NamesAccepted" if status == "False" => {
                return outcome(Status::Failed, reason, cond_field(c, "message"));
            }
            "Established" if status == "False" && reason != "Installing" => {
                return outcome(Status::Failed, reason, cond_field(c, "message"));
            }
            "Established" if status == "True" => return current("CRD is established"),
            _ => {}
        }
    }
    in_progress("Installing", "Install in progress")
}

fn deployment(o: &Value) -> Result<Outcome, String> {
    let deadline = int(o, "/spec/progressDeadlineSeconds", i64::from(i32::MAX));
    let mut progressing = deadline == i64::from(i32::MAX);
    let mut available = false;
    for c in conditions(o) {
        let (kind, status, reason) = (
            cond_field(c, "type"),
            cond_field(c, "status"),
            cond_field(c, "reason"),
        );
        if kind == "Progressing" && reason == "ProgressDeadlineExceeded" {
            return outcome(Status::Failed, reason, "Progress deadline exceeded");
        }
        if kind == "Progressing" && status == "True" && reason == "NewReplicaSetAvailable" {
            progressing = true;
        }
        if kind == "Available" && status == "True" {
            available = true;
        }
    }
    let spec = int(o, "/spec/replicas", 1);
    let status = int(o, "/status/replicas", 0);
    let updated = int(o, "/status/updatedReplicas", 0);
    let avail = int(o, "/status/availableReplicas", 0);
    let ready = int(o, "/status/readyReplicas", 0);
    if spec > status {
        return in_progress("LessReplicas", format!("Replicas: {status}/{spec}"));
    }
    if spec > updated {
        return in_progress("LessUpdated", format!("Updated: {updated}/{spec}"));
    }
    if status > spec {
        return in_progress(
            "ExtraPods",
            format!("Pending termination: {}", status - spec),
        );
    }
    if updated > avail {
        return in_progress("LessAvailable", format!("Available: {avail}/{updated}"));
    }
    if spec > ready {
        return in_progress("LessReady", format!("Ready: {ready}/{spec}"));
    }
    if !progressing {
        return in_progress("ReplicaSetNotAvailable", "Rollout in progress");
    }
    if !available {
        return in_progress("DeploymentNotAvailable", "Deployment not Available");
    }
    current(format!("Deployment is available. Replicas: {status}"))
}

fn stateful_set(o: &Value) -> Result<Outcome, String> {
    if string(o, "/spec/updateStrategy/type") == Some("OnDelete") {
        return current("StatefulSet is using the OnDelete update strategy");
    }
    let spec = int(o, "/spec/replicas", 1);
    let status = int(o, "/status/replicas", 0);
    let ready = int(o, "/status/readyReplicas", 0);
    let updated = int(o, "/status/updatedReplicas", 0);
    let current_replicas = int(o, "/status/currentReplicas", 0);
    if spec > status {
        return in_progress("LessReplicas", format!("Replicas: {status}/{spec}"));
    }
    if spec > ready {
        return in_progress("LessReady", format!("Ready: {ready}/{spec}"));
    }
    if status > spec {
        return in_progress(
            "ExtraPods",
            format!("Pending termination: {}", status - spec),
        );
    }
    let partition = int(o, "/spec/updateStrategy/rollingUpdate/partition", -1);
    if partition != -1 {
        let want = spec - partition;
        if updated < want {
            return in_progress("PartitionRollout", format!("updated: {updated}/{want}"));
        }
        return current(format!("Partition rollout complete. updated: {updated}"));
    }
    if spec > current_replicas {
        return in_progress("LessCurrent", format!("current: {current_replicas}/{spec}"));
    }
    if string(o, "/status/currentRevision") != string(o, "/status/updateRevision") {
        return in_progress(
            "RevisionMismatch",
            "Waiting for updated revision to match current",
        );
    }
    current(format!(
        "All replicas scheduled as expected. Replicas: {status}"
    ))
}

fn daemon_set(o: &Value) -> Result<Outcome, String> {
    if o.pointer("/metadata/generation").is_none() {
        return in_progress("NoGeneration", "missing generation");
    }
    if o.pointer("/status/observedGeneration").is_none() {
        return in_progress("NoObservedGeneration", "missing observed generation");
    }
    if o.pointer("/status/desiredNumberScheduled").is_none() {
        return in_progress("NoDesiredNumber", "Missing desiredNumberScheduled");
    }
    let desired = int(o, "/status/desiredNumberScheduled", 0);
    let checks = [
        ("currentNumberScheduled", "LessCurrent", "Current"),
        ("updatedNumberScheduled", "LessUpdated", "Updated"),
        ("numberAvailable", "LessAvailable", "Available"),
        ("numberReady", "LessReady", "Ready"),
    ];
    for (field, reason, label) in checks {
        let n = int(o, &format!("/status/{field}"), 0);
        if desired > n {
            return in_progress(reason, format!("{label}: {n}/{desired}"));
        }
    }
    current(format!(
        "All replicas scheduled as expected. Replicas: {desired}"
    ))
}

fn replica_set(o: &Value) -> Result<Outcome, String> {
    if find_condition(o, "ReplicaFailure").is_some_and(|c| cond_field(c, "status") == "True") {
        return in_progress("ReplicaFailure", "Replica Failure condition. See Events");
    }
    let spec = int(o, "/spec/replicas", 1);
    let checks = [
        ("fullyLabeledReplicas", "LessLabelled", "Labelled"),
        ("availableReplicas", "LessAvailable", "Available"),
        ("readyReplicas", "LessReady", "Ready"),
    ];
    for (field, reason, label) in checks {
        let n = int(o, &format!("/status/{field}"), 0);
        if spec > n {
            return in_progress(reason, format!("{label}: {n}/{spec}"));
        }
    }
    let status = int(o, "/status/replicas", 0);
    if status > spec {
        return in_progress(
            "ExtraPods",
            format!("Pending termination: {}", status - spec),
        );
    }
    current(format!("ReplicaSet is available. Replicas: {status}"))
}

/// Aggregates per-object statuses against the `desired` one.
pub fn aggregate(statuses: &[Status], desired: Status) -> Status {
    if statuses.contains(&Status::Failed) {
        Status::Failed
    } else if statuses.contains(&Status::Unknown) {
        Status::Unknown
    } else if statuses.iter().all(|s| *s == desired) {
        desired
    } else {
        Status::InProgress
    }
}

#[cfg(test)]
#[path = "kstatus_tests.rs"]
mod tests;
