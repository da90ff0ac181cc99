//! Reads: get, list (selectors, limit/continue) and starting a watch.

use std::sync::Arc;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{Store, present};
use crate::resources::ResourceType;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::watch::{EventType, WatchEvent, WatchFilter};

/// Options of a list call.
#[derive(Debug, Default, Clone)]
pub struct ListOptions {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
}

/// One page of a list.
#[derive(Debug)]
pub struct ListResult {
    /// Shared with the store; rendered at the requested version by [`ListResult::to_bytes`].
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

impl ListResult {
    /// The `<Kind>List` body, serialized straight from the shared objects (no copy of
    /// the items; see [`super::Presented`]).
    pub fn to_bytes(&self, rt: &ResourceType) -> Vec<u8> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Body<'a> {
            api_version: String,
            kind: &'a str,
            metadata: Value,
            items: Vec<super::Presented<'a>>,
        }
        let api_version = rt.api_version();
        let body = Body {
            api_version: api_version.clone(),
            kind: &rt.list_kind,
            metadata: self.list_meta(),
            items: self
                .items
                .iter()
                .map(|o| super::Presented {
                    api_version: &api_version,
                    kind: &rt.kind,
                    object: o,
                    typed: rt.custom,
                })
                .collect(),
        };
        // Serializing a tree of strings, numbers and maps cannot fail.
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// The list's `metadata` (resourceVersion, continue, remainingItemCount).
    pub fn list_meta(&self) -> Value {
        let mut metadata = json!({ "resourceVersion": self.resource_version.to_string() });
        if let Some(c) = &self.continue_token {
            metadata["continue"] = Value::String(c.clone());
        }
        if let Some(r) = self.remaining {
            metadata["remainingItemCount"] = json!(r);
        }
        metadata
    }
}

/// A continue token: the list's snapshot resourceVersion and the last key returned.
/// Opaque to clients (base64 JSON), like the apiserver's.
#[derive(Serialize, Deserialize)]
struct ContinueToken {
    rv: u64,
    namespace: String,
    name: String,
}

impl ContinueToken {
    fn encode(&self) -> String {
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    fn decode(token: &str) -> Result<ContinueToken, ApiError> {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| ApiError::bad_request(format!("invalid continue token {token:?}")))
    }
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStart {
    /// `resourceVersion` unset or "0": synthetic ADDED events for current objects first.
    Now,
    /// `sendInitialEvents=true`: ADDED for current objects, then a bookmark marking the end.
    InitialEvents,
    /// Resume after this resourceVersion.
    After(u64),
}

/// What a started watch delivers: events to send first, then the live channel.
pub struct WatchStream {
    pub initial: Vec<WatchEvent>,
    pub live: mpsc::Receiver<WatchEvent>,
    pub resource_version: u64,
}

impl Store {
    pub fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let st = self.lock();
        st.get(&rt.gr(), namespace, name)
            .map(|o| present(rt, o))
            .ok_or_else(|| ApiError::not_found(&rt.group, &rt.plural, name))
    }

    pub fn list(&self, rt: &ResourceType, opts: &ListOptions) -> Result<ListResult, ApiError> {
        let st = self.lock();
        let token = opts
            .continue_token
            .as_deref()
            .map(ContinueToken::decode)
            .transpose()?;
        let snapshot_rv = match &token {
            Some(t) => {
                st.hub.check_rv(t.rv).map_err(|_| {
                    ApiError::gone("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.")
                })?;
                t.rv
            }
            None => st.rv,
        };
        let filter = WatchFilter {
            gr: rt.gr(),
            namespace: opts.namespace.clone(),
            labels: opts.labels.clone(),
            fields: opts.fields.clone(),
        };
        let after = token.map(|t| (t.namespace, t.name));
        let matching: Vec<(&(String, String), &Arc<Value>)> = st
            .objects
            .get(&rt.gr())
            .into_iter()
            .flat_map(|c| c.iter())
            .filter(|(k, _)| after.as_ref().is_none_or(|a| *k > a))
            .filter(|(_, o)| filter.matches(o))
            .collect();
        let limit = opts.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let page = matching.len().min(limit);
        let items = matching[..page]
            .iter()
            .map(|(_, o)| Arc::clone(o))
            .collect();
        let (continue_token, remaining) = match matching.get(page.wrapping_sub(1)) {
            Some(((namespace, name), _)) if matching.len() > page => {
                let token = ContinueToken {
                    rv: snapshot_rv,
                    namespace: namespace.clone(),
                    name: name.clone(),
                };
                (Some(token.encode()), Some(matching.len() - page))
            }
            _ => (None, None),
        };
        Ok(ListResult {
            items,
            resource_version: snapshot_rv,
            continue_token,
            remaining,
        })
    }

    /// Starts a watch; the initial events and the subscription are taken under one lock,
    /// so nothing committed in between is lost or duplicated.
    pub fn watch(
        &self,
        rt: &ResourceType,
        filter: WatchFilter,
        start: WatchStart,
    ) -> Result<WatchStream, ApiError> {
        let mut st = self.lock();
        let current = st.rv;
        let initial_objects = |st: &super::State| -> Vec<WatchEvent> {
            st.objects
                .get(&rt.gr())
                .into_iter()
                .flat_map(|c| c.values())
                .filter(|o| filter.matches(o))
                .map(|o| WatchEvent {
                    kind: EventType::Added,
                    object: o.clone(),
                    rendered: None,
                })
                .collect()
        };
        let (initial, live) = match start {
            WatchStart::Now | WatchStart::InitialEvents => {
                let mut initial = initial_objects(&st);
                let (_, rx) = st
                    .hub
                    .subscribe(filter.clone(), None)
                    .map_err(|_| ApiError::internal("subscribe"))?;
                if start == WatchStart::InitialEvents {
                    initial.push(WatchEvent {
                        kind: EventType::Bookmark,
                        object: std::sync::Arc::new(initial_events_end(current)),
                        rendered: None,
                    });
                }
                (initial, rx)
            }
            WatchStart::After(rv) => {
                st.hub
                    .subscribe(filter.clone(), Some(rv))
                    .map_err(|too_old| {
                        ApiError::gone(format!(
                            "too old resource version: {} ({})",
                            too_old.requested,
                            too_old.oldest + 1
                        ))
                    })?
            }
        };
        Ok(WatchStream {
            initial,
            live,
            resource_version: current,
        })
    }
}

/// The bookmark that ends the initial events of a `sendInitialEvents=true` watch.
fn initial_events_end(rv: u64) -> Value {
    json!({ "metadata": { "resourceVersion": rv.to_string(), "annotations": { "k8s.io/initial-events-end": "true" } } })
}
