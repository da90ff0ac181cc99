//! The requests of the differential test, in order. Each request names the kind of request
//! it covers (the first argument); later requests build on the objects earlier ones made.
//! Objects live in the test's namespace (`{{ns}}`); cluster-scoped ones (a namespace, a CRD)
//! carry the run's suffix (`{{sfx}}`) and are deleted by the scenario itself.

use serde_json::{Value, json};

use super::engine::{APPLY, Harness, JSON_PATCH, MERGE, Req, STRATEGIC, View};

const CM: &str = "/api/v1/namespaces/{{ns}}/configmaps";

fn cm(name: &str, labels: Value, data: Value) -> Value {
    json!({ "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "labels": labels }, "data": data })
}

fn code(a: &Value) -> u16 {
    a["code"].as_u64().unwrap_or_default() as u16
}

pub async fn run(h: &mut Harness) {
    discovery(h).await;
    create_and_read(h).await;
    lists(h).await;
    updates(h).await;
    patches(h).await;
    server_side_apply(h).await;
    dry_runs(h).await;
    deletes(h).await;
    garbage_collection(h).await;
    watches(h).await;
    subresources(h).await;
    namespaces(h).await;
    custom_resources(h).await;
}

async fn discovery(h: &mut Harness) {
    h.run(Req::get("discovery: /api", "/api")).await;
    h.run(Req::get("discovery: /apis", "/apis").view(View::Project(groups_served_by_dev)))
        .await;
    h.run(Req::get("discovery: group", "/apis/apps").view(View::Keyed(&["/body/versions"])))
        .await;
    h.run(Req::get("discovery: core resources", "/api/v1").view(View::Keyed(&["/body/resources"])))
        .await;
    h.run(
        Req::get("discovery: group resources", "/apis/apps/v1")
            .view(View::Keyed(&["/body/resources"])),
    )
    .await;
    h.run(Req::get(
        "discovery: unknown group",
        "/apis/nope.example.com/v1",
    ))
    .await;
    h.run(Req::get("version", "/version").view(View::Project(shape)))
        .await;
    h.run(Req::get("openapi v2", "/openapi/v2").view(View::Project(openapi_v2)))
        .await;
    h.run(Req::get("openapi v3 index", "/openapi/v3").view(View::Project(openapi_v3_index)))
        .await;
    h.run(
        Req::get("openapi v3 group document", "/openapi/v3/api/v1")
            .view(View::Project(openapi_v3_document)),
    )
    .await;
}

/// The groups the dev cluster serves, as they appear in the real `/apis`: the dev cluster
/// serves a subset of the built-in groups (see the crate docs), and within it must agree.
fn groups_served_by_dev(a: &Value) -> Value {
    const GROUPS: &[&str] = &[
        "apps",
        "batch",
        "rbac.authorization.k8s.io",
        "apiextensions.k8s.io",
        "coordination.k8s.io",
        "networking.k8s.io",
        "policy",
        "autoscaling",
    ];
    let mut out = a.clone();
    if let Some(groups) = a["body"]["groups"].as_array() {
        let kept: serde_json::Map<String, Value> = groups
            .iter()
            .filter(|g| GROUPS.contains(&g["name"].as_str().unwrap_or_default()))
            .map(|g| {
                (
                    g["name"].as_str().unwrap_or_default().to_string(),
                    g.clone(),
                )
            })
            .collect();
        out["body"]["groups"] = Value::Object(kept);
    }
    out
}

/// Every scalar replaced by its type: documents whose values differ between clusters.
fn shape(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), shape(v))).collect()),
        Value::Array(a) => Value::Array(a.iter().take(1).map(shape).collect()),
        Value::String(_) => json!("<string>"),
        Value::Number(_) => json!("<number>"),
        Value::Bool(_) => json!("<bool>"),
        Value::Null => Value::Null,
    }
}

/// OpenAPI v2: served, a swagger 2.0 document with paths and definitions.
fn openapi_v2(a: &Value) -> Value {
    let b = &a["body"];
    json!({ "code": a["code"], "swagger": b["swagger"],
        "has paths": b["paths"].is_object(), "has definitions": b["definitions"].is_object() })
}

/// OpenAPI v3 index: the core group and apps are listed, each with a URL.
fn openapi_v3_index(a: &Value) -> Value {
    let paths = &a["body"]["paths"];
    let entry = |p: &str| {
        json!({ "listed": paths.get(p).is_some(),
        "has serverRelativeURL": paths[p]["serverRelativeURL"].is_string() })
    };
    json!({ "code": a["code"], "api/v1": entry("api/v1"), "apis/apps/v1": entry("apis/apps/v1") })
}

