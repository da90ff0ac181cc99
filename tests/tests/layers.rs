//! The layering rules of ARCHITECTURE.md ("Layers"), so a change that lets gRPC or storage leak
//! into the domain fails here.
//!
//! Where a rule is a crate boundary it is checked as one, on the dependency graph `cargo
//! metadata` resolves (a type alias or a re-export cannot get past it):
//!
//! - the domain crates (`berth-names`, `berth-package`, `berth-hooks`, `berth-jq`,
//!   `berth-helm`, `berth-operator`, and lifecycle's engine `berth-lifecycle-core`) depend,
//!   directly or not, on none of tonic, prost, kube, k8s-openapi, sqlx, berth's contracts
//!   (`berth-proto`) or the shared crates that bring them (`berth-runtime`, `berth-sql`,
//!   `berth-clients`);
//! - `berth-runtime` (process plumbing) depends on neither `berth-proto` nor sqlx, and
//!   `berth-sql` on neither tonic nor `berth-proto`; of the shared crates under `crates/`,
//!   only `berth-clients` knows the contracts.
//!
//! Inside a service crate, where tonic is a dependency anyway, the rules are checked on the
//! source:
//!
//! - tonic is named only in the transport layers: a crate's `convert`, `service`, `error`,
//!   `client`, `process` and `limits` (the gateway's request limits) modules, its root
//!   (`lib.rs`, where a service's process is wired) and `main.rs`, binaries (`bin/`), the CLI
//!   (`cli/`, a gRPC client), the crates whose job is the transport itself (`berth-proto`,
//!   `berth-runtime`, `berth-clients`), and the test harness;
//! - a `model` module (pure domain) names none of tonic, sqlx or kube.
//!
//! Comments do not count: a doc comment may say what a layer does not know.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Module names (file stems or directory names) of the transport layers.
const TRANSPORT_LAYERS: &[&str] = &[
    "convert", "service", "error", "client", "process", "lib", "main", "bin", "cli",
    // The gateway's request limits: tower layers in front of its gRPC service.
    "limits",
];

/// Crates that are transport through and through: the contracts, the transport scaffolding,
/// and this test harness (a gRPC client of every service).
const TRANSPORT_CRATES: &[&str] = &[
    "berth-proto",
    "berth-runtime",
    "berth-clients",
    "berth-tests",
];

/// The crates of the domain: what berth knows about packages, hooks, jq and charts, and
/// lifecycle's engine (package state and what each change writes and enqueues), with no
/// transport, cluster or storage under them.
const DOMAIN_CRATES: &[&str] = &[
    "berth-names",
    "berth-package",
    "berth-hooks",
    "berth-jq",
    "berth-helm",
    "berth-lifecycle-core",
    "berth-operator",
];

/// What the domain must not depend on, directly or not.
const NOT_IN_THE_DOMAIN: &[&str] = &[
    "tonic",
    "kube",
    "kube-client",
    "k8s-openapi",
    "sqlx",
    "prost",
    "berth-proto",
    "berth-runtime",
    "berth-sql",
    "berth-clients",
];

/// The whole resolved graph, from `cargo metadata`.
fn metadata() -> Value {
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
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// Names of the packages `root` depends on, directly or not, through normal (not dev or
/// build) dependencies: what its library is built with.
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
        .unwrap_or_else(|| panic!("{root} is in the workspace"));
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
    seen.iter().map(|id| name_of[id].to_owned()).collect()
}

/// The forbidden names `crate_name` depends on.
fn forbidden_in(deps: &BTreeSet<String>, crate_name: &str, forbidden: &[&str]) -> Vec<String> {
    forbidden
        .iter()
        .filter(|name| deps.contains(**name))
        .map(|name| format!("{crate_name} depends on {name}"))
        .collect()
}

