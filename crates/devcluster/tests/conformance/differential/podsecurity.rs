//! The Pod Security scenario of the differential test: the test namespace is labelled for Pod
//! Security admission, then pods and workloads that break each check of the `baseline` and
//! `restricted` profiles are written to both clusters, and every refusal, warning and label
//! error is compared word for word (this scenario runs without the `error-wording` allowance).
//!
//! Success answers are compared by their code and `Warning`s only: a Pod's body differs by the
//! real API server's defaulting of built-in kinds, which the dev cluster does not do (see the
//! crate docs).

use serde_json::{Value, json};

use super::engine::{Harness, MERGE, Req, View};

const PODS: &str = "/api/v1/namespaces/{{ns}}/pods";
const NS: &str = "/api/v1/namespaces/{{ns}}";

fn code(a: &Value) -> u16 {
    a["code"].as_u64().unwrap_or_default() as u16
}

/// A pod named `name` whose spec is `spec` (a `containers` list defaults to one plain
/// container `app`).
fn pod(name: &str, spec: Value) -> Value {
    let mut spec = spec;
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{ "name": "app", "image": "busybox" }]);
    }
    json!({ "apiVersion": "v1", "kind": "Pod", "metadata": { "name": name }, "spec": spec })
}

/// A container `name` with `security_context`.
fn container(name: &str, security_context: Value) -> Value {
    json!({ "name": name, "image": "busybox", "securityContext": security_context })
}

/// Whether the write was admitted, and with which warnings.
fn admitted(a: &Value) -> Value {
    json!({ "code": a["code"], "warnings": a["warnings"] })
}

