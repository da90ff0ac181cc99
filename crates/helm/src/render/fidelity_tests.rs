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
h: {{ regexMatch "{(v[0-9])*[^}]*}}$" "x{v1abc}}" }}
i: {{ regexReplaceAll "[^A-Za-z0-9-_.]|sha256" "a-b_c.d/e sha256" "" }}
j: {{ regexReplaceAll "(-?[^a-z\\d\\-])+-?" "ab-CD-9x" "_" }}
k: {{ regexFindAll "a{2}|b{1,}|c{,2}" "aaabbc{,2}" -1 | toJson | quote }}
"#;
    assert_eq!(
        render_one(&[("templates/t.yaml", t)], json!({})),
        r#"a: true
b: [h llo w rld]
c: true
d: xYxacb
e: true
f: [w w]
g: [h llo]
h: true
i: a-b_c.de
j: ab_9x
k: "[\"aa\",\"bb\",\"c{,2}\"]"
"#
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

#[test]
fn a_deep_copy_shares_nothing_with_the_values() {
    let chart = [
        (
            "values.yaml",
            "g:\n  x: 1\n  nn:\n    k: 2\na:\n  x: 3\n  z: 4\n",
        ),
        (
            "templates/t.yaml",
            "{{- $m := mergeOverwrite (deepCopy .Values.g) .Values.a }}\n\
             {{- $c := deepCopy .Values }}\n\
             {{- $_ := unset $c \"a\" }}\n\
             m: {{ $m | toJson }}\nv: {{ .Values | toJson }}\n",
        ),
    ];
    assert_eq!(
        render_one(&chart, json!({})),
        concat!(
            r#"m: {"nn":{"k":2},"x":3,"z":4}"#,
            "\n",
            r#"v: {"a":{"x":3,"z":4},"g":{"nn":{"k":2},"x":1}}"#,
            "\n"
        )
    );
}

#[test]
fn to_yaml_quotes_strings_go_yaml_reads_as_timestamps() {
    let t = r#"a: {{ list "2001-12-14" "2001-12-14t21:59:43.10-05:00" "2001-12-14T21:59:43Z" "2001-12-14 21:59:43.10" "2001-2-3" "2001-02-30" "2000-02-29" "2001-12-14T21:59:43" "2001-12-14 21:59:43Z" "2001-13-01" "12001-12-14" "2001-12-14T25:00:00Z" "2001-12-14T1:2:3+01:00" "2001-12-14T1:2:3+1:00" "2001-12-14T21:59:43.1234567891Z" "2001-12-14 " "2001-12-14T21:59:43,5Z" | toYaml | nindent 2 }}
"#;
    assert_eq!(
        render_one(&[("templates/t.yaml", t)], json!({})),
        r#"a: 
  - "2001-12-14"
  - "2001-12-14t21:59:43.10-05:00"
  - "2001-12-14T21:59:43Z"
  - "2001-12-14 21:59:43.10"
  - "2001-2-3"
  - 2001-02-30
  - "2000-02-29"
  - 2001-12-14T21:59:43
  - 2001-12-14 21:59:43Z
  - 2001-13-01
  - 12001-12-14
  - 2001-12-14T25:00:00Z
  - "2001-12-14T1:2:3+01:00"
  - 2001-12-14T1:2:3+1:00
  - "2001-12-14T21:59:43.1234567891Z"
  - '2001-12-14 '
  - "2001-12-14T21:59:43,5Z"
"#
    );
}

#[test]
fn nil_reads_as_an_empty_dict_where_a_dict_is_expected() {
    let t = "{{- $d := dict \"a\" 1 }}{{ $n := .Values.nothing }}\n\
             b: {{ mergeOverwrite $d $n | toJson }}\n\
             c: {{ merge (dict \"b\" 2) $n $d | toJson }}\n\
             d: {{ hasKey $n \"k\" }}\ne: {{ get $n \"k\" }}\nf: {{ keys $n | toJson }}\n\
             g: {{ merge $n $d | toJson }}\n";
    assert_eq!(
        render_one(&[("templates/t.yaml", t)], json!({})),
        "b: {\"a\":1}\nc: {\"a\":1,\"b\":2}\nd: false\ne: \nf: []\ng: {\"a\":1}\n"
    );
}

#[test]
fn subcharts_are_visible_through_dot_subcharts() {
    let chart = [
        (
            "charts/sub/Chart.yaml",
            "apiVersion: v2\nname: sub\nversion: 0.2.0\n",
        ),
        ("charts/sub/values.yaml", "z: 1\n"),
        ("values.yaml", "sub:\n  w: 2\n"),
        (
            "templates/t.yaml",
            "a: {{ .Subcharts.sub.Values.z }} {{ .Subcharts.sub.Values.w }} \
             {{ .Subcharts.sub.Chart.Name }} {{ .Subcharts.sub.Chart.Version }} \
             {{ keys .Subcharts | toJson }} {{ .Subcharts.sub.Subcharts | toJson }} \
             {{ .Subcharts.sub.Release.Name }}\n",
        ),
    ];
    assert_eq!(
        render_one(&chart, json!({})),
        "a: 1 2 sub 0.2.0 [\"sub\"] {} rel\n"
    );
}

#[test]
fn only_the_top_charts_helmignore_applies() {
    let chart = [
        (".helmignore", "*.md\n"),
        ("README.md", "r"),
        ("t.txt", "t"),
        (
            "templates/t.yaml",
            "top: {{ range $p, $_ := .Files }}{{ $p }} {{ end }}\n",
        ),
        (
            "charts/sub/Chart.yaml",
            "apiVersion: v2\nname: sub\nversion: 0.1.0\n",
        ),
        ("charts/sub/.helmignore", "files/b.txt\n*.txt\n"),
        ("charts/sub/files/a.txt", "a"),
        ("charts/sub/files/b.txt", "b"),
        ("charts/sub/README.md", "r"),
        (
            "charts/sub/templates/t.yaml",
            "sub: {{ range $p, $_ := .Files }}{{ $p }} {{ end }}\n",
        ),
    ];
    // helm template prints `sub: .helmignore files/a.txt files/b.txt ` and
    // `top: .helmignore t.txt` (its document trimmed).
    let out = render_one(&chart, json!({}));
    assert!(
        out.contains("sub: .helmignore files/a.txt files/b.txt \n"),
        "{out}"
    );
    assert!(out.contains("top: .helmignore t.txt \n"), "{out}");
}

/// Each manifest's source and text, for a chart of several templates.
fn render_sources(extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let files = super::tests::chart(extra);
    match super::render_release(
        &files,
        &json!({}),
        &super::tests::release(),
        &super::Capabilities::default(),
    ) {
        Ok(r) => {
            let mut out: Vec<(String, String)> = r
                .manifests
                .iter()
                .map(|m| (m.source.clone(), m.text.clone()))
                .collect();
            out.sort();
            out
        }
        Err(e) => panic!("render failed: {e}"),
    }
}

/// Maps are references across templates (issue 13, root cause 1): helm renders a chart's
/// templates deepest first and in reverse name order, and every template of a chart shares
/// its root data and `.Values`; a subchart's `.Values` is its parent's `.Values.<name>`.
#[test]
fn changes_to_the_root_data_and_values_are_seen_by_later_templates() {
    let out = render_sources(&[
        ("values.yaml", "g: {x: 1}\n"),
        (
            "templates/a.yaml",
            "kind: A\na4: {{ $_ := set . \"top\" \"t\" }}{{ .top }}\n\
             a5: {{ $_ := set $ \"Values\" (merge (dict \"m\" 1) $.Values) }}{{ .Values.m }}\n",
        ),
        (
            "templates/b.yaml",
            "kind: B\nb1: \"{{ .Values.m }} {{ .top }} {{ .Values.sub }}\"\n",
        ),
        (
            "templates/0.yaml",
            "kind: Z\nz1: {{ .Values.m }} {{ .top }}\n",
        ),
        (
            "charts/sub/Chart.yaml",
            "apiVersion: v2\nname: sub\nversion: 0.1.0\n",
        ),
        ("charts/sub/values.yaml", "k: v\n"),
        (
            "charts/sub/templates/s.yaml",
            "kind: S\ns1: \"{{ $_ := set .Values \"fromsub\" 1 }}{{ .top }} {{ .Values }}\"\n\
             s2: {{ $_ := set . \"top\" \"sub\" }}\n",
        ),
    ]);
    let texts: Vec<&str> = out.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        texts,
        [
            "kind: S\ns1: \" map[fromsub:1 global:map[] k:v]\"\ns2: \n",
            "kind: Z\nz1: 1 t\n",
            "kind: A\na4: t\na5: 1\n",
            "kind: B\nb1: \"  map[fromsub:1 global:map[] k:v]\"\n",
        ]
    );
}

