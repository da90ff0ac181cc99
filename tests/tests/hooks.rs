//! Hooks bound to Kubernetes objects, end to end: real hook scripts in a fixture package, real
//! berth processes, and the dev cluster (or the real cluster named by `BERTH_TEST_KUBECONFIG`).

use std::time::Duration;

use anyhow::{Context, bail};
use berth_proto::v1;
use berth_tests::{SplitTopology, TestCluster, journey};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Longest a hook reaction may take to become visible.
const REACT_DEADLINE: Duration = Duration::from_secs(60);

fn fixtures() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/packages").display().to_string()
}

async fn namespace(kube: &kube::Client) -> anyhow::Result<String> {
    let name = format!("hooks-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    Api::<Namespace>::all(kube.clone()).create(&PostParams::default(), &ns).await?;
    Ok(name)
}

fn configmap(name: &str, labels: Value, data: Value) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": data}))?)
}

/// The package's `seen` values, as recorded by its hooks.
fn seen(p: &v1::Package) -> Vec<String> {
    let values = p.values.as_ref().map(berth_proto::json::from_struct).unwrap_or(Value::Null);
    values["seen"].as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

/// Follows the package until `done(seen)` holds; fails on a hook error.
async fn wait_seen(client: &mut journey::Client, r: &v1::PackageRef, what: &str, done: impl Fn(&[String]) -> bool) -> anyhow::Result<Vec<String>> {
    let follow = async {
        let mut stream = client.watch(v1::WatchRequest { r#ref: Some(r.clone()) }).await?.into_inner();
        let mut last = vec![];
        while let Some(p) = stream.next().await {
            let p = p?;
            if let Some(h) = p.hooks.iter().find(|h| !h.last_error.is_empty()) {
                bail!("hook {} failed: {}", h.name, h.last_error);
            }
            last = seen(&p);
            if done(&last) {
                return Ok(last);
            }
        }
        bail!("watch ended; seen so far: {last:?}")
    };
    tokio::time::timeout(REACT_DEADLINE, follow).await.with_context(|| format!("waiting for {what}"))?
}

/// Polls the cluster until `check` holds (bounded).
async fn wait_cluster<F, Fut>(what: &str, check: F) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + REACT_DEADLINE;
    while !check().await? {
        if tokio::time::Instant::now() >= deadline {
            bail!("{what}: not within {REACT_DEADLINE:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// A kubernetes binding sees Synchronization (before onStartup) with the existing objects, then
/// Added/Modified/Deleted events with the jqFilter's result; changes that leave the filter result
/// unchanged fire nothing; the hook's object operations mirror the ConfigMaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_binding_synchronization_events_and_object_operations() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = kubernetes_binding_journey(&topology.gateway.endpoint(), cluster.client.clone()).await;
    topology.stop().await;
    cluster.stop().await;
    result
}

async fn kubernetes_binding_journey(endpoint: &str, kube: kube::Client) -> anyhow::Result<()> {
    let ns = namespace(&kube).await?;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let pp = PostParams::default();
    cms.create(&pp, &configmap("pre", json!({"app": "watched"}), json!({"v": "1"}))?).await?;
    cms.create(&pp, &configmap("ignored", json!({"app": "other"}), json!({"v": "x"}))?).await?;

    let mut client = journey::connect(endpoint).await?;
    let r = v1::PackageRef { kind: v1::PackageKind::App as i32, name: "watcher".into(), namespace: ns.clone() };
    let accepted = client
        .update(v1::UpdateRequest { r#ref: Some(r.clone()), repository: fixtures(), version: "1.0.0".into(), ..Default::default() })
        .await?
        .into_inner();
    journey::wait_running(&mut client, &r, accepted.generation).await?;

    // Synchronization saw the existing watched ConfigMap (not the other one), before onStartup.
    let s = wait_seen(&mut client, &r, "Synchronization and onStartup", |s| s.len() >= 2).await?;
    assert_eq!(s[..2], ["Synchronization:cms:pre=1".to_owned(), "onStartup".to_owned()], "{s:?}");
    let mirror = |name: &'static str, v: &'static str| {
        let cms = cms.clone();
        move || {
            let cms = cms.clone();
            async move {
                let cm = cms.get_opt(&format!("{name}-mirror")).await?;
                Ok(cm.and_then(|c| c.data).and_then(|d| d.get("v").cloned()).as_deref() == Some(v))
            }
        }
    };
    wait_cluster("pre-mirror created by the Synchronization run", mirror("pre", "1")).await?;

    // Added.
    cms.create(&pp, &configmap("a", json!({"app": "watched"}), json!({"v": "a"}))?).await?;
    wait_seen(&mut client, &r, "Added", |s| s.contains(&"Event:Added:a:a".to_owned())).await?;
    wait_cluster("a-mirror created by the Added run", mirror("a", "a")).await?;

    // A change outside the filter result fires nothing; a change inside fires Modified.
    let merge = |data: Value| Patch::Merge(json!({"data": data}));
    cms.patch("a", &PatchParams::default(), &merge(json!({"other": "ignored"}))).await?;
    cms.patch("a", &PatchParams::default(), &merge(json!({"v": "b"}))).await?;
    let s = wait_seen(&mut client, &r, "Modified", |s| s.contains(&"Event:Modified:a:b".to_owned())).await?;
    let after_added: Vec<&String> = s.iter().skip_while(|x| *x != "Event:Added:a:a").skip(1).collect();
    assert_eq!(after_added, ["Event:Modified:a:b"], "the unrelated change was dropped: {s:?}");
    wait_cluster("a-mirror updated", mirror("a", "b")).await?;

    // Deleted.
    cms.delete("a", &DeleteParams::default()).await?;
    wait_seen(&mut client, &r, "Deleted", |s| s.contains(&"Event:Deleted:a:b".to_owned())).await?;
    wait_cluster("a-mirror deleted by the Deleted run", || {
        let cms = cms.clone();
        async move { Ok(cms.get_opt("a-mirror").await?.is_none()) }
    })
    .await?;
    // A settings-only Update keeps the bindings, and their events still reach the hook.
    let again = client
        .update(v1::UpdateRequest { r#ref: Some(r.clone()), repository: fixtures(), version: "1.0.0".into(), ..Default::default() })
        .await?
        .into_inner();
    assert!(again.generation > accepted.generation);
    journey::wait_running(&mut client, &r, again.generation).await?;
    cms.create(&pp, &configmap("b", json!({"app": "watched"}), json!({"v": "b"}))?).await?;
    wait_seen(&mut client, &r, "Added after a settings-only Update", |s| s.contains(&"Event:Added:b:b".to_owned())).await?;

    // Objects outside the label selector never reached the hook.
    let s = wait_seen(&mut client, &r, "final values", |_| true).await?;
    assert!(!s.iter().any(|x| x.contains("ignored")), "{s:?}");

    client.remove(v1::RemoveRequest { r#ref: Some(r.clone()) }).await?;
    journey::wait_gone(&mut client, &r).await?;
    let _ = Api::<Namespace>::all(kube).delete(&ns, &DeleteParams::default()).await;
    Ok(())
}

/// A hook whose object-operations file has an unknown key fails with an error naming the key,
/// and none of its operations (not even the valid one before it) is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_object_operations_apply_nothing() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = async {
        let kube = cluster.client.clone();
        let ns = namespace(&kube).await?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = v1::PackageRef { kind: v1::PackageKind::App as i32, name: "badops".into(), namespace: ns.clone() };
        client
            .update(v1::UpdateRequest { r#ref: Some(r.clone()), repository: fixtures(), version: "1.0.0".into(), ..Default::default() })
            .await?;
        let error = tokio::time::timeout(REACT_DEADLINE, async {
            let mut stream = client.watch(v1::WatchRequest { r#ref: Some(r.clone()) }).await?.into_inner();
            while let Some(p) = stream.next().await {
                let p = p?;
                if !p.last_error.is_empty() {
                    return Ok(p.last_error);
                }
            }
            bail!("watch ended without an error")
        })
        .await
        .context("waiting for the hook failure")??;
        assert!(error.contains("bad.sh") && error.contains("colour"), "the error names the hook and the key: {error}");
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        assert!(cms.get_opt("must-not-exist").await?.is_none(), "nothing of the batch was applied");
        client.remove(v1::RemoveRequest { r#ref: Some(r.clone()) }).await?;
        journey::wait_gone(&mut client, &r).await?;
        let _ = Api::<Namespace>::all(kube).delete(&ns, &DeleteParams::default()).await;
        Ok(())
    }
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}
