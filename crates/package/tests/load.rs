mod support;

use std::fs;

use berth_package::{LoadError, PackageType, load};
use serde_json::json;
use support::{MINIMAL_DEFINITION, write};

fn load_err(dir: &tempfile::TempDir) -> String {
    let err = load(dir.path()).expect_err("load fails");
    err.to_string()
}

#[test]
fn loads_a_full_package() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        root,
        "package.yaml",
        "type: Module\nname: my-mod\nversion: v0.3.0\nweight: 20\ndescription: demo\nrequirements:\n  kubernetes: '>=1.28'\n",
    );
    write(
        root,
        "values.yaml",
        "myMod:\n  image: nginx\nother: ignored\n",
    );
    write(
        root,
        "openapi/config-values.yaml",
        "type: object\nproperties:\n  replicas: {type: integer, default: 1}\n",
    );
    write(
        root,
        "openapi/values.yaml",
        "type: object\nproperties:\n  image: {type: string}\n",
    );
    write(root, "templates/deploy.yaml", "kind: Deployment\n");
    fs::create_dir(root.join("hooks")).expect("mkdir hooks");

    let pkg = load(root).expect("loads");
    assert_eq!(pkg.definition.package_type, PackageType::Module);
    assert_eq!(pkg.definition.name, "my-mod");
    assert_eq!(pkg.definition.version.to_string(), "0.3.0");
    assert_eq!(pkg.definition.weight, Some(20));
    assert_eq!(pkg.definition.description.as_deref(), Some("demo"));
    assert!(pkg.definition.requirements.kubernetes.is_some());
    assert_eq!(
        pkg.static_values,
        json!({"image": "nginx"}),
        "only the camelCase section is used"
    );
    assert!(
        pkg.settings_schema.is_some(),
        "config-values.yaml is the fallback settings schema"
    );
    assert!(pkg.is_helm);
    assert_eq!(pkg.hooks_dir, Some(root.join("hooks")));
    // The settings properties are merged into the values schema, so flat values validate.
    let values_schema = pkg.values_schema.expect("values schema");
    assert!(
        values_schema
            .validate(&json!({"image": "x", "replicas": 2}))
            .is_ok()
    );
    assert_eq!(
        values_schema
            .validate(&json!({"replicas": "two"}))
            .expect_err("invalid")[0]
            .path,
        ".replicas"
    );
}

#[test]
fn minimal_package_has_no_extras() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "package.yaml", MINIMAL_DEFINITION);
    let pkg = load(dir.path()).expect("loads");
    assert_eq!(pkg.static_values, json!({}));
    assert!(pkg.settings_schema.is_none() && pkg.values_schema.is_none());
    assert!(pkg.hooks_dir.is_none());
    assert!(!pkg.is_helm);
}

#[test]
fn settings_yaml_wins_over_config_values() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "package.yaml", MINIMAL_DEFINITION);
    write(
        dir.path(),
        "openapi/settings.yaml",
        "type: object\nproperties:\n  a: {type: string}\n",
    );
    write(
        dir.path(),
        "openapi/config-values.yaml",
        "type: object\nproperties:\n  b: {type: string}\n",
    );
    let schema = load(dir.path())
        .expect("loads")
        .settings_schema
        .expect("schema");
    assert!(schema.validate(&json!({"a": "x"})).is_ok());
    assert!(schema.validate(&json!({"b": "x"})).is_err());
}

#[test]
fn missing_definition_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let err = load(dir.path()).expect_err("fails");
    assert!(matches!(err, LoadError::MissingDefinition { .. }));
    assert!(err.to_string().contains("package.yaml"), "{err}");
}

#[test]
fn bad_yaml_names_the_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "package.yaml",
        "type: Application\nname: demo\nversion: [1.0\n",
    );
    let message = load_err(&dir);
    assert!(
        message.contains("package.yaml") && message.contains("invalid YAML"),
        "{message}"
    );
    assert!(message.contains("line 3 column 10"), "{message}");
    assert!(!message.contains('\n'), "one line: {message}");
}

#[test]
fn definition_errors_name_file_and_field() {
    let cases = [
        (
            "type: Thing\nname: demo\nversion: 1.0.0\n",
            "`type`",
            "unknown package type",
        ),
        (
            "type: Application\nname: demo\nversion: 1.0\n",
            "`version`",
            "must be a string",
        ),
        (
            "type: Application\nname: demo\nversion: one\n",
            "`version`",
            "not a semantic version",
        ),
        (
            "type: Application\nversion: 1.0.0\n",
            "`name`",
            "is required",
        ),
        (
            "type: Application\nname: demo\nversion: 1.0.0\nrequirements:\n  kubernetes: '>=x'\n",
            "`requirements.kubernetes`",
            "invalid version constraint",
        ),
    ];
    for (definition, field, problem) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "package.yaml", definition);
        let message = load_err(&dir);
        assert!(message.contains("package.yaml"), "{message}");
        assert!(
            message.contains(field) && message.contains(problem),
            "{message}"
        );
    }
}

