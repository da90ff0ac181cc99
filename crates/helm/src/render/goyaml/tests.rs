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

/// A small fixed-seed generator (xorshift), so a failing case is reproducible.
struct Gen(u64);

impl Gen {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Random documents from YAML's building blocks (indentation, indicators, anchors, tags,
/// flow and block collections, quotes, scalars that resolve to other types): the reader
/// answers a value or an error, never panics.
#[test]
fn random_yaml_never_panics() {
    const PIECES: &[&str] = &[
        "a",
        "b",
        ": ",
        ":",
        "- ",
        "-",
        "\n",
        "  ",
        "    ",
        "\t",
        "{",
        "}",
        "[",
        "]",
        ", ",
        "'",
        "\"",
        "\\",
        "#",
        "&x ",
        "*x",
        "!!str ",
        "!!int ",
        "!t ",
        "|",
        ">",
        "|-",
        ">+",
        "? ",
        "---",
        "...",
        "%YAML 1.1",
        "~",
        "null",
        "true",
        "yes",
        "0x1F",
        "0o17",
        "1e3",
        "-.inf",
        ".nan",
        "1:20",
        "2001-12-14",
        "é",
        "\u{feff}",
        "<<: *x",
        "\r\n",
        "%",
        "@",
        "`",
    ];
    let mut g = Gen(0x9e37_79b9_7f4a_7c15);
    let mut parsed = 0;
    for _ in 0..20_000 {
        let len = 1 + g.below(20);
        let doc: String = (0..len).map(|_| PIECES[g.below(PIECES.len())]).collect();
        if load::from_str(&doc).is_ok() {
            parsed += 1;
        }
        let _ = load::values_from_str(&doc);
        let _ = load::head(&doc);
    }
    assert!(parsed > 1000, "only {parsed} random documents parsed");
}

/// A random value built from strings that look like other types, nested maps and lists,
/// numbers, booleans and nulls.
fn random_value(g: &mut Gen, depth: usize) -> serde_json::Value {
    const STRINGS: &[&str] = &[
        "",
        "a",
        "true",
        "yes",
        "no",
        "on",
        "null",
        "~",
        "1",
        "-1",
        "0x1F",
        "0777",
        "1e3",
        "1.5",
        ".inf",
        "1:20",
        "2001-12-14",
        "a: b",
        "- x",
        "#c",
        "x #c",
        "it's",
        "say \"hi\"",
        " lead",
        "trail ",
        "multi\nline",
        "multi\nline\n",
        "tab\there",
        "é",
        "*",
        "&a",
        "!t",
        "%",
        "@x",
        "[1]",
        "{a: 1}",
        "<<",
        "=",
        "?",
        "-",
        "---",
        "...",
    ];
    let pick = if depth >= 4 { 5 } else { 8 };
    match g.below(pick) {
        0 | 1 => serde_json::Value::from(STRINGS[g.below(STRINGS.len())]),
        2 => serde_json::Value::from(g.below(2000) as i64 - 1000),
        3 => serde_json::Value::from(g.below(2) == 0),
        4 => serde_json::Value::Null,
        5 | 6 => {
            let n = g.below(4);
            let mut map = serde_json::Map::new();
            for _ in 0..n {
                let key = STRINGS[g.below(STRINGS.len())].to_owned();
                map.insert(key, random_value(g, depth + 1));
            }
            serde_json::Value::Object(map)
        }
        _ => {
            let n = g.below(4);
            serde_json::Value::Array((0..n).map(|_| random_value(g, depth + 1)).collect())
        }
    }
}

/// What `toYaml` writes reads back as the same value: strings that look like numbers,
/// booleans, nulls, dates or YAML syntax are quoted as go-yaml quotes them, and no value makes
/// the emitter panic.
#[test]
fn emitted_yaml_reads_back_as_the_same_value() {
    let mut g = Gen(0x2545_f491_4f6c_dd1d);
    for case in 0..5_000 {
        let v = random_value(&mut g, 0);
        let text = to_yaml(&v);
        let back = load::from_str(&text)
            .unwrap_or_else(|e| panic!("case {case}: {v} wrote unreadable YAML ({e}):\n{text}"));
        assert_eq!(back, v, "case {case}: read back differently from:\n{text}");
    }
}
