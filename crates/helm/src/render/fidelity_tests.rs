//! Fidelity on real-world charts: each test is a minimal template reproducing one cause of a
//! difference seen on the chart corpus, and its expected text is what `helm template` (v4.2.3)
//! printed for it.

use super::tests::render_one;
use serde_json::json;

#[test]
fn comments_and_fields_named_values_do_not_crash_the_renderer() {
    assert_eq!(
        render_one(
            &[("templates/t.yaml", "{{/* é .Values */}}\na: 1\n")],
            json!({})
        ),
        "a: 1\n"
    );
    assert_eq!(
        render_one(
            &[(
                "templates/t.yaml",
                "{{- $v := .Values.Values -}}\na: {{ $v }}\nb: 1\n"
            )],
            json!({})
        ),
        "a: \nb: 1\n"
    );
}

#[test]
fn regular_expressions_are_re2() {
    let t = r#"a: {{ regexMatch "^[\\w-\\.]+$" "a-b.c" }}
b: {{ regexFindAll "\\w+" "héllo wörld" -1 }}
c: {{ regexMatch "^[a-c-e]+$" "a-e" }}
d: {{ regexReplaceAll "\\Qa.b\\E" "xa.bxacb" "Y" }}
e: {{ regexMatch "^[\\d-z]+$" "1-z" }}
f: {{ regexFindAll "\\bw" "éw w" -1 }}
g: {{ regexFindAll "[^\\W]+" "héllo" -1 }}
"#;
    assert_eq!(
        render_one(&[("templates/t.yaml", t)], json!({})),
        "a: true\nb: [h llo w rld]\nc: true\nd: xYxacb\ne: true\nf: [w w]\ng: [h llo]\n"
    );
}

#[test]
fn a_comment_with_a_left_trim_marker_trims_left_only() {
    assert_eq!(
        render_one(
            &[(
                "templates/t.yaml",
                "a: |\n  x\n  {{- /* c */}}\n  y\n  {{- /* multi\nline */}}\n  z\n  {{- /* both */ -}}\n  w\n"
            )],
            json!({})
        ),
        "a: |\n  x\n  y\n  zw\n"
    );
}

#[test]
fn a_pipeline_may_end_in_a_pipe() {
    assert_eq!(
        render_one(
            &[(
                "templates/t.yaml",
                "a:\n  {{- toYaml .Values.m | nindent 2 | }}\nb: {{ \"|\" | }}\n"
            )],
            json!({"m": {"k": "v"}})
        ),
        "a:\n  k: v\nb: |\n"
    );
}

#[test]
fn nulls_among_chart_defaults_are_dropped_and_user_nulls_kept() {
    let chart = [
        (
            "values.yaml",
            "top:\na:\n  b: 1\n  c:\n  d:\n    e:\n    f: [1, null]\n",
        ),
        ("templates/t.yaml", "v: {{ .Values | toJson }}\n"),
    ];
    assert_eq!(
        render_one(&chart, json!({})),
        concat!(r#"v: {"a":{"b":1,"d":{"f":[1,null]}}}"#, "\n")
    );
    assert_eq!(
        render_one(
            &chart,
            json!({"a": {"b": null, "g": 2, "h": null}, "q": null})
        ),
        concat!(
            r#"v: {"a":{"d":{"f":[1,null]},"g":2,"h":null},"q":null}"#,
            "\n"
        )
    );
}

#[test]
fn capabilities_are_helms_offline_defaults() {
    let t = "k: {{ .Capabilities.KubeVersion.Version }} {{ .Capabilities.KubeVersion.Major }} \
             {{ .Capabilities.KubeVersion.Minor }}\nh: {{ .Capabilities.HelmVersion.Version }}\n\
             n: {{ len .Capabilities.APIVersions }}\n\
             a: {{ .Capabilities.APIVersions.Has \"storagemigration.k8s.io/v1beta1\" }}\n";
    assert_eq!(
        render_one(&[("templates/t.yaml", t)], json!({})),
        "k: v1.36.0 1 36\nh: v4.2.3\nn: 55\na: true\n"
    );
}
