//! Rendering tests: whole charts in, manifests out, compared with what `helm template` prints
//! for the same input.

use super::*;
use serde_json::json;

pub(super) fn release() -> ReleaseInfo {
    ReleaseInfo {
        name: "rel".into(),
        namespace: "ns".into(),
        revision: 1,
        is_install: true,
        is_upgrade: false,
    }
}

pub(super) fn chart(extra: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    let mut files = vec![(
        "Chart.yaml".to_string(),
        b"apiVersion: v2\nname: hello\nversion: 0.1.0\nappVersion: \"1.16.0\"\n".to_vec(),
    )];
    files.extend(
        extra
            .iter()
            .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec())),
    );
    files
}

/// Renders and returns the text of the single document the chart produces.
pub(super) fn render_one(extra: &[(&str, &str)], values: serde_json::Value) -> String {
    match render_release(&chart(extra), &values, &release(), &Capabilities::default()) {
        Ok(r) => r
            .manifests
            .iter()
            .map(|m| m.text.clone())
            .collect::<Vec<_>>()
            .join("\n---\n"),
        Err(e) => panic!("render failed: {e}"),
    }
}

pub(super) fn render_err(extra: &[(&str, &str)], values: serde_json::Value) -> RenderError {
    match render_chart(&chart(extra), &values, &release()) {
        Ok(m) => panic!("expected an error, got {m:?}"),
        Err(e) => e,
    }
}

#[test]
fn whitespace_trimming_markers_remove_surrounding_space() {
    let t = "kind: ConfigMap\ndata:\n  {{- if true }}\n  a: \"1\"\n  {{- end }}\n  b: {{ \"x\" -}}   \n  \n";
    assert_eq!(
        render_one(&[("templates/cm.yaml", t)], json!({})),
        "kind: ConfigMap\ndata:\n  a: \"1\"\n  b: x"
    );
}

#[test]
fn include_with_nindent_indents_a_named_template() {
    let helpers = "{{- define \"hello.labels\" -}}\napp: {{ .Chart.Name }}\nrelease: {{ .Release.Name }}\n{{- end }}";
    let t =
        "kind: ConfigMap\nmetadata:\n  labels:\n    {{- include \"hello.labels\" . | nindent 4 }}";
    assert_eq!(
        render_one(
            &[
                ("templates/_helpers.tpl", helpers),
                ("templates/cm.yaml", t)
            ],
            json!({})
        ),
        "kind: ConfigMap\nmetadata:\n  labels:\n    app: hello\n    release: rel"
    );
}

#[test]
fn to_yaml_of_nested_values_matches_helm_output() {
    let t = "kind: ConfigMap\nspec:\n  {{- toYaml .Values.spec | nindent 2 }}";
    let values = json!({"spec": {"z": [1, {"b": "yes", "a": null}], "a": {"x": "multi\nline\n"}}});
    assert_eq!(
        render_one(&[("templates/cm.yaml", t)], values),
        "kind: ConfigMap\nspec:\n  a:\n    x: |\n      multi\n      line\n  z:\n  - 1\n  - a: null\n    b: \"yes\""
    );
}

#[test]
fn range_over_a_map_visits_keys_in_sorted_order() {
    let t = "kind: ConfigMap\ndata:\n{{- range $k, $v := .Values.env }}\n  {{ $k }}: {{ $v | quote }}\n{{- end }}";
    let values = json!({"env": {"ZED": "3", "ALPHA": "1", "MID": 2}});
    assert_eq!(
        render_one(&[("templates/cm.yaml", t)], values),
        "kind: ConfigMap\ndata:\n  ALPHA: \"1\"\n  MID: \"2\"\n  ZED: \"3\""
    );
}

#[test]
fn required_reports_the_message_and_the_template() {
    let t = "kind: ConfigMap\nimage: {{ required \"image.tag is required\" .Values.image.tag }}";
    let err = render_err(&[("templates/deploy.yaml", t)], json!({"image": {}}));
    let text = err.to_string();
    assert!(matches!(err, RenderError::Execute { .. }), "{text}");
    assert!(text.contains("image.tag is required"), "{text}");
    assert!(text.contains("hello/templates/deploy.yaml"), "{text}");
}

#[test]
fn fail_aborts_the_render() {
    let t = "{{ if not .Values.ok }}{{ fail \"not ok\" }}{{ end }}kind: ConfigMap";
    assert!(
        render_err(&[("templates/x.yaml", t)], json!({}))
            .to_string()
            .contains("not ok")
    );
    assert_eq!(
        render_one(&[("templates/x.yaml", t)], json!({"ok": true})),
        "kind: ConfigMap"
    );
}

