//! What kube-controller-manager puts in every active namespace: the `default`
//! ServiceAccount (pods without `serviceAccountName` use it) and the `kube-root-ca.crt`
//! ConfigMap. Clients see both in listings, so the dev cluster has them too.
//!
//! `kube-root-ca.crt` carries the dev cluster's CA (as kube-controller-manager's
//! root-ca-cert-publisher keeps it current, so does this: a stale `ca.crt` is replaced).

use std::collections::HashSet;

use serde_json::json;

use crate::resources::Registry;
use crate::store::SharedObject as StoredObject;
use crate::store::{Part, Store, WriteOptions, meta_str};

const MANAGER: &str = "kube-controller-manager";

/// Creates the missing defaults in every namespace that is not terminating.
pub fn reconcile(store: &Store, registry: &Registry, objects: &[StoredObject]) {
    let present: HashSet<(&str, String, String)> = objects
        .iter()
        .map(|o| {
            (
                o.resource.as_str(),
                meta_str(&o.object, "namespace"),
                meta_str(&o.object, "name"),
            )
        })
        .collect();
    let active = objects.iter().filter(|o| {
        o.group.is_empty()
            && o.resource == "namespaces"
            && o.object.pointer("/metadata/deletionTimestamp").is_none()
    });
    // A CA that changed (a new data directory's, or one written before the dev cluster had
    // one) is put into every existing kube-root-ca.crt.
    if let Some(rt) = registry.get("", "v1", "configmaps") {
        for o in objects.iter().filter(|o| {
            o.group.is_empty()
                && o.resource == "configmaps"
                && meta_str(&o.object, "name") == "kube-root-ca.crt"
                && o.object.pointer("/data/ca.crt").and_then(|c| c.as_str())
                    != Some(store.root_ca())
        }) {
            let ns = meta_str(&o.object, "namespace");
            let ca = store.root_ca().to_string();
            if let Err(e) = store.mutate(rt, &ns, "kube-root-ca.crt", Part::Main, MANAGER, |c| {
                c["data"]["ca.crt"] = serde_json::Value::String(ca);
            }) {
                tracing::warn!(k8s.namespace = %ns, error = %e, "updating kube-root-ca.crt failed");
            }
        }
    }
    for ns in active.map(|o| meta_str(&o.object, "name")) {
        let wanted = [
            (
                "serviceaccounts",
                "default",
                json!({ "metadata": { "name": "default" } }),
            ),
            (
                "configmaps",
                "kube-root-ca.crt",
                json!({
                    "metadata": { "name": "kube-root-ca.crt", "annotations": { "kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters." } },
                    "data": { "ca.crt": store.root_ca() },
                }),
            ),
        ];
        for (resource, name, body) in wanted {
            if present.contains(&(resource, ns.clone(), name.to_string())) {
                continue;
            }
            let Some(rt) = registry.get("", "v1", resource) else {
                continue;
            };
            match store.create(rt, Some(&ns), body, &WriteOptions::internal(MANAGER)) {
                Ok(_) => {}
                // Raced with a user or with the namespace starting to terminate.
                Err(e) if matches!(e.code, 409 | 403 | 404) => {}
                Err(e) => {
                    tracing::warn!(k8s.namespace = %ns, k8s.name = name, error = %e, "creating namespace default failed")
                }
            }
        }
    }
}
