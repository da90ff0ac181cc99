//! The kstatus test vectors (numbered as in `reference/other-seeds.md` C.2.5).

use super::*;
use serde_json::json;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-01T00:01:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

fn check(o: serde_json::Value, status: Status, reason: &str) {
    match compute(&o, now()) {
        Ok(out) => {
            assert_eq!(
                (out.status, out.reason.as_str()),
                (status, reason),
                "{o} -> {}",
                out.message
            )
        }
        Err(e) => panic!("{o}: {e}"),
    }
}

fn deploy(spec: serde_json::Value, status: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": spec, "status": status})
}

#[test]
fn generic_rules() {
    let cr = |extra: serde_json::Value| {
        let mut o = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"generation": 3}});
        if let (Some(o), Some(e)) = (o.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        o
    };
    check(
        json!({"kind": "X", "metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"conditions": [{"type": "Stalled", "status": "True"}]}}),
        Status::Terminating,
        "",
    ); // 1
    check(
        cr(json!({"status": {"observedGeneration": 2}})),
        Status::InProgress,
        "LatestGenerationNotObserved",
    ); // 2
    check(cr(json!({})), Status::Current, ""); // 3
    let both = |first: &str, second: &str| {
        cr(json!({"status": {"conditions": [
            {"type": first, "status": "True", "reason": if first == "Stalled" { "A" } else { "B" }},
            {"type": second, "status": "True", "reason": if second == "Stalled" { "A" } else { "B" }}
        ]}}))
    };
    check(both("Stalled", "Reconciling"), Status::Failed, "A"); // 4
    check(both("Reconciling", "Stalled"), Status::InProgress, "B"); // 5
    check(
        cr(
            json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Wait"}]}}),
        ),
        Status::InProgress,
        "Wait",
    ); // 6
    check(
        cr(json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})),
        Status::Current,
        "",
    ); // 7
}

#[test]
fn deployments() {
    let full = json!({"replicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "readyReplicas": 3,
        "conditions": [{"type": "Ready", "status": "False"}, {"type": "Available", "status": "True"}]});
    check(deploy(json!({"replicas": 3}), full), Status::Current, ""); // 8
    check(
        deploy(json!({}), json!({})),
        Status::InProgress,
        "LessReplicas",
    ); // 9
    check(
        deploy(
            json!({"replicas": 3}),
            json!({"replicas": 3, "updatedReplicas": 2}),
        ),
        Status::InProgress,
        "LessUpdated",
    ); // 10
    check(
        deploy(
            json!({"replicas": 3}),
            json!({"replicas": 4, "updatedReplicas": 3}),
        ),
        Status::InProgress,
        "ExtraPods",
    ); // 11
    check(
        deploy(
            json!({"replicas": 3}),
            json!({"replicas": 3, "updatedReplicas": 3, "availableReplicas": 2}),
        ),
        Status::InProgress,
        "LessAvailable",
    ); // 12
    check(
        deploy(
            json!({"replicas": 3}),
            json!({"replicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "readyReplicas": 2}),
        ),
        Status::InProgress,
        "LessReady",
    ); // 13
    let counts = json!({"replicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "readyReplicas": 3,
        "conditions": [{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}, {"type": "Available", "status": "True"}]});
    check(
        deploy(
            json!({"replicas": 3, "progressDeadlineSeconds": 600}),
            counts,
        ),
        Status::InProgress,
        "ReplicaSetNotAvailable",
    ); // 14
    let no_avail =
        json!({"replicas": 3, "updatedReplicas": 3, "availableReplicas": 3, "readyReplicas": 3});
    check(
        deploy(json!({"replicas": 3}), no_avail),
        Status::InProgress,
        "DeploymentNotAvailable",
    ); // 15
    check(
        deploy(
            json!({"replicas": 3}),
            json!({"conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]}),
        ),
        Status::Failed,
        "ProgressDeadlineExceeded",
    ); // 16
    check(
        deploy(
            json!({"replicas": 0}),
            json!({"conditions": [{"type": "Available", "status": "True"}]}),
        ),
        Status::Current,
        "",
    ); // 17
}

#[test]
fn stateful_sets_and_daemon_sets_and_replica_sets() {
    let sts = |spec: serde_json::Value, status: serde_json::Value| json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "spec": spec, "status": status});
    check(
        sts(
            json!({"replicas": 3, "updateStrategy": {"type": "OnDelete"}}),
            json!({}),
        ),
        Status::Current,
        "",
    ); // 18
    check(
        sts(
            json!({"replicas": 3}),
            json!({"replicas": 3, "readyReplicas": 2}),
        ),
        Status::InProgress,
        "LessReady",
    ); // 19
    let part = json!({"replicas": 3, "updateStrategy": {"rollingUpdate": {"partition": 1}}});
    check(
        sts(
            part.clone(),
            json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 1}),
        ),
        Status::InProgress,
        "PartitionRollout",
    ); // 20
    check(
        sts(
            part,
            json!({"replicas": 3, "readyReplicas": 3, "updatedReplicas": 2, "currentRevision": "a", "updateRevision": "b"}),
        ),
        Status::Current,
        "",
    ); // 21
    check(
        sts(
            json!({"replicas": 3}),
            json!({"replicas": 3, "readyReplicas": 3, "currentReplicas": 3, "currentRevision": "a", "updateRevision": "b"}),
        ),
        Status::InProgress,
        "RevisionMismatch",
    ); // 22
    let ds = |status: serde_json::Value| json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"generation": 1}, "status": status});
    check(ds(json!({})), Status::InProgress, "NoObservedGeneration"); // 23
    check(
        ds(json!({"observedGeneration": 1})),
        Status::InProgress,
        "NoDesiredNumber",
    ); // 24
    check(
        ds(json!({"observedGeneration": 1, "desiredNumberScheduled": 0})),
        Status::Current,
        "",
    ); // 25
    check(
        ds(
            json!({"observedGeneration": 1, "desiredNumberScheduled": 3, "currentNumberScheduled": 3, "updatedNumberScheduled": 3, "numberAvailable": 2}),
        ),
        Status::InProgress,
        "LessAvailable",
    ); // 26
    let rs = |spec: serde_json::Value, status: serde_json::Value| json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "spec": spec, "status": status});
    check(
        rs(
            json!({}),
            json!({"conditions": [{"type": "ReplicaFailure", "status": "True"}]}),
        ),
        Status::InProgress,
        "ReplicaFailure",
    ); // 27
    check(
        rs(json!({"replicas": 3}), json!({"fullyLabeledReplicas": 2})),
        Status::InProgress,
        "LessLabelled",
    ); // 28
}

