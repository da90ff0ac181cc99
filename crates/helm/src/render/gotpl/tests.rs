//! The parser against Go's: what parses (shown by the tree printed back), and the errors
//! helm prints for what does not.

use super::ast::*;
use super::parse;

fn is_func(name: &str) -> bool {
    matches!(name, "f" | "g" | "printf" | "include" | "list")
}

/// The tree printed back compactly: text as `T"..."`, actions in `{{ }}`.
fn show(src: &str) -> String {
    let tree = parse("t", src, &is_func).unwrap_or_else(|e| panic!("{src:?}: {e}"));
    let mut out = list(&tree.root);
    for d in &tree.defines {
        out.push_str(&format!(" define[{}]:{}", d.name, list(&d.body)));
    }
    out
}

fn list(l: &ListNode) -> String {
    l.nodes.iter().map(node).collect::<Vec<_>>().join("")
}

fn node(n: &Node) -> String {
    match n {
        Node::Text(t) => format!("T{:?}", t.text),
        Node::Action(a) => format!("{{{{{}}}}}", pipe(&a.pipe)),
        Node::If(b) => branch("if", b),
        Node::With(b) => branch("with", b),
        Node::Range(b) => branch("range", b),
        Node::Template(t) => match &t.pipe {
            Some(p) => format!("{{{{template {:?} {}}}}}", t.name, pipe(p)),
            None => format!("{{{{template {:?}}}}}", t.name),
        },
        Node::Break(_) => "{{break}}".into(),
        Node::Continue(_) => "{{continue}}".into(),
    }
}

fn branch(word: &str, b: &BranchNode) -> String {
    let e = b
        .else_body
        .as_ref()
        .map(|e| format!("{{{{else}}}}{}", list(e)))
        .unwrap_or_default();
    format!(
        "{{{{{word} {}}}}}{}{e}{{{{end}}}}",
        pipe(&b.pipe),
        list(&b.body)
    )
}

