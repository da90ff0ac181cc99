//! Discovery documents: `/version`, `/api`, `/apis`, `/apis/{group}` and the per
//! group/version resource lists, plus aggregated discovery (`apidiscovery.k8s.io/v2`)
//! when a client asks for it in `Accept`, as kubectl and helm do first.
//!
//! The legacy documents are what kube-rs `Discovery::run()` reads; kubectl falls back
//! to them when the response is not the aggregated type it asked for, and accepts the
//! aggregated one when we send it.

use serde_json::{Value, json};

use crate::resources::{Registry, ResourceType};

/// The Kubernetes version the dev cluster reports (its API surface matches this release).
pub const KUBE_MINOR: &str = "33";

pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": KUBE_MINOR,
        "emulationMajor": "1",
        "emulationMinor": KUBE_MINOR,
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": KUBE_MINOR,
        "gitVersion": format!("v1.{KUBE_MINOR}.0+berth-devcluster"),
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "n/a (berth-devcluster is written in Rust)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, go_arch()),
    })
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [ { "clientCIDR": "0.0.0.0/0", "serverAddress": server_address } ],
    })
}

fn group_json(name: &str, versions: &[&str]) -> Value {
    let gv = |v: &str| json!({ "groupVersion": format!("{name}/{v}"), "version": v });
    json!({
        "name": name,
        "versions": versions.iter().map(|v| gv(v)).collect::<Vec<_>>(),
        "preferredVersion": gv(versions.first().copied().unwrap_or("v1")),
    })
}

pub fn groups(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .named_groups()
        .map(|(n, vs)| group_json(n, &vs))
        .collect();
    json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups })
}

pub fn group(registry: &Registry, name: &str) -> Option<Value> {
    let (n, vs) = registry.named_groups().find(|(n, _)| *n == name)?;
    let mut g = group_json(n, &vs);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

fn resource_json(rt: &ResourceType) -> Value {
    let mut r = json!({
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": rt.verbs(),
    });
    if !rt.short_names.is_empty() {
        r["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        r["categories"] = json!(rt.categories);
    }
    r
}

fn status_json(rt: &ResourceType) -> Value {
    json!({
        "name": format!("{}/status", rt.plural),
        "singularName": "",
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": ["get", "patch", "update"],
    })
}

/// `APIResourceList` of one group/version, or None when it is not served.
pub fn resources(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types = registry.version_resources(group, version)?;
    let mut list = Vec::new();
    for rt in types.values() {
        list.push(resource_json(rt));
        if rt.has_status {
            list.push(status_json(rt));
        }
        if rt.group.is_empty() && rt.plural == "serviceaccounts" {
            list.push(json!({
                "name": "serviceaccounts/token",
                "singularName": "",
                "namespaced": true,
                "group": "authentication.k8s.io",
                "version": "v1",
                "kind": "TokenRequest",
                "verbs": ["create"],
            }));
        }
        if super::scale::has_scale(rt) {
            list.push(json!({
                "name": format!("{}/scale", rt.plural),
                "singularName": "",
                "namespaced": rt.namespaced,
                "group": "autoscaling",
                "version": "v1",
                "kind": "Scale",
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({ "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list }),
    )
}

/// Whether `Accept` asks for aggregated discovery (`as=APIGroupDiscoveryList`, v2).
pub fn wants_aggregated(accept: &str) -> bool {
    accept.split(',').any(|m| {
        m.contains("as=APIGroupDiscoveryList") && m.contains("v=v2") && !m.contains("v2beta1")
    })
}

/// The aggregated discovery content type, which clients check before decoding.
pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// `APIGroupDiscoveryList` for `/api` (core = true) or `/apis`.
pub fn aggregated(registry: &Registry, core: bool) -> Value {
    let mut groups = Vec::new();
    let mut names: Vec<(String, Vec<String>)> = Vec::new();
    if core {
        names.push((String::new(), vec!["v1".into()]));
    } else {
        for (n, vs) in registry.named_groups() {
            names.push((n.to_string(), vs.into_iter().map(String::from).collect()));
        }
    }
    for (name, versions) in names {
        let versions: Vec<Value> = versions
            .iter()
            .filter_map(|v| {
                let types = registry.version_resources(&name, v)?;
                let resources: Vec<Value> = types.values().map(aggregated_resource).collect();
                Some(json!({ "version": v, "resources": resources, "freshness": "Current" }))
            })
            .collect();
        groups.push(json!({ "metadata": { "name": name }, "versions": versions }));
    }
    json!({ "kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": groups })
}

fn aggregated_resource(rt: &ResourceType) -> Value {
    let mut r = json!({
        "resource": rt.plural,
        "responseKind": { "group": rt.group, "version": rt.version, "kind": rt.kind },
        "scope": if rt.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": rt.singular,
        "verbs": rt.verbs(),
    });
    if !rt.short_names.is_empty() {
        r["shortNames"] = json!(rt.short_names);
    }
    if !rt.categories.is_empty() {
        r["categories"] = json!(rt.categories);
    }
    let mut subresources = Vec::new();
    if rt.has_status {
        subresources.push(json!({
            "subresource": "status",
            "responseKind": { "group": rt.group, "version": rt.version, "kind": rt.kind },
            "verbs": ["get", "patch", "update"],
        }));
    }
    if rt.group.is_empty() && rt.plural == "serviceaccounts" {
        subresources.push(json!({
            "subresource": "token",
            "responseKind": { "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest" },
            "verbs": ["create"],
        }));
    }
    if super::scale::has_scale(rt) {
        subresources.push(json!({
            "subresource": "scale",
            "responseKind": super::scale::scale_kind(),
            "verbs": ["get", "patch", "update"],
        }));
    }
    if !subresources.is_empty() {
        r["subresources"] = json!(subresources);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apps_v1_lists_deployments_with_status() {
        let r = resources(&Registry::with_builtins(), "apps", "v1").expect("apps/v1");
        let names: Vec<&str> = r["resources"]
            .as_array()
            .expect("list")
            .iter()
            .filter_map(|x| x["name"].as_str())
            .collect();
        assert!(names.contains(&"deployments") && names.contains(&"deployments/status"));
        assert!(resources(&Registry::with_builtins(), "apps", "v2").is_none());
    }

    #[test]
    fn aggregated_is_only_sent_when_asked_for_v2() {
        assert!(wants_aggregated(
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
        ));
        assert!(!wants_aggregated("application/json"));
    }
}