/// Helm's `.Capabilities.KubeVersion` and `.HelmVersion` are structs and print as Go prints
/// them (issue 13, root cause 6).
#[test]
fn capability_structs_print_as_go_structs() {
    let t = "t: {{ printf \"%v|%v|%s\" .Capabilities.KubeVersion .Capabilities.HelmVersion .Capabilities.KubeVersion | quote }}\n\
             u: {{ .Capabilities.KubeVersion | quote }}\n\
             v: \"{{ .Capabilities.KubeVersion.Version }} {{ .Capabilities.APIVersions | len }}\"\n";
    assert_eq!(
        render_one(&[("templates/t.yaml", t)], json!({})),
        "t: \"{v1.36.0 v1.36.0 1 36}|{v4.2.3 43e8b7feece8beb0fcba47059ec9b522fd929a64 clean go1.26.5 v1.36}|{v1.36.0 v1.36.0 1 36}\"\n\
         u: \"{v1.36.0 v1.36.0 1 36}\"\n\
         v: \"v1.36.0 55\"\n"
    );
}

/// Two spellings Go reads its own way (gotmpl read them differently, and berth once respelled
/// them): a comment with a left trim marker only trims on its left, and a pipeline may end in
/// `|` (helm v4.2.3's output).
#[test]
fn go_spellings_render_as_in_helm() {
    let t = "a: 1\nb: x\n{{- /* c */}}\nc: {{ .Values.a | }}\nd: {{ \"q\" | upper | }}\n";
    assert_eq!(
        render_one(&[("templates/t.yaml", t)], json!({"a": 7})),
        "a: 1\nb: x\nc: 7\nd: Q\n"
    );
}

