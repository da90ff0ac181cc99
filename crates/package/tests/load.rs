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
        // Issue 31.8: a typo or an unsupported section is refused, not silently dropped.
        (
            "type: Application\nname: demo\nversion: 1.0.0\nrequirments:\n  kubernetes: '>=1.28'\n",
            "`requirments`",
            "unknown field (did you mean `requirements`?); known fields: type, name, version",
        ),
        (
            "type: Application\nname: demo\nversion: 1.0.0\nsidecars: []\n",
            "`sidecars`",
            "unknown field; known fields: type, name, version",
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

/// Issue 30.6: a chart whose links form a DAG (16 links per level to the next level, 11
/// levels) has 16^10 paths; the walk stops after a bounded number of entries with the limit
/// named instead of visiting them all.
#[test]
fn chart_files_stop_a_walk_through_a_link_dag_at_the_visit_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(root, "package.yaml", MINIMAL_DEFINITION);
    write(root, "Chart.yaml", "name: demo\n");
    // No files at the bottom: the files bound never comes into play.
    fs::create_dir_all(root.join("templates/dag/l10/leaf")).expect("mkdir");
    for level in (0..10).rev() {
        let dir = root.join(format!("templates/dag/l{level}"));
        fs::create_dir_all(&dir).expect("mkdir");
        for i in 0..16 {
            std::os::unix::fs::symlink(format!("../l{}", level + 1), dir.join(format!("n{i}")))
                .expect("symlink");
        }
    }
    let started = std::time::Instant::now();
    let err = load(root)
        .expect("loads")
        .chart_files()
        .expect_err("refused");
    assert!(
        err.to_string().contains("20000 directory entries visited"),
        "{err}"
    );
    assert!(!err.is_transient(), "the same files are refused again");
    eprintln!("refused after {:?}", started.elapsed());
}

/// Links inside the package are followed as Helm follows them: each path through a link is a
/// file of its own, read from the link's real target.
#[test]
fn chart_files_follow_links_inside_the_package() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(root, "package.yaml", MINIMAL_DEFINITION);
    write(root, "Chart.yaml", "name: demo\n");
    write(root, "shared/common/Chart.yaml", "name: common\n");
    write(root, "shared/common/templates/_h.tpl", "h");
    fs::create_dir_all(root.join("charts")).expect("mkdir");
    std::os::unix::fs::symlink("../shared/common", root.join("charts/common")).expect("symlink");
    fs::create_dir_all(root.join("templates")).expect("mkdir");
    std::os::unix::fs::symlink(
        "../shared/common/templates/_h.tpl",
        root.join("templates/_h.tpl"),
    )
    .expect("symlink");
    std::os::unix::fs::symlink("missing.yaml", root.join("templates/dangling.yaml"))
        .expect("symlink");
    let files = load(root)
        .expect("loads")
        .chart_files()
        .expect("chart files");
    let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "Chart.yaml",
            "charts/common/Chart.yaml",
            "charts/common/templates/_h.tpl",
            "templates/_h.tpl"
        ]
    );
}

#[test]
fn a_modules_rbac_section_loads_and_an_apps_is_refused_naming_file_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "package.yaml",
        "type: Module\nname: copier\nversion: 1.0.0\nrbac:\n  rules:\n  - apiGroups: ['']\n    resources: [secrets]\n    verbs: ['*']\n  - apiGroups: ['']\n    resources: [namespaces]\n    verbs: [get, list, watch]\n",
    );
    let pkg = load(dir.path()).expect("loads");
    let rbac = pkg.definition.rbac.expect("declared");
    assert_eq!(rbac.rules.len(), 2);
    assert_eq!(rbac.rules[1].verbs, vec!["get", "list", "watch"]);

    let app = tempfile::tempdir().expect("tempdir");
    write(
        app.path(),
        "package.yaml",
        "type: Application\nname: web\nversion: 1.0.0\nrbac:\n  rules: []\n",
    );
    let err = load_err(&app);
    assert!(err.contains("package.yaml"), "{err}");
    assert!(err.contains("field `rbac`"), "{err}");
    assert!(err.contains("Application may not declare"), "{err}");

    let bad = tempfile::tempdir().expect("tempdir");
    write(
        bad.path(),
        "package.yaml",
        "type: Module\nname: m\nversion: 1.0.0\nrbac:\n  rules:\n  - apiGroups: ['']\n    resources: [pods]\n    verb: [get]\n",
    );
    let err = load_err(&bad);
    assert!(err.contains("field `rbac.rules[0].verb`"), "{err}");
}

const OPERATOR: &str = r#"apiVersion: dcontroller.io/v1alpha1
kind: Operator
metadata: {name: annotator}
spec:
  controllers:
    - name: label-copier
      sources: [{apiGroup: "", kind: ConfigMap}]
      pipeline:
        "@project":
          metadata: {name: $.metadata.name, namespace: $.metadata.namespace}
      target: {kind: Copy}
"#;

#[test]
fn operators_load_from_their_directory_and_bad_ones_name_file_controller_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    write(root, "package.yaml", MINIMAL_DEFINITION);
    write(root, "operators/a.yaml", OPERATOR);
    // A bare spec takes its file's name; other files are not read.
    write(
        root,
        "operators/bare.yml",
        "controllers:\n  - name: c\n    sources: [{kind: X}]\n    target: {kind: Out}\n",
    );
    write(root, "operators/README.md", "not a spec");
    let pkg = load(root).expect("loads");
    let names: Vec<&str> = pkg.operators.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["annotator", "bare"]);
    assert_eq!(pkg.operators[0].controllers[0].name, "label-copier");

    write(
        root,
        "operators/bare.yml",
        "controllers:\n  - name: c\n    sources: [{kind: X}]\n    pipeline: {\"@select\": {\"@gt\": [1]}}\n    target: {kind: Out}\n",
    );
    let err = load_err(&dir);
    assert!(err.contains("operators/bare.yml"), "{err}");
    assert!(
        err.contains("controller \"c\": pipeline.@select.@gt: @gt takes 2 arguments, not 1"),
        "{err}"
    );
    assert!(matches!(load(root), Err(LoadError::Operator { .. })));

    write(root, "operators/bare.yml", OPERATOR);
    let err = load_err(&dir);
    assert!(
        err.contains("a second operator named \"annotator\""),
        "{err}"
    );
}

#[test]
fn a_package_without_operators_has_none() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "package.yaml", MINIMAL_DEFINITION);
    assert!(load(dir.path()).expect("loads").operators.is_empty());
}

#[test]
fn an_addon_operator_modules_own_operators_directory_is_not_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "Chart.yaml",
        "name: olm-bundle\nversion: 1.0.0\n",
    );
    write(
        dir.path(),
        "operators/bundle.yaml",
        "apiVersion: operators.coreos.com/v1\nkind: X\n",
    );
    assert!(load(dir.path()).expect("loads").operators.is_empty());
}
