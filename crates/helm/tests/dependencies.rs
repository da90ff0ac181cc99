//! The engine, and with it `berth render`, builds without a Kubernetes or gRPC client: none
//! of berth-helm's transitive normal dependencies is tonic, kube, kube-client, k8s-openapi or
//! sqlx. Asked of `cargo metadata`, so a new dependency that pulls one in fails here.

use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::process::Command;

const FORBIDDEN: &[&str] = &["tonic", "kube", "kube-client", "k8s-openapi", "sqlx"];

#[test]
fn the_engine_depends_on_neither_tonic_nor_kube() {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let deps = normal_dependencies(&metadata, "berth-helm");
    assert!(
        deps.contains("gotmpl"),
        "the walk found the engine's own dependencies: {deps:?}"
    );
    let found: Vec<&&str> = FORBIDDEN
        .iter()
        .filter(|name| deps.contains(**name))
        .collect();
    assert!(found.is_empty(), "berth-helm depends on {found:?}");
}

/// Names of the packages `root` depends on, directly or not, through normal (not dev or
/// build) dependencies.
fn normal_dependencies(metadata: &Value, root: &str) -> BTreeSet<String> {
    let packages = metadata["packages"].as_array().expect("packages");
    let name_of: HashMap<&str, &str> = packages
        .iter()
        .map(|p| {
            (
                p["id"].as_str().unwrap_or_default(),
                p["name"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    let root_id = packages
        .iter()
        .find(|p| p["name"] == root)
        .and_then(|p| p["id"].as_str())
        .expect("the package is in the workspace");
    let nodes: HashMap<&str, &Value> = metadata["resolve"]["nodes"]
        .as_array()
        .expect("resolve.nodes")
        .iter()
        .map(|n| (n["id"].as_str().unwrap_or_default(), n))
        .collect();
    let mut seen = BTreeSet::new();
    let mut stack = vec![root_id];
    while let Some(id) = stack.pop() {
        let Some(node) = nodes.get(id) else { continue };
        for dep in node["deps"].as_array().into_iter().flatten() {
            let normal = dep["dep_kinds"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["kind"].is_null());
            let dep_id = dep["pkg"].as_str().unwrap_or_default();
            if normal && seen.insert(dep_id) {
                stack.push(dep_id);
            }
        }
    }
    seen.iter().map(|id| name_of[id].to_string()).collect()
}