/// Without annotations in `Chart.yaml`, `.Chart.Annotations` is Go's nil map: `null` to
/// `toJson`/`toYaml`, `map[]` printed, empty everywhere else (helm v4.2.3's output).
#[test]
fn unset_chart_annotations_are_a_nil_map() {
    let t = "a: {{ .Chart.Annotations | toJson }} {{ toYaml .Chart.Annotations }} \
             {{ .Chart.Annotations }} {{ len .Chart.Annotations }} {{ empty .Chart.Annotations }}\
             {{ with .Chart.Annotations }}x{{ end }}{{ range .Chart.Annotations }}y{{ end }}\n";
    assert_eq!(
        render_one(&[("templates/t.yaml", t)], json!({})),
        "a: null null map[] 0 true\n"
    );
}

/// An action prints `.Capabilities` (a pointer to a struct) as the struct, and
/// `.Capabilities.KubeVersion` through its `String` method; inside the struct it is a struct
/// again (helm v4.2.3's output).
#[test]
fn capabilities_print_as_helm_prints_them() {
    let t = "w: \"{{ .Capabilities }}\"\nx: \"{{ .Capabilities.KubeVersion }}\"\n";
    let out = render_one(&[("templates/t.yaml", t)], json!({}));
    assert!(
        out.starts_with("w: \"{{v1.36.0 v1.36.0 1 36} [v1 admissionregistration.k8s.io/v1 "),
        "{out}"
    );
    assert!(
        out.ends_with(
            " apiextensions.k8s.io/v1] {v4.2.3 43e8b7feece8beb0fcba47059ec9b522fd929a64 clean go1.26.5 v1.36}}\"\nx: \"v1.36.0\"\n"
        ),
        "{out}"
    );
}

