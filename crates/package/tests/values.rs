mod support;

use berth_package::{ValuesError, checksum, compact_patches, compute_values, load, rebuild_values};
use json_patch::Patch;
use serde_json::{Value, json};
use support::write;

/// The values of a flat package (no global values to see).
fn compute_flat(
    pkg: &berth_package::Package,
    settings: &Value,
    patches: &Patch,
) -> Result<Value, ValuesError> {
    compute_values(pkg, settings, &json!({}), patches)
}

fn rebuild_flat(
    pkg: &berth_package::Package,
    settings: &Value,
    patches: &Patch,
) -> Result<Value, ValuesError> {
    rebuild_values(pkg, settings, &json!({}), patches)
}

fn patch(ops: Value) -> Patch {
    serde_json::from_value(ops).expect("valid patch")
}

/// A package where every layer sets `layer` and some layer-specific keys, so each test can see
/// which layer won.
fn layered_package(dir: &std::path::Path) -> berth_package::Package {
    write(
        dir,
        "package.yaml",
        "type: Application\nname: demo\nversion: 1.0.0\n",
    );
    write(
        dir,
        "values.yaml",
        "layer: static\nfromStatic: true\nnested: {a: static, b: static}\nsettingDefault: static\n",
    );
    write(
        dir,
        "openapi/settings.yaml",
        "type: object\nproperties:\n  layer: {type: string}\n  settingDefault: {type: string, default: settings-default}\n  nested:\n    type: object\n    properties:\n      a: {type: string}\n      b: {type: string}\n  replicas: {type: integer, default: 1}\n",
    );
    write(
        dir,
        "openapi/values.yaml",
        "type: object\nproperties:\n  fromStatic: {type: boolean}\n  valuesDefault: {type: string, default: values-default}\n  replicas: {type: integer, default: 5, maximum: 10}\n  internal:\n    type: object\n    default: {}\n    properties:\n      token: {type: string, default: none}\n",
    );
    load(dir).expect("loads")
}

#[test]
fn layers_override_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pkg = layered_package(dir.path());

    let values = compute_flat(&pkg, &json!({}), &Patch(vec![])).expect("computes");
    assert_eq!(
        values["layer"], "static",
        "static values are the bottom layer"
    );
    assert_eq!(
        values["settingDefault"], "settings-default",
        "settings defaults override static values"
    );
    assert_eq!(
        values["replicas"], 1,
        "settings defaults win over values-schema defaults"
    );
    assert_eq!(
        values["valuesDefault"], "values-default",
        "values-schema defaults fill missing keys"
    );
    assert_eq!(
        values["internal"],
        json!({"token": "none"}),
        "nested defaults of defaulted objects"
    );

    let settings = json!({"layer": "settings", "nested": {"a": "settings"}, "replicas": 3});
    let values = compute_flat(&pkg, &settings, &Patch(vec![])).expect("computes");
    assert_eq!(
        values["layer"], "settings",
        "settings override static values"
    );
    assert_eq!(
        values["nested"],
        json!({"a": "settings", "b": "static"}),
        "maps deep-merge"
    );
    assert_eq!(values["replicas"], 3);

    let patches = patch(json!([
        {"op": "replace", "path": "/layer", "value": "patch"},
        {"op": "add", "path": "/internal/token", "value": "abc"}
    ]));
    let values = compute_flat(&pkg, &settings, &patches).expect("computes");
    assert_eq!(values["layer"], "patch", "hook patches are the top layer");
    assert_eq!(values["internal"]["token"], "abc");
}

#[test]
fn patches_are_strict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pkg = layered_package(dir.path());
    let err = compute_flat(
        &pkg,
        &json!({}),
        &patch(json!([{"op": "remove", "path": "/missing/key"}])),
    )
    .expect_err("strict");
    match &err {
        ValuesError::Patch {
            operation, path, ..
        } => {
            assert_eq!(*operation, 0);
            assert_eq!(path, "/missing/key");
        }
        other => panic!("expected a patch error, got {other}"),
    }
}