#[test]
fn pods_pvcs_services_jobs_crds_pdbs() {
    let pod = |status: serde_json::Value, created: &str| json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"creationTimestamp": created}, "status": status});
    check(
        json!({"apiVersion": "v1", "kind": "Pod"}),
        Status::InProgress,
        "PodNotObserved",
    ); // 29
    check(
        pod(json!({"phase": "Failed"}), "2026-01-01T00:00:00Z"),
        Status::Current,
        "",
    ); // 30
    check(
        pod(
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}),
            "2026-01-01T00:00:00Z",
        ),
        Status::Failed,
        "ContainerCrashLooping",
    ); // 31
    let unsched = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
    check(
        pod(unsched.clone(), "2026-01-01T00:00:55Z"),
        Status::InProgress,
        "PodNotScheduled",
    ); // 32
    check(
        pod(unsched, "2026-01-01T00:00:00Z"),
        Status::Failed,
        "PodUnschedulable",
    ); // 33
    assert!(
        compute(
            &pod(json!({"phase": "Weird"}), "2026-01-01T00:00:00Z"),
            now()
        )
        .is_err()
    ); // 34
    check(
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim"}),
        Status::InProgress,
        "NotBound",
    ); // 35
    check(
        json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer"}}),
        Status::InProgress,
        "NoIPAssigned",
    ); // 36
    check(
        json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": "LoadBalancer", "clusterIP": "10.0.0.1"}}),
        Status::Current,
        "",
    ); // 37
    let job = |spec: serde_json::Value, status: serde_json::Value| json!({"apiVersion": "batch/v1", "kind": "Job", "spec": spec, "status": status});
    check(
        job(json!({}), json!({})),
        Status::InProgress,
        "JobNotStarted",
    ); // 38
    check(
        job(
            json!({}),
            json!({"startTime": "2026-01-01T00:00:00Z", "active": 1}),
        ),
        Status::Current,
        "",
    ); // 39
    check(
        job(
            json!({}),
            json!({"failed": 6, "conditions": [{"type": "Failed", "status": "True"}]}),
        ),
        Status::Failed,
        "JobFailed",
    ); // 40
    check(
        job(
            json!({}),
            json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
        ),
        Status::InProgress,
        "JobNotStarted",
    ); // 41
    let crd = |conds: serde_json::Value| json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "status": {"conditions": conds}});
    check(
        crd(json!([{"type": "Established", "status": "False", "reason": "Installing"}])),
        Status::InProgress,
        "Installing",
    ); // 42
    check(
        crd(json!([{"type": "NamesAccepted", "status": "False", "reason": "X"}])),
        Status::Failed,
        "X",
    ); // 43
    check(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"generation": 2}, "status": {"observedGeneration": 1}}),
        Status::InProgress,
        "LatestGenerationNotObserved",
    ); // 44
}

#[test]
fn aggregation() {
    use Status::*;
    assert_eq!(aggregate(&[Current, Unknown, InProgress], Current), Unknown); // 48
    assert_eq!(aggregate(&[NotFound, Terminating], NotFound), InProgress); // 49
    assert_eq!(aggregate(&[], Current), Current); // 50
    assert_eq!(aggregate(&[Current, Failed], Current), Failed);
}
