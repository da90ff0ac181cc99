//! Behaviour that only the dev cluster has: persistence, workload simulation, the
//! bearer token it was started with, and the separate-process binary.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use berth_devcluster::{DevCluster, DevClusterConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::common::{client_for, code, dev_only, eventually, namespace};

#[tokio::test]
async fn objects_survive_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = DevClusterConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let Some(t) = dev_only("persistence is a dev cluster property", config.clone()).await else {
        return;
    };
    let ns = namespace(&t.client, "persist").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let c: ConfigMap =
        serde_json::from_value(json!({ "metadata": { "name": "kept" }, "data": { "k": "v" } }))
            .expect("cm");
    let created = api
        .create(&PostParams::default(), &c)
        .await
        .expect("create");
    t.dev.expect("dev cluster").shutdown().await;

    let again = DevCluster::start(config).await.expect("restart");
    let client = client_for(&again.kubeconfig_yaml()).await;
    let api: Api<ConfigMap> = Api::namespaced(client, &ns);
    let kept = api.get("kept").await.expect("still there after restart");
    assert_eq!(kept.metadata.uid, created.metadata.uid);
    assert_eq!(kept.data, created.data);
    let newer = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": "newer" } })).expect("cm"),
        )
        .await
        .expect("create");
    let rv = |o: &ConfigMap| {
        o.metadata
            .resource_version
            .as_deref()
            .and_then(|r| r.parse::<u64>().ok())
            .expect("numeric rv")
    };
    assert!(
        rv(&newer) > rv(&kept),
        "resourceVersions keep increasing across restarts"
    );
    again.shutdown().await;
}

#[tokio::test]
async fn deployments_become_ready_when_simulated() {
    let config = DevClusterConfig {
        simulate_workloads: true,
        workload_delay: Duration::from_millis(200),
        ..Default::default()
    };
    let Some(t) = dev_only("a real cluster runs real controllers", config).await else {
        return;
    };
    let ns = namespace(&t.client, "sim").await;
    let api: Api<Deployment> = Api::namespaced(t.client.clone(), &ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "web" },
        "spec": { "replicas": 2, "selector": { "matchLabels": { "app": "web" } },
            "template": { "metadata": { "labels": { "app": "web" } }, "spec": { "containers": [ { "name": "web", "image": "nginx" } ] } } }
    })).expect("deployment");
    let created = api
        .create(&PostParams::default(), &d)
        .await
        .expect("create");
    assert!(created.status.is_none(), "not ready at creation");
    let status = eventually("the deployment to be ready", || async {
        let s = api.get("web").await.expect("get").status?;
        (s.ready_replicas == Some(2) && s.observed_generation == Some(1)).then_some(s)
    })
    .await;
    let available =
        status.conditions.unwrap_or_default().into_iter().any(|c| {
            c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True")
        });
    assert!(available);
}

#[tokio::test]
async fn a_configured_admin_token_is_the_kubeconfig_s() {
    let config = DevClusterConfig {
        admin_token: Some("s3cret".into()),
        ..Default::default()
    };
    let Some(t) = dev_only("the token is the dev cluster's own", config).await else {
        return;
    };
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), "kube-system");
    api.list(&Default::default())
        .await
        .expect("the kubeconfig carries the token");
    let dev = t.dev.as_ref().expect("dev");
    assert_eq!(dev.admin_token(), "s3cret");
    assert!(dev.kubeconfig_yaml().contains("\"s3cret\""));
    let wrong = crate::common::client_as(&t.kubeconfig, Some("s3cre")).await;
    let err = Api::<ConfigMap>::namespaced(wrong, "kube-system")
        .list(&Default::default())
        .await
        .expect_err("a wrong token");
    assert_eq!(code(&err), 401);
}

#[tokio::test]
async fn binary_prints_its_address_and_serves() {
    if crate::common::real_cluster().is_some() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_berth-devcluster"))
        .arg("--data-dir")
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("binary starts");
    let stdout = child.stdout.take().expect("stdout");
    let (first, second) = tokio::task::spawn_blocking(move || {
        let mut reader = BufReader::new(stdout);
        let (mut first, mut second) = (String::new(), String::new());
        reader.read_line(&mut first)?;
        reader.read_line(&mut second)?;
        Ok::<_, std::io::Error>((first, second))
    })
    .await
    .expect("join")
    .expect("two lines");
    let url = first
        .trim()
        .strip_prefix("listening on ")
        .expect("`listening on URL` first line")
        .to_string();
    let kubeconfig = second
        .trim()
        .strip_prefix("kubeconfig ")
        .expect("`kubeconfig PATH` second line")
        .to_string();
    let client = client_for(&std::fs::read_to_string(&kubeconfig).expect("kubeconfig")).await;
    let listed = Api::<ConfigMap>::all(client)
        .list(&Default::default())
        .await;
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let anonymous = crate::common::client_as(std::path::Path::new(&kubeconfig), None).await;
    let refused = Api::<ConfigMap>::all(anonymous)
        .list(&Default::default())
        .await;
    // SIGTERM the child we started, by its pid, and wait for it.
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let status = child.wait().expect("child exits");
    listed.expect("the separate process serves the API");
    assert_eq!(code(&refused.expect_err("no token")), 403);
    assert!(status.success(), "clean exit on SIGTERM: {status:?}");
}

#[tokio::test]
async fn watch_from_before_a_restart_is_gone() {
    use futures::TryStreamExt;
    use kube::api::{WatchEvent, WatchParams};
    let dir = tempfile::tempdir().expect("tempdir");
    let config = DevClusterConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    // A real apiserver keeps minutes of history in etcd; only here can a test reliably
    // age a resourceVersion out (a restart starts the event history afresh).
    let Some(t) = dev_only(
        "ageing out history needs control of the server",
        config.clone(),
    )
    .await
    else {
        return;
    };
    let ns = namespace(&t.client, "gone").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let first = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": "a" } })).expect("cm"),
        )
        .await
        .expect("create");
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({ "metadata": { "name": "b" } })).expect("cm"),
    )
    .await
    .expect("create");
    t.dev.expect("dev").shutdown().await;
    let again = DevCluster::start(config).await.expect("restart");
    let api: Api<ConfigMap> = Api::namespaced(client_for(&again.kubeconfig_yaml()).await, &ns);
    let old_rv = first.metadata.resource_version.expect("rv");
    let mut events = Box::pin(
        api.watch(&WatchParams::default().timeout(5), &old_rv)
            .await
            .expect("watch opens"),
    );
    let event = tokio::time::timeout(crate::common::DEADLINE, events.try_next())
        .await
        .expect("in time")
        .expect("stream ok")
        .expect("an event");
    match event {
        WatchEvent::Error(status) => assert_eq!(status.code, 410),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    again.shutdown().await;
}