#[test]
fn default_and_empty_follow_sprig_semantics() {
    let t = "kind: ConfigMap\na: {{ .Values.zero | default 5 }}\nb: {{ .Values.missing | default \"d\" }}\nc: {{ .Values.set | default \"d\" }}\nd: {{ empty .Values.list }}\ne: {{ empty .Values.set }}";
    let values = json!({"zero": 0, "set": "v", "list": []});
    assert_eq!(
        render_one(&[("templates/x.yaml", t)], values),
        "kind: ConfigMap\na: 5\nb: d\nc: v\nd: true\ne: false"
    );
}

#[test]
fn quote_escapes_like_go_and_squote_does_not() {
    let t = "kind: ConfigMap\na: {{ .Values.s | quote }}\nb: {{ .Values.s | squote }}\nc: {{ quote 12 }}";
    let values = json!({"s": "say \"hi\"\\"});
    assert_eq!(
        render_one(&[("templates/x.yaml", t)], values),
        "kind: ConfigMap\na: \"say \\\"hi\\\"\\\\\"\nb: 'say \"hi\"\\'\nc: \"12\""
    );
}

#[test]
fn missing_values_render_as_empty_text() {
    // helm: `.Values.deep.nope` fails (nil pointer); through a variable it is no value.
    let t =
        "kind: ConfigMap\na: \"{{ .Values.nope }}\"\nb: \"{{ $d := .Values.deep }}{{ $d.nope }}\"";
    assert_eq!(
        render_one(&[("templates/x.yaml", t)], json!({})),
        "kind: ConfigMap\na: \"\"\nb: \"\""
    );
}

#[test]
fn user_values_are_merged_over_the_chart_defaults() {
    let values_yaml = "image:\n  repository: nginx\n  tag: stable\nreplicas: 1\n";
    let t = "kind: Deployment\nimage: {{ .Values.image.repository }}:{{ .Values.image.tag }}\nreplicas: {{ .Values.replicas }}";
    assert_eq!(
        render_one(
            &[("values.yaml", values_yaml), ("templates/d.yaml", t)],
            json!({"image": {"tag": "1.2"}})
        ),
        "kind: Deployment\nimage: nginx:1.2\nreplicas: 1"
    );
}

#[test]
fn release_chart_capabilities_and_template_objects_are_visible() {
    let t = "kind: ConfigMap\ndata:\n  name: {{ .Release.Name }}\n  ns: {{ .Release.Namespace }}\n  rev: \"{{ .Release.Revision }}\"\n  install: \"{{ .Release.IsInstall }}\"\n  service: {{ .Release.Service }}\n  chart: {{ .Chart.Name }}-{{ .Chart.Version }}\n  app: {{ .Chart.AppVersion | quote }}\n  tmpl: {{ .Template.Name }}\n  base: {{ .Template.BasePath }}\n  kube: {{ .Capabilities.KubeVersion.Major }}\n  policy: \"{{ .Capabilities.APIVersions.Has \"policy/v1\" }}\"\n  fake: \"{{ .Capabilities.APIVersions.Has \"fake/v9\" }}\"";
    let out = render_one(&[("templates/cm.yaml", t)], json!({}));
    assert_eq!(
        out,
        "kind: ConfigMap\ndata:\n  name: rel\n  ns: ns\n  rev: \"1\"\n  install: \"true\"\n  service: Helm\n  chart: hello-0.1.0\n  app: \"1.16.0\"\n  tmpl: hello/templates/cm.yaml\n  base: hello/templates\n  kube: 1\n  policy: \"true\"\n  fake: \"false\""
    );
}

#[test]
fn tpl_renders_values_as_templates() {
    let t = "kind: ConfigMap\nhost: {{ tpl .Values.host . }}";
    let values = json!({"host": "{{ .Release.Name }}.example.com"});
    assert_eq!(
        render_one(&[("templates/x.yaml", t)], values),
        "kind: ConfigMap\nhost: rel.example.com"
    );
}

#[test]
fn set_on_a_variable_is_visible_afterwards() {
    let t = "{{- $ctx := dict \"a\" 1 }}{{- $_ := set $ctx \"b\" 2 }}kind: ConfigMap\nv: {{ $ctx.b }}\nkeys: {{ keys $ctx | sortAlpha | join \",\" }}";
    assert_eq!(
        render_one(&[("templates/x.yaml", t)], json!({})),
        "kind: ConfigMap\nv: 2\nkeys: a,b"
    );
}