/// Execution errors read as helm's (issue 13, root cause 11): `fail` and `required` as
/// `execution error at (FILE:LINE:COL): MESSAGE` where the outermost template called into
/// them, other errors in Go's `template: FILE:LINE:COL: executing "NAME" at <NODE>: ...` form,
/// nested through `include` and `tpl`.
#[test]
fn execution_errors_read_as_helms() {
    let helpers = "{{- define \"h\" }}\n  {{ required \"need x\" .Values.x }}\n{{- end }}\n\
                   {{- define \"h2\" }}{{ .Values.a.b }}{{ end }}\n\
                   {{- define \"h3\" }}{{ eq 1.5 1 }}{{ end }}\n\
                   {{- define \"h4\" }}{{ fail \"inner\" }}{{ end }}\n";
    let cases = [
        (
            "a: {{ fail \"boom\" }}\n",
            "execution error at (hello/templates/x.yaml:1:6): boom",
        ),
        (
            "a: 1\nb: {{ include \"h\" . }}\n",
            "execution error at (hello/templates/x.yaml:2:6): need x",
        ),
        (
            "a: {{ eq 1.5 1 }}\n",
            "template: hello/templates/x.yaml:1:6: executing \"hello/templates/x.yaml\" at <eq 1.5 1>: error calling eq: incompatible types for comparison: float64 and int",
        ),
        (
            "a: {{ include \"h3\" . }}\n",
            "template: hello/templates/x.yaml:1:6: executing \"hello/templates/x.yaml\" at <include \"h3\" .>: error calling include: template: hello/templates/_h.tpl:5:21: executing \"h3\" at <eq 1.5 1>: error calling eq: incompatible types for comparison: float64 and int",
        ),
        (
            "a: {{ template \"h4\" . }}\n",
            "execution error at (hello/templates/_h.tpl:6:21): inner",
        ),
        (
            "a: {{ tpl \"{{ fail \\\"x\\\" }}\" . }}\n",
            "execution error at (hello/templates/x.yaml:1:6): x",
        ),
        (
            "a: {{ tpl \"{{ .Values.a.b }}\" . }}\n",
            "template: hello/templates/x.yaml:1:6: executing \"hello/templates/x.yaml\" at <tpl \"{{ .Values.a.b }}\" .>: error calling tpl: error during tpl function execution for \"{{ .Values.a.b }}\": template: gotpl:1:10: executing \"gotpl\" at <.Values.a.b>: nil pointer evaluating interface {}.b",
        ),
        (
            "a: {{ $x := include \"h\" . }}\n",
            "execution error at (hello/templates/x.yaml:1:12): need x",
        ),
        (
            "a: {{ index (list 1) 3 }}\n",
            "template: hello/templates/x.yaml:1:6: executing \"hello/templates/x.yaml\" at <index (list 1) 3>: error calling index: index out of range: 3",
        ),
    ];
    for (template, helm) in cases {
        let err = super::tests::render_err(
            &[
                ("templates/_h.tpl", helpers),
                ("templates/x.yaml", template),
            ],
            json!({}),
        );
        assert_eq!(err.to_string(), helm, "{template}");
    }
    // An error the executor raises itself is laid out on lines of its own, through includes.
    let helpers = "{{- define \"h2\" }}{{ .Values.a.b }}{{ end }}\n\
                   {{- define \"h5\" }}{{ include \"h2\" . }}{{ end }}\n";
    for (template, helm) in [
        (
            "a: {{ .Values.a.b }}\n",
            "hello/templates/x.yaml:1:13\n  executing \"hello/templates/x.yaml\" at <.Values.a.b>:\n    nil pointer evaluating interface {}.b",
        ),
        (
            "a: {{ $x := dict }}{{ $x.a.b }}\n",
            "hello/templates/x.yaml:1:24\n  executing \"hello/templates/x.yaml\" at <$x.a.b>:\n    nil pointer evaluating interface {}.b",
        ),
        (
            "a: {{ include \"nope\" . }}\n",
            "hello/templates/x.yaml:1:6\n  executing \"hello/templates/x.yaml\" at <include \"nope\" .>:\n    error calling include:\ntemplate: no template \"nope\" associated with template \"gotpl\"",
        ),
        (
            "a: {{ include \"h5\" . }}\n",
            "hello/templates/x.yaml:1:6\n  executing \"hello/templates/x.yaml\" at <include \"h5\" .>:\n    error calling include:\nhello/templates/_h.tpl:2:21\n  executing \"h5\" at <include \"h2\" .>:\n    error calling include:\nhello/templates/_h.tpl:1:28\n  executing \"h2\" at <.Values.a.b>:\n    nil pointer evaluating interface {}.b",
        ),
        (
            "a: {{ toYaml }}\n",
            "hello/templates/x.yaml:1:6\n  executing \"hello/templates/x.yaml\" at <toYaml>:\n    wrong number of args for toYaml: want 1 got 0",
        ),
    ] {
        let err = super::tests::render_err(
            &[
                ("templates/_h.tpl", helpers),
                ("templates/x.yaml", template),
            ],
            json!({}),
        );
        assert_eq!(err.to_string(), helm, "{template}");
    }
}