fn pipe(p: &PipeNode) -> String {
    let cmds = p
        .commands
        .iter()
        .map(|c| c.args.iter().map(expr).collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join(" | ");
    if p.decl.is_empty() {
        return cmds;
    }
    let op = if p.is_assign { "=" } else { ":=" };
    format!("{} {op} {cmds}", p.decl.join(", "))
}

fn expr(e: &Expr) -> String {
    let fields =
        |fs: &[std::sync::Arc<str>]| fs.iter().map(|f| format!(".{f}")).collect::<String>();
    match e {
        Expr::Dot(_) => ".".into(),
        Expr::Nil(_) => "nil".into(),
        Expr::Bool(_, b) => b.to_string(),
        Expr::Number(_, Number::Int(i), _) => format!("int:{i}"),
        Expr::Number(_, Number::Uint(u), _) => format!("uint:{u}"),
        Expr::Number(_, Number::Float(f), _) => format!("float:{f}"),
        Expr::String(_, s) => format!("{s:?}"),
        Expr::Field(_, fs) => fields(fs),
        Expr::Variable(_, n, fs) => format!("{n}{}", fields(fs)),
        Expr::Identifier(_, n) => n.to_string(),
        Expr::Pipe(_, p) => format!("({})", pipe(p)),
        Expr::Chain(_, inner, fs) => format!("{}{}", expr(inner), fields(fs)),
    }
}

fn error(src: &str) -> String {
    match parse("t", src, &is_func) {
        Ok(t) => panic!("{src:?} parsed: {:?}", t.root),
        Err(e) => e.to_string(),
    }
}

#[test]
fn templates_parse_as_go_reads_them() {
    for (src, want) in [
        ("a {{ .x }} b", r#"T"a "{{.x}}T" b""#),
        // Trim markers take the spaces (and newlines) on their side only.
        ("a \n {{- .x -}} \n b", r#"T"a"{{.x}}T"b""#),
        ("a {{- /* c */}} b", r#"T"a"T" b""#),
        ("a {{/* c */ -}} b", r#"T"a "T"b""#),
        ("a {{/* multi\nline */}}b", r#"T"a "T"b""#),
        // A pipeline may end in `|`.
        ("{{ .x | }}", "{{.x}}"),
        ("{{ .a.b | f 1 | g }}", "{{.a.b | f int:1 | g}}"),
        (
            "{{ $x := .a }}{{ $x.b }}{{ $x = 2 }}",
            "{{$x := .a}}{{$x.b}}{{$x = int:2}}",
        ),
        ("{{ $ }}{{ $.Values.x }}", "{{$}}{{$.Values.x}}"),
        ("{{ (f .x).y.z }}", "{{(f .x).y.z}}"),
        ("{{ f.y }}", "{{f.y}}"),
        ("{{ nil }}{{ true }}{{ false }}", "{{nil}}{{true}}{{false}}"),
        // Numbers as Go reads them.
        (
            "{{ f 0x1F 0o17 017 0b101 1_000 -5 +5 1.5 1e3 .5 0x1p-2 'a' '\\n' '\\x41' 18446744073709551615 }}",
            "{{f int:31 int:15 int:15 int:5 int:1000 int:-5 int:5 float:1.5 float:1000 float:0.5 float:0.25 int:97 int:10 int:65 uint:18446744073709551615}}",
        ),
        // Strings: Go's escapes, raw strings without carriage returns.
        (
            r#"{{ f "a\tb\"\\\u00e9\101" `x\n` }}"#,
            r#"{{f "a\tb\"\\éA" "x\\n"}}"#,
        ),
        ("{{ f `a\r\nb` }}", r#"{{f "a\nb"}}"#),
        (
            "{{ if .a }}1{{ else if .b }}2{{ else }}3{{ end }}",
            r#"{{if .a}}T"1"{{else}}{{if .b}}T"2"{{else}}T"3"{{end}}{{end}}"#,
        ),
        (
            "{{ with .a }}1{{ else with .b }}2{{ end }}",
            r#"{{with .a}}T"1"{{else}}{{with .b}}T"2"{{end}}{{end}}"#,
        ),
        (
            "{{ range $i, $v := .l }}{{ if $i }}{{ break }}{{ end }}{{ continue }}{{ else }}e{{ end }}",
            r#"{{range $i, $v := .l}}{{if $i}}{{break}}{{end}}{{continue}}{{else}}T"e"{{end}}"#,
        ),
        (
            "{{ range 3 }}{{ . }}{{ end }}",
            "{{range int:3}}{{.}}{{end}}",
        ),
        (
            "{{ define \"a\" }}A{{ end }}{{ template \"a\" . }}{{ template \"b\" }}",
            r#"{{template "a" .}}{{template "b"}} define[a]:T"A""#,
        ),
        (
            "{{ block \"b\" .x }}B{{ end }}",
            r#"{{template "b" .x}} define[b]:T"B""#,
        ),
        // An empty definition does not replace one with content, in either order.
        (
            "{{ define \"a\" }}A{{ end }}{{ define \"a\" }} {{ end }}{{ define \"c\" }}\n{{ end }}{{ define \"c\" }}C{{ end }}",
            r#" define[a]:T"A" define[c]:T"C""#,
        ),
        ("{{ f (g 1) (list) }}", "{{f (g int:1) (list)}}"),
        ("{{\n.x\n}}", "{{.x}}"),
        ("{{ .x}}{{.y }}", "{{.x}}{{.y}}"),
        ("{{ 3 -}} x", "{{int:3}}T\"x\""),
        ("x {{- 3 }}", "T\"x\"{{int:3}}"),
        ("{{-3}}", "{{int:-3}}"),
        ("{{ \"}}\" }}", r#"{{"}}"}}"#),
    ] {
        assert_eq!(show(src), want, "{src:?}");
    }
}

/// Parse errors as helm prints them for a chart's template (`parse error at (FILE:LINE): ...`,
/// built from Go's `template: FILE:LINE: ...`). Every row was checked against `helm template`
/// v4.2.3 (the ignored test `dump_errors_for_helm` writes berth's side for that check).
#[test]
fn parse_errors_are_helms() {
    for &(src, want) in ERRORS {
        let got = match parse("t.yaml", src, &is_func) {
            Ok(t) => panic!("{src:?} parsed: {:?}", t.root),
            Err(e) => e.helm_message(),
        };
        assert_eq!(got, want, "{src:?}");
    }
}

const ERRORS: &[(&str, &str)] = &[
    ("{{ .x ", "parse error at (t.yaml:1): unclosed action"),
    (
        "a\n{{ .x\n\n",
        "parse error at (t.yaml:4): unclosed action started at t.yaml:2",
    ),
    (
        "{{ .x }",
        "parse error at (t.yaml:1): unexpected \"}\" in operand",
    ),
    (
        "{{ }}",
        "parse error at (t.yaml:1): missing value for command",
    ),
    ("{{ end }}", "parse error at (t.yaml:1): unexpected {{end}}"),
    (
        "{{ else }}",
        "parse error at (t.yaml:1): unexpected {{else}}",
    ),
    ("{{ if .x }}", "parse error at (t.yaml:1): unexpected EOF"),
    (
        "{{ if }}{{ end }}",
        "parse error at (t.yaml:1): missing value for if",
    ),
    (
        "{{ nofunc 1 }}",
        "parse error at (t.yaml:1): function \"nofunc\" not defined",
    ),
    (
        "\n{{ $y }}",
        "parse error at (t.yaml:2): undefined variable \"$y\"",
    ),
    (
        "{{ if true }}{{ $y := 1 }}{{ end }}{{ $y }}",
        "parse error at (t.yaml:1): undefined variable \"$y\"",
    ),
    (
        "{{ break }}",
        "parse error at (t.yaml:1): {{break}} outside {{range}}",
    ),
    (
        "{{ continue }}",
        "parse error at (t.yaml:1): {{continue}} outside {{range}}",
    ),
    (
        "{{ range .x }}{{ break 1 }}{{ end }}",
        "parse error at (t.yaml:1): unexpected \"1\" in {{break}}",
    ),
    (
        "{{ .x | 3 }}",
        "parse error at (t.yaml:1): non executable command in pipeline stage 2",
    ),
    (
        "{{ .x | | f }}",
        "parse error at (t.yaml:1): unexpected \"|\" in command",
    ),
    (
        "{{ /* c */ }}",
        "parse error at (t.yaml:1): unexpected \"/\" in command",
    ),
    (
        "{{/* c */ }}",
        "parse error at (t.yaml:1): comment ends before closing delimiter",
    ),
    ("{{/* c ", "parse error at (t.yaml:1): unclosed comment"),
    (
        "{{ \"abc }}",
        "parse error at (t.yaml:1): unterminated quoted string",
    ),
    (
        "{{ `abc }}",
        "parse error at (t.yaml:1): unterminated raw quoted string",
    ),
    ("{{ 'ab' }}", "parse error at (t.yaml:1): 'ab'"),
    ("{{ 1-2 }}", "parse error at (t.yaml:1): \"1-2\""),
    ("{{ 08 }}", "parse error at (t.yaml:1): \"08\""),
    (
        "{{ 99999999999999999999 }}",
        "parse error at (t.yaml:1): \"99999999999999999999\"",
    ),
    (
        "{{ \"a\\q\" }}",
        "parse error at (t.yaml:1): invalid syntax",
    ),
    (
        "{{ .x# }}",
        "parse error at (t.yaml:1): bad character U+0023 '#'",
    ),
    (
        "{{ ( .x }}",
        "parse error at (t.yaml:1): unclosed left paren",
    ),
    (
        "{{ .x ) }}",
        "parse error at (t.yaml:1): unexpected right paren",
    ),
    (
        "{{ $x := 1 := 2 }}",
        "parse error at (t.yaml:1): unexpected \":=\" in operand",
    ),
    (
        "{{ $x : 1 }}",
        "parse error at (t.yaml:1): undefined variable \"$x\"",
    ),
    (
        "{{ \"s\".x }}",
        "parse error at (t.yaml:1): unexpected . after term \"\\\"s\\\"\"",
    ),
    (
        "{{ $a, $b := .x }}",
        "parse error at (t.yaml:1): too many declarations in command",
    ),
    (
        "{{ range $a, 1 }}{{ end }}",
        "parse error at (t.yaml:1): range can only initialize variables",
    ),
    (
        "{{ range $a, $b, $c := .x }}{{ end }}",
        "parse error at (t.yaml:1): too many declarations in range",
    ),
    (
        "{{ template .x }}",
        "parse error at (t.yaml:1): unexpected \".x\" in template clause",
    ),
    (
        "{{ define \"a\" }}{{ else }}{{ end }}",
        "parse error at (t.yaml:1): unexpected {{else}} in define clause",
    ),
    (
        "{{ range .x }}{{ else }}{{ else }}{{ end }}",
        "parse error at (t.yaml:1): expected end; found {{else}}",
    ),
    (
        "{{ define \"a\" }}A{{ end }}{{ define \"a\" }}B{{ end }}",
        "parse error at (t.yaml:1): multiple definition of template \"a\"",
    ),
    (
        "{{ if .x }}{{ define \"a\" }}{{ end }}{{ end }}",
        "parse error at (t.yaml:1): unexpected <define> in command",
    ),
    ("{{ .x \u{1} }}", "parse error at (t.yaml:1): U+0001"),
    (
        "{{ printf \"a very long string here\" | }",
        "parse error at (t.yaml:1): unexpected \"}\" in command",
    ),
    (
        "{{ if .x }}\nabcdefghijklmnop {{ end }",
        "parse error at (t.yaml:2): unexpected \"}\" in end",
    ),
];

/// Writes each erroring template with berth's message, for `helm template` to check (the
/// chart's template is `c/templates/t.yaml`).
#[test]
#[ignore]
fn dump_errors_for_helm() {
    let rows: Vec<serde_json::Value> = ERRORS
        .iter()
        .map(|(src, _)| {
            let message = parse("c/templates/t.yaml", src, &is_func)
                .map(|_| String::new())
                .unwrap_or_else(|e| e.helm_message());
            serde_json::json!({ "src": src, "berth": message })
        })
        .collect();
    let rows = serde_json::to_string(&rows).expect("JSON");
    std::fs::write("/tmp/gotpl-errors.json", rows).expect("write /tmp/gotpl-errors.json");
}

/// The Go form, which `tpl` reports inside its own message.
#[test]
fn go_form_names_the_template_and_line() {
    let e = parse("gotpl", "a\n{{ if .x }}\n{{ .y }", &is_func).unwrap_err();
    assert_eq!(
        e.to_string(),
        "template: gotpl:3: unexpected \"}\" in operand"
    );
}

#[test]
fn deep_nesting_is_refused_not_a_crash() {
    let src = format!(
        "{}1{}",
        "{{ f ".to_string() + &"(f ".repeat(5000),
        ")".repeat(5000) + " }}"
    );
    assert!(error(&src).contains("nests deeper than"));
    let src = format!("{}{}", "{{ if 1 }}".repeat(5000), "{{ end }}".repeat(5000));
    assert!(error(&src).contains("nests deeper than"));
}

#[test]
fn helm_keeps_the_last_part_of_the_message() {
    let e = parse("x.yaml", "\n{{ 1-2 }}", &is_func).unwrap_err();
    assert_eq!(e.helm_message(), "parse error at (x.yaml:2): \"1-2\"");
    let e = parse("x.yaml", "{{ nofunc }}", &is_func).unwrap_err();
    assert_eq!(
        e.helm_message(),
        "parse error at (x.yaml:1): function \"nofunc\" not defined"
    );
}

/// Random soups of template fragments (and stray bytes of every kind) parse or fail with an
/// error; none may panic the parser.
#[test]
fn random_input_never_panics() {
    const PIECES: &[&str] = &[
        "{{", "}}", "{{-", "-}}", " ", "\n", "\t", "/*", "*/", "\"", "\\", "`", "'", "$", "$x",
        ":=", "=", ",", "|", "(", ")", ".", ".a", "1", "-", "+", "0x", "e", "p", "i", "_", "é",
        "\u{1}", "if", "else", "end", "range", "with", "define", "block", "template", "break",
        "continue", "nil", "true", "f", "#", "}", "{",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let (mut parsed, mut refused) = (0, 0);
    for _ in 0..20_000 {
        let len = 1 + next(30);
        let src: String = (0..len).map(|_| PIECES[next(PIECES.len())]).collect();
        match parse("t", &src, &is_func) {
            Ok(_) => parsed += 1,
            Err(e) => {
                assert!(e.to_string().starts_with("template: t:"), "{src:?}: {e}");
                refused += 1;
            }
        }
    }
    assert!(
        parsed > 100 && refused > 100,
        "{parsed} parsed, {refused} refused"
    );
}
