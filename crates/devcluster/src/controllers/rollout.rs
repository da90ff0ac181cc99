//! The ReplicaSet half of the simulated Deployment controller.
//!
//! Clients that judge a Deployment's readiness by its ReplicaSets (helm's `--wait=legacy`,
//! `kubectl rollout status` on older versions, dashboards) look for the Deployment's
//! *current* ReplicaSet: one controlled by the Deployment (ownerReference with
//! `controller: true` and the Deployment's uid) whose pod template equals the
//! Deployment's once the `pod-template-hash` label is ignored. So when the simulator
//! marks a Deployment ready it first makes the world match, as kube-controller-manager
//! would have: the current ReplicaSet exists with the desired replicas and a ready
//! status, and older ReplicaSets of the same Deployment are scaled to zero. Deleting the
//! Deployment deletes its ReplicaSets through the ordinary owner-reference garbage
//! collection. No pods are created.

use serde_json::{Value, json};

use crate::status::ApiError;
use crate::store::{ListOptions, Part, Store, WriteOptions, meta_str};

use super::simulate::{MANAGER, simulated_status};

/// The label the Deployment controller adds to tell its ReplicaSets' pods apart.
const HASH_LABEL: &str = "pod-template-hash";
const REVISION: &str = "deployment.kubernetes.io/revision";

/// Makes the current ReplicaSet of `deployment` exist, scaled and ready, and scales the
/// Deployment's other ReplicaSets to zero.
pub fn sync(store: &Store, deployment: &Value) -> Result<(), ApiError> {
    let Some(rt) = store.resolve("apps", "v1", "replicasets") else {
        return Ok(());
    };
    let namespace = meta_str(deployment, "namespace");
    let name = meta_str(deployment, "name");
    let uid = meta_str(deployment, "uid");
    let template = deployment
        .pointer("/spec/template")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let hash = template_hash(&template);
    let current = format!("{name}-{hash}");
    let replicas = deployment
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);

    let owned: Vec<std::sync::Arc<Value>> = store
        .list(
            &rt,
            &ListOptions {
                namespace: Some(namespace.clone()),
                ..ListOptions::default()
            },
        )?
        .items
        .into_iter()
        .filter(|rs| controlled_by(rs, &uid))
        .collect();
    let mut revision = 0;
    for rs in &owned {
        let rs_name = meta_str(rs, "name");
        revision = revision.max(
            rs.pointer(&format!(
                "/metadata/annotations/{}",
                REVISION.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            .and_then(|r| r.parse::<i64>().ok())
            .unwrap_or(0),
        );
        let target = if rs_name == current { replicas } else { 0 };
        if rs.pointer("/spec/replicas").and_then(Value::as_i64) != Some(target) {
            store.mutate(&rt, &namespace, &rs_name, Part::Main, MANAGER, |o| {
                o["spec"]["replicas"] = json!(target);
            })?;
        }
    }
    if !owned.iter().any(|rs| meta_str(rs, "name") == current) {
        let body = replica_set(deployment, &template, &current, &hash, revision + 1);
        store.create(
            &rt,
            Some(&namespace),
            body,
            &WriteOptions::internal(MANAGER),
        )?;
    }
    // Every owned ReplicaSet reports what its replicas would be once its pods ran.
    for rs_name in owned
        .iter()
        .map(|rs| meta_str(rs, "name"))
        .chain(std::iter::once(current))
    {
        store.mutate(&rt, &namespace, &rs_name, Part::Status, MANAGER, |o| {
            o["status"] = simulated_status("replicasets", o);
        })?;
    }
    Ok(())
}

fn controlled_by(rs: &Value, uid: &str) -> bool {
    rs.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter()
                .any(|r| r["uid"] == uid && r["controller"] == true)
        })
}

/// The ReplicaSet the Deployment controller would create for `template`.
fn replica_set(
    deployment: &Value,
    template: &Value,
    name: &str,
    hash: &str,
    revision: i64,
) -> Value {
    let mut template = template.clone();
    template["metadata"]["labels"][HASH_LABEL] = json!(hash);
    let mut selector = deployment
        .pointer("/spec/selector")
        .cloned()
        .unwrap_or_else(|| json!({}));
    selector["matchLabels"][HASH_LABEL] = json!(hash);
    let labels = template["metadata"]["labels"].clone();
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": { REVISION: revision.to_string() },
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "name": meta_str(deployment, "name"),
                "uid": meta_str(deployment, "uid"),
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "replicas": deployment.pointer("/spec/replicas").cloned().unwrap_or(json!(1)),
            "minReadySeconds": deployment.pointer("/spec/minReadySeconds").cloned().unwrap_or(json!(0)),
            "selector": selector,
            "template": template,
        },
    })
}

/// A short, stable name suffix derived from the pod template, in the alphabet the
/// Deployment controller uses for `pod-template-hash` (no vowels, so no words). The
/// value only has to be stable for a given template and differ between templates; it
/// is not the controller's exact hash. FNV-1a is written out because it is five lines
/// and the std hasher is not stable across releases (persisted ReplicaSets would be
/// orphaned by an upgrade).
fn template_hash(template: &Value) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h: u32 = 0x811c_9dc5;
    for b in template.to_string().bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let mut out = Vec::new();
    loop {
        out.push(ALPHABET[(h % 27) as usize]);
        h /= 27;
        if h == 0 {
            break;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_hash_is_stable_and_template_sensitive() {
        let a = json!({ "spec": { "containers": [{ "image": "a" }] } });
        let b = json!({ "spec": { "containers": [{ "image": "b" }] } });
        assert_eq!(template_hash(&a), template_hash(&a.clone()));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert!(template_hash(&a).bytes().all(|c| c.is_ascii_alphanumeric()));
    }

    #[test]
    fn replica_set_is_controlled_by_its_deployment_and_selects_its_hash() {
        let d = json!({
            "metadata": { "name": "web", "namespace": "n", "uid": "u1" },
            "spec": { "replicas": 2, "selector": { "matchLabels": { "app": "web" } },
                      "template": { "metadata": { "labels": { "app": "web" } } } },
        });
        let rs = replica_set(&d, &d["spec"]["template"], "web-x", "x", 1);
        assert!(controlled_by(&rs, "u1"));
        assert_eq!(
            rs["spec"]["selector"]["matchLabels"],
            json!({ "app": "web", HASH_LABEL: "x" })
        );
        assert_eq!(
            rs["spec"]["template"]["metadata"]["labels"][HASH_LABEL],
            "x"
        );
        assert_eq!(rs["spec"]["replicas"], 2);
    }
}
