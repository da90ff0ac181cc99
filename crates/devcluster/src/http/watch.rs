//! The watch response: a stream of newline-delimited `{"type":..,"object":..}` events.
//!
//! The stream ends when the client's `timeoutSeconds` passes, when the server shuts
//! down, or when the store disconnects a watcher that fell behind; clients then
//! re-watch from the last resourceVersion they saw.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::query::WatchParams;
use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::store::{Presented, Store, WatchStream};
use crate::watch::{EventType, WatchEvent};

/// How often an idle watch with `allowWatchBookmarks` gets a bookmark. kube-apiserver
/// sends them about once a minute; more often keeps a dev cluster's clients' resume
/// points fresh at negligible cost.
const BOOKMARK_INTERVAL: Duration = Duration::from_secs(10);

/// One `{"type":…,"object":…}` line, serialized straight from the shared object (each
/// watcher renders its own line, so copying the object here would cost one deep copy
/// per watcher per event).
fn line(rt: &ResourceType, event: &WatchEvent) -> Bytes {
    match &event.rendered {
        Some(shared) => shared.get_or_render(&rt.api_version(), || render(rt, event)),
        None => render(rt, event),
    }
}

fn render(rt: &ResourceType, event: &WatchEvent) -> Bytes {
    #[derive(serde::Serialize)]
    struct Line<'a, O: serde::Serialize> {
        #[serde(rename = "type")]
        kind: &'a str,
        object: O,
    }
    let kind = event.kind.as_str();
    let api_version = rt.api_version();
    let result = match event.kind {
        // A Status is sent as it is, not as an object of the watched kind.
        EventType::Error => serde_json::to_vec(&Line {
            kind,
            object: &*event.object,
        }),
        _ => serde_json::to_vec(&Line {
            kind,
            object: Presented {
                api_version: &api_version,
                kind: &rt.kind,
                object: &event.object,
                typed: true,
            },
        }),
    };
    // Serializing a tree of strings, numbers and maps cannot fail.
    let mut bytes = result.unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// A watch that could not start from its resourceVersion: 200 with one ERROR event,
/// which is how kube-apiserver reports 410 Gone and what clients re-list on.
pub fn expired(rt: &ResourceType, err: &ApiError) -> Response {
    let event = WatchEvent {
        kind: EventType::Error,
        object: Arc::new(err.to_status()),
        rendered: None,
    };
    respond(Body::from(line(rt, &event)))
}

fn respond(body: Body) -> Response {
    Response::builder()
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap_or_default()
}

struct Pump {
    rt: ResourceType,
    store: Arc<Store>,
    live: mpsc::Receiver<WatchEvent>,
    bookmarks: Option<tokio::time::Interval>,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    shutdown: CancellationToken,
}

impl Pump {
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            let tick = async {
                match self.bookmarks.as_mut() {
                    Some(i) => {
                        i.tick().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = self.shutdown.cancelled() => return None,
                _ = &mut self.deadline => return None,
                event = self.live.recv() => return event.map(|e| line(&self.rt, &e)),
                _ = tick => {
                    // Everything committed up to `rv` was queued before `rv` became
                    // visible, so an empty queue means the client has seen it all and
                    // may resume from `rv`.
                    let rv = self.store.resource_version();
                    if self.live.is_empty() {
                        let object = Arc::new(json!({ "metadata": { "resourceVersion": rv.to_string() } }));
                        return Some(line(&self.rt, &WatchEvent { kind: EventType::Bookmark, object, rendered: None }));
                    }
                }
            }
        }
    }
}

pub fn stream(
    rt: ResourceType,
    store: Arc<Store>,
    watch: WatchStream,
    params: &WatchParams,
    shutdown: CancellationToken,
) -> Response {
    let initial: Vec<Bytes> = watch
        .initial
        .iter()
        .filter(|e| e.kind != EventType::Bookmark || params.bookmarks)
        .map(|e| line(&rt, e))
        .collect();
    let bookmarks = params.bookmarks.then(|| {
        let mut i = tokio::time::interval_at(
            tokio::time::Instant::now() + BOOKMARK_INTERVAL,
            BOOKMARK_INTERVAL,
        );
        i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        i
    });
    let pump = Pump {
        rt,
        store,
        live: watch.live,
        bookmarks,
        deadline: Box::pin(tokio::time::sleep(params.timeout)),
        shutdown,
    };
    let live = futures::stream::unfold(pump, |mut p| async move { p.next().await.map(|b| (b, p)) });
    let body = futures::stream::iter(initial)
        .chain(live)
        .map(Ok::<Bytes, std::convert::Infallible>);
    respond(Body::from_stream(body))
}