/// An OpenAPI v3 group document: its version, the ConfigMap paths and their operations,
/// and whether it has schemas.
fn openapi_v3_document(a: &Value) -> Value {
    let b = &a["body"];
    let path = &b["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"];
    let mut ops: Vec<&String> = path
        .as_object()
        .map(|m| m.keys().filter(|k| k.as_str() != "parameters").collect())
        .unwrap_or_default();
    ops.sort();
    json!({ "code": a["code"], "openapi": b["openapi"].as_str().map(|v| v.starts_with("3.")),
        "configmap operations": ops,
        "has ConfigMap schema": b["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"].is_object() })
}

async fn create_and_read(h: &mut Harness) {
    h.run(
        Req::post(
            "create",
            CM,
            cm(
                "a",
                json!({ "suite": "diff", "tier": "web" }),
                json!({ "k": "1" }),
            ),
        )
        .save("rv_a", "/metadata/resourceVersion")
        .save("uid_a", "/metadata/uid"),
    )
    .await;
    h.run(Req::post(
        "create",
        CM,
        cm(
            "b",
            json!({ "suite": "diff", "tier": "db" }),
            json!({ "k": "2" }),
        ),
    ))
    .await;
    h.run(Req::post(
        "create",
        CM,
        cm(
            "c",
            json!({ "suite": "diff", "tier": "web" }),
            json!({ "k": "3" }),
        ),
    ))
    .await;
    h.run(Req::post(
        "create",
        CM,
        cm("d", json!({ "suite": "diff" }), json!({})),
    ))
    .await;
    h.run(Req::post(
        "create with generateName",
        CM,
        json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "generateName": "gen-", "labels": { "suite": "gen" } } }),
    ))
    .await;
    h.run(Req::post(
        "create: already exists (409)",
        CM,
        cm("a", json!({}), json!({})),
    ))
    .await;
    h.run(Req::post(
        "create: invalid name (422)",
        CM,
        cm("Bad_Name", json!({}), json!({})),
    ))
    .await;
    h.run(Req::post(
        "create: missing name (422)",
        CM,
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": {} }),
    ))
    .await;
    h.run(Req::post(
        "create: wrong kind (400)",
        CM,
        json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "wrong" } }),
    ))
    .await;
    h.run(Req::post(
        "create: namespace mismatch (400)",
        CM,
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "x", "namespace": "other" } }),
    ))
    .await;
    h.run(Req::post(
        "create: unknown field, fieldValidation=Strict (400)",
        &format!("{CM}?fieldValidation=Strict"),
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "strict" }, "bogus": 1 }),
    ))
    .await;
    h.run(Req::post(
        "create: unknown field, fieldValidation=Warn",
        &format!("{CM}?fieldValidation=Warn"),
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "warn" }, "bogus": 1 }),
    ))
    .await;
    h.run(Req::post(
        "create: invalid data key (422)",
        CM,
        cm("badkey", json!({}), json!({ "not a key!": "x" })),
    ))
    .await;
    h.run(
        Req::post("create: malformed JSON (400)", CM, json!(null))
            .raw("application/json", "{\"kind\":"),
    )
    .await;
    h.run(Req::post(
        "create: namespace missing (404)",
        "/api/v1/namespaces/missing-{{sfx}}/configmaps",
        cm("x", json!({}), json!({})),
    ))
    .await;
    h.run(Req::post(
        "create secret with stringData",
        "/api/v1/namespaces/{{ns}}/secrets",
        json!({ "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "s" },
            "stringData": { "user": "admin" }, "data": { "pass": "cHc=" } }),
    ))
    .await;
    h.run(Req::get("get", &format!("{CM}/a"))).await;
    h.run(Req::get("get: not found (404)", &format!("{CM}/missing")))
        .await;
    h.run(Req::get(
        "get: unknown resource (404)",
        "/api/v1/namespaces/{{ns}}/gizmos",
    ))
    .await;
    h.run(Req::get(
        "get secret",
        "/api/v1/namespaces/{{ns}}/secrets/s",
    ))
    .await;
    h.wait(
        Req::get(
            "get: namespace's kube-root-ca.crt",
            &format!("{CM}/kube-root-ca.crt"),
        ),
        "kube-root-ca.crt to be created in the namespace",
        |a| code(a) == 200,
    )
    .await;
}