#[test]
fn static_values_must_be_a_mapping() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "package.yaml", MINIMAL_DEFINITION);
    write(dir.path(), "values.yaml", "- a\n- b\n");
    let message = load_err(&dir);
    assert!(
        message.contains("values.yaml") && message.contains("must be a mapping"),
        "{message}"
    );
}

#[test]
fn schema_that_does_not_compile_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "package.yaml", MINIMAL_DEFINITION);
    write(
        dir.path(),
        "openapi/values.yaml",
        "type: object\nproperties:\n  a: {type: banana}\n",
    );
    let message = load_err(&dir);
    assert!(
        message.contains("openapi/values.yaml") && message.contains("does not compile"),
        "{message}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "package.yaml", MINIMAL_DEFINITION);
    write(
        dir.path(),
        "openapi/settings.yaml",
        "type: object\nproperties:\n  a: [1]\n",
    );
    let message = load_err(&dir);
    assert!(
        message.contains("openapi/settings.yaml") && message.contains("/properties/a"),
        "{message}"
    );
}

#[test]
fn chart_files_are_relative_sorted_and_skip_hooks_and_openapi() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(root, "package.yaml", MINIMAL_DEFINITION);
    write(root, "Chart.yaml", "name: demo\n");
    write(root, "values.yaml", "a: 1\n");
    write(root, "templates/b.yaml", "b");
    write(root, "templates/_helpers.tpl", "h");
    write(root, "charts/sub/Chart.yaml", "name: sub\n");
    write(root, "crds/crd.yaml", "kind: CustomResourceDefinition\n");
    write(root, "hooks/run", "#!/bin/sh\n");
    write(root, "openapi/settings.yaml", "type: object\n");
    write(root, "README.md", "docs");

    let files = load(root)
        .expect("loads")
        .chart_files()
        .expect("chart files");
    let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "Chart.yaml",
            "charts/sub/Chart.yaml",
            "crds/crd.yaml",
            "templates/_helpers.tpl",
            "templates/b.yaml",
            "values.yaml"
        ]
    );
    assert_eq!(files[4].1, b"b");
}

#[test]
fn chart_files_refuse_links_out_of_the_package() {
    let outside = tempfile::tempdir().expect("tempdir");
    write(outside.path(), "secret.yaml", "secret");
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "package.yaml", MINIMAL_DEFINITION);
    fs::create_dir(dir.path().join("templates")).expect("mkdir");
    std::os::unix::fs::symlink(
        outside.path().join("secret.yaml"),
        dir.path().join("templates/leak.yaml"),
    )
    .expect("symlink");
    let err = load(dir.path())
        .expect("loads")
        .chart_files()
        .expect_err("refused");
    assert!(matches!(err, LoadError::LinkEscapes { .. }), "{err}");
}

#[test]
fn conversions_load_with_the_schema_version_and_broken_ones_name_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "package.yaml", MINIMAL_DEFINITION);
    write(
        dir.path(),
        "openapi/config-values.yaml",
        "type: object\nx-config-version: 2\nproperties:\n  replicas: {type: integer}\n",
    );
    write(
        dir.path(),
        "openapi/conversions/v2.yaml",
        "version: 2\nconversions:\n  - .replicas = .size | del(.size)\n",
    );
    let pkg = load(dir.path()).expect("loads");
    assert_eq!(pkg.conversions.latest(), 2);
    let chain = pkg.conversions.chain(1).expect("known version");
    assert_eq!(chain[0].expressions, [".replicas = .size | del(.size)"]);
    // The schema still validates settings of the latest version.
    let schema = pkg.settings_schema.expect("schema");
    assert!(schema.validate(&json!({"replicas": 2})).is_ok());

    write(
        dir.path(),
        "openapi/conversions/v2.yaml",
        "version: 2\nconversions: 'not a list'\n",
    );
    let err = load_err(&dir);
    assert!(
        err.contains("openapi/conversions/v2.yaml") && err.contains("conversions: required"),
        "{err}"
    );
}

/// An addon-operator module has no package.yaml: its Chart.yaml names and versions it, and its
/// values are nested.
#[test]
fn an_addon_operator_module_loads_from_its_chart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(
        root,
        "Chart.yaml",
        "apiVersion: v2\nname: sysctl-tuner\nversion: 0.2.0\n",
    );
    write(
        root,
        "values.yaml",
        "sysctlTuner:\n  sleep: 600\nsysctlTunerEnabled: true\n",
    );
    write(root, "templates/ds.yaml", "kind: DaemonSet\n");
    let pkg = load(root).expect("loads");
    assert_eq!(pkg.definition.package_type, PackageType::Module);
    assert_eq!(pkg.definition.name, "sysctl-tuner");
    assert_eq!(pkg.definition.version.to_string(), "0.2.0");
    assert_eq!(pkg.layout, berth_package::ValuesLayout::Nested);
    assert_eq!(pkg.static_values, json!({"sleep": 600}));
    assert!(berth_package::is_package_dir(root));

    // A chart without a version names the field and the file.
    write(root, "Chart.yaml", "apiVersion: v2\nname: sysctl-tuner\n");
    let err = load_err(&dir);
    assert!(
        err.contains("Chart.yaml") && err.contains("version"),
        "{err}"
    );
}