/// Go refuses a template calling an unknown function when it parses it, even in a branch
/// that never runs; inside `tpl` the text is refused when `tpl` runs.
#[test]
fn unknown_functions_are_parse_errors() {
    let err = super::tests::render_err(
        &[(
            "templates/x.yaml",
            "a: 1\n{{ if false }}\n{{ nofunc 1 }}{{ end }}\n",
        )],
        json!({}),
    );
    assert_eq!(
        err.to_string(),
        "parse error at (hello/templates/x.yaml:3): function \"nofunc\" not defined"
    );
    let err = super::tests::render_err(
        &[(
            "templates/x.yaml",
            "a: {{ range .Values.l }}{{ $y := 1 }}{{ end }}\n{{ if false }}{{ $y }}{{ end }}\n",
        )],
        json!({}),
    );
    assert_eq!(
        err.to_string(),
        "parse error at (hello/templates/x.yaml:2): undefined variable \"$y\""
    );
    // An assignment to an undeclared variable fails only when it runs.
    assert_eq!(
        render_one(
            &[(
                "templates/x.yaml",
                "a: {{ if false }}{{ $x = 1 }}{{ end }}1\n"
            )],
            json!({})
        ),
        "a: 1\n"
    );
    let err = super::tests::render_err(
        &[("templates/x.yaml", "a: {{ tpl \"{{ nofunc }}\" . }}\n")],
        json!({}),
    );
    assert_eq!(
        err.to_string(),
        "template: hello/templates/x.yaml:1:6: executing \"hello/templates/x.yaml\" at <tpl \"{{ nofunc }}\" .>: error calling tpl: cannot parse template \"{{ nofunc }}\": template: gotpl:1: function \"nofunc\" not defined"
    );
}

/// Nil in Sprig's string functions: `toString` prints Go's `<nil>`, `join` and `toStrings`
/// leave nil items out.
#[test]
fn nil_in_string_functions_is_as_sprig_has_it() {
    let t = "a: {{ list (toString nil) (toString .Values.m) (quote nil) (join \",\" (list 1 nil \"x\")) (toStrings (list nil 2)) (print \"a\" nil 1 2 \"b\") | toJson }}\n";
    assert_eq!(
        render_one(&[("templates/t.yaml", t)], json!({})),
        "a: [\"\\u003cnil\\u003e\",\"\\u003cnil\\u003e\",\"\",\"1,x\",[\"2\"],\"a\\u003cnil\\u003e 1 2b\"]\n"
    );
}