#[test]
fn files_get_and_glob_as_config() {
    let t = "kind: ConfigMap\ndata:\n  one: {{ .Files.Get \"conf/a.txt\" | quote }}\n  {{- (.Files.Glob \"conf/*.txt\").AsConfig | nindent 2 }}";
    let out = render_one(
        &[
            ("templates/x.yaml", t),
            ("conf/a.txt", "alpha"),
            ("conf/b.txt", "beta\n"),
            ("conf/c.md", "no"),
        ],
        json!({}),
    );
    assert_eq!(
        out,
        "kind: ConfigMap\ndata:\n  one: \"alpha\"\n  a.txt: alpha\n  b.txt: |\n    beta"
    );
}

#[test]
fn partials_and_notes_produce_no_objects_and_output_is_in_install_order() {
    let files = chart(&[
        (
            "templates/_helpers.tpl",
            "{{ define \"x\" }}kind: Secret{{ end }}",
        ),
        (
            "templates/NOTES.txt",
            "Thanks for installing {{ .Release.Name }}",
        ),
        (
            "templates/a-deploy.yaml",
            "kind: Deployment\nmetadata:\n  name: d",
        ),
        (
            "templates/b-svc.yaml",
            "kind: Service\nmetadata:\n  name: s\n---\n# only a comment\n---\nkind: Namespace\nmetadata:\n  name: n",
        ),
    ]);
    let out = render_chart(&files, &json!({}), &release()).unwrap_or_default();
    let kinds: Vec<&str> = out.iter().map(|m| m.kind()).collect();
    assert_eq!(kinds, vec!["Namespace", "Service", "Deployment"]);
    assert_eq!(out[1].source, "hello/templates/b-svc.yaml");
}

#[test]
fn subcharts_get_their_section_globals_and_conditions() {
    let mut files = chart(&[
        (
            "values.yaml",
            "global:\n  domain: example.com\nsub:\n  enabled: true\n  greeting: hi\ndisabled:\n  enabled: false\n",
        ),
        (
            "templates/cm.yaml",
            "kind: ConfigMap\nmetadata:\n  name: parent",
        ),
    ]);
    files[0].1.extend_from_slice(b"dependencies:\n- name: sub\n  condition: sub.enabled\n- name: disabled\n  condition: disabled.enabled\n");
    files.extend([
        ("charts/sub/Chart.yaml".to_string(), b"apiVersion: v2\nname: sub\nversion: 1.0.0\n".to_vec()),
        ("charts/sub/values.yaml".to_string(), b"greeting: hello\nport: 80\n".to_vec()),
        (
            "charts/sub/templates/cm.yaml".to_string(),
            b"kind: ConfigMap\nmetadata:\n  name: {{ .Chart.Name }}\ndata:\n  g: {{ .Values.greeting }}\n  p: \"{{ .Values.port }}\"\n  d: {{ .Values.global.domain }}\n  t: {{ .Template.Name }}".to_vec(),
        ),
        ("charts/disabled/Chart.yaml".to_string(), b"apiVersion: v2\nname: disabled\nversion: 1.0.0\n".to_vec()),
        ("charts/disabled/templates/cm.yaml".to_string(), b"kind: ConfigMap\nmetadata:\n  name: disabled".to_vec()),
    ]);
    let out = match render_chart(&files, &json!({}), &release()) {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    let texts: Vec<&str> = out.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(
        texts,
        vec![
            "kind: ConfigMap\nmetadata:\n  name: sub\ndata:\n  g: hi\n  p: \"80\"\n  d: example.com\n  t: hello/charts/sub/templates/cm.yaml",
            "kind: ConfigMap\nmetadata:\n  name: parent",
        ]
    );
}

#[test]
fn parse_errors_name_the_template_and_line() {
    let err = render_err(
        &[("templates/bad.yaml", "kind: ConfigMap\n{{ if }}")],
        json!({}),
    );
    let text = err.to_string();
    assert!(matches!(err, RenderError::Parse { .. }), "{text}");
    // helm v4.2.3's text for the same template.
    assert_eq!(
        text,
        "parse error at (hello/templates/bad.yaml:2): missing value for if"
    );
}

#[test]
fn recursive_include_is_stopped() {
    let t = "{{ define \"loop\" }}{{ include \"loop\" . }}{{ end }}kind: ConfigMap\nx: {{ include \"loop\" . }}";
    assert!(
        render_err(&[("templates/x.yaml", t)], json!({}))
            .to_string()
            .contains("nesting")
    );
}

#[test]
fn manifest_text_has_helm_source_headers() {
    let files = chart(&[(
        "templates/cm.yaml",
        "kind: ConfigMap\nmetadata:\n  name: a\n",
    )]);
    let out = render_chart(&files, &json!({}), &release()).unwrap_or_default();
    // Helm 4 keeps a document's trailing newline, so the record shows a blank line after it.
    assert_eq!(
        manifests::manifest_text(&out),
        "---\n# Source: hello/templates/cm.yaml\nkind: ConfigMap\nmetadata:\n  name: a\n\n"
    );
}

#[test]
fn packed_subcharts_are_unpacked_and_rendered() {
    let mut files = chart(&[("values.yaml", "redis:\n  port: 6380\n")]);
    let archive = archive::tests::tgz(&[
        (
            "redis/Chart.yaml",
            "apiVersion: v2\nname: redis\nversion: 17.0.0\n",
        ),
        ("redis/values.yaml", "port: 6379\nimage: redis\n"),
        (
            "redis/templates/svc.yaml",
            "kind: Service\nmetadata:\n  name: {{ .Release.Name }}-redis\nport: {{ .Values.port }}\nimage: {{ .Values.image }}",
        ),
    ]);
    files.push(("charts/redis-17.0.0.tgz".to_string(), archive));
    let out = render_chart(&files, &json!({}), &release()).unwrap_or_default();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].source, "hello/charts/redis/templates/svc.yaml");
    assert_eq!(
        out[0].text,
        "kind: Service\nmetadata:\n  name: rel-redis\nport: 6380\nimage: redis"
    );
}