#[test]
fn patched_values_are_validated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pkg = layered_package(dir.path());
    let err = compute_flat(
        &pkg,
        &json!({}),
        &patch(json!([{"op": "replace", "path": "/replicas", "value": 50}])),
    )
    .expect_err("invalid");
    let ValuesError::Values(errors) = &err else {
        panic!("expected a values error, got {err}")
    };
    assert_eq!(errors[0].path, ".replicas");
    assert!(err.to_string().contains(".replicas"), "{err}");
}

#[test]
fn invalid_settings_are_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pkg = layered_package(dir.path());
    let err =
        compute_flat(&pkg, &json!({"replicas": "many"}), &Patch(vec![])).expect_err("invalid");
    let ValuesError::Settings(errors) = &err else {
        panic!("expected a settings error, got {err}")
    };
    assert_eq!(errors[0].path, ".replicas");
    let err = compute_flat(&pkg, &json!({"typo": 1}), &Patch(vec![])).expect_err("unknown field");
    assert!(err.to_string().contains(".typo"), "{err}");
}

#[test]
fn settings_without_schema_are_rejected() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "package.yaml",
        "type: Application\nname: demo\nversion: 1.0.0\n",
    );
    write(dir.path(), "values.yaml", "a: 1\n");
    let pkg = load(dir.path()).expect("loads");
    assert_eq!(
        compute_flat(&pkg, &json!({}), &Patch(vec![])).expect("empty settings are fine"),
        json!({"a": 1})
    );
    let err = compute_flat(&pkg, &json!({"a": 2}), &Patch(vec![])).expect_err("rejected");
    assert!(err.to_string().contains("no settings schema"), "{err}");
}

#[test]
fn rebuild_replays_stored_patches_leniently() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pkg = layered_package(dir.path());
    // Accepted while the settings still had `nested.a`; later the user drops it.
    let stored = compact_patches(&patch(json!([
        {"op": "replace", "path": "/layer", "value": "first"},
        {"op": "remove", "path": "/nested/a"},
        {"op": "replace", "path": "/layer", "value": "patch"}
    ])));
    assert_eq!(
        stored.0.len(),
        2,
        "only the last operation per path is kept"
    );
    let old = compute_flat(&pkg, &json!({"nested": {"a": "x"}}), &stored)
        .expect("strict apply works at first");
    assert!(old["nested"].get("a").is_none());

    // The static values always provide nested.a, so make the remove fail by removing twice.
    let doubled = patch(
        json!([{"op": "remove", "path": "/nested/a"}, {"op": "remove", "path": "/nested/a"}]),
    );
    assert!(
        compute_flat(&pkg, &json!({}), &doubled).is_err(),
        "strict mode refuses the second remove"
    );
    let rebuilt = rebuild_flat(&pkg, &json!({}), &doubled).expect("lenient replay skips it");
    assert!(rebuilt["nested"].get("a").is_none());
    assert_eq!(rebuilt["nested"]["b"], "static");
    assert_eq!(
        checksum(&rebuilt),
        checksum(&rebuild_flat(&pkg, &json!({}), &doubled).expect("again")),
        "rebuilds are deterministic"
    );
}

/// An addon-operator style module: `values.yaml` keeps its values under `myMod`.
fn nested_module(dir: &std::path::Path, explicit: Option<&str>) -> berth_package::Package {
    let layout = explicit
        .map(|l| format!("values: {l}\n"))
        .unwrap_or_default();
    write(
        dir,
        "package.yaml",
        &format!("type: Module\nname: my-mod\nversion: 1.0.0\n{layout}"),
    );
    write(
        dir,
        "values.yaml",
        "myMod:\n  image: nginx\n  internal: {}\nmyModEnabled: true\n",
    );
    write(
        dir,
        "openapi/config-values.yaml",
        "type: object\nproperties:\n  replicas: {type: integer, default: 1}\n",
    );
    write(
        dir,
        "openapi/values.yaml",
        "type: object\nproperties:\n  image: {type: string}\n  internal:\n    type: object\n    properties:\n      token: {type: string}\n",
    );
    load(dir).expect("loads")
}