async fn lists(h: &mut Harness) {
    h.run(Req::get(
        "list: label selector (equality)",
        &format!("{CM}?labelSelector=tier%3Dweb"),
    ))
    .await;
    h.run(Req::get(
        "list: label selector (set-based)",
        &format!("{CM}?labelSelector=suite%3Ddiff,tier%20in%20(web,db)"),
    ))
    .await;
    h.run(Req::get(
        "list: label selector (does not exist)",
        &format!("{CM}?labelSelector=suite%3Ddiff,!tier"),
    ))
    .await;
    h.run(Req::get(
        "list: field selector",
        &format!("{CM}?fieldSelector=metadata.name%3Db"),
    ))
    .await;
    h.run(Req::get(
        "list: field selector (not equal)",
        &format!("{CM}?labelSelector=suite%3Ddiff&fieldSelector=metadata.name!%3Db"),
    ))
    .await;
    h.run(Req::get(
        "list: invalid label selector (400)",
        &format!("{CM}?labelSelector=tier%3D%3D%3Dx"),
    ))
    .await;
    h.run(Req::get(
        "list: unsupported field selector (400)",
        &format!("{CM}?fieldSelector=data.k%3D1"),
    ))
    .await;
    h.run(
        Req::get(
            "list: first page (limit)",
            &format!("{CM}?labelSelector=suite%3Ddiff&limit=2"),
        )
        .save("next", "/metadata/continue"),
    )
    .await;
    h.run(Req::get(
        "list: next page (continue)",
        &format!("{CM}?labelSelector=suite%3Ddiff&limit=2&continue={{{{next}}}}"),
    ))
    .await;
    h.run(Req::get(
        "list: invalid continue token (400)",
        &format!("{CM}?limit=2&continue=garbage"),
    ))
    .await;
    h.run(Req::get("list: all namespaces", "/api/v1/configmaps?labelSelector=tier%3Dweb,suite%3Ddiff&fieldSelector=metadata.namespace%3D{{ns}}"))
        .await;
    h.run(
        Req::get(
            "list: table (kubectl get)",
            &format!("{CM}?labelSelector=suite%3Ddiff"),
        )
        .accept("application/json;as=Table;v=v1;g=meta.k8s.io")
        .view(View::Project(table_shape)),
    )
    .await;
}

/// A Table's columns and rows' cells (the dev cluster's columns are documented to differ).
fn table_shape(a: &Value) -> Value {
    let b = &a["body"];
    json!({ "code": a["code"], "kind": b["kind"], "apiVersion": b["apiVersion"],
        "columns": b["columnDefinitions"].as_array().map(|c| c.iter().map(|c| c["name"].clone()).collect::<Vec<_>>()),
        "rows": b["rows"].as_array().map(|r| r.iter().map(|r| r["cells"][0].clone()).collect::<Vec<_>>()) })
}

async fn updates(h: &mut Harness) {
    h.run(
        Req::put(
            "update (PUT) with resourceVersion",
            &format!("{CM}/a"),
            json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": "a", "resourceVersion": "{{rv_a}}", "labels": { "suite": "diff", "tier": "web" } },
                "data": { "k": "1b" } }),
        )
        .save("rv_a2", "/metadata/resourceVersion"),
    )
    .await;
    h.run(Req::put(
        "update: stale resourceVersion (409)",
        &format!("{CM}/a"),
        json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "a", "resourceVersion": "{{rv_a}}" }, "data": { "k": "stale" } }),
    ))
    .await;
    h.run(Req::put(
        "update without resourceVersion",
        &format!("{CM}/a"),
        json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "a", "labels": { "suite": "diff", "tier": "web" } }, "data": { "k": "1c" } }),
    ))
    .await;
    h.run(Req::put(
        "update: name mismatch (400)",
        &format!("{CM}/a"),
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "b" }, "data": {} }),
    ))
    .await;
    h.run(Req::put(
        "update: not found (404)",
        &format!("{CM}/nothere"),
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "nothere" } }),
    ))
    .await;
    h.run(Req::put(
        "update: unknown field, fieldValidation=Strict (400)",
        &format!("{CM}/a?fieldValidation=Strict"),
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "a" }, "spec": {} }),
    ))
    .await;
}

