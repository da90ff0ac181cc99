//! The packages as lifecycle's Watch stream shows them (every package, from its current
//! state on): the controller reads status from here instead of asking lifecycle per
//! reconcile, and each change triggers the reconcile of the resource the package belongs to.
//! The stream is opened again (with backoff) whenever it ends; a fresh stream's first
//! messages are the current state, and packages the cache still holds that the store no
//! longer has are confirmed gone with a Get before they are dropped.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use berth_proto::v1;
use futures::StreamExt as _;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::resources::{Application, Module};

/// Triggers waiting to be reconciled; when full, a change waits (the stream is read no
/// faster than resources are triggered).
pub const MAX_TRIGGERS: usize = 4096;

/// The resource a package belongs to, by its key: an App `<namespace>.<name>` is the
/// Application `<name>` in `<namespace>`, a Module `<name>` the Module `<name>`.
#[derive(Clone, Debug)]
pub enum Trigger {
    Application(ObjectRef<Application>),
    Module(ObjectRef<Module>),
}

pub fn trigger_of(key: &str) -> Trigger {
    match key.split_once('.') {
        Some((namespace, name)) => Trigger::Application(ObjectRef::new(name).within(namespace)),
        None => Trigger::Module(ObjectRef::new(key)),
    }
}

/// What lifecycle last showed of each package, by key.
#[derive(Clone, Default)]
pub struct Packages {
    known: Arc<RwLock<HashMap<String, v1::Package>>>,
}

impl Packages {
    pub fn get(&self, key: &str) -> Option<v1::Package> {
        self.read().get(key).cloned()
    }

    /// Records what an answer of lifecycle showed (a Get after a change).
    pub fn put(&self, package: v1::Package) {
        self.write().insert(package.key.clone(), package);
    }

    pub fn forget(&self, key: &str) {
        self.write().remove(key);
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, v1::Package>> {
        self.known.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, v1::Package>> {
        self.known.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows lifecycle's Watch until `shutdown`, keeping the cache and sending a trigger
    /// per change (to `apps` or `modules` by the key's shape).
    pub async fn follow(
        self,
        lifecycle: crate::client::Lifecycle,
        apps: mpsc::Sender<ObjectRef<Application>>,
        modules: mpsc::Sender<ObjectRef<Module>>,
        shutdown: CancellationToken,
    ) {
        let mut backoff = Duration::from_millis(200);
        while !shutdown.is_cancelled() {
            let opened = tokio::select! {
                o = lifecycle.watch() => o,
                () = shutdown.cancelled() => return,
            };
            let mut stream = match opened {
                Ok(s) => Box::pin(s),
                Err(e) => {
                    tracing::warn!(error = %e, "lifecycle's Watch failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        () = shutdown.cancelled() => return,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                    continue;
                }
            };
            // Keys held before this stream: those it does not show again are checked.
            let mut unconfirmed: std::collections::HashSet<String> =
                self.read().keys().cloned().collect();
            let mut settled = tokio::time::interval(Duration::from_secs(5));
            settled.tick().await;
            loop {
                let item = tokio::select! {
                    item = stream.next() => item,
                    _ = settled.tick(), if !unconfirmed.is_empty() => {
                        self.confirm(&lifecycle, std::mem::take(&mut unconfirmed), &apps, &modules).await;
                        continue;
                    }
                    () = shutdown.cancelled() => return,
                };
                let package = match item {
                    Some(Ok(p)) => p,
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "lifecycle's Watch ended; opening it again");
                        break;
                    }
                    None => break,
                };
                backoff = Duration::from_millis(200);
                let key = package.key.clone();
                unconfirmed.remove(&key);
                if package.gone {
                    self.forget(&key);
                } else {
                    self.put(package);
                }
                send(&key, &apps, &modules).await;
            }
            // A stream that ended: opened again after a pause (growing while they keep ending).
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = shutdown.cancelled() => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    }

    /// Drops the packages a Get no longer finds, triggering their resources.
    async fn confirm(
        &self,
        lifecycle: &crate::client::Lifecycle,
        keys: std::collections::HashSet<String>,
        apps: &mpsc::Sender<ObjectRef<Application>>,
        modules: &mpsc::Sender<ObjectRef<Module>>,
    ) {
        for key in keys {
            let Some(known) = self.get(&key) else {
                continue;
            };
            let Some(r) = known.r#ref.clone() else {
                continue;
            };
            match lifecycle.get(r).await {
                Ok(Some(p)) => self.put(p),
                Ok(None) => self.forget(&key),
                Err(_) => continue,
            }
            send(&key, apps, modules).await;
        }
    }
}

async fn send(
    key: &str,
    apps: &mpsc::Sender<ObjectRef<Application>>,
    modules: &mpsc::Sender<ObjectRef<Module>>,
) {
    let _ = match trigger_of(key) {
        Trigger::Application(r) => apps.send(r).await.is_ok(),
        Trigger::Module(r) => modules.send(r).await.is_ok(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_name_their_resources() {
        match trigger_of("team-a.web") {
            Trigger::Application(r) => {
                assert_eq!(
                    (r.name.as_str(), r.namespace.as_deref()),
                    ("web", Some("team-a"))
                )
            }
            Trigger::Module(_) => panic!("an app key"),
        }
        assert!(
            matches!(trigger_of("cert-manager"), Trigger::Module(r) if r.name == "cert-manager")
        );
    }
}