#[test]
fn nested_values_sit_under_the_camel_case_name_beside_global() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pkg = nested_module(dir.path(), None);
    assert_eq!(
        pkg.layout,
        berth_package::ValuesLayout::Nested,
        "detected from values.yaml"
    );
    let global = json!({"clusterName": "prod"});
    let values = compute_values(
        &pkg,
        &json!({"replicas": 3}),
        &global,
        &patch(json!([{"op": "add", "path": "/myMod/internal/token", "value": "t"}])),
    )
    .expect("computes");
    assert_eq!(
        values,
        json!({
            "global": {"clusterName": "prod"},
            "myMod": {"image": "nginx", "internal": {"token": "t"}, "replicas": 3}
        })
    );
    // The values schema checks the module's own section.
    let err = compute_values(
        &pkg,
        &json!({}),
        &global,
        &patch(json!([{"op": "add", "path": "/myMod/internal/token", "value": 5}])),
    )
    .expect_err("schema refuses");
    assert!(
        matches!(&err, ValuesError::Values(e) if e[0].path == ".internal.token"),
        "{err}"
    );
}

#[test]
fn module_hooks_may_not_patch_global_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pkg = nested_module(dir.path(), Some("nested"));
    let err = berth_package::check_patch_scope(
        &pkg,
        &patch(json!([
            {"op": "add", "path": "/myMod/a", "value": 1},
            {"op": "add", "path": "/global/a", "value": 1}
        ])),
    )
    .expect_err("global is not the module's");
    assert!(
        matches!(&err, ValuesError::Scope { operation: 1, path, .. } if path == "/global/a"),
        "{err}"
    );
    assert!(err.to_string().contains("/myMod/"), "{err}");
    // Moving from outside the section is refused too.
    assert!(
        berth_package::check_patch_scope(
            &pkg,
            &patch(json!([{"op": "copy", "from": "/global/x", "path": "/myMod/x"}]))
        )
        .is_err()
    );
}

#[test]
fn explicit_flat_layout_wins_over_detection() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pkg = nested_module(dir.path(), Some("flat"));
    assert_eq!(pkg.layout, berth_package::ValuesLayout::Flat);
    let values = compute_values(&pkg, &json!({}), &json!({"ignored": true}), &Patch(vec![]))
        .expect("computes");
    assert_eq!(
        values,
        json!({"image": "nginx", "internal": {}, "replicas": 1})
    );
}

#[test]
fn config_patches_change_the_settings_within_their_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pkg = nested_module(dir.path(), None);
    let settings = berth_package::patch_settings(
        &pkg,
        &json!({"replicas": 2}),
        &patch(json!([{"op": "replace", "path": "/myMod/replicas", "value": 4}])),
    )
    .expect("patches");
    assert_eq!(settings, json!({"replicas": 4}));
    let err = berth_package::patch_settings(
        &pkg,
        &json!({}),
        &patch(json!([{"op": "add", "path": "/myMod/replicas", "value": "four"}])),
    )
    .expect_err("schema refuses");
    assert!(matches!(err, ValuesError::Settings(_)), "{err}");
}

#[test]
fn the_global_package_owns_the_global_section() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "package.yaml",
        "type: Global\nname: global\nversion: 1.0.0\n",
    );
    write(dir.path(), "values.yaml", "global:\n  clusterName: dev\n");
    let pkg = load(dir.path()).expect("loads");
    let values = compute_values(
        &pkg,
        &json!({}),
        &json!({}),
        &patch(json!([{"op": "add", "path": "/global/discovered", "value": true}])),
    )
    .expect("computes");
    assert_eq!(
        values,
        json!({"global": {"clusterName": "dev", "discovered": true}})
    );
    assert!(
        berth_package::check_patch_scope(
            &pkg,
            &patch(json!([{"op": "add", "path": "/other", "value": 1}]))
        )
        .is_err()
    );
    // A chart has no place in it.
    write(dir.path(), "templates/a.yaml", "kind: ConfigMap\n");
    let err = load(dir.path()).expect_err("refused");
    assert!(err.to_string().contains("not a chart"), "{err}");
}

