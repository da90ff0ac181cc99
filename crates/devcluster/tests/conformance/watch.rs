//! Watches: kube-rs' watcher with both initial-list strategies, and resuming.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

use crate::common::{DEADLINE, namespace, target};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({ "metadata": { "name": name }, "data": { "v": "1" } }))
        .expect("configmap")
}

/// Drives a watcher until it has seen `cfg` added, modified and deleted.
async fn sees_lifecycle(api: Api<ConfigMap>, config: watcher::Config) {
    let mut stream = watcher::watcher(api.clone(), config).boxed();
    // Wait for the initial list to finish, then change things.
    let initial_done = tokio::time::timeout(DEADLINE, async {
        while let Some(e) = stream.try_next().await.expect("watch stream") {
            if matches!(e, Event::InitDone) {
                return;
            }
        }
    });
    initial_done.await.expect("initial list completes");
    api.create(&PostParams::default(), &cm("cfg"))
        .await
        .expect("create");
    api.patch(
        "cfg",
        &PatchParams::default(),
        &Patch::Merge(json!({ "data": { "v": "2" } })),
    )
    .await
    .expect("modify");
    api.delete("cfg", &DeleteParams::default())
        .await
        .expect("delete");
    let mut seen = Vec::new();
    tokio::time::timeout(DEADLINE, async {
        while let Some(e) = stream.try_next().await.expect("watch stream") {
            match e {
                Event::Apply(c) => seen.push(format!(
                    "apply:{}",
                    c.data.and_then(|d| d.get("v").cloned()).unwrap_or_default()
                )),
                Event::Delete(_) => {
                    seen.push("delete".into());
                    return;
                }
                _ => {}
            }
        }
    })
    .await
    .expect("events arrive");
    assert_eq!(seen, vec!["apply:1", "apply:2", "delete"]);
}

#[tokio::test]
async fn watcher_sees_added_modified_deleted() {
    let t = target().await;
    let ns = namespace(&t.client, "watch").await;
    sees_lifecycle(
        Api::namespaced(t.client.clone(), &ns),
        watcher::Config::default(),
    )
    .await;
}

#[tokio::test]
async fn streaming_list_watcher_works() {
    let t = target().await;
    let ns = namespace(&t.client, "wstream").await;
    sees_lifecycle(
        Api::namespaced(t.client.clone(), &ns),
        watcher::Config::default().streaming_lists(),
    )
    .await;
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version() {
    let t = target().await;
    let ns = namespace(&t.client, "wresume").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let created = api
        .create(&PostParams::default(), &cm("a"))
        .await
        .expect("create");
    let rv = created.metadata.resource_version.expect("rv");
    api.create(&PostParams::default(), &cm("b"))
        .await
        .expect("create b");
    let mut events = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .expect("watch")
        .boxed();
    let first = tokio::time::timeout(DEADLINE, events.try_next())
        .await
        .expect("event in time")
        .expect("stream ok")
        .expect("an event");
    match first {
        WatchEvent::Added(c) => assert_eq!(
            c.metadata.name.as_deref(),
            Some("b"),
            "only changes after rv are replayed"
        ),
        other => panic!("expected ADDED b, got {other:?}"),
    }
}
