//! go-yaml compatibility cases for `toYaml`.

use super::*;
use serde_json::json;

#[test]
fn nested_maps_and_lists_use_go_yaml_layout() {
    let v = json!({"b": {"y": [1, 2], "x": "s"}, "a": [{"k": "v", "j": true}, ["q"]], "e": {}, "f": []});
    let want = "a:\n- j: true\n  k: v\n- - q\nb:\n  x: s\n  \"y\":\n  - 1\n  - 2\ne: {}\nf: []\n";
    assert_eq!(to_yaml(&v), want);
}

#[test]
fn strings_that_read_back_as_other_types_are_double_quoted() {
    for s in [
        "true", "yes", "on", "123", "0x1F", "1.5", "1e3", "", "null", "~", "1:20", "0777",
    ] {
        assert_eq!(to_yaml(&json!(s)), format!("\"{s}\"\n"), "for {s:?}");
    }
    assert_eq!(to_yaml(&json!("1.2.3")), "1.2.3\n");
    assert_eq!(to_yaml(&json!("v1")), "v1\n");
    assert_eq!(to_yaml(&json!("n")), "\"n\"\n");
}

#[test]
fn indicators_force_single_quotes() {
    assert_eq!(to_yaml(&json!("*")), "'*'\n");
    assert_eq!(to_yaml(&json!("a: b")), "'a: b'\n");
    assert_eq!(to_yaml(&json!("it's #x")), "'it''s #x'\n");
    assert_eq!(to_yaml(&json!(" lead")), "' lead'\n");
    assert_eq!(to_yaml(&json!("a:b")), "a:b\n");
    assert_eq!(to_yaml(&json!("tab\there")), "\"tab\\there\"\n");
}

#[test]
fn multiline_strings_become_literal_blocks() {
    let v = json!({"script": "echo a\necho b\n", "nochomp": "x\ny", "keep": "z\n\n"});
    let want = "keep: |+\n  z\n\nnochomp: |-\n  x\n  y\nscript: |\n  echo a\n  echo b\n";
    assert_eq!(to_yaml(&v), want);
    assert_eq!(to_yaml(&json!(["a\nb"])), "- |-\n  a\n  b\n");
}

#[test]
fn long_strings_fold_at_the_first_space_past_column_80() {
    let words = vec!["word"; 30].join(" ");
    let out = to_yaml(&json!({"description": words}));
    let lines: Vec<&str> = out.lines().collect();
    // "description: " is 13 columns; the break comes at the first space past column 80.
    assert_eq!(lines[0].len(), 82, "{out}");
    assert!(lines[1].starts_with("  word"), "{out}");
    assert_eq!(out.replace("\n  ", " "), format!("description: {words}\n"));
    let key = vec!["k"; 50].join(" ");
    assert!(
        !to_yaml(&json!({ key.clone(): 1 })).contains("\n  "),
        "keys never fold"
    );
}

#[test]
fn numbers_print_like_json_numbers() {
    assert_eq!(
        to_yaml(&json!({"a": 1.0, "b": 0.5, "c": 1000000})),
        "a: 1\nb: 0.5\nc: 1000000\n"
    );
}

#[test]
fn keys_sort_naturally() {
    let mut keys = vec!["a10", "a2", "b", "_x", "Z", "a"];
    keys.sort_by(|a, b| natural_cmp(a, b));
    assert_eq!(keys, vec!["_x", "Z", "a", "a2", "a10", "b"]);
}