async fn patches(h: &mut Harness) {
    h.run(Req::patch(
        "patch: merge",
        &format!("{CM}/b"),
        MERGE,
        json!({ "metadata": { "labels": { "patched": "merge" } }, "data": { "k": null, "m": "1" } }),
    ))
    .await;
    h.run(Req::patch(
        "patch: JSON patch",
        &format!("{CM}/b"),
        JSON_PATCH,
        json!([ { "op": "add", "path": "/data/j", "value": "1" },
                { "op": "replace", "path": "/data/m", "value": "2" } ]),
    ))
    .await;
    h.run(Req::patch(
        "patch: JSON patch test fails (422)",
        &format!("{CM}/b"),
        JSON_PATCH,
        json!([ { "op": "test", "path": "/data/m", "value": "nope" } ]),
    ))
    .await;
    h.run(Req::patch(
        "patch: JSON patch on a missing path (422)",
        &format!("{CM}/b"),
        JSON_PATCH,
        json!([ { "op": "replace", "path": "/data/absent", "value": "x" } ]),
    ))
    .await;
    h.run(Req::patch(
        "patch: strategic merge",
        &format!("{CM}/b"),
        STRATEGIC,
        json!({ "metadata": { "annotations": { "a": "1" } }, "data": { "s": "1" } }),
    ))
    .await;
    h.run(Req::patch(
        "patch: merge, not found (404)",
        &format!("{CM}/missing"),
        MERGE,
        json!({ "data": { "x": "1" } }),
    ))
    .await;
    h.run(
        Req::patch(
            "patch: unsupported content type (415)",
            &format!("{CM}/b"),
            MERGE,
            json!({}),
        )
        .raw("text/plain", "data"),
    )
    .await;
    h.run(
        Req::patch(
            "patch: malformed body (400)",
            &format!("{CM}/b"),
            MERGE,
            json!({}),
        )
        .raw(MERGE, "{not json"),
    )
    .await;
    // Strategic merge patches of keyed lists: containers merge by name.
    let deploy = "/apis/apps/v1/namespaces/{{ns}}/deployments";
    h.run(
        Req::post(
            "create deployment",
            deploy,
            json!({ "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": "web", "labels": { "suite": "diff" } },
            "spec": { "replicas": 1, "selector": { "matchLabels": { "app": "web" } },
                "template": { "metadata": { "labels": { "app": "web" } },
                    "spec": { "containers": [ { "name": "web", "image": "nginx:1" },
                                              { "name": "side", "image": "busybox:1" } ] } } } }),
        )
        .view_status_free(),
    )
    .await;
    h.run(
        Req::patch(
            "patch: strategic merge of a keyed list",
            &format!("{deploy}/web"),
            STRATEGIC,
            json!({ "spec": { "template": { "spec": { "containers": [ { "name": "web", "image": "nginx:2" } ] } } } }),
        )
        .view(View::Project(without_status)),
    )
    .await;
    h.run(
        Req::patch(
            "patch: strategic merge $patch: delete",
            &format!("{deploy}/web"),
            STRATEGIC,
            json!({ "spec": { "template": { "spec": { "containers": [ { "name": "side", "$patch": "delete" } ] } } } }),
        )
        .view(View::Project(without_status)),
    )
    .await;
    h.run(Req::post(
        "create deployment: missing required fields (422)",
        deploy,
        json!({ "apiVersion": "apps/v1", "kind": "Deployment", "metadata": { "name": "empty" }, "spec": {} }),
    ))
    .await;
}

/// The answer without the object's `status`, which a real cluster's controllers write
/// asynchronously (a race with the request, not a behaviour of the API server).
fn without_status(a: &Value) -> Value {
    let mut a = a.clone();
    if let Some(b) = a["body"].as_object_mut() {
        b.remove("status");
    }
    a
}

trait StatusFree {
    fn view_status_free(self) -> Req;
}

impl StatusFree for Req {
    fn view_status_free(self) -> Req {
        self.view(View::Project(without_status))
    }
}

