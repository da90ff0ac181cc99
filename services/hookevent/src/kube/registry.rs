//! The watch manager's registry: the watches, the bindings subscribed to them, and each
//! package's bindings and hook configurations. Plain data under the manager's lock.

use berth_names::{Generation, PackageKey};
use std::collections::{HashMap, HashSet};

use berth_hooks::HookConfig;
use kube::core::ApiResource;
use tokio_util::sync::CancellationToken;

use super::binding::{BindingState, ObjKey};

/// What one watch covers.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WatchKey {
    pub api_version: String,
    pub plural: String,
    pub namespace: Option<String>,
    pub labels: String,
    pub fields: String,
}

impl std::fmt::Display for WatchKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version, self.plural)?;
        if let Some(ns) = &self.namespace {
            write!(f, " in {ns}")?;
        }
        if !self.labels.is_empty() {
            write!(f, " labels {:?}", self.labels)?;
        }
        if !self.fields.is_empty() {
            write!(f, " fields {:?}", self.fields)?;
        }
        Ok(())
    }
}

pub(super) struct Watch {
    pub(super) resource: ApiResource,
    pub(super) subscribers: Vec<u64>,
    /// Packages' operators reading this watch: its events go to them too.
    pub(super) feeds: Vec<Feed>,
    pub(super) epoch: u64,
    pub(super) cancel: CancellationToken,
    /// Keys seen since the last `Init`; `Some` while a (re)list is in progress.
    pub(super) relist: Option<HashSet<ObjKey>>,
    pub(super) listed: bool,
    pub(super) error: Option<String>,
}

pub(super) struct Registered {
    pub(super) state: BindingState,
    pub(super) keys: Vec<WatchKey>,
    pub(super) pending: HashSet<WatchKey>,
    /// A binding with a namespace label selector follows the namespaces it matches.
    pub(super) follow: Option<Follow>,
}

/// How a binding with a namespace label selector grows and shrinks as namespaces come, go,
/// or change labels.
#[derive(Clone)]
pub(super) struct Follow {
    pub(super) selector: String,
    /// The binding's watch key with no namespace: each followed namespace gets a copy.
    pub(super) template: WatchKey,
    pub(super) resource: ApiResource,
}

/// One watch of the namespaces matching a label selector, shared by the bindings that follow
/// it.
pub(super) struct NamespaceWatch {
    pub(super) subscribers: Vec<u64>,
    pub(super) cancel: CancellationToken,
}

pub(super) struct PackageState {
    pub(super) generation: Generation,
    pub(super) bindings: Vec<u64>,
    /// Per hook, the bindings as the context builders need them (selectors are not needed there).
    pub(super) hooks: HashMap<String, HookConfig>,
}

/// An operator host's subscription to a watch: the watch's events, sent on `tx` under `id`.
#[derive(Clone)]
pub(super) struct Feed {
    pub(super) id: u64,
    pub(super) tx: tokio::sync::mpsc::Sender<super::operators::HostMsg>,
}

impl Watch {
    pub(super) fn new(resource: ApiResource) -> Watch {
        Watch {
            resource,
            subscribers: vec![],
            feeds: vec![],
            epoch: 0,
            cancel: CancellationToken::new(),
            relist: None,
            listed: false,
            error: None,
        }
    }

    /// Nobody reads it any more: it is to stop.
    pub(super) fn unused(&self) -> bool {
        self.subscribers.is_empty() && self.feeds.is_empty()
    }
}

#[derive(Default)]
pub(super) struct State {
    pub(super) next_id: u64,
    pub(super) next_epoch: u64,
    pub(super) watches: HashMap<WatchKey, Watch>,
    pub(super) bindings: HashMap<u64, Registered>,
    pub(super) packages: HashMap<PackageKey, PackageState>,
    /// By namespace label selector.
    pub(super) namespace_watches: HashMap<String, NamespaceWatch>,
    /// Per package, its operators (registered, and running once started).
    pub(super) operators: HashMap<PackageKey, super::operators::Hosted>,
}