/// Go's two nils where a Sprig function takes a map: a nil variable is an empty map, but a
/// map's missing entry passed directly is refused (issue 13, root cause 4, as helm v4.2.3
/// has it).
#[test]
fn a_missing_entry_passed_to_a_map_parameter_is_refused() {
    for (template, place) in [
        ("a: {{ hasKey .Values.nothing \"k\" }}\n", "1:20"),
        ("a: {{ keys .Values.nothing }}\n", "1:18"),
        ("a: {{ merge (dict) .Values.nothing | toJson }}\n", "1:26"),
        ("a: {{ get .Values.nothing \"k\" }}\n", "1:17"),
    ] {
        let err = super::tests::render_err(&[("templates/x.yaml", template)], json!({}));
        assert_eq!(
            err.to_string(),
            format!(
                "hello/templates/x.yaml:{place}\n  executing \"hello/templates/x.yaml\" at \
                 <.Values.nothing>:\n    wrong type for value; expected map[string]interface {{}}; \
                 got interface {{}}"
            ),
            "{template}"
        );
    }
    assert_eq!(
        render_one(
            &[(
                "templates/x.yaml",
                "{{ $n := .Values.nothing }}a: {{ hasKey $n \"k\" }} {{ .Values.nothing | keys }}\n"
            )],
            json!({})
        ),
        "a: false []\n"
    );
}

/// Go's checks of a `string` parameter, each in helm v4.2.3's words and place: a map's
/// missing entry, a nil variable or pipeline, a literal of another type, a value of another
/// type (written, piped or in parentheses).
#[test]
fn a_string_parameter_refuses_what_go_refuses() {
    for (template, place, node, message) in [
        (
            "a: {{ upper .Values.nothing }}\n",
            "1:19",
            ".Values.nothing",
            "wrong type for value; expected string; got interface {}",
        ),
        (
            "a: {{ .Values.nothing | upper }}\n",
            "1:24",
            "upper",
            "invalid value; expected string",
        ),
        (
            "a: {{ $x := .Values.nothing }}{{ upper $x }}\n",
            "1:39",
            "$x",
            "invalid value; expected string",
        ),
        (
            "a: {{ upper .Values.b }}\n",
            "1:19",
            ".Values.b",
            "wrong type for value; expected string; got bool",
        ),
        (
            "a: {{ upper .Values.m }}\n",
            "1:19",
            ".Values.m",
            "wrong type for value; expected string; got map[string]interface {}",
        ),
        (
            "a: {{ 1 | upper }}\n",
            "1:10",
            "upper",
            "wrong type for value; expected string; got int",
        ),
        (
            "a: {{ upper (list) }}\n",
            "1:13",
            "list",
            "wrong type for value; expected string; got []interface {}",
        ),
        (
            "a: {{ upper nil }}\n",
            "1:12",
            "nil",
            "cannot assign nil to string",
        ),
        (
            "a: {{ upper 3 }}\n",
            "1:12",
            "3",
            "expected string; found 3",
        ),
        (
            "a: {{ .Values.nothing | trimPrefix \"x\" }}\n",
            "1:35",
            "\"x\"",
            "invalid value; expected string",
        ),
        (
            "a: {{ upper (index .Values.m \"zz\") }}\n",
            "1:29",
            "\"zz\"",
            "invalid value; expected string",
        ),
        (
            "a: {{ include .Values.nothing . }}\n",
            "1:21",
            ".Values.nothing",
            "wrong type for value; expected string; got interface {}",
        ),
        (
            "a: {{ indent 2 .Values.nothing }}\n",
            "1:22",
            ".Values.nothing",
            "wrong type for value; expected string; got interface {}",
        ),
    ] {
        let err = super::tests::render_err(
            &[("templates/x.yaml", template)],
            json!({"b": true, "m": {"a": 1}}),
        );
        assert_eq!(
            err.to_string(),
            format!(
                "hello/templates/x.yaml:{place}\n  executing \"hello/templates/x.yaml\" at \
                 <{node}>:\n    {message}"
            ),
            "{template}"
        );
    }
    // Strings, and nil made a string, pass.
    assert_eq!(
        render_one(
            &[(
                "templates/x.yaml",
                "a: {{ upper \"x\" }}{{ .Values.nothing | default \"q\" | upper }}{{ upper (toString .Values.b) }}\n"
            )],
            json!({"b": true})
        ),
        "a: XQTRUE\n"
    );
}