async fn server_side_apply(h: &mut Harness) {
    let path = format!("{CM}/applied");
    let cfg = |data: Value, labels: Value| {
        json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "applied", "labels": labels }, "data": data })
    };
    h.run(
        Req::patch(
            "apply: create",
            &format!("{path}?fieldManager=owner"),
            APPLY,
            cfg(json!({ "a": "1", "b": "1" }), json!({})),
        )
        .save("rv_applied", "/metadata/resourceVersion"),
    )
    .await;
    h.run(Req::patch(
        "apply: no-op",
        &format!("{path}?fieldManager=owner"),
        APPLY,
        cfg(json!({ "a": "1", "b": "1" }), json!({})),
    ))
    .await;
    h.run(Req::patch(
        "apply: conflict on an empty map (409)",
        &format!("{path}?fieldManager=sharer"),
        APPLY,
        cfg(json!({ "a": "1" }), json!({})),
    ))
    .await;
    h.run(Req::patch("apply: second manager shares a value", &format!("{path}?fieldManager=sharer"), APPLY,
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "applied" }, "data": { "a": "1" } })))
    .await;
    h.run(Req::patch("apply: conflicts with two managers (409)", &format!("{path}?fieldManager=rival"), APPLY,
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "applied" }, "data": { "a": "2", "b": "2" } })))
    .await;
    h.run(Req::patch("apply: force", &format!("{path}?fieldManager=rival&force=true"), APPLY,
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "applied" }, "data": { "a": "2" } })))
    .await;
    h.run(Req::patch(
        "apply: prunes fields the manager stopped setting",
        &format!("{path}?fieldManager=owner"),
        APPLY,
        cfg(json!({ "b": "1" }), json!({ "l": "1" })),
    ))
    .await;
    h.run(Req::patch(
        "patch: merge takes ownership (Update)",
        &format!("{path}?fieldManager=editor"),
        MERGE,
        json!({ "data": { "b": "edited" } }),
    ))
    .await;
    h.run(Req::patch(
        "apply: conflict with an Update manager (409)",
        &format!("{path}?fieldManager=owner"),
        APPLY,
        cfg(json!({ "b": "1" }), json!({ "l": "1" })),
    ))
    .await;
    h.run(Req::patch(
        "apply: missing fieldManager (400)",
        &path,
        APPLY,
        cfg(json!({ "a": "1" }), json!({})),
    ))
    .await;
    h.run(Req::patch(
        "apply: missing kind (400)",
        &format!("{path}?fieldManager=owner"),
        APPLY,
        json!({ "apiVersion": "v1", "metadata": { "name": "applied" } }),
    ))
    .await;
    h.run(Req::patch(
        "apply: name mismatch (400)",
        &format!("{path}?fieldManager=owner"),
        APPLY,
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "other" } }),
    ))
    .await;
    h.run(Req::patch("apply: stale resourceVersion (409)", &format!("{path}?fieldManager=owner"), APPLY,
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "applied", "resourceVersion": "{{rv_applied}}" } })))
    .await;
    h.run(
        Req::patch(
            "apply: YAML body",
            &format!("{CM}/yaml?fieldManager=owner"),
            APPLY,
            json!({}),
        )
        .raw(
            APPLY,
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: yaml\ndata:\n  k: v\n",
        ),
    )
    .await;
    h.run(Req::get("get: managed fields after apply", &path))
        .await;
}

async fn dry_runs(h: &mut Harness) {
    h.run(Req::post(
        "dry run: create",
        &format!("{CM}?dryRun=All"),
        cm("dry", json!({ "suite": "dry" }), json!({ "k": "v" })),
    ))
    .await;
    h.run(Req::get(
        "get: dry-run create stored nothing (404)",
        &format!("{CM}/dry"),
    ))
    .await;
    h.run(Req::patch(
        "dry run: patch",
        &format!("{CM}/c?dryRun=All"),
        MERGE,
        json!({ "data": { "k": "dry" } }),
    ))
    .await;
    h.run(Req::patch("dry run: apply", &format!("{CM}/c?dryRun=All&fieldManager=dry"), APPLY,
        json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "c" }, "data": { "n": "1" } })))
    .await;
    h.run(Req::delete(
        "dry run: delete",
        &format!("{CM}/c?dryRun=All"),
    ))
    .await;
    h.run(Req::get(
        "get: after dry runs, unchanged",
        &format!("{CM}/c"),
    ))
    .await;
    h.run(Req::post(
        "dry run: invalid value (400)",
        &format!("{CM}?dryRun=Some"),
        cm("dry", json!({}), json!({})),
    ))
    .await;
}