#[test]
fn lookup_without_a_cluster_finds_nothing() {
    let t = "kind: ConfigMap\nfound: {{ if lookup \"v1\" \"Secret\" \"ns\" \"x\" }}yes{{ else }}no{{ end }}";
    assert_eq!(
        render_one(&[("templates/x.yaml", t)], json!({})),
        "kind: ConfigMap\nfound: no"
    );
}

#[test]
fn values_are_validated_against_the_chart_schema() {
    let schema = r#"{"type": "object", "required": ["image"], "properties": {
        "replicas": {"type": "integer", "minimum": 1},
        "image": {"type": "object", "properties": {"tag": {"type": "string"}}}}}"#;
    let files = [
        ("values.schema.json", schema),
        ("values.yaml", "replicas: 1\nimage:\n  tag: v1\n"),
        ("templates/x.yaml", "kind: ConfigMap"),
    ];
    assert_eq!(
        render_one(&files, json!({"replicas": 2})),
        "kind: ConfigMap"
    );
    let err = render_err(&files, json!({"replicas": "two", "image": {"tag": 5}}));
    let text = err.to_string();
    assert!(matches!(err, RenderError::Values(_)), "{text}");
    assert!(
        text.contains("hello: /replicas:") && text.contains("hello: /image/tag:"),
        "{text}"
    );
}

/// As `helm template` (its `CheckDependencies`): a declared dependency missing from `charts/`
/// is refused whether or not its condition would switch it off.
#[test]
fn declared_but_missing_dependencies_are_reported_even_when_disabled() {
    let mut files = chart(&[("templates/x.yaml", "kind: ConfigMap")]);
    files[0]
        .1
        .extend_from_slice(b"dependencies:\n- name: redis\n  condition: redis.enabled\n");
    for values in [json!({}), json!({"redis": {"enabled": false}})] {
        let err = render_chart(&files, &values, &release())
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("invalid chart: found in Chart.yaml, but missing in charts/ directory: redis")
        );
    }
}

#[test]
fn helmignore_hides_files_from_the_chart() {
    let t = "kind: ConfigMap\nx: {{ .Files.Get \"notes/a.txt\" | quote }}\ny: {{ .Files.Get \"b.txt\" | quote }}";
    let files = [
        (".helmignore", "notes/\n"),
        ("notes/a.txt", "secret"),
        ("b.txt", "ok"),
        ("templates/x.yaml", t),
    ];
    assert_eq!(
        render_one(&files, json!({})),
        "kind: ConfigMap\nx: \"\"\ny: \"ok\""
    );
}

#[test]
fn fail_messages_reach_the_user_verbatim() {
    let helpers = "{{ define \"check\" }}{{ fail \"replicas must be odd\" }}{{ end }}";
    let err = render_err(
        &[
            ("templates/_h.tpl", helpers),
            ("templates/x.yaml", "{{ include \"check\" . }}"),
        ],
        json!({}),
    );
    assert_eq!(
        err.to_string(),
        "execution error at (hello/templates/x.yaml:1:3): replicas must be odd"
    );
}

