//! kubectl against the cluster: client-side and server-side `apply -f`, `get -o yaml`,
//! `get -A`, `get -w`, `delete`, `api-resources`, and the typed imperative commands
//! (`create configmap|secret|serviceaccount`, `scale`) that send protobuf bodies or use
//! the `/scale` subresource. kubectl is found on PATH or in `target/ci-tools`.

use std::path::Path;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common::{DEADLINE, eventually, namespace, target};
use crate::tools::Cli;

fn kubectl(kubeconfig: &Path) -> Option<Cli> {
    Cli::new("kubectl", kubeconfig)
}

fn deployment_yaml(ns: &str, image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: {image}\n"
    )
}

#[tokio::test]
async fn kubectl_get_and_apply() {
    let t = target().await;
    let Some(kubectl) = kubectl(&t.kubeconfig) else {
        return;
    };
    let ns = namespace(&t.client, "kubectl").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("m.yaml");
    let write = |image: &str| {
        let cm = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\ndata:\n  a: \"1\"\n---\n"
        );
        std::fs::write(&manifest, cm + &deployment_yaml(&ns, image)).expect("manifest");
    };
    let path = manifest.to_str().expect("utf-8 path");
    write("nginx:1");
    let first = kubectl.ok(&["apply", "-f", path]).await;
    assert!(
        first.contains("configmap/settings created")
            && first.contains("deployment.apps/web created"),
        "{first}"
    );
    write("nginx:2");
    let second = kubectl.ok(&["apply", "-f", path]).await;
    assert!(
        second.contains("configmap/settings unchanged")
            && second.contains("deployment.apps/web configured"),
        "{second}"
    );
    let image = kubectl
        .ok(&[
            "get",
            "deployment",
            "web",
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ])
        .await;
    assert_eq!(image, "nginx:2");
    let listing = kubectl.ok(&["get", "configmaps", "-A"]).await;
    assert!(
        listing
            .lines()
            .any(|l| l.contains(&*ns) && l.contains("settings")),
        "{listing}"
    );
}

