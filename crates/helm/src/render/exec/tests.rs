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