/// issue 32.10: addon-operator's `update-kube-module-config` test module. Its hook patches the
/// config values under the camelCase name; with no settings yet the section is `{}` (as in
/// addon-operator), so the first `add` applies and the `remove` of a setting nobody made
/// fails as addon-operator's strict mode fails it.
#[test]
fn a_dashed_modules_hook_patches_its_camel_case_section_from_no_settings() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "Chart.yaml",
        "name: update-kube-module-config\nversion: 0.1.0\n",
    );
    write(
        dir.path(),
        "openapi/config-values.yaml",
        "type: object\nproperties:\n  a: {type: integer}\n  b: {type: string}\n  c: {type: array, items: {type: integer}}\n",
    );
    let pkg = load(dir.path()).expect("loads");
    // The patch the module's hook `merge_and_patch_values` writes.
    let hook_patch = patch(json!([
        {"op": "add", "path": "/updateKubeModuleConfig/a", "value": 2},
        {"op": "remove", "path": "/updateKubeModuleConfig/b"},
        {"op": "add", "path": "/updateKubeModuleConfig/c", "value": [3]}
    ]));
    // A hook sees an empty section, not null, before any settings exist.
    assert_eq!(
        berth_package::config_values(&pkg, &Value::Null, &json!({})),
        json!({"global": {}, "updateKubeModuleConfig": {}})
    );
    // addon-operator's expectation: {b: should-be-deleted} becomes {a: 2, c: [3]}.
    let settings =
        berth_package::patch_settings(&pkg, &json!({"b": "should-be-deleted"}), &hook_patch)
            .expect("patches");
    assert_eq!(settings, json!({"a": 2, "c": [3]}));
    let settings = berth_package::patch_settings(&pkg, &json!({"a": 1, "b": "2"}), &hook_patch)
        .expect("patches over existing settings");
    assert_eq!(settings, json!({"a": 2, "c": [3]}));
    // No settings yet: the `add` applies; the `remove` of a setting that does not exist is
    // operation 1's failure, as in addon-operator.
    let err = berth_package::patch_settings(&pkg, &Value::Null, &hook_patch).expect_err("strict");
    assert!(
        matches!(&err, ValuesError::Patch { operation: 1, path, .. } if path == "/updateKubeModuleConfig/b"),
        "{err}"
    );
    let settings = berth_package::patch_settings(
        &pkg,
        &Value::Null,
        &patch(json!([{"op": "add", "path": "/updateKubeModuleConfig/a", "value": 2}])),
    )
    .expect("the first add applies");
    assert_eq!(settings, json!({"a": 2}));
    // Its sibling `update-module-dynamic` patches the values the same way.
    let values = compute_values(
        &pkg,
        &Value::Null,
        &json!({}),
        &patch(json!([{"op": "add", "path": "/updateKubeModuleConfig/x", "value": 9}])),
    )
    .expect("values patch");
    assert_eq!(
        values,
        json!({"global": {}, "updateKubeModuleConfig": {"x": 9}})
    );
}

/// A flat package whose hook patches `/<camelName>/...` was written for addon-operator's
/// layout: the error says so and how to choose it.
#[test]
fn a_flat_package_patched_under_its_camel_case_name_is_told_to_nest() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "package.yaml",
        "type: Module\nname: update-kube-module-config\nversion: 0.1.0\n",
    );
    let pkg = load(dir.path()).expect("loads");
    let err = compute_values(
        &pkg,
        &json!({}),
        &json!({}),
        &patch(json!([{"op": "add", "path": "/updateKubeModuleConfig/a", "value": 2}])),
    )
    .expect_err("flat values have no such section");
    let text = err.to_string();
    assert!(
        text.contains("path is invalid") && text.contains("values: nested"),
        "{text}"
    );
    // With `values: nested` the same patch applies.
    write(
        dir.path(),
        "package.yaml",
        "type: Module\nname: update-kube-module-config\nversion: 0.1.0\nvalues: nested\n",
    );
    let pkg = load(dir.path()).expect("loads");
    let values = compute_values(
        &pkg,
        &json!({}),
        &json!({}),
        &patch(json!([{"op": "add", "path": "/updateKubeModuleConfig/a", "value": 2}])),
    )
    .expect("nested");
    assert_eq!(
        values,
        json!({"global": {}, "updateKubeModuleConfig": {"a": 2}})
    );
}