/// `.Chart` has every field of helm's chart metadata with Go's names (maintainers and
/// dependencies too), and `IsRoot`.
#[test]
fn chart_metadata_has_helms_fields() {
    let top = "apiVersion: v2\nname: top\nversion: 1.0.0\nkeywords: [a, b]\n\
               maintainers: [{name: me, email: m@x.io, url: \"http://x\"}]\n\
               annotations: {k: v}\nsources: [http://s]\ndeprecated: true\n\
               dependencies:\n  - name: sub\n    version: 0.1.0\n    condition: sub.enabled\n\
               \x20   tags: [t1]\n    alias: sub\n";
    let files: Vec<(String, Vec<u8>)> = [
        ("Chart.yaml", top),
        (
            "charts/sub/Chart.yaml",
            "apiVersion: v2\nname: sub\nversion: 0.1.0\n",
        ),
        (
            "templates/x.yaml",
            "c: {{ .Chart | toJson | quote }}\nr: \"{{ .Chart.IsRoot }}\"\n",
        ),
        (
            "charts/sub/templates/x.yaml",
            "r: \"{{ .Chart.IsRoot }}\"\n",
        ),
    ]
    .iter()
    .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
    .collect();
    let rendered = match super::render_release(
        &files,
        &json!({}),
        &super::tests::release(),
        &super::Capabilities::default(),
    ) {
        Ok(r) => r,
        Err(e) => panic!("render failed: {e}"),
    };
    let mut texts: Vec<&str> = rendered.manifests.iter().map(|m| m.text.as_str()).collect();
    texts.sort();
    assert_eq!(
        texts,
        [
            "c: \"{\\\"APIVersion\\\":\\\"v2\\\",\\\"Annotations\\\":{\\\"k\\\":\\\"v\\\"},\\\"AppVersion\\\":\\\"\\\",\\\"Condition\\\":\\\"\\\",\\\"Dependencies\\\":[{\\\"Alias\\\":\\\"sub\\\",\\\"Condition\\\":\\\"sub.enabled\\\",\\\"Enabled\\\":true,\\\"ImportValues\\\":[],\\\"Name\\\":\\\"sub\\\",\\\"Repository\\\":\\\"\\\",\\\"Tags\\\":[\\\"t1\\\"],\\\"Version\\\":\\\"0.1.0\\\"}],\\\"Deprecated\\\":true,\\\"Description\\\":\\\"\\\",\\\"Home\\\":\\\"\\\",\\\"Icon\\\":\\\"\\\",\\\"IsRoot\\\":true,\\\"Keywords\\\":[\\\"a\\\",\\\"b\\\"],\\\"KubeVersion\\\":\\\"\\\",\\\"Maintainers\\\":[{\\\"Email\\\":\\\"m@x.io\\\",\\\"Name\\\":\\\"me\\\",\\\"URL\\\":\\\"http://x\\\"}],\\\"Name\\\":\\\"top\\\",\\\"Sources\\\":[\\\"http://s\\\"],\\\"Tags\\\":\\\"\\\",\\\"Type\\\":\\\"\\\",\\\"Version\\\":\\\"1.0.0\\\"}\"\nr: \"true\"\n",
            "r: \"false\"\n",
        ]
    );
}

