//! helm against the cluster: install, list, upgrade, uninstall of the chart in
//! `tests/fixtures/demo-chart` (ConfigMap, Secret, Service, Deployment), and `--wait`
//! with workload simulation.
//!
//! helm v4 applies chart objects with server-side apply and stores each release
//! revision as a `helm.sh/release.v1` Secret sent as protobuf, so this exercises both.

use std::path::{Path, PathBuf};

use berth_devcluster::DevClusterConfig;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::common::{Target, dev_only, eventually, namespace, target};
use crate::tools::Cli;

fn chart() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/demo-chart")
        .display()
        .to_string()
}

/// helm with its cache/config/data directories inside `home`, so tests share nothing.
fn helm(t: &Target, home: &Path) -> Option<Cli> {
    let sub = |s: &str| -> PathBuf { home.join(s) };
    Some(
        Cli::new("helm", &t.kubeconfig)?
            .env("HELM_CACHE_HOME", sub("cache"))
            .env("HELM_CONFIG_HOME", sub("config"))
            .env("HELM_DATA_HOME", sub("data")),
    )
}

/// `helm list -n ns -o json` as (name, revision, status) triples.
async fn releases(helm: &Cli, ns: &str) -> Vec<(String, String, String)> {
    let out = helm.ok(&["list", "-n", ns, "-o", "json"]).await;
    let list: Vec<Value> = serde_json::from_str(&out).expect("helm list -o json is JSON");
    list.iter()
        .map(|r| {
            let field = |f: &str| match &r[f] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (field("name"), field("revision"), field("status"))
        })
        .collect()
}

async fn greeting(client: &Client, ns: &str) -> Option<String> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt("demo-settings")
        .await
        .expect("get configmap");
    cm.and_then(|c| c.data)
        .and_then(|d| d.get("greeting").cloned())
}

async fn release_secrets(client: &Client, ns: &str) -> usize {
    Api::<Secret>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("owner=helm,name=demo"))
        .await
        .expect("list release secrets")
        .items
        .len()
}

#[tokio::test]
async fn helm_install_upgrade_list_uninstall() {
    let t = target().await;
    let home = tempfile::tempdir().expect("tempdir");
    let Some(helm) = helm(&t, home.path()) else {
        return;
    };
    let ns = namespace(&t.client, "helm").await;
    let chart = chart();

    helm.ok(&["install", "demo", &chart, "-n", &ns]).await;
    assert_eq!(
        releases(&helm, &ns).await,
        vec![("demo".into(), "1".into(), "deployed".into())]
    );
    assert_eq!(greeting(&t.client, &ns).await.as_deref(), Some("hello"));
    let secret = Api::<Secret>::namespaced(t.client.clone(), &ns)
        .get("demo-credentials")
        .await
        .expect("chart secret created");
    assert!(
        secret.data.is_some_and(|d| d.contains_key("password")),
        "stringData became data"
    );
    Api::<Service>::namespaced(t.client.clone(), &ns)
        .get("demo-web")
        .await
        .expect("chart service created");
    Api::<Deployment>::namespaced(t.client.clone(), &ns)
        .get("demo-web")
        .await
        .expect("chart deployment created");
    assert_eq!(release_secrets(&t.client, &ns).await, 1);

    helm.ok(&[
        "upgrade",
        "demo",
        &chart,
        "-n",
        &ns,
        "--set",
        "greeting=bye",
    ])
    .await;
    assert_eq!(greeting(&t.client, &ns).await.as_deref(), Some("bye"));
    assert_eq!(
        releases(&helm, &ns).await,
        vec![("demo".into(), "2".into(), "deployed".into())]
    );
    assert_eq!(release_secrets(&t.client, &ns).await, 2);

    let out = helm.ok(&["uninstall", "demo", "-n", &ns]).await;
    assert!(out.contains("release \"demo\" uninstalled"), "{out}");
    assert!(releases(&helm, &ns).await.is_empty());
    let client = t.client.clone();
    let ns2 = ns.to_string();
    eventually("chart objects and release records deleted", || {
        let (client, ns) = (client.clone(), ns2.clone());
        async move {
            let gone = greeting(&client, &ns).await.is_none()
                && Api::<Secret>::namespaced(client.clone(), &ns)
                    .get_opt("demo-credentials")
                    .await
                    .expect("get secret")
                    .is_none()
                && Api::<Service>::namespaced(client.clone(), &ns)
                    .get_opt("demo-web")
                    .await
                    .expect("get service")
                    .is_none()
                && Api::<Deployment>::namespaced(client.clone(), &ns)
                    .get_opt("demo-web")
                    .await
                    .expect("get deployment")
                    .is_none()
                && release_secrets(&client, &ns).await == 0;
            gone.then_some(())
        }
    })
    .await;
}

/// `helm install --wait` (kstatus "watcher" strategy) and `--wait=legacy` (which looks
/// for the Deployment's current ReplicaSet) both finish once simulated workloads report
/// ready. Dev-only: a real cluster would need the image to run.
#[tokio::test]
async fn helm_install_wait_with_simulated_workloads() {
    let config = DevClusterConfig {
        simulate_workloads: true,
        workload_delay: std::time::Duration::from_millis(200),
        ..DevClusterConfig::default()
    };
    let Some(t) = dev_only("needs workload simulation", config).await else {
        return;
    };
    let home = tempfile::tempdir().expect("tempdir");
    let Some(helm) = helm(&t, home.path()) else {
        return;
    };
    let chart = chart();
    for strategy in ["watcher", "legacy"] {
        let ns = namespace(&t.client, &format!("helm-wait-{strategy}")).await;
        let wait = format!("--wait={strategy}");
        helm.ok(&[
            "install",
            "demo",
            &chart,
            "-n",
            &ns,
            &wait,
            "--timeout",
            "30s",
        ])
        .await;
        let deployment = Api::<Deployment>::namespaced(t.client.clone(), &ns)
            .get("demo-web")
            .await
            .expect("deployment");
        let ready = deployment.status.and_then(|s| s.ready_replicas);
        assert_eq!(
            ready,
            Some(1),
            "{strategy}: deployment ready when helm returns"
        );
        let sets = Api::<ReplicaSet>::namespaced(t.client.clone(), &ns)
            .list(&ListParams::default())
            .await
            .expect("list replicasets")
            .items;
        assert_eq!(
            sets.len(),
            1,
            "{strategy}: one ReplicaSet owned by the Deployment"
        );
        assert_eq!(
            releases(&helm, &ns).await,
            vec![("demo".into(), "1".into(), "deployed".into())]
        );
    }
}