/// `apply --server-side` creates then updates, `get -o yaml` shows the object with
/// kubectl as its field manager, and `delete` removes it.
#[tokio::test]
async fn kubectl_server_side_apply_get_yaml_delete() {
    let t = target().await;
    let Some(kubectl) = kubectl(&t.kubeconfig) else {
        return;
    };
    let ns = namespace(&t.client, "kubectl-ssa").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("cm.yaml");
    let path = manifest.to_str().expect("utf-8 path");
    for (value, verb) in [("1", "serverside-applied"), ("2", "serverside-applied")] {
        std::fs::write(
            &manifest,
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: {ns}\ndata:\n  v: \"{value}\"\n"),
        )
        .expect("manifest");
        let out = kubectl.ok(&["apply", "--server-side", "-f", path]).await;
        assert!(out.contains(&format!("configmap/ssa {verb}")), "{out}");
    }
    let yaml = kubectl
        .ok(&[
            "get",
            "configmap",
            "ssa",
            "-n",
            &ns,
            "-o",
            "yaml",
            "--show-managed-fields",
        ])
        .await;
    let object: Value = serde_saphyr::from_str(&yaml).expect("get -o yaml is YAML");
    assert_eq!(object["kind"], "ConfigMap");
    assert_eq!(object["data"], json!({ "v": "2" }));
    let managers: Vec<&str> = object["metadata"]["managedFields"]
        .as_array()
        .map(|m| m.iter().filter_map(|e| e["manager"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(managers, vec!["kubectl"], "{yaml}");

    let out = kubectl.ok(&["delete", "configmap", "ssa", "-n", &ns]).await;
    assert!(out.contains("configmap \"ssa\" deleted"), "{out}");
    let gone = Api::<ConfigMap>::namespaced(t.client.clone(), &ns)
        .get_opt("ssa")
        .await
        .expect("get");
    assert!(gone.is_none());
}

/// `kubectl get -w` prints a line for an object created while it watches.
#[tokio::test]
async fn kubectl_get_watch_prints_created_objects() {
    let t = target().await;
    let Some(kubectl) = kubectl(&t.kubeconfig) else {
        return;
    };
    let ns = namespace(&t.client, "kubectl-watch").await;
    let api = Api::<ConfigMap>::namespaced(t.client.clone(), &ns);
    let cm = |name: &str| -> ConfigMap {
        serde_json::from_value(json!({ "metadata": { "name": name } })).expect("configmap")
    };
    // kill_on_drop ends kubectl when `child` goes out of scope, pass or fail.
    let mut child = kubectl
        .command(&[
            "get",
            "configmaps",
            "-n",
            &ns,
            "-w",
            "--output-watch-events",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("kubectl get -w starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut seen = Vec::new();
    let mut wait_for = async |needle: &str| {
        let found = tokio::time::timeout(DEADLINE, async {
            while let Some(line) = lines.next_line().await.expect("read kubectl output") {
                seen.push(line.clone());
                if line.contains(needle) {
                    return true;
                }
            }
            false
        })
        .await;
        assert!(
            found == Ok(true),
            "kubectl get -w never printed {needle}; it printed {seen:?}"
        );
    };
    // The first object may arrive in kubectl's initial list or as an event, depending on
    // when its watch started; once it is printed the watch is running, so the second one
    // can only arrive as an ADDED event.
    api.create(&PostParams::default(), &cm("first"))
        .await
        .expect("create first");
    wait_for("first").await;
    api.create(&PostParams::default(), &cm("second"))
        .await
        .expect("create second");
    wait_for("second").await;
    child.kill().await.expect("kubectl stops");
}

#[tokio::test]
async fn kubectl_api_resources_lists_builtin_kinds() {
    let t = target().await;
    let Some(kubectl) = kubectl(&t.kubeconfig) else {
        return;
    };
    let out = kubectl.ok(&["api-resources"]).await;
    let row = |name: &str| -> Vec<String> {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("api-resources has no {name} row:\n{out}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]
    );
    assert_eq!(
        row("configmaps"),
        ["configmaps", "cm", "v1", "true", "ConfigMap"]
    );
    assert_eq!(
        row("deployments"),
        ["deployments", "deploy", "apps/v1", "true", "Deployment"]
    );
    assert_eq!(
        row("namespaces"),
        ["namespaces", "ns", "v1", "false", "Namespace"]
    );
    let names = kubectl
        .ok(&["api-resources", "--api-group=apps", "-o", "name"])
        .await;
    assert!(names.lines().any(|l| l == "deployments.apps"), "{names}");
}

/// Typed imperative commands: kubectl sends their bodies as protobuf, and `scale` goes
/// through the `/scale` subresource.
#[tokio::test]
async fn kubectl_imperative_create_and_scale() {
    let t = target().await;
    let Some(kubectl) = kubectl(&t.kubeconfig) else {
        return;
    };
    let ns = namespace(&t.client, "kubectl-imp").await;
    kubectl
        .ok(&[
            "create",
            "configmap",
            "plain",
            "-n",
            &ns,
            "--from-literal=greeting=hi",
        ])
        .await;
    kubectl
        .ok(&[
            "create",
            "secret",
            "generic",
            "creds",
            "-n",
            &ns,
            "--from-literal=password=pw",
        ])
        .await;
    kubectl
        .ok(&["create", "serviceaccount", "robot", "-n", &ns])
        .await;
    let cm = Api::<ConfigMap>::namespaced(t.client.clone(), &ns)
        .get("plain")
        .await
        .expect("configmap created");
    assert_eq!(
        cm.data.and_then(|d| d.get("greeting").cloned()).as_deref(),
        Some("hi")
    );
    assert!(
        cm.metadata.generate_name.is_none(),
        "empty protobuf strings stay unset"
    );
    let secret = Api::<Secret>::namespaced(t.client.clone(), &ns)
        .get("creds")
        .await
        .expect("secret created");
    assert_eq!(
        secret
            .data
            .and_then(|d| d.get("password").cloned())
            .map(|b| b.0),
        Some(b"pw".to_vec())
    );
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    Api::<ServiceAccount>::namespaced(t.client.clone(), &ns)
        .get("robot")
        .await
        .expect("serviceaccount created");

    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("d.yaml");
    std::fs::write(&manifest, deployment_yaml(&ns, "nginx:1")).expect("manifest");
    kubectl
        .ok(&["apply", "-f", manifest.to_str().expect("utf-8 path")])
        .await;
    let out = kubectl
        .ok(&["scale", "deployment", "web", "-n", &ns, "--replicas=3"])
        .await;
    assert!(out.contains("deployment.apps/web scaled"), "{out}");
    let api = Api::<Deployment>::namespaced(t.client.clone(), &ns);
    let replicas = eventually("deployment scaled to 3", || {
        let api = api.clone();
        async move {
            let d = api.get("web").await.expect("get deployment");
            d.spec.replicas.filter(|r| *r == 3)
        }
    })
    .await;
    assert_eq!(replicas, 3);
}