#[test]
fn the_last_sprig_functions_are_helms() {
    let t = r#"a: {{ hello }}
b: {{ randInt 5 6 }}
c: {{ randAscii 3 | len }}
d: {{ randBytes 6 | b64dec | len }}
e: {{ date_in_zone "2006-01-02 15:04" 0 "UTC" }}
f: {{ htmlDateInZone 86400 "UTC" }}
g: {{ durationRound "2h10m" }} {{ durationRound "49h" }} {{ durationRound "800h" }} {{ durationRound "9000h" }} {{ durationRound "59s" }} {{ durationRound "-3m" }} {{ durationRound "1ms" }}
h: {{ date_modify "1h30m" (toDate "2006-01-02" "2020-01-02") | date "2006-01-02 15:04" }}
i: {{ must_date_modify "-2h" (toDate "2006-01-02" "2020-01-02") | date "2006-01-02 15:04" }}
j: {{ date_modify "bogus" (toDate "2006-01-02" "2020-01-02") | date "2006-01-02 15:04" }}
k: {{ ago (toDate "2006-01-02" "2020-01-02") | regexMatch "^[0-9]+h[0-9]+m[0-9]+s$" }}
l: |
{{ toYamlPretty (dict "x" (list 1 (dict "y" 2 "w" (list "a"))) "z" "s") | indent 2 }}
m: {{ durationRound 3600 }} {{ durationRound "1h" }} {{ durationRound "24h" }} {{ durationRound "720h" }} {{ durationRound "8760h" }} {{ durationRound "bogus" }}
n: {{ randAscii 200 | regexMatch "^[ -~]+$" }}
o: {{ mustDateModify "1h" (toDate "2006-01-02" "2020-01-02") | date "2006-01-02 15:04" }}
p: {{ getHostByName "localhost" }}
"#;
    assert_eq!(
        render_one(&[("templates/t.yaml", t)], json!({})),
        r#"a: Hello!
b: 5
c: 3
d: 6
e: 1970-01-01 00:00
f: 1970-01-02
g: 2h 2d 1mo 1y 59s 3m 0s
h: 2020-01-02 01:30
i: 2020-01-01 22:00
j: 2020-01-02 00:00
k: true
l: |
  x:
    - 1
    - w:
        - a
      "y": 2
  z: s
m: 0s 60m 24h 30d 12mo 0s
n: true
o: 2020-01-02 01:00
p: 
"#
    );
}

#[test]
fn to_yaml_pretty_indents_sequences_and_does_not_fold() {
    let t = r#"{{ toYamlPretty (dict "long" "aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk llll mmmm nnnn oooo pppp qqqq rrrr" "multi" "a\nb\n" "yes" "yes" "n" 1.5 "e" (list) "m" (dict) "nested" (list (list 1 2) (list))) }}
"#;
    assert_eq!(
        render_one(&[("templates/t.yaml", t)], json!({})),
        r#"e: []
long: aaaa bbbb cccc dddd eeee ffff gggg hhhh iiii jjjj kkkk llll mmmm nnnn oooo pppp qqqq rrrr
m: {}
multi: |
  a
  b
"n": 1.5
nested:
  - - 1
    - 2
  - []
"yes": "yes"
"#
    );
}

#[test]
fn strict_date_and_random_functions_fail_as_in_helm() {
    let err = super::tests::render_err(
        &[(
            "templates/t.yaml",
            "x: {{ mustDateModify \"bogus\" (now) }}\n",
        )],
        json!({}),
    )
    .to_string();
    assert!(
        err.contains("error calling mustDateModify: time: invalid duration \"bogus\""),
        "{err}"
    );
    let err =
        super::tests::render_err(&[("templates/t.yaml", "x: {{ randInt 3 3 }}\n")], json!({}))
            .to_string();
    assert!(
        err.contains("error calling randInt: invalid argument to Intn"),
        "{err}"
    );
}