async fn deletes(h: &mut Harness) {
    h.run(
        Req::delete("delete: uid precondition fails (409)", &format!("{CM}/d"))
            .json(json!({ "kind": "DeleteOptions", "apiVersion": "v1",
            "preconditions": { "uid": "00000000-0000-0000-0000-000000000000" } })),
    )
    .await;
    h.run(Req::delete("delete", &format!("{CM}/d"))).await;
    h.run(Req::delete("delete: not found (404)", &format!("{CM}/d")))
        .await;
    h.run(Req::delete(
        "delete: invalid propagationPolicy (400)",
        &format!("{CM}/c?propagationPolicy=Sideways"),
    ))
    .await;
    h.run(Req::post(
        "create with a finalizer",
        CM,
        json!({ "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "with-finalizer", "finalizers": ["berth.io/hold"] } }),
    ))
    .await;
    h.run(Req::delete(
        "delete: object with a finalizer",
        &format!("{CM}/with-finalizer"),
    ))
    .await;
    h.run(Req::patch(
        "patch: remove the last finalizer",
        &format!("{CM}/with-finalizer"),
        MERGE,
        json!({ "metadata": { "finalizers": null } }),
    ))
    .await;
    h.run(Req::get(
        "get: finalized object is gone (404)",
        &format!("{CM}/with-finalizer"),
    ))
    .await;
    h.run(Req::delete(
        "delete collection (label selector)",
        &format!("{CM}?labelSelector=suite%3Dgen"),
    ))
    .await;
    h.run(Req::get(
        "list: after delete collection",
        &format!("{CM}?labelSelector=suite%3Dgen"),
    ))
    .await;
}

async fn garbage_collection(h: &mut Harness) {
    for policy in ["Foreground", "Background", "Orphan"] {
        let owner = format!("owner-{}", policy.to_lowercase());
        let uid_var = format!("uid_{}", policy.to_lowercase());
        h.run(
            Req::post(
                "create",
                CM,
                cm(&owner, json!({ "suite": "gc" }), json!({})),
            )
            .save(&uid_var, "/metadata/uid"),
        )
        .await;
        h.run(Req::post(
            "create with ownerReferences",
            CM,
            json!({ "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": format!("dep-{}", policy.to_lowercase()), "labels": { "suite": "gc" },
                    "ownerReferences": [ { "apiVersion": "v1", "kind": "ConfigMap", "name": owner,
                        "uid": format!("{{{{{uid_var}}}}}"), "blockOwnerDeletion": true } ] } }),
        ))
        .await;
        h.run(Req::delete(
            &format!("delete: propagationPolicy={policy}"),
            &format!("{CM}/{owner}?propagationPolicy={policy}"),
        ))
        .await;
        h.wait(
            Req::get("get: deleted owner is gone (404)", &format!("{CM}/{owner}")),
            "the owner to be deleted",
            |a| code(a) == 404,
        )
        .await;
        let dep = format!("{CM}/dep-{}", policy.to_lowercase());
        if policy == "Orphan" {
            h.wait(
                Req::get("get: orphaned dependent", &dep),
                "the dependent to lose its ownerReferences",
                |a| code(a) == 200 && a["body"]["metadata"].get("ownerReferences").is_none(),
            )
            .await;
        } else {
            h.wait(
                Req::get("get: collected dependent is gone (404)", &dep),
                "the garbage collector to delete the dependent",
                |a| code(a) == 404,
            )
            .await;
        }
    }
}

async fn watches(h: &mut Harness) {
    h.run(
        Req::post(
            "create",
            CM,
            cm("w0", json!({ "suite": "watch" }), json!({ "v": "0" })),
        )
        .save("rv_w", "/metadata/resourceVersion"),
    )
    .await;
    h.watch(
        Req::get(
            "watch from a resourceVersion (label selector)",
            &format!("{CM}?watch=true&labelSelector=suite%3Dwatch&resourceVersion={{{{rv_w}}}}"),
        ),
        vec![
            Req::post(
                "create",
                CM,
                cm("w1", json!({ "suite": "watch" }), json!({ "v": "1" })),
            ),
            Req::patch(
                "patch: merge",
                &format!("{CM}/w1"),
                MERGE,
                json!({ "data": { "v": "2" } }),
            ),
            Req::patch(
                "patch: merge",
                &format!("{CM}/w0"),
                MERGE,
                json!({ "metadata": { "labels": { "suite": "other" } } }),
            ),
            Req::delete("delete", &format!("{CM}/w1")),
        ],
        4,
    )
    .await;
    h.watch(
        Req::get(
            "watch: field selector on name",
            &format!(
                "{CM}?watch=true&fieldSelector=metadata.name%3Dw2&resourceVersion={{{{rv_w}}}}"
            ),
        ),
        vec![
            Req::post(
                "create",
                CM,
                cm("w2", json!({ "suite": "watch" }), json!({})),
            ),
            Req::delete("delete", &format!("{CM}/w2")),
        ],
        2,
    )
    .await;
    h.run(Req::get(
        "watch: invalid resourceVersion (400)",
        &format!("{CM}?watch=true&resourceVersion=abc"),
    ))
    .await;
}

async fn subresources(h: &mut Harness) {
    let deploy = "/apis/apps/v1/namespaces/{{ns}}/deployments/web";
    h.run(Req::get("scale: get", &format!("{deploy}/scale")).view(View::Project(without_status)))
        .await;
    h.run(
        Req::patch(
            "scale: patch",
            &format!("{deploy}/scale"),
            MERGE,
            json!({ "spec": { "replicas": 2 } }),
        )
        .view(View::Project(without_status)),
    )
    .await;
    h.run(
        Req::put("scale: update", &format!("{deploy}/scale"),
            json!({ "apiVersion": "autoscaling/v1", "kind": "Scale", "metadata": { "name": "web" }, "spec": { "replicas": 0 } }))
        .view(View::Project(without_status)),
    )
    .await;
    h.run(Req::get(
        "scale: of a kind without one (404)",
        &format!("{CM}/a/scale"),
    ))
    .await;
    h.run(Req::get("status: get", "/api/v1/namespaces/{{ns}}/status"))
        .await;
}

async fn namespaces(h: &mut Harness) {
    let ns = "/api/v1/namespaces/diffns-{{sfx}}";
    h.run(Req::post(
        "namespace: create",
        "/api/v1/namespaces",
        json!({ "apiVersion": "v1", "kind": "Namespace",
            "metadata": { "name": "diffns-{{sfx}}", "labels": { "berth.io/test": "true" } } }),
    ))
    .await;
    h.run(Req::post(
        "namespace: invalid name (422)",
        "/api/v1/namespaces",
        json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "has.dots-{{sfx}}" } }),
    ))
    .await;
    h.run(Req::get("namespace: get", ns)).await;
    h.run(Req::patch(
        "status: merge patch",
        &format!("{ns}/status"),
        MERGE,
        json!({ "status": { "conditions": [] } }),
    ))
    .await;
    h.run(Req::post(
        "create",
        &format!("{ns}/configmaps"),
        cm("inside", json!({}), json!({})),
    ))
    .await;
    h.run(Req::delete("namespace: delete", ns)).await;
    h.run(Req::post(
        "create in a terminating namespace (403)",
        &format!("{ns}/configmaps"),
        cm("late", json!({}), json!({})),
    ))
    .await;
    h.wait(
        Req::get("namespace: terminated (404)", ns),
        "the namespace to terminate",
        |a| code(a) == 404,
    )
    .await;
}