#[test]
fn the_domain_crates_depend_on_no_transport_cluster_or_storage() {
    let metadata = metadata();
    let mut offenders = Vec::new();
    let mut all = BTreeSet::new();
    for name in DOMAIN_CRATES {
        let deps = normal_dependencies(&metadata, name);
        offenders.extend(forbidden_in(&deps, name, NOT_IN_THE_DOMAIN));
        all.extend(deps);
    }
    for expected in ["serde", "tokio", "gotmpl", "jaq-core", "petgraph"] {
        assert!(
            all.contains(expected),
            "the walk found the domain's dependencies (no {expected}): {all:?}"
        );
    }
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

#[test]
fn the_shared_crates_keep_to_their_layer() {
    let metadata = metadata();
    let mut offenders = Vec::new();
    let runtime = normal_dependencies(&metadata, "berth-runtime");
    assert!(runtime.contains("tonic"), "{runtime:?}");
    offenders.extend(forbidden_in(
        &runtime,
        "berth-runtime",
        &["berth-proto", "sqlx", "kube", "kube-client", "k8s-openapi"],
    ));
    let sql = normal_dependencies(&metadata, "berth-sql");
    assert!(sql.contains("sqlx"), "{sql:?}");
    offenders.extend(forbidden_in(
        &sql,
        "berth-sql",
        &["tonic", "berth-proto", "kube", "kube-client", "k8s-openapi"],
    ));
    // Of the shared crates (`crates/`), only the clients know berth's contracts.
    for (name, src) in workspace_sources() {
        let shared = src
            .parent()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            == Some(std::ffi::OsStr::new("crates"));
        if shared
            && name != "berth-clients"
            && normal_dependencies(&metadata, &name).contains("berth-proto")
        {
            offenders.push(format!("{name} depends on berth-proto"));
        }
    }
    assert!(
        normal_dependencies(&metadata, "berth-clients").contains("berth-proto"),
        "the walk sees the clients' contracts"
    );
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

/// Every workspace crate's name and `src/` directory, from `cargo metadata`.
fn workspace_sources() -> Vec<(String, PathBuf)> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            let manifest = PathBuf::from(p["manifest_path"].as_str().expect("manifest_path"));
            let src = manifest.parent().expect("a crate directory").join("src");
            (p["name"].as_str().expect("name").to_owned(), src)
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of `text` without comments (line comments, doc comments, block comments); string
/// literals are kept, which only makes the check stricter.
fn code_of(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    let mut in_block = 0usize;
    for line in text.lines() {
        let mut rest = line;
        loop {
            if in_block > 0 {
                match (rest.find("/*"), rest.find("*/")) {
                    (Some(open), Some(close)) if open < close => {
                        in_block += 1;
                        rest = &rest[open + 2..];
                    }
                    (_, Some(close)) => {
                        in_block -= 1;
                        rest = &rest[close + 2..];
                    }
                    (Some(open), None) => {
                        in_block += 1;
                        rest = &rest[open + 2..];
                    }
                    (None, None) => break,
                }
                continue;
            }
            let line_comment = rest.find("//");
            let block = rest.find("/*");
            match (line_comment, block) {
                (Some(l), Some(b)) if b < l => {
                    code.push_str(&rest[..b]);
                    in_block = 1;
                    rest = &rest[b + 2..];
                }
                (Some(l), _) => {
                    code.push_str(&rest[..l]);
                    break;
                }
                (None, Some(b)) => {
                    code.push_str(&rest[..b]);
                    in_block = 1;
                    rest = &rest[b + 2..];
                }
                (None, None) => {
                    code.push_str(rest);
                    break;
                }
            }
        }
        code.push('\n');
    }
    code
}

/// True when `code` names the crate `name` (`name::…`, `use name`, `name_…` crates such as
/// `tonic_health` count as the same layer).
fn names_crate(code: &str, name: &str) -> bool {
    code.match_indices(name).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = &code[at + name.len()..];
        let starts_word = !before.is_some_and(|c| c.is_alphanumeric() || c == '_');
        starts_word && (after.starts_with("::") || after.starts_with('_') || after.starts_with(';'))
    })
}

/// The module path components of `file` under `src` (directories and the file stem).
fn components(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .parent()
        .into_iter()
        .flat_map(|p| p.components())
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.push(
        rel.file_stem()
            .expect("a file name")
            .to_string_lossy()
            .into_owned(),
    );
    parts
}

#[test]
fn tonic_is_named_only_in_the_transport_layers() {
    let mut offenders = Vec::new();
    let mut checked = 0;
    for (name, src) in workspace_sources() {
        if TRANSPORT_CRATES.contains(&name.as_str()) {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            let parts = components(&src, &file);
            if parts.iter().any(|p| TRANSPORT_LAYERS.contains(&p.as_str())) {
                continue;
            }
            checked += 1;
            let code = code_of(&std::fs::read_to_string(&file).expect("readable source"));
            if names_crate(&code, "tonic") {
                offenders.push(format!("{name}: {}", file.display()));
            }
        }
    }
    assert!(
        checked > 100,
        "the walk found the workspace's domain modules ({checked} files)"
    );
    assert!(
        offenders.is_empty(),
        "tonic outside the transport layers (move the call behind a client/convert module):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn model_modules_know_neither_grpc_nor_storage_nor_kubernetes() {
    let mut offenders = Vec::new();
    let mut models = 0;
    for (name, src) in workspace_sources() {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in files {
            if !components(&src, &file).iter().any(|p| p == "model") {
                continue;
            }
            models += 1;
            let code = code_of(&std::fs::read_to_string(&file).expect("readable source"));
            for forbidden in ["tonic", "sqlx", "kube", "k8s_openapi"] {
                if names_crate(&code, forbidden) {
                    offenders.push(format!("{name}: {} names {forbidden}", file.display()));
                }
            }
        }
    }
    assert!(models >= 2, "the walk found the model modules ({models})");
    assert!(offenders.is_empty(), "{}", offenders.join("\n"));
}

#[test]
fn the_check_sees_through_comments_but_not_code() {
    let code = code_of("// tonic::Status in a comment\n/* tonic::Code */ let x = 1;\n");
    assert!(!names_crate(&code, "tonic"), "{code}");
    let code = code_of("use tonic::Status; // fine\n");
    assert!(names_crate(&code, "tonic"));
    assert!(names_crate("fn f() -> tonic_health::X {}", "tonic"));
    assert!(!names_crate("let untonic::x;", "tonic"));
    assert!(!names_crate("kubeconfig::read()", "kube"));
    assert!(names_crate("::kube::Client", "kube"));
}