/// A namespace write's code, warnings and Pod Security labels.
fn labelled(a: &Value) -> Value {
    let labels: serde_json::Map<String, Value> = a["body"]["metadata"]["labels"]
        .as_object()
        .map(|l| {
            l.iter()
                .filter(|(k, _)| k.starts_with("pod-security.kubernetes.io/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    json!({ "code": a["code"], "warnings": a["warnings"], "labels": labels })
}

fn set_labels(kind: &str, labels: Value) -> Req {
    Req::patch(kind, NS, MERGE, json!({ "metadata": { "labels": labels } }))
        .view(View::Project(labelled))
}

pub async fn run(h: &mut Harness) {
    labels(h).await;
    baseline(h).await;
    workloads(h).await;
    restricted(h).await;
}

async fn labels(h: &mut Harness) {
    h.run(set_labels(
        "podsecurity: invalid level and version (422)",
        json!({ "pod-security.kubernetes.io/enforce": "strict",
            "pod-security.kubernetes.io/warn-version": "1.30" }),
    ))
    .await;
    h.run(set_labels(
        "podsecurity: label the namespace (enforce baseline, warn restricted)",
        json!({ "pod-security.kubernetes.io/enforce": "baseline",
            "pod-security.kubernetes.io/enforce-version": "latest",
            "pod-security.kubernetes.io/warn": "restricted" }),
    ))
    .await;
    // kube-apiserver reads namespaces through an informer: wait until it enforces the label.
    h.wait(
        Req::post(
            "podsecurity: enforced (403)",
            &format!("{PODS}?dryRun=All"),
            pod("probe", json!({ "hostPID": true })),
        ),
        "the namespace's enforce label to take effect",
        |a| code(a) == 403,
    )
    .await;
}

/// One pod per baseline check, each refused with kube-apiserver's words; then the node's
/// root (host PID namespace, the node's `/`, every capability) refused naming every check.
async fn baseline(h: &mut Harness) {
    let refusals = [
        (
            "host namespaces",
            json!({ "hostNetwork": true, "hostPID": true, "hostIPC": true }),
        ),
        (
            "hostPath volumes",
            json!({ "volumes": [
                { "name": "root", "hostPath": { "path": "/" } },
                { "name": "logs", "hostPath": { "path": "/var/log" } },
                { "name": "scratch", "emptyDir": {} } ] }),
        ),
        (
            "hostPorts",
            json!({ "containers": [ { "name": "web", "image": "busybox", "ports": [
                { "containerPort": 80, "hostPort": 8080 }, { "containerPort": 443 } ] } ] }),
        ),
        (
            "capabilities",
            json!({ "initContainers": [ container("init", json!({ "capabilities": { "add": ["NET_ADMIN", "CHOWN"] } })) ],
                "containers": [ container("app", json!({ "capabilities": { "add": ["SYS_ADMIN"] } })),
                    container("fine", json!({ "capabilities": { "add": ["KILL"] } })) ] }),
        ),
        (
            "AppArmor",
            json!({ "securityContext": { "appArmorProfile": { "type": "Unconfined" } },
                "containers": [ container("app", json!({ "appArmorProfile": { "type": "Unconfined" } })) ] }),
        ),
        (
            "SELinux",
            json!({ "securityContext": { "seLinuxOptions": { "type": "spc_t" } },
                "containers": [ container("app", json!({ "seLinuxOptions": { "user": "system_u", "role": "system_r" } })) ] }),
        ),
        (
            "seccomp",
            json!({ "securityContext": { "seccompProfile": { "type": "Unconfined" } },
                "containers": [ container("app", json!({ "seccompProfile": { "type": "Unconfined" } })) ] }),
        ),
        (
            "sysctls",
            json!({ "securityContext": { "sysctls": [
                { "name": "kernel.msgmax", "value": "65536" },
                { "name": "net.ipv4.tcp_syncookies", "value": "1" } ] } }),
        ),
        (
            "the node's root",
            json!({ "hostPID": true,
                "containers": [ { "name": "x", "image": "busybox",
                    "securityContext": { "capabilities": { "add": ["SYS_ADMIN", "SYS_PTRACE"] } },
                    "volumeMounts": [ { "name": "root", "mountPath": "/host" } ] } ],
                "volumes": [ { "name": "root", "hostPath": { "path": "/" } } ] }),
        ),
    ];
    for (check, spec) in refusals {
        h.run(Req::post(
            &format!("podsecurity: baseline refuses {check} (403)"),
            PODS,
            pod("bad", spec),
        ))
        .await;
    }
    h.run(Req::post(
        "podsecurity: dry run refused too (403)",
        &format!("{PODS}?dryRun=All"),
        pod("bad", json!({ "hostNetwork": true })),
    ))
    .await;
    // A container that asks for privileged mode: refused by Pod Security here, and by
    // validation first on a kube-apiserver without `--allow-privileged` (see `known.rs`).
    h.run(Req::post(
        "podsecurity: baseline refuses privileged (403)",
        PODS,
        pod(
            "bad",
            json!({ "containers": [ container("x", json!({ "privileged": true })) ] }),
        ),
    ))
    .await;
    // Within baseline, outside restricted: admitted, with restricted's warning.
    h.run(
        Req::post(
            "podsecurity: baseline admits, restricted warns",
            PODS,
            pod(
                "plain",
                json!({ "containers": [ container("app", json!({ "capabilities": { "add": ["CHOWN"] } })) ] }),
            ),
        )
        .view(View::Project(admitted)),
    )
    .await;
    // Baseline (from policy v1.35) lets a pod in a user namespace unmask /proc; restricted
    // warns.
    h.run(
        Req::post(
            "podsecurity: baseline admits procMount in a user namespace",
            PODS,
            pod(
                "userns",
                json!({ "hostUsers": false, "containers": [ container("app", json!({ "procMount": "Unmasked" })) ] }),
            ),
        )
        .view(View::Project(admitted)),
    )
    .await;
    // An update that leaves the spec as it was is not looked at again.
    h.run(
        Req::patch(
            "podsecurity: metadata update of an admitted pod",
            &format!("{PODS}/plain"),
            MERGE,
            json!({ "metadata": { "labels": { "touched": "yes" } } }),
        )
        .view(View::Project(admitted)),
    )
    .await;
}

/// Workloads are never refused: their pod template only warns, against the `warn` level.
async fn workloads(h: &mut Harness) {
    let template = json!({ "metadata": { "labels": { "app": "root" } },
        "spec": { "hostPID": true, "containers": [ { "name": "x", "image": "busybox" } ],
            "volumes": [ { "name": "root", "hostPath": { "path": "/" } } ] } });
    h.run(
        Req::post(
            "podsecurity: a deployment's template only warns",
            "/apis/apps/v1/namespaces/{{ns}}/deployments",
            json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "root" },
                "spec": { "replicas": 0, "selector": { "matchLabels": { "app": "root" } }, "template": template } }),
        )
        .view(View::Project(admitted)),
    )
    .await;
    h.run(
        Req::post(
            "podsecurity: a cronjob's template only warns",
            "/apis/batch/v1/namespaces/{{ns}}/cronjobs",
            json!({ "apiVersion": "batch/v1", "kind": "CronJob", "metadata": { "name": "root" },
                "spec": { "schedule": "0 0 1 1 *", "suspend": true, "jobTemplate": { "spec": {
                    "template": { "spec": { "restartPolicy": "Never", "hostIPC": true,
                        "containers": [ { "name": "x", "image": "busybox" } ] } } } } } }),
        )
        .view(View::Project(admitted)),
    )
    .await;
}

/// Raising `enforce` to restricted warns about the pods already there; then restricted's own
/// checks refuse, and a pod that meets them is admitted without a warning.
async fn restricted(h: &mut Harness) {
    h.run(set_labels(
        "podsecurity: raise enforce to restricted (existing pods warned about)",
        json!({ "pod-security.kubernetes.io/enforce": "restricted" }),
    ))
    .await;
    h.wait(
        Req::post(
            "podsecurity: restricted enforced (403)",
            &format!("{PODS}?dryRun=All"),
            pod("probe", json!({})),
        ),
        "the namespace's new enforce label to take effect",
        |a| code(a) == 403,
    )
    .await;
    h.run(Req::post(
        "podsecurity: restricted refuses a plain pod (403)",
        PODS,
        pod(
            "bad",
            json!({ "volumes": [ { "name": "nfs", "nfs": { "server": "n", "path": "/" } } ],
                "containers": [ container("app", json!({ "runAsUser": 0, "runAsNonRoot": false })),
                    container("side", json!({ "capabilities": { "add": ["NET_RAW"], "drop": ["ALL"] } })) ] }),
        ),
    ))
    .await;
    h.run(
        Req::post(
            "podsecurity: restricted admits a hardened pod",
            PODS,
            pod(
                "hardened",
                json!({ "securityContext": { "runAsNonRoot": true, "seccompProfile": { "type": "RuntimeDefault" } },
                    "containers": [ container("app", json!({ "allowPrivilegeEscalation": false,
                        "capabilities": { "drop": ["ALL"], "add": ["NET_BIND_SERVICE"] } })) ] }),
            ),
        )
        .view(View::Project(admitted)),
    )
    .await;
    h.run(
        Req::post(
            "podsecurity: restricted admits root in a user namespace",
            PODS,
            pod(
                "userroot",
                json!({ "hostUsers": false, "securityContext": { "runAsUser": 0, "seccompProfile": { "type": "RuntimeDefault" } },
                    "containers": [ container("app", json!({ "allowPrivilegeEscalation": false,
                        "capabilities": { "drop": ["ALL"] } })) ] }),
            ),
        )
        .view(View::Project(admitted)),
    )
    .await;
    h.run(set_labels(
        "podsecurity: pinned to an older policy version",
        json!({ "pod-security.kubernetes.io/enforce-version": "v1.21" }),
    ))
    .await;
    h.wait(
        Req::post(
            "podsecurity: restricted v1.21 (no capabilities check)",
            &format!("{PODS}?dryRun=All"),
            pod(
                "old",
                json!({ "securityContext": { "runAsNonRoot": true, "seccompProfile": { "type": "RuntimeDefault" } },
                    "containers": [ container("app", json!({ "allowPrivilegeEscalation": false })) ] }),
            ),
        )
        .view(View::Project(admitted)),
        "the policy version to take effect",
        |a| code(a) == 201,
    )
    .await;
}