async fn custom_resources(h: &mut Harness) {
    let crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    let group = "d{{sfx}}.berth.test";
    let crd = json!({ "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": { "name": format!("widgets.{group}") },
        "spec": { "group": group, "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList" },
            "versions": [ { "name": "v1", "served": true, "storage": true,
                "subresources": { "status": {}, "scale": { "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas" } },
                "additionalPrinterColumns": [
                    { "name": "Size", "type": "integer", "jsonPath": ".spec.size" },
                    { "name": "Phase", "type": "string", "jsonPath": ".status.phase" },
                    { "name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status" },
                    { "name": "Mode", "type": "string", "priority": 1, "jsonPath": ".spec.mode" },
                    { "name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp" } ],
                "schema": { "openAPIV3Schema": { "type": "object", "properties": {
                    "spec": { "type": "object", "required": ["size"], "properties": {
                        "size": { "type": "integer", "minimum": 1 },
                        "replicas": { "type": "integer" },
                        "mode": { "type": "string", "enum": ["fast", "slow"], "default": "fast" } } },
                    "status": { "type": "object", "properties": { "replicas": { "type": "integer" }, "phase": { "type": "string" },
                        "conditions": { "type": "array", "items": { "type": "object", "properties": {
                            "type": { "type": "string" }, "status": { "type": "string" } } } } } } } } } } ] } });
    h.run(Req::post("crd: create", crd_path, crd).view(View::Project(without_status)))
        .await;
    h.run(Req::post(
        "crd: invalid (422)",
        crd_path,
        json!({ "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": { "name": format!("wrong.{group}") },
            "spec": { "group": group, "scope": "Namespaced",
                "names": { "plural": "gadgets", "kind": "Gadget" }, "versions": [] } }),
    ))
    .await;
    let crd_one = format!("{crd_path}/widgets.{group}");
    h.wait(
        Req::get("crd: established", &crd_one).view(View::Project(crd_conditions)),
        "the CRD to be Established",
        |a| {
            a["body"]["status"]["conditions"]
                .as_array()
                .is_some_and(|c| {
                    c.iter()
                        .any(|c| c["type"] == "Established" && c["status"] == "True")
                })
        },
    )
    .await;
    let widgets = format!("/apis/{group}/v1/namespaces/{{{{ns}}}}/widgets");
    let widget = |name: &str, spec: Value| json!({ "apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": { "name": name }, "spec": spec });
    h.wait(
        Req::get("custom resource: list", &widgets),
        "the custom resource to be served",
        |a| code(a) == 200,
    )
    .await;
    h.run(Req::post(
        "custom resource: create (pruned, defaulted)",
        &widgets,
        widget("w", json!({ "size": 2, "unknown": true })),
    ))
    .await;
    h.run(Req::post(
        "custom resource: wrong type (422)",
        &widgets,
        widget("bad-type", json!({ "size": "big" })),
    ))
    .await;
    h.run(Req::post(
        "custom resource: enum and minimum (422)",
        &widgets,
        widget("bad-enum", json!({ "size": 0, "mode": "medium" })),
    ))
    .await;
    h.run(Req::post(
        "custom resource: missing required (422)",
        &widgets,
        widget("missing", json!({})),
    ))
    .await;
    h.run(Req::post(
        "custom resource: unknown field, fieldValidation=Strict (400)",
        &format!("{widgets}?fieldValidation=Strict"),
        widget("strict", json!({ "size": 1, "unknown": 1 })),
    ))
    .await;
    h.run(Req::patch(
        "custom resource: merge patch",
        &format!("{widgets}/w"),
        MERGE,
        json!({ "metadata": { "labels": { "x": "1" } }, "spec": { "replicas": 1 } }),
    ))
    .await;
    h.run(Req::patch(
        "custom resource: strategic merge patch (415)",
        &format!("{widgets}/w"),
        STRATEGIC,
        json!({ "spec": { "size": 3 } }),
    ))
    .await;
    h.run(Req::patch(
        "custom resource: apply",
        &format!("{widgets}/w?fieldManager=owner"),
        APPLY,
        widget("w", json!({ "size": 4 })),
    ))
    .await;
    h.run(Req::put(
        "custom resource: status update",
        &format!("{widgets}/w/status"),
        json!({ "apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": { "name": "w" },
            "spec": { "size": 99 }, "status": { "replicas": 1, "phase": "Ready",
                "conditions": [ { "type": "Reconciling", "status": "False" }, { "type": "Ready", "status": "True" } ] } }),
    ))
    .await;
    h.run(
        Req::get("custom resource: table (kubectl get)", &widgets)
            .accept("application/json;as=Table;v=v1;g=meta.k8s.io")
            .view(View::Project(printer_columns)),
    )
    .await;
    h.run(Req::get(
        "custom resource: scale",
        &format!("{widgets}/w/scale"),
    ))
    .await;
    h.run(Req::patch(
        "custom resource: scale patch",
        &format!("{widgets}/w/scale"),
        MERGE,
        json!({ "spec": { "replicas": 3 } }),
    ))
    .await;
    h.run(Req::get("custom resource: get", &format!("{widgets}/w")))
        .await;
    h.run(Req::delete("crd: delete", &crd_one).view(View::Project(without_status)))
        .await;
    h.wait(
        Req::get("crd: deleted (404)", &crd_one),
        "the CRD to be deleted",
        |a| code(a) == 404,
    )
    .await;
}

