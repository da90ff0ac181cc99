//! Watches: kube-rs' watcher with both initial-list strategies, and resuming.
//!
//! Every watch is scoped to the test's own objects by a label: a real cluster puts objects of
//! its own in every new namespace (kube-root-ca.crt, asynchronously), which could otherwise
//! show up in the middle of a test.

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use serde_json::json;

use crate::common::{DEADLINE, namespace, target};

/// The label on every object these tests create, and the selector that finds only them.
const SUITE: &str = "suite=watch";

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": { "name": name, "labels": { "suite": "watch" } },
        "data": { "v": "1" }
    }))
    .expect("configmap")
}

/// Whether the API server refused a streaming list: `sendInitialEvents` needs the WatchList
/// feature (off by default in Kubernetes 1.31 and older, and in 1.33), and a server without it
/// answers 422 Invalid.
fn streaming_lists_unsupported(e: &watcher::Error) -> bool {
    let invalid = |s: &kube::core::Status| s.code == 422 || s.reason == "Invalid";
    match e {
        watcher::Error::WatchStartFailed(kube::Error::Api(s)) => invalid(s),
        watcher::Error::WatchError(s) => invalid(s),
        _ => false,
    }
}

/// Whether [`sees_lifecycle`] ran to the end.
#[derive(Debug, PartialEq)]
enum Outcome {
    Checked,
    /// The server does not serve streaming lists; nothing was checked.
    StreamingListsUnsupported,
}

/// Drives a watcher until it has seen `cfg` added, modified and deleted.
async fn sees_lifecycle(api: Api<ConfigMap>, config: watcher::Config) -> Outcome {
    let streaming = config.initial_list_strategy == watcher::InitialListStrategy::StreamingList;
    let mut stream = watcher::watcher(api.clone(), config.labels(SUITE)).boxed();
    // Wait for the initial list to finish, then change things.
    let initial_done = tokio::time::timeout(DEADLINE, async {
        loop {
            match stream.try_next().await {
                Ok(Some(Event::InitDone)) => return Outcome::Checked,
                Ok(Some(_)) => {}
                Ok(None) => panic!("watch stream ended before the initial list completed"),
                Err(e) if streaming && streaming_lists_unsupported(&e) => {
                    return Outcome::StreamingListsUnsupported;
                }
                Err(e) => panic!("watch stream: {e}"),
            }
        }
    });
    if initial_done.await.expect("initial list completes") != Outcome::Checked {
        return Outcome::StreamingListsUnsupported;
    }
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
    Outcome::Checked
}

#[tokio::test]
async fn watcher_sees_added_modified_deleted() {
    let t = target().await;
    let ns = namespace(&t.client, "watch").await;
    let outcome = sees_lifecycle(
        Api::namespaced(t.client.clone(), &ns),
        watcher::Config::default(),
    )
    .await;
    assert_eq!(outcome, Outcome::Checked);
}

#[tokio::test]
async fn streaming_list_watcher_works() {
    let t = target().await;
    let ns = namespace(&t.client, "wstream").await;
    let outcome = sees_lifecycle(
        Api::namespaced(t.client.clone(), &ns),
        watcher::Config::default().streaming_lists(),
    )
    .await;
    if outcome == Outcome::StreamingListsUnsupported {
        // The dev cluster serves streaming lists: there the whole test must run.
        assert!(
            t.dev.is_none(),
            "the dev cluster refused a streaming list (sendInitialEvents)"
        );
        eprintln!(
            "\n!!!!!!!! SKIPPED: the cluster answered 422 Invalid to sendInitialEvents (the \
             WatchList feature is off); streaming lists were NOT checked !!!!!!!!\n"
        );
    }
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
        .watch(&WatchParams::default().labels(SUITE).timeout(5), &rv)
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
