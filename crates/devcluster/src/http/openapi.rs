//! A minimal OpenAPI v3 surface: the `/openapi/v3` index and one document per
//! group/version that lists each resource's operations with their query parameters,
//! but no schemas.
//!
//! Why this much and no more: `kubectl apply` (default `--validate=strict`) reads the
//! PATCH operation of the object's kind from `/openapi/v3/<gv>` to learn whether the
//! server validates fields itself (a `fieldValidation` query parameter). When it does,
//! kubectl sends `fieldValidation=Strict` and skips client-side validation, which would
//! otherwise need full schemas. Without schemas kubectl computes client-side-apply
//! patches from its compiled-in types (built-in kinds) or as JSON merge patches
//! (custom kinds), which is what it does against any server whose spec lacks them.

use std::hash::{Hash, Hasher};

use serde_json::{Map, Value, json};

use crate::resources::{Registry, ResourceType};

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The `/openapi/v3` index: one entry per served group/version.
pub fn index(registry: &Registry) -> Value {
    let mut paths = Map::new();
    let mut seen = Vec::new();
    for rt in registry.all() {
        let p = gv_path(&rt.group, &rt.version);
        if seen.contains(&p) {
            continue;
        }
        seen.push(p.clone());
        let hash = document(registry, &rt.group, &rt.version)
            .map(|d| content_hash(&d))
            .unwrap_or_default();
        paths.insert(
            p.clone(),
            json!({ "serverRelativeURL": format!("/openapi/v3/{p}?hash={hash}") }),
        );
    }
    json!({ "paths": paths })
}

/// Hash of a document, so clients can cache it by URL as they do against kube-apiserver.
fn content_hash(doc: &Value) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    doc.to_string().hash(&mut h);
    format!("{:016X}", h.finish())
}

/// The document of one group/version (`api/v1`, `apis/apps/v1`), or None.
pub fn document_for_path(registry: &Registry, path: &str) -> Option<Value> {
    let segs: Vec<&str> = path.split('/').collect();
    match segs.as_slice() {
        ["api", v] => document(registry, "", v),
        ["apis", g, v] => document(registry, g, v),
        _ => None,
    }
}

fn document(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types = registry.version_resources(group, version)?;
    let mut paths = Map::new();
    for rt in types.values() {
        let item = item_path(rt);
        paths.insert(item, json!({ "get": operation(rt, "get", &[]), "put": operation(rt, "put", WRITE_PARAMS), "patch": operation(rt, "patch", PATCH_PARAMS), "delete": operation(rt, "delete", &["dryRun"]) }));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": { "title": "Kubernetes", "version": format!("v1.{}.0", super::discovery::KUBE_MINOR) },
        "paths": paths,
        "components": { "schemas": {} },
    }))
}

const WRITE_PARAMS: &[&str] = &["dryRun", "fieldManager", "fieldValidation"];
const PATCH_PARAMS: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "force"];

fn item_path(rt: &ResourceType) -> String {
    let base = format!("/{}", gv_path(&rt.group, &rt.version));
    if rt.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}/{{name}}", rt.plural)
    } else {
        format!("{base}/{}/{{name}}", rt.plural)
    }
}

fn operation(rt: &ResourceType, action: &str, params: &[&str]) -> Value {
    let parameters: Vec<Value> = params
        .iter()
        .map(|p| json!({ "name": p, "in": "query", "schema": { "type": if *p == "force" { "boolean" } else { "string" }, "uniqueItems": true } }))
        .collect();
    json!({
        "operationId": format!("{action}{}", rt.kind),
        "parameters": parameters,
        "responses": { "200": { "description": "OK" } },
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": { "group": rt.group, "version": rt.version, "kind": rt.kind },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_operations_advertise_field_validation() {
        let r = Registry::with_builtins();
        let idx = index(&r);
        assert!(
            idx["paths"]["apis/apps/v1"]["serverRelativeURL"]
                .as_str()
                .is_some_and(|u| u.starts_with("/openapi/v3/apis/apps/v1?hash="))
        );
        let doc = document_for_path(&r, "apis/apps/v1").expect("apps/v1");
        let patch =
            &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "Deployment"
        );
        assert!(
            patch["parameters"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["name"] == "fieldValidation"))
        );
    }
}
