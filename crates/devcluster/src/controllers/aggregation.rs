//! kube-controller-manager's ClusterRole aggregation: a ClusterRole with an `aggregationRule`
//! gets as its rules those of every other ClusterRole its selectors match, in name order,
//! each rule once. It runs whenever a ClusterRole changes, so a ClusterRole labelled
//! `rbac.authorization.k8s.io/aggregate-to-edit: "true"` extends `edit` (and, through it,
//! `admin`) within milliseconds, as on a real cluster.

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::auth::rbac::{GROUP, PolicyRule};
use crate::store::{ListOptions, Part, Store, meta_str};

const MANAGER: &str = "clusterrole-aggregation-controller";

pub async fn run(store: Arc<Store>, shutdown: CancellationToken) {
    let mut changes = store.rbac().subscribe_cluster_roles();
    loop {
        changes.borrow_and_update();
        reconcile(&store);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
    }
}

/// Passes until nothing changes (bounded): aggregated roles may aggregate each other (`admin`
/// collects `edit`, which collects `view`). The dev cluster runs this before it serves, so the
/// bootstrap `admin`, `edit` and `view` have their rules from the first request on.
pub fn settle(store: &Store) {
    for _ in 0..8 {
        if !reconcile(store) {
            return;
        }
    }
}

/// One pass: every aggregated ClusterRole gets the rules its selectors collect. Whether it
/// changed any.
pub fn reconcile(store: &Store) -> bool {
    let Some(rt) = store.resolve(GROUP, "v1", "clusterroles") else {
        return false;
    };
    let Ok(list) = store.list(&rt, &ListOptions::default()) else {
        return false;
    };
    let mut changed = false;
    // The list is in name order, as the controller sorts the roles it collects.
    let roles: Vec<Arc<Value>> = list.items;
    for role in roles
        .iter()
        .filter(|r| r.get("aggregationRule").is_some_and(|a| !a.is_null()))
    {
        let name = meta_str(role, "name");
        let selectors: Vec<Value> = role
            .pointer("/aggregationRule/clusterRoleSelectors")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut rules: Vec<PolicyRule> = Vec::new();
        for other in roles.iter().filter(|o| meta_str(o, "name") != name) {
            if !selectors
                .iter()
                .any(|s| crate::selectors::structured_matches(s, other))
            {
                continue;
            }
            for rule in PolicyRule::all_of(other) {
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
        if PolicyRule::all_of(role) == rules && role.get("rules").is_some() {
            continue;
        }
        let rules: Vec<Value> = rules.iter().map(PolicyRule::to_json).collect();
        let result = store.mutate(&rt, "", &name, Part::Main, MANAGER, |r| {
            r["rules"] = Value::Array(rules);
        });
        match result {
            Ok(_) => changed = true,
            Err(e) => {
                tracing::warn!(k8s.name = %name, error = %e, "aggregating a ClusterRole failed")
            }
        }
    }
    changed
}
