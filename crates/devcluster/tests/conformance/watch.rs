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

/// Why the API server refused a streaming list (`sendInitialEvents`), if it did:
/// - the WatchList feature is off (Kubernetes 1.31 and older, and 1.33): 422 Invalid;
/// - the storage cannot serve one (etcd older than 3.5.13 has no watch-progress requests):
///   an ERROR event `500 InternalError` naming the `RequestWatchProgress` storage feature.
fn streaming_lists_unsupported(e: &watcher::Error) -> Option<String> {
    let why = |s: &kube::core::Status| {
        if s.code == 422 || s.reason == "Invalid" {
            Some(format!(
                "422 Invalid (the WatchList feature is off): {}",
                s.message
            ))
        } else if s.code == 500 && s.message.contains("RequestWatchProgress") {
            Some(format!(
                "500 {} (the storage has no watch-progress requests): {}",
                s.reason, s.message
            ))
        } else {
            None
        }
    };
    match e {
        watcher::Error::WatchStartFailed(kube::Error::Api(s)) => why(s),
        watcher::Error::WatchError(s) => why(s),
        _ => None,
    }
}

/// Whether [`sees_lifecycle`] ran to the end.
#[derive(Debug, PartialEq)]
enum Outcome {
    Checked,
    /// The server does not serve streaming lists (why); nothing was checked.
    StreamingListsUnsupported(String),
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
                Err(e) if streaming => match streaming_lists_unsupported(&e) {
                    Some(why) => return Outcome::StreamingListsUnsupported(why),
                    None => panic!("watch stream: {e}"),
                },
                Err(e) => panic!("watch stream: {e}"),
            }
        }
    });
    let initial = initial_done.await.expect("initial list completes");
    if initial != Outcome::Checked {
        return initial;
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
    if let Outcome::StreamingListsUnsupported(why) = outcome {
        // The dev cluster serves streaming lists: there the whole test must run.
        assert!(
            t.dev.is_none(),
            "the dev cluster refused a streaming list (sendInitialEvents): {why}"
        );
        eprintln!(
            "\n!!!!!!!! SKIPPED: the cluster refused sendInitialEvents with {why}; streaming \
             lists were NOT checked !!!!!!!!\n"
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