#[test]
fn notes_are_rendered_for_the_top_chart_apart_from_manifests() {
    let files = chart(&[
        ("templates/NOTES.txt", "Installed {{ .Release.Name }}."),
        ("templates/x.yaml", "kind: ConfigMap"),
        (
            "charts/sub/Chart.yaml",
            "apiVersion: v2\nname: sub\nversion: 1.0.0\n",
        ),
        ("charts/sub/templates/NOTES.txt", "sub notes"),
    ]);
    let out = render_release(&files, &json!({}), &release(), &Capabilities::default());
    let out = match out {
        Ok(o) => o,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(out.notes, "Installed rel.");
    assert_eq!(out.manifests.len(), 1);
}

/// `helm template r CHART` on a chart of `hello`'s Chart.yaml and `files`: its output, or
/// the error's text.
fn template_text(files: &[(&str, &str)]) -> Result<String, String> {
    let opts = crate::template::TemplateOptions {
        release_name: "r".into(),
        ..Default::default()
    };
    crate::template::render(&chart(files), &opts)
        .map(|l| crate::template::listing_output(&l, false))
        .map_err(|e| e.to_string())
}

/// issue 32.5: `.Values` is Helm's `Values` type, whose methods come before its keys:
/// `AsMap`, `Table`, `PathValue` and `YAML`, with Helm's errors. Expected texts are helm
/// v4.2.3's for the same chart.
#[test]
fn values_has_helms_methods() {
    let values = (
        "values.yaml",
        "a:\n  b:\n    c: 1\n  s: str\n  l: [1, 2]\ntop: 5\n",
    );
    let t = r#"# a: {{ .Values.AsMap }}|
# b: {{ .Values.Table "a" }}|
# c: {{ .Values.Table "a.b" }}|
# d: {{ .Values.PathValue "a.b.c" }} {{ .Values.PathValue "top" }} {{ .Values.PathValue "a.l" }}|
# e: {{ .Values.YAML | b64enc }}|
# f: {{ typeOf .Values.AsMap }} {{ typeOf (.Values.Table "a") }} {{ typeOf .Values }}|
# g: {{ (.Values.Table "a").YAML | b64enc }} {{ (.Values.Table "a").Table "b" }}|
# h: {{ .Values.AsMap.a.s }} {{ .Values.a.AsMap }}|
"#;
    assert_eq!(
        template_text(&[values, ("templates/t.yaml", t)]).as_deref(),
        Ok(r#"---
# Source: hello/templates/t.yaml
# a: map[a:map[b:map[c:1] l:[1 2] s:str] top:5]|
# b: map[b:map[c:1] l:[1 2] s:str]|
# c: map[c:1]|
# d: 1 5 [1 2]|
# e: YToKICBiOgogICAgYzogMQogIGw6CiAgLSAxCiAgLSAyCiAgczogc3RyCnRvcDogNQo=|
# f: map[string]interface {} common.Values common.Values|
# g: YjoKICBjOiAxCmw6Ci0gMQotIDIKczogc3RyCg== map[c:1]|
# h: str |
"#)
    );
    let at = |node: &str| {
        format!(
            r#"template: hello/templates/t.yaml:1:12: executing "hello/templates/t.yaml" at <.Values.{node}>: error calling {node}: "#
        )
    };
    for (t, err) in [
        (
            r#"# {{ .Values.Table "nope" }}"#,
            format!(r#"{}"nope" is not a table"#, at("Table")),
        ),
        (
            r#"# {{ .Values.Table "a.s" }}"#,
            format!(r#"{}"s" is not a table"#, at("Table")),
        ),
        (
            r#"# {{ .Values.PathValue "a.b" }}"#,
            format!(r#"{}"b" is not a value"#, at("PathValue")),
        ),
        (
            r#"# {{ .Values.PathValue "nope" }}"#,
            format!(r#"{}"nope" is not a value"#, at("PathValue")),
        ),
        (
            r#"# {{ .Values.PathValue "" }}"#,
            format!("{}YAML path cannot be empty", at("PathValue")),
        ),
        (
            r#"# {{ .Values.Table }}"#,
            "hello/templates/t.yaml:1:12\n  executing \"hello/templates/t.yaml\" at <.Values.Table>:\n    wrong number of args for Table: want 1 got 0".to_string(),
        ),
    ] {
        assert_eq!(
            template_text(&[values, ("templates/t.yaml", t)]),
            Err(err),
            "{t}"
        );
    }
}