/// A custom resource Table's columns (name, type, priority) and widget `w`'s cells of its spec
/// columns. Only `w`: the dev cluster also holds `strict`, which kube-apiserver refused
/// (`field-validation`). The JSONPath filter column is checked by `table.rs`'s unit test and
/// the journeys' `kubectl get app` on both clusters.
fn printer_columns(a: &Value) -> Value {
    let b = &a["body"];
    let columns: Vec<Value> = b["columnDefinitions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| json!({ "name": c["name"], "type": c["type"], "priority": c["priority"] }))
        .collect();
    let rows: Vec<Value> = b["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["cells"][0] == "w")
        // Name, Size and Mode: the status columns are empty on kube-apiserver, which refused
        // the status update without a resourceVersion (`cr-unconditional-update`).
        .map(|r| json!([r["cells"][0], r["cells"][1], r["cells"][4]]))
        .collect();
    json!({ "code": a["code"], "kind": b["kind"], "columns": columns, "rows": rows })
}

/// A CRD's conditions by type: status and reason (messages and times differ in wording
/// across versions; the dev cluster's are documented).
fn crd_conditions(a: &Value) -> Value {
    let conds = a["body"]["status"]["conditions"]
        .as_array()
        .map(|c| {
            c.iter()
                .map(|c| (c["type"].as_str().unwrap_or_default().to_string(),
                    json!({ "status": c["status"], "reason": c["reason"], "message": c["message"] })))
                .collect::<serde_json::Map<String, Value>>()
        })
        .unwrap_or_default();
    let mut out = a.clone();
    out["body"]["status"]["conditions"] = Value::Object(conds);
    out
}
