//! The executor on single templates. Expected texts are `helm template`'s output (helm
//! v4.2.3) for the same template.

use super::{Exec, V, value};
use crate::render::gotpl;

fn run(src: &str, data: serde_json::Value) -> Result<String, String> {
    let mut fm = crate::render::funcs::sprig();
    crate::render::files::register(&mut fm);
    let parsed =
        gotpl::parse("t", src, &|name| super::is_function(&fm, name)).map_err(|e| e.to_string())?;
    let mut exec = Exec::new(fm);
    exec.add(
        "t",
        parsed.root,
        Some(super::Source {
            file: "t".into(),
            text: src.into(),
        }),
    );
    for d in parsed.defines {
        exec.add(
            &d.name,
            d.body,
            Some(super::Source {
                file: "t".into(),
                text: src.into(),
            }),
        );
    }
    let data: V = value::from_json(&data);
    exec.execute("t", &data)
}

fn ok(src: &str) -> String {
    run(src, serde_json::json!({})).unwrap_or_else(|e| format!("error: {e}"))
}

#[test]
fn a_dict_passed_to_include_is_changed_in_place() {
    assert_eq!(
        ok(
            r#"{{ define "mut" }}{{ $_ := set .target "done" true }}{{ end }}{{ $t := dict }}{{ include "mut" (dict "target" $t) }}{{ $t }}"#
        ),
        "map[done:true]"
    );
}

