//! Subcharts as Helm arranges them (its `processDependencyEnabled`): aliases, several aliases
//! of one chart, version ranges, `condition`/`tags`, v1 charts' `requirements.yaml`, and the
//! missing-dependency check. Expected texts are `helm template` (v4.2.3) output for the same
//! charts.

use crate::template::{TemplateOptions, listing_output, render};

const ALIASES: &[(&str, &str)] = &[
    (
        r#"Chart.yaml"#,
        r#"apiVersion: v2
name: a
version: 0.1.0
dependencies:
  - name: sub
    alias: one
    version: "0.1.0"
  - name: sub
    alias: two
    version: "~0.1"
    condition: two.enabled
  - name: sub
    version: "0.1.x"
    tags: [t1]
  - name: sub
    alias: three
"#,
    ),
    (
        r#"charts/extra/Chart.yaml"#,
        r#"apiVersion: v2
name: extra
version: 9.9.9
"#,
    ),
    (
        r#"charts/extra/templates/t.yaml"#,
        r#"# extra {{ .Chart.Name }}
"#,
    ),
    (
        r#"charts/sub/Chart.yaml"#,
        r#"apiVersion: v2
name: sub
version: 0.1.0
"#,
    ),
    (
        r#"charts/sub/templates/t.yaml"#,
        r#"# {{ .Chart.Name }} x={{ .Values.x }} {{ .Template.Name }}
"#,
    ),
    (
        r#"charts/sub/values.yaml"#,
        r#"x: 1
enabled: true
"#,
    ),
    (
        r#"templates/t.yaml"#,
        r#"# deps:{{ range .Chart.Dependencies }} {{ .Name }}/{{ .Alias }}/{{ .Enabled }}{{ end }} subs: {{ keys .Subcharts | sortAlpha }} {{ .Values.two }}
"#,
    ),
    (
        r#"values.yaml"#,
        r#"two:
  x: 2
sub:
  x: 3
tags:
  t1: true
"#,
    ),
];

const REQUIREMENTS: &[(&str, &str)] = &[
    (
        r#"Chart.yaml"#,
        r#"apiVersion: v1
name: b
version: 0.1.0
"#,
    ),
    (
        r#"charts/sub/Chart.yaml"#,
        r#"apiVersion: v1
name: sub
version: 0.1.0
"#,
    ),
    (
        r#"charts/sub/templates/t.yaml"#,
        r#"# {{ .Chart.Name }} x={{ .Values.x }}
"#,
    ),
    (
        r#"charts/sub/values.yaml"#,
        r#"x: 1
"#,
    ),
    (
        r#"requirements.yaml"#,
        r#"dependencies:
  - name: sub
    version: 0.1.0
    alias: renamed
    condition: renamed.enabled,global.sub
    tags: [backend]
"#,
    ),
    (
        r#"templates/t.yaml"#,
        r#"# deps:{{ range .Chart.Dependencies }} {{ .Name }}/{{ .Condition }}{{ end }}
"#,
    ),
    (
        r#"values.yaml"#,
        r#"renamed:
  x: 2
"#,
    ),
];

fn template(files: &[(&str, &str)], set: &[&str]) -> Result<String, String> {
    let files: Vec<(String, Vec<u8>)> = files
        .iter()
        .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
        .collect();
    let opts = TemplateOptions {
        release_name: "r".into(),
        set: set.iter().map(|s| s.to_string()).collect(),
        ..TemplateOptions::default()
    };
    render(&files, &opts)
        .map(|l| listing_output(&l, false))
        .map_err(|e| e.to_string())
}

/// issue 32.6: two aliases of one subchart render as two subcharts; a dependency whose version
/// range the vendored chart does not meet (or that has none) takes no chart; a vendored chart
/// no dependency names renders under its own name; `.Chart.Dependencies` names each by its
/// alias and drops the disabled ones.
#[test]
fn two_aliases_of_one_subchart_render_as_two() {
    assert_eq!(
        template(ALIASES, &[]).as_deref(),
        Ok(r#"---
# Source: a/charts/extra/templates/t.yaml
# extra extra

---
# Source: a/charts/one/templates/t.yaml
# one x=1 a/charts/one/templates/t.yaml

---
# Source: a/charts/sub/templates/t.yaml
# sub x=3 a/charts/sub/templates/t.yaml

---
# Source: a/charts/two/templates/t.yaml
# two x=2 a/charts/two/templates/t.yaml

---
# Source: a/templates/t.yaml
# deps: one/one/true two/two/true sub//true three/three/true subs: [extra one sub two] map[enabled:true global:map[] x:2]
"#)
    );
    assert_eq!(
        template(ALIASES, &["two.enabled=false", "tags.t1=false"]).as_deref(),
        Ok(r#"---
# Source: a/charts/extra/templates/t.yaml
# extra extra

---
# Source: a/charts/one/templates/t.yaml
# one x=1 a/charts/one/templates/t.yaml

---
# Source: a/templates/t.yaml
# deps: one/one/true three/three/true subs: [extra one] map[enabled:false x:2]
"#)
    );
}

/// issue 32.3: an apiVersion v1 chart's `requirements.yaml` declares its dependencies: alias,
/// conditions (the first that holds a boolean decides) and tags apply.
#[test]
fn a_v1_charts_requirements_yaml_declares_its_dependencies() {
    for (set, want) in [
        (
            &[][..],
            r#"---
# Source: b/charts/renamed/templates/t.yaml
# renamed x=2

---
# Source: b/templates/t.yaml
# deps: renamed/renamed.enabled,global.sub
"#,
        ),
        (
            &["renamed.enabled=false"][..],
            r#"---
# Source: b/templates/t.yaml
# deps:
"#,
        ),
        (
            &["tags.backend=false"][..],
            r#"---
# Source: b/templates/t.yaml
# deps:
"#,
        ),
        (
            &["tags.backend=false", "global.sub=true"][..],
            r#"---
# Source: b/charts/renamed/templates/t.yaml
# renamed x=2

---
# Source: b/templates/t.yaml
# deps: renamed/renamed.enabled,global.sub
"#,
        ),
    ] {
        assert_eq!(template(REQUIREMENTS, set).as_deref(), Ok(want), "{set:?}");
    }
}

/// `helm template` refuses a chart whose declared dependency is not vendored, enabled or not.
#[test]
fn a_declared_dependency_missing_from_charts_is_refused_even_when_disabled() {
    let mut files = REQUIREMENTS.to_vec();
    files.push((
        "requirements.yaml",
        "dependencies:\n  - name: sub\n    version: 0.1.0\n  - name: other\n    version: 1.0.0\n    condition: other.on\n",
    ));
    let err = template(&files, &["other.on=false"]).unwrap_err();
    assert!(
        err.ends_with("found in Chart.yaml, but missing in charts/ directory: other"),
        "{err}"
    );
}
