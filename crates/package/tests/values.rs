mod support;

use berth_package::{ValuesError, checksum, compact_patches, compute_values, load, rebuild_values};
use json_patch::Patch;
use serde_json::{Value, json};
use support::write;

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

    let values = compute_values(&pkg, &json!({}), &Patch(vec![])).expect("computes");
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
    let values = compute_values(&pkg, &settings, &Patch(vec![])).expect("computes");
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
    let values = compute_values(&pkg, &settings, &patches).expect("computes");
    assert_eq!(values["layer"], "patch", "hook patches are the top layer");
    assert_eq!(values["internal"]["token"], "abc");
}

#[test]
fn patches_are_strict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pkg = layered_package(dir.path());
    let err = compute_values(
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
    let err = compute_values(
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
        compute_values(&pkg, &json!({"replicas": "many"}), &Patch(vec![])).expect_err("invalid");
    let ValuesError::Settings(errors) = &err else {
        panic!("expected a settings error, got {err}")
    };
    assert_eq!(errors[0].path, ".replicas");
    let err = compute_values(&pkg, &json!({"typo": 1}), &Patch(vec![])).expect_err("unknown field");
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
        compute_values(&pkg, &json!({}), &Patch(vec![])).expect("empty settings are fine"),
        json!({"a": 1})
    );
    let err = compute_values(&pkg, &json!({"a": 2}), &Patch(vec![])).expect_err("rejected");
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
    let old = compute_values(&pkg, &json!({"nested": {"a": "x"}}), &stored)
        .expect("strict apply works at first");
    assert!(old["nested"].get("a").is_none());

    // The static values always provide nested.a, so make the remove fail by removing twice.
    let doubled = patch(
        json!([{"op": "remove", "path": "/nested/a"}, {"op": "remove", "path": "/nested/a"}]),
    );
    assert!(
        compute_values(&pkg, &json!({}), &doubled).is_err(),
        "strict mode refuses the second remove"
    );
    let rebuilt = rebuild_values(&pkg, &json!({}), &doubled).expect("lenient replay skips it");
    assert!(rebuilt["nested"].get("a").is_none());
    assert_eq!(rebuilt["nested"]["b"], "static");
    assert_eq!(
        checksum(&rebuilt),
        checksum(&rebuild_values(&pkg, &json!({}), &doubled).expect("again")),
        "rebuilds are deterministic"
    );
}