#[test]
fn a_nested_dict_read_into_a_variable_is_the_same_dict() {
    assert_eq!(
        ok(r#"{{ $o := dict "in" (dict) }}{{ $in := $o.in }}{{ $_ := set $in "z" 1 }}{{ $o }}"#),
        "map[in:map[z:1]]"
    );
}

#[test]
fn set_through_a_field_path_changes_the_outer_dict() {
    assert_eq!(
        ok(r#"{{ $c := dict "a" (dict "b" (dict)) }}{{ $_ := set $c.a.b "q" 2 }}{{ $c }}"#),
        "map[a:map[b:map[q:2]]]"
    );
}

#[test]
fn set_on_the_root_data_is_seen_by_later_reads() {
    assert_eq!(ok(r#"{{ $_ := set . "top" "t" }}{{ .top }}"#), "t");
}

#[test]
fn merge_over_a_deep_copy_leaves_the_original_alone() {
    let out = run(
        r#"{{ $x := mergeOverwrite (deepCopy .Values.g) .Values.a }}{{ .Values.g }} {{ $x }}"#,
        serde_json::json!({"Values": {"g": {"x": 1}, "a": {"true": 2}}}),
    );
    assert_eq!(out.as_deref(), Ok("map[x:1] map[true:2 x:1]"));
}

#[test]
fn a_dict_returned_by_default_is_still_the_same_dict() {
    assert_eq!(
        ok(
            r#"{{ $d := dict "a" (dict "z" 0) }}{{ $x := default (dict) $d.a }}{{ $_ := set $x "k" 1 }}{{ $d }}"#
        ),
        "map[a:map[k:1 z:0]]"
    );
}

#[test]
fn merge_shares_the_maps_it_adds_and_lists_hold_references() {
    assert_eq!(
        ok(
            r#"{{ $d := dict }}{{ $s := dict "n" (dict "x" 1) }}{{ $_ := merge $d $s }}{{ $_ := set $d.n "y" 2 }}{{ $s }}"#
        ),
        "map[n:map[x:1 y:2]]"
    );
    assert_eq!(
        ok(r#"{{ $l := list (dict "a" 1) }}{{ $_ := set (first $l) "b" 2 }}{{ $l }}"#),
        "[map[a:1 b:2]]"
    );
    assert_eq!(
        ok(r#"{{ $d := dict "a" 1 }}{{ $p := pick $d "a" }}{{ $_ := set $p "b" 2 }}{{ $d }}"#),
        "map[a:1]"
    );
    assert_eq!(
        ok(r#"{{ printf "%v" .missing }} {{ printf "%v" nil }} {{ list .missing }}"#),
        "<nil> <nil> [<nil>]"
    );
}

#[test]
fn control_flow_variables_and_printing() {
    assert_eq!(
        ok(
            r#"{{ range $i, $v := list "a" "b" "c" }}{{ if eq $v "b" }}{{ continue }}{{ end }}{{ $i }}={{ $v }};{{ end }}"#
        ),
        "0=a;2=c;"
    );
    assert_eq!(
        ok(r#"{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ $y := 3 }}{{ end }}{{ $x }}"#),
        "2"
    );
    assert_eq!(
        ok(r#"{{ range $k, $v := dict "b" 2 "a" 1 }}{{ $k }}{{ $v }}{{ end }}"#),
        "a1b2"
    );
    assert_eq!(ok(r#"{{ with .missing }}x{{ else }}y{{ end }}"#), "y");
    assert_eq!(ok(r#"{{ .missing }}"#), "<no value>");
    assert_eq!(
        ok(r#"{{ 1.5 }} {{ list 1 "a" }} {{ printf "%d-%s" 3 "x" }}"#),
        "1.5 [1 a] 3-x"
    );
    assert_eq!(
        ok(r#"{{ and 1 0 }} {{ or 0 "" "z" }} {{ not 1 }}"#),
        "0 z false"
    );
    assert_eq!(ok(r#"{{ range 3 }}{{ . }}{{ end }}"#), "012");
    assert_eq!(
        ok(r#"{{ printf "%T %T %T %T %d%%" 1 .nope "s" (list) 5 }}"#),
        "int <nil> string []interface {} 5%"
    );
}

#[test]
fn a_field_of_a_missing_value_fails() {
    let err = run("{{ .a.b }}", serde_json::json!({}))
        .err()
        .unwrap_or_default();
    assert!(
        err.contains("nil pointer evaluating interface {}.b"),
        "{err}"
    );
}

#[test]
fn a_field_of_a_nil_variable_is_no_value() {
    assert_eq!(ok(r#"a{{ $x := .Values }}{{ $x.y }}"#), "a<no value>");
    assert_eq!(ok(r#"a{{ (.nope).x }}"#), "a<no value>");
    let err = run("{{ .nope.x }}", serde_json::json!({}))
        .err()
        .unwrap_or_default();
    assert!(
        err.contains("nil pointer evaluating interface {}.x"),
        "{err}"
    );
}

/// Inputs Go would loop on or reject must end in an error or some text, never a panic or a
/// stack overflow.
#[test]
fn self_containing_maps_and_runaway_recursion_do_not_crash() {
    let cyclic = r#"{{ $d := dict "a" 1 }}{{ $_ := set $d "self" $d }}{{ $x := toJson $d }}{{ $y := deepCopy $d }}{{ $_ := merge $d $y }}{{ len $d }}"#;
    assert_eq!(ok(cyclic), "2");
    let err = run(
        r#"{{ define "r" }}{{ include "r" . }}{{ end }}{{ include "r" . }}"#,
        serde_json::json!({}),
    )
    .err()
    .unwrap_or_default();
    assert!(err.contains("nesting deeper than"), "{err}");
    let err = run(
        r#"{{ define "r" }}{{ template "r" . }}{{ end }}{{ template "r" . }}"#,
        serde_json::json!({}),
    )
    .err()
    .unwrap_or_default();
    assert!(err.contains("nesting deeper than"), "{err}");
    let err = run(
        r#"{{ tpl "{{ tpl . . }}" "{{ tpl . . }}" }}"#,
        serde_json::json!({}),
    )
    .err()
    .unwrap_or_default();
    assert!(err.contains("nesting deeper than"), "{err}");
    for bad in [
        "{{ nil }}",
        "{{ 1 2 }}",
        "{{ .a 1 }}",
        "{{ $x = 1 }}",
        "{{ range \"s\" }}{{ end }}",
        "{{ index (list 1) 5 }}",
        "{{ index 1 1 }}",
        "{{ set 1 \"a\" 2 }}",
        "{{ nofunc 1 }}",
        "{{ template \"none\" }}",
        "{{ (list 1).x }}",
        "{{ \"s\".x }}",
    ] {
        assert!(
            run(bad, serde_json::json!({})).is_err(),
            "{bad} should fail"
        );
    }
}

/// Random templates from a vocabulary of Go template pieces (a fixed-seed generator, so a
/// failure is reproducible): whatever parses must execute to text or an error, never panic.
#[test]
fn random_templates_never_panic() {
    const PIECES: &[&str] = &[
        "{{ ",
        " }}",
        "{{- ",
        " -}}",
        " ",
        ".",
        ".Values",
        ".a",
        ".b",
        "$",
        "$x",
        "$y",
        " := ",
        " = ",
        " | ",
        "(",
        ")",
        "set ",
        "unset ",
        "dict ",
        "merge ",
        "mergeOverwrite ",
        "include ",
        "tpl ",
        "template ",
        "\"t\" ",
        "\"a\" ",
        "\"{{ . }}\" ",
        "1 ",
        "-1 ",
        "2.5 ",
        "if ",
        "range ",
        "with ",
        "else ",
        "end",
        "define ",
        "break",
        "continue",
        "nil ",
        "index ",
        "list ",
        "and ",
        "or ",
        "not ",
        "eq ",
        "printf ",
        "toYaml ",
        "default ",
        "deepCopy ",
        "keys ",
        "first ",
        "len ",
        "get ",
        "hasKey ",
        "x",
        "\n",
        "$.Values.a ",
        ".Files.Get ",
        ".Capabilities.APIVersions.Has ",
        "true ",
        "until ",
    ];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let data = serde_json::json!({"Values": {"a": {"b": 1}, "l": [1, 2]}, "a": {}});
    let mut executed = 0;
    for _ in 0..4000 {
        let len = 1 + next(24);
        let src: String = (0..len).map(|_| PIECES[next(PIECES.len())]).collect();
        let fm = crate::render::funcs::sprig();
        let Ok(parsed) = gotpl::parse("t", &src, &|name| super::is_function(&fm, name)) else {
            continue;
        };
        let mut exec = Exec::new(fm);
        exec.add("t", parsed.root, None);
        for d in parsed.defines {
            exec.add(&d.name, d.body, None);
        }
        let _ = exec.execute("t", &value::from_json(&data));
        executed += 1;
    }
    assert!(executed > 100, "only {executed} random templates parsed");
}

/// Maps that hold themselves are freed when the render's cell scope closes.
#[test]
fn self_containing_maps_are_freed_with_the_render() {
    let weak = {
        let _scope = value::CellScope::open();
        let d = value::Dict::new(Default::default());
        let exec = Exec::new(crate::render::funcs::sprig());
        let _ = exec.call(
            "set",
            vec![V::Map(d.clone()), V::str("self"), V::Map(d.clone())],
        );
        d.weak()
    };
    assert!(weak.upgrade().is_none());
}

#[test]
fn a_render_past_its_budgets_time_stops_where_it_is() {
    use std::time::Duration;
    // 10^15 steps (ranges over integers, each below the range bound): only the budget ends it.
    let endless =
        "{{ range 100000 }}{{ range 100000 }}{{ range 100000 }}{{ end }}{{ end }}{{ end }}";
    let budget = super::Budget {
        time: Some(Duration::from_millis(50)),
        ..Default::default()
    };
    let err = super::with_budget(budget, || run(endless, serde_json::json!({}))).unwrap_err();
    assert!(err.contains("render time limit of 50ms"), "{err}");
    // The budget is gone with `with_budget`: the same thread renders unbounded again.
    assert_eq!(run("{{ 1 }}", serde_json::json!({})).unwrap(), "1");
}

#[test]
fn a_templates_output_past_its_budget_fails_with_the_limit_named() {
    let budget = super::Budget {
        output: Some(1000),
        ..Default::default()
    };
    let err = super::with_budget(budget, || {
        run("{{ range until 10000 }}abc{{ end }}", serde_json::json!({}))
    })
    .unwrap_err();
    assert!(
        err.contains("over the render output limit of 1000 bytes"),
        "{err}"
    );
    // Through include too: the included text is bounded while it is made.
    let err = super::with_budget(budget, || {
        run(
            r#"{{ define "big" }}{{ range until 10000 }}abc{{ end }}{{ end }}{{ include "big" . | len }}"#,
            serde_json::json!({}),
        )
    })
    .unwrap_err();
    assert!(
        err.contains("over the render output limit of 1000 bytes"),
        "{err}"
    );
}

/// Renders `src` within a memory budget of `mib` MiB: the error, and what the render charged.
fn within_memory(src: &str, mib: usize) -> (Result<String, String>, usize) {
    let budget = super::Budget {
        memory: Some(mib << 20),
        ..Default::default()
    };
    super::measured(budget, || run(src, serde_json::json!({})))
}

fn memory_refusal(src: &str, mib: usize, what: &str) {
    let (out, used) = within_memory(src, mib);
    let err = match out {
        Err(e) => e,
        Ok(text) => panic!("{src}: rendered {} bytes", text.len()),
    };
    let limit = format!("render: memory budget of {mib} MiB exceeded building {what}");
    assert!(err.contains(&limit), "{src}: {err}");
    // Stopped at the budget, not far past it: nothing much was built after it ran out.
    assert!(used < (mib << 20) * 3, "{src}: charged {used} bytes");
}

/// issue 30's bomb: a string doubled forty times in a variable. The output bound never saw it;
/// the memory budget stops it at the doubling that would pass it, naming the template.
#[test]
fn a_string_doubled_in_a_variable_is_stopped_by_the_memory_budget() {
    let bomb = r#"{{ $s := repeat 1048576 "x" }}{{ range until 40 }}{{ $s = printf "%s%s" $s $s }}{{ end }}"#;
    let (out, used) = within_memory(bomb, 64);
    let err = out.unwrap_err();
    assert!(
        err.contains("render: memory budget of 64 MiB exceeded building a string in template t"),
        "{err}"
    );
    assert!(used <= 64 << 20, "charged {used} bytes past the check");
    // The same doubling ten times fits.
    let fits = r#"{{ $s := repeat 1024 "x" }}{{ range until 10 }}{{ $s = printf "%s%s" $s $s }}{{ end }}{{ len $s }}"#;
    assert_eq!(within_memory(fits, 64).0.as_deref(), Ok("1048576"));
}

/// Values shared by many paths are cheap to hold but expand when converted, printed or
/// serialised; each way of expanding them is stopped while it expands.
#[test]
fn values_that_expand_when_used_are_stopped_by_the_memory_budget() {
    // A list holding itself twice per level: every function call converts it whole.
    memory_refusal(
        r#"{{ $l := list 1 }}{{ range until 40 }}{{ $l = list $l $l }}{{ end }}"#,
        16,
        "a list",
    );
    // A map reached through 2^30 paths, written out.
    let dag = r#"{{ $d := dict "x" 1 }}{{ range until 30 }}{{ $d = dict "a" $d "b" $d }}{{ end }}"#;
    for use_it in [
        "{{ toJson $d }}",
        "{{ toYaml $d }}",
        "{{ $d }}",
        "{{ printf \"%v\" $d }}",
        "{{ deepCopy $d }}",
        "{{ toString $d }}",
        "{{ cat $d $d }}",
    ] {
        memory_refusal(&format!("{dag}{use_it}"), 16, "");
    }
    // A list of one long string many times over, joined.
    memory_refusal(
        r#"{{ $s := repeat 1048576 "x" }}{{ $l := list }}{{ range until 100 }}{{ $l = append $l $s }}{{ end }}{{ join "" $l }}"#,
        16,
        "a string",
    );
}

/// Functions whose one call can build far more than their arguments hold check the size
/// first.
#[test]
fn functions_that_multiply_their_input_check_the_budget_first() {
    let s = r#"{{ $s := repeat 65536 "x" }}"#;
    for call in [
        r#"{{ repeat 1000000000 "xy" }}"#,
        r#"{{ indent 1000000000 "a\nb" }}"#,
        r#"{{ nindent 1000000000 "a" }}"#,
        r#"{{ replace "" $s $s }}"#,
        r#"{{ regexReplaceAll "" $s $s }}"#,
        r#"{{ regexReplaceAll "(x)" $s "$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1$1" }}"#,
        r#"{{ wrapWith 1 $s (repeat 65536 "x y ") }}"#,
    ] {
        memory_refusal(&format!("{s}{call}"), 4, "a string");
    }
    // Go pads each verb up to the width asked (at most 65535).
    let widths = format!(
        "{{{{ printf \"{}\" {} }}}}",
        "%65535d".repeat(100),
        "1 ".repeat(100)
    );
    memory_refusal(&widths, 4, "a string");
    // What helm renders stays the same below the budget.
    assert_eq!(
        within_memory(
            r#"{{ indent 2 "a\nb" }}|{{ replace "" "-" "ab" }}|{{ repeat 3 "xy" }}"#,
            4
        )
        .0
        .as_deref(),
        Ok("  a\n  b|-a-b-|xyxyxy")
    );
}

/// A YAML document whose aliases expand past the budget (each level doubles) fails the render
/// even though `fromYaml` itself reports errors in its result.
#[test]
fn a_yaml_alias_bomb_in_from_yaml_is_stopped_by_the_memory_budget() {
    let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x]\\n");
    for i in 1..20 {
        doc.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}]\\n",
            p = i - 1
        ));
    }
    memory_refusal(&format!("{{{{ $m := fromYaml \"{doc}\" }}}}"), 4, "a map");
}

/// Template output counts too: a template writing more than the budget fails while it writes.
#[test]
fn template_output_counts_against_the_memory_budget() {
    memory_refusal(
        r#"{{ $s := repeat 65536 "x" }}{{ range until 100 }}{{ $s }}{{ end }}"#,
        4,
        "the template's output",
    );
}

/// issue 32.1: mergeOverwrite replaces with whatever the source holds, zero values and nil
/// included (mergo sees them inside interfaces); merge fills only empty destination values.
#[test]
fn merge_overwrite_replaces_with_zero_values_and_nil() {
    let t = r#"x: {{ $d := dict "a" true "n" 5 "s" "x" }}{{ $_ := mustMergeOverwrite $d (dict "a" false "n" 0 "s" "") }}{{ $d.a }} {{ $d.n }} {{ $d.s }}|
y: {{ $d := dict "a" 1 "m" (dict "k" 1) "l" (list 1) }}{{ $_ := mergeOverwrite $d (dict "a" nil "m" "str" "l" (list)) }}{{ $d.a }} {{ $d.m }} {{ $d.l }}|
w: {{ $d := dict "m" (dict "k" 1 "j" 2) }}{{ $_ := mergeOverwrite $d (dict "m" (dict "k" 0 "j" "")) }}{{ $d.m }}|
s: {{ $d := dict "m" (dict "k" 1) }}{{ $_ := mergeOverwrite $d (dict "m" nil) }}{{ $d.m }}|
v: {{ $d := dict "a" false "s" "" "n" 0 "z" nil }}{{ $_ := merge $d (dict "a" true "s" "x" "n" 3 "z" 4) }}{{ $d.a }} {{ $d.s }} {{ $d.n }} {{ $d.z }}|
u: {{ $d := dict "m" (dict "k" 1) }}{{ $_ := merge $d (dict "m" (dict "k" 0 "q" false)) }}{{ $d.m }}|
v2: {{ $d := dict "a" true }}{{ $_ := mergeOverwrite $d .x }}{{ $d.a }}|"#;
    // helm template v4.2.3's output for the same template (`.x` from `--set x.a=false`), before
    // helm removes `<no value>`.
    assert_eq!(
        run(t, serde_json::json!({"x": {"a": false}})).unwrap(),
        "x: false 0 |
y: <no value> str []|
w: map[j: k:0]|
s: <no value>|
v: true x 3 4|
u: map[k:1 q:false]|
v2: false|"
    );
}

/// issue 32.2: `semver` and `semverCompare` read partial versions as Masterminds'
/// `NewVersion` does (missing parts are 0), a version prints as its `String` method gives it,
/// and refusals read as helm's.
#[test]
fn semver_reads_partial_versions() {
    let t = r#"a: {{ (semver "3.9").Minor }} {{ semverCompare ">=3.0.0" "3.9" }} {{ semverCompare ">=3.0.0" "v3" }} {{ (semver "v1.2").Patch }} {{ (semver "3").Major }} {{ (semver "v1.2").Original }} {{ semver "1.2" }}|
b: {{ semverCompare "~3" "3.9" }} {{ semverCompare "3.9" "3.9.0" }} {{ semverCompare ">3.9" "3.9.1" }} {{ (semver "1.2-rc.1").Prerelease }} {{ (semver "01.2.3").Major }}|
c: {{ semver "1.2.3+b" }} {{ toJson (semver "1.2") }} {{ (semver "1.2").Metadata }}|{{ typeOf (semver "1") }}"#;
    assert_eq!(
        run(t, serde_json::json!({})).unwrap(),
        r#"a: 9 true true 0 3 v1.2 1.2.0|
b: true true false rc.1 1|
c: 1.2.3+b "1.2.0" |*semver.Version"#
    );
    for (t, err) in [
        (
            r#"{{ semver "1.x" }}"#,
            "error calling semver: invalid semantic version",
        ),
        (
            r#"{{ semver " 1.2" }}"#,
            "error calling semver: invalid semantic version",
        ),
        (
            r#"{{ semver "1.2.3.4" }}"#,
            "error calling semver: invalid semantic version",
        ),
        (
            r#"{{ semver "v" }}"#,
            "error calling semver: invalid semantic version",
        ),
        (
            r#"{{ semverCompare ">1" "x" }}"#,
            "error calling semverCompare: invalid semantic version",
        ),
        (
            r#"{{ semverCompare "bad!" "1.0.0" }}"#,
            r#"error calling semverCompare: improper constraint: "bad!""#,
        ),
        (
            r#"{{ semverCompare "" "1.0.0" }}"#,
            r#"error calling semverCompare: improper constraint: """#,
        ),
    ] {
        let got = run(t, serde_json::json!({})).unwrap_err();
        assert!(got.ends_with(err), "{t}: {got}");
    }
}

/// issue 32.7: numbers from `fromJson`, `fromJsonArray`, `fromYaml` and `fromYamlArray` are
/// float64, as Go's JSON decoder makes them (helm v4.2.3's output).
#[test]
fn numbers_read_by_from_json_and_from_yaml_are_floats() {
    let t = r#"a: {{ $m := fromJson "{\"n\":5368709120}" }}{{ typeOf $m.n }} {{ $m.n }}|
b: {{ $m := fromYaml "f: 1.5\nb: 5368709120\nl: [1, 2]" }}{{ $m.b }} {{ $m.l }} {{ typeOf (index $m.l 0) }} {{ $m.f }}|
c: {{ $l := fromJsonArray "[1, 2.5, 100000000]" }}{{ $l }} {{ typeOf (index $l 0) }}|
d: {{ $l := fromYamlArray "[1, 2, 3000000]" }}{{ $l }}|
e: {{ toYaml (fromYaml "n: 5368709120") }} {{ toJson (fromJson "{\"a\": 1e3}") }} {{ add (fromYaml "m: 1").m 1 }}|"#;
    assert_eq!(
        run(t, serde_json::json!({})).unwrap(),
        r#"a: float64 5.36870912e+09|
b: 5.36870912e+09 [1 2] float64 1.5|
c: [1 2.5 1e+08] float64|
d: [1 2 3e+06]|
e: "false": 5368709120 {"a":1000} 2|"#
    );
}

/// issue 32.8: `duration` writes Go's `Duration.String` of a string or int64 count of seconds
/// (anything else is 0s), and Sprig's arithmetic gives Go int64s where literals are ints
/// (helm v4.2.3's output; `.n` and `.f` as `--set n=90 --set f=1.5` make them).
#[test]
fn duration_is_gos_and_int64_is_told_from_int() {
    let t = r#"a: {{ duration "3661" }} {{ duration (int64 90) }} {{ duration .n }} {{ duration .f }} {{ typeOf .n }} {{ typeOf (default 0 .n) }} {{ kindIs "int64" (add 1 1) }} {{ kindOf (sub 3 1) }} {{ deepEqual 1 (int64 1) }} {{ printf "%T" (mul 1 1) }} {{ typeIs "int64" .n }}|
b: {{ duration "9223372036854775807" }} {{ duration "-9223372036854775808" }} {{ duration "99999999999999999999" }} {{ duration "+5" }} {{ duration "1_000" }} {{ duration "18446744073" }}|
c: {{ duration 90 }} {{ duration (int64 3600) }} {{ duration "60" }} {{ duration "-90" }} {{ duration 1.5 }} {{ duration "abc" }} {{ duration (int 5) }} {{ duration "100000000000000" }}|
d: {{ typeOf 5 }} {{ typeOf (int64 5) }} {{ typeOf (add 1 2) }} {{ typeOf (len "a") }} {{ typeOf (int 5) }} {{ typeOf (atoi "5") }} {{ typeOf (mul 2 3) }} {{ typeOf (max 1 2) }} {{ typeOf (until 2 | first) }} {{ typeOf (toDecimal "5") }}|"#;
    assert_eq!(
        run(t, serde_json::json!({"n": 90, "f": 1.5})).unwrap(),
        "a: 1h1m1s 1m30s 1m30s 0s int64 int64 true int64 false int64 true|
b: -1s 0s -1s 5s 0s -709.551616ms|
c: 0s 1h0m0s 1m0s -1m30s 0s 0s 0s 55660h7m0.520689664s|
d: int int64 int64 int int int int64 int64 int int64|"
    );
}

/// Found by the differential fuzzer (`tests/differential.rs`): Sprig's `round` rounds a
/// negative number with a fraction down, and takes negative places; `substr` fails as Go's
/// slice bounds do (helm v4.2.3's output).
#[test]
fn round_and_substr_as_sprig_has_them() {
    let t = r#"{{ round -0.25 0 }} {{ round -1.5 0 }} {{ round 15 -1 }} {{ round 1.005 2 }} {{ round -2.5 0 }} {{ round 2.5 0 }} {{ round 1.2345 2 }}|{{ substr -1 3 "abcdef" }}|{{ substr 3 3 "abcdef" }}|{{ substr 2 -1 "abcdef" }}|{{ substr 1 9 "abcdef" }}"#;
    assert_eq!(
        run(t, serde_json::json!({})).unwrap(),
        "-1 -2 20 1 -3 3 1.23|abc||cdef|bcdef"
    );
    for (args, err) in [
        ("-1 9", "slice bounds out of range [:9] with length 6"),
        ("-2 -1", "slice bounds out of range [:-1]"),
        ("2 0", "slice bounds out of range [2:0]"),
        ("9 -1", "slice bounds out of range [9:6]"),
        ("7 7", "slice bounds out of range [7:6]"),
        ("4 2", "slice bounds out of range [4:2]"),
    ] {
        let got = run(
            &format!(r#"{{{{ substr {args} "abcdef" }}}}"#),
            serde_json::json!({}),
        );
        assert!(
            got.as_ref().is_err_and(|e| e.contains(err)),
            "substr {args}: {got:?}"
        );
    }
}

/// The error's text after Go's frame, or the output.
fn outcome(src: &str) -> String {
    match run(src, serde_json::json!({"s": "x", "f": 1.5, "m": {"a": 1}})) {
        Ok(out) => out,
        Err(e) => {
            let e = e.replace('\n', " ");
            let at = e.rfind(" at <").map_or(0, |i| i + 1);
            e[at..].split_whitespace().collect::<Vec<_>>().join(" ")
        }
    }
}

/// Issue 32 (seed 32 and longer runs of `tests/differential.rs`): Go's executor checks every
/// argument against the function's parameter type. Expected values are helm v4.2.3's (the
/// part of its error after `executing "..."`).
#[test]
fn arguments_are_checked_against_go_parameter_types() {
    for (src, want) in [
        (
            r#"{{ ternary "a" "b" .missing }}"#,
            "at <.missing>: wrong type for value; expected bool; got interface {}",
        ),
        (
            r#"{{ $x := .missing }}{{ ternary "a" "b" $x }}"#,
            "at <$x>: invalid value; expected bool",
        ),
        (
            r#"{{ ternary "a" "b" (.missing) }}"#,
            "at <.missing>: invalid value; expected bool",
        ),
        (
            r#"{{ .missing | ternary "a" "b" }}"#,
            "at <\"b\">: invalid value; expected bool",
        ),
        (
            r#"{{ ternary "a" "b" nil }}"#,
            "at <nil>: cannot assign nil to bool",
        ),
        (
            r#"{{ ternary "a" "b" "true" }}"#,
            "at <\"true\">: expected bool; found \"true\"",
        ),
        (
            r#"{{ repeat 1.5 "a" }}"#,
            "at <1.5>: expected integer; found 1.5",
        ),
        (
            r#"{{ repeat .f "a" }}"#,
            "at <.f>: wrong type for value; expected int; got float64",
        ),
        (
            r#"{{ repeat (int64 2) "a" }}"#,
            "at <2>: wrong type for value; expected int; got int64",
        ),
        (
            r#"{{ upper (first (list)) }}"#,
            "at <list>: invalid value; expected string",
        ),
        (
            r#"{{ hasKey "x" "a" }}"#,
            "at <\"x\">: can't handle \"x\" for arg of type map[string]interface {}",
        ),
        (
            r#"{{ genSelfSignedCert "a" (splitList "," "a") nil 1 }}"#,
            "at <\"a\">: wrong type for value; expected []interface {}; got []string",
        ),
        (
            r#"{{ derivePassword -1 "long" "p" "u" "s" }}"#,
            "at <-1>: expected unsigned integer; found -1",
        ),
        (
            r#"{{ round 1.5 0 (int 1) }}"#,
            "at <1>: wrong type for value; expected float64; got int",
        ),
        (r#"{{ upper 2.0 }}"#, "at <2.0>: expected string; found 2.0"),
        (
            r#"{{ unixEpoch "x" }}"#,
            "at <\"x\">: can't handle \"x\" for arg of type time.Time",
        ),
        // Literals Go accepts: an integral float for an int, an int for a float.
        (r#"{{ until 2.0 }}"#, "[0 1]"),
        (r#"{{ round 1.5 0 1 }}"#, "1"),
        (
            r#"{{ $x := .missing }}{{ merge (dict) $x | toJson }}"#,
            "{}",
        ),
        (r#"{{ "x" | hasKey (dict) }}"#, "false"),
    ] {
        assert_eq!(outcome(src), want, "{src}");
    }
}

/// Sprig's typed slices and maps, as `typeOf` and Go's checks see them (helm v4.2.3).
#[test]
fn typed_slices_and_maps_keep_their_go_types() {
    assert_eq!(
        ok(
            r#"{{ typeOf (split "," "a,b") }} {{ typeOf (splitList "," "a") }} {{ typeOf (until 2) }} {{ typeOf (chunk 1 (list 1)) }} {{ typeOf (keys (dict)) }}"#
        ),
        "map[string]string []string []int [][]interface {} []string"
    );
    assert_eq!(
        ok(
            r#"{{ typeOf (regexSplit "," "a,b" -1) }} {{ typeOf (toStrings (list 1)) }} {{ typeOf (uniq (splitList "," "a")) }} {{ typeOf (default (list) (splitList "," "a")) }} {{ typeOf (slice (splitList "," "a,b") 1) }}"#
        ),
        "[]string []string []interface {} []string []string"
    );
    assert_eq!(
        ok(
            r#"{{ typeOf (first (chunk 1 (list 1))) }} {{ typeOf (deepCopy (splitList "," "a")) }} {{ typeOf (reverse (splitList "," "a")) }} {{ typeOf (sortAlpha (list 1)) }} {{ typeOf (compact (splitList "," "a")) }}"#
        ),
        "[]interface {} []string []interface {} []string []interface {}"
    );
    assert_eq!(
        outcome(r#"{{ hasKey (split "," "a") "_0" }}"#),
        "at <\"a\">: wrong type for value; expected map[string]interface {}; got map[string]string"
    );
}

/// Go's `time.Time`: printed by Go's `String`, RFC 3339 in JSON, Sprig's fallbacks (helm
/// v4.2.3).
#[test]
fn times_print_as_go_prints_them() {
    for (src, want) in [
        (
            r#"{{ toDate "2006-01-02" "2024-03-05" }}"#,
            "2024-03-05 00:00:00 +0000 UTC",
        ),
        (
            r#"{{ toDate "2006-01-02T15:04:05Z07:00" "2020-02-29T12:30:00+02:00" }}"#,
            "2020-02-29 12:30:00 +0200 +0200",
        ),
        (
            r#"{{ toDate "2006-01-02" "bad" }}"#,
            "0001-01-01 00:00:00 +0000 UTC",
        ),
        (
            r#"{{ toDate "2006-01-02" "2024-03-05" | toJson }}"#,
            "\"2024-03-05T00:00:00Z\"",
        ),
        (
            r#"{{ list (toDate "2006-01-02" "2024-03-05") }}"#,
            "[2024-03-05 00:00:00 +0000 UTC]",
        ),
        (
            r#"{{ dateModify "1h" (toDate "2006-01-02" "2024-03-05") }}"#,
            "2024-03-05 01:00:00 +0000 UTC",
        ),
        (
            r#"{{ unixEpoch (toDate "2006-01-02" "2024-03-05") | typeOf }}"#,
            "string",
        ),
        (
            r#"{{ toDate "2006-01-02 15:04" "2021-12-31 23:59" | date "Jan 2, 2006 at 3:04pm (MST)" }}"#,
            "Dec 31, 2021 at 11:59pm (UTC)",
        ),
        (
            r#"{{ typeOf (toDate "2006-01-02" "2024-01-01") }} {{ kindOf (toDate "2006-01-02" "2024-01-01") }}"#,
            "time.Time struct",
        ),
        (
            r#"{{ printf "%s" (toDate "2006-01-02" "2024-03-05") }}"#,
            "2024-03-05 00:00:00 +0000 UTC",
        ),
        (
            r#"{{ dateInZone "2006-01-02 MST" (toDate "2006-01-02" "2024-03-05") "bogus" }}"#,
            "2024-03-05 UTC",
        ),
    ] {
        assert_eq!(outcome(src), want, "{src}");
    }
}

/// Sprig's `dig` asserts what it reads (helm v4.2.3).
#[test]
fn dig_fails_on_what_is_not_a_map() {
    assert_eq!(
        outcome(r#"{{ dig "a" "b" .missing }}"#),
        "at <dig \"a\" \"b\" .missing>: error calling dig: interface conversion: interface {} is nil, not map[string]interface {}"
    );
    assert_eq!(ok(r#"{{ dig "a" "z" (dict "a" 1) }}"#), "1");
}
