//! Source rewrites that emulate the Go method calls and in-place mutations Helm templates use.
//!
//! Go templates can call methods on data (`.Capabilities.APIVersions.Has "apps/v1"`,
//! `.Files.Get "x"`), and Sprig's `set` mutates a dict in place. `gotmpl` has neither method
//! calls nor mutable values, so before parsing, the few method forms Helm defines are rewritten
//! into calls of hidden functions that take the receiver as their first argument, and the
//! `$_ := set $d ...` idiom becomes `$d = set $d ...`. The rewrites only touch these exact
//! spellings; anything else is left for the parser to accept or reject.
//!
//! Reads of `.Values` (`.Values.x`, `$.Values`, `$ctx.Values`, outside string literals) become
//! `(__values RECEIVER)`, which answers with the chart's current values: in Helm `.Values` is
//! a map that `set`, `unset` and `merge` change in place, for the rest of the template and for
//! the templates rendered after it (see `render::engine`).

use regex::Regex;
use std::sync::LazyLock;

/// A receiver expression: `.`, `$`, `$var`, optionally followed by field names.
const RECEIVER: &str = r"((?:\$[A-Za-z0-9_]*)?(?:\.[A-Za-z0-9_]+)*?)";

struct Rewrite {
    /// Text the action must contain for the pattern to have a chance (cheap pre-check).
    needle: &'static str,
    pattern: Regex,
    replacement: &'static str,
}

static REWRITES: LazyLock<Vec<Rewrite>> = LazyLock::new(|| {
    let specs: [(&'static str, String, &'static str); 4] = [
        // `(.Files.Glob "x").AsConfig` → `(__filesAsConfig (.Files.Glob "x"))`
        (
            ".Files.Glob",
            r"\(([^()]*\.Files\.Glob\s[^()]*)\)\.(AsConfig|AsSecrets)\b".to_string(),
            "(__files${2} (${1}))",
        ),
        (
            ".Files.",
            format!(r"{RECEIVER}\.Files\.(Get|GetBytes|Glob|Lines)\b"),
            "__files${2} ${1}.Files",
        ),
        (
            ".Capabilities.APIVersions.Has",
            format!(r"{RECEIVER}\.Capabilities\.APIVersions\.Has\b"),
            "__apiVersionsHas ${1}.Capabilities.APIVersions",
        ),
        (
            "$_",
            r"\$_\s*:?=\s*(set|unset|merge|mergeOverwrite)\s+(\$[A-Za-z0-9_]+)(\s)".to_string(),
            "${2} = ${1} ${2}${3}",
        ),
    ];
    specs
        .into_iter()
        .filter_map(|(needle, p, r)| {
            Regex::new(&p).ok().map(|pattern| Rewrite {
                needle,
                pattern,
                replacement: r,
            })
        })
        .collect()
});

/// Rewrites one template's source; the text outside `{{ }}` is left untouched.
pub fn rewrite(src: &str) -> String {
    rewrite_actions(src, true, false).into_owned()
}

/// Like [`rewrite`] but without the print hook, which [`add_print_hook`] then puts into the
/// parsed tree (cheaper than lexing and parsing it as text).
pub fn rewrite_methods(src: &str) -> std::borrow::Cow<'_, str> {
    rewrite_actions(src, false, false)
}

/// Only the lexer and parser respellings ([`lexer_fixes`]), for `render::exec`, which runs
/// method calls and in-place changes itself.
pub fn lexer_fixed(src: &str) -> std::borrow::Cow<'_, str> {
    rewrite_actions(src, false, true)
}

fn rewrite_actions(src: &str, hook: bool, lexer_only: bool) -> std::borrow::Cow<'_, str> {
    use std::borrow::Cow;
    let mut out = String::new();
    // Text up to `copied` is already in `out` (or unchanged, while `out` is empty).
    let mut copied = 0;
    let mut at = 0;
    while let Some(found) = src[at..].find("{{") {
        let start = at + found;
        let Some(len) = action_len(&src[start..]) else {
            break;
        };
        let end = start + len;
        let original = &src[start..end];
        let mut action = Cow::Borrowed(original);
        if let Some(fixed) = lexer_fixes(original) {
            action = Cow::Owned(fixed);
        }
        for rw in REWRITES.iter().filter(|_| !lexer_only) {
            if action.contains(rw.needle) {
                let replaced = rw.pattern.replace_all(&action, rw.replacement).into_owned();
                action = Cow::Owned(replaced);
            }
        }
        if !lexer_only && action.contains(".Values") {
            action = Cow::Owned(values_reads(&action));
        }
        if hook {
            action = Cow::Owned(with_print_hook(&action));
        }
        if action != original {
            out.push_str(&src[copied..start]);
            out.push_str(&action);
            copied = end;
        }
        at = end;
    }
    if copied == 0 {
        return Cow::Borrowed(src);
    }
    out.push_str(&src[copied..]);
    Cow::Owned(out)
}

/// Two spellings gotmpl 0.6's lexer and parser read differently from Go's text/template,
/// respelled into forms they read as Go does (each keeps the action's line count, so positions
/// in error messages do not move):
/// - `{{- /* c */}}` (a comment with a left trim marker only): Go trims the space before it
///   and keeps the space after it; gotmpl trims both. It becomes `{{- "" }}`, which prints
///   nothing and trims on the left only.
/// - `{{ x | }}` (a pipeline ending in `|`): Go accepts it as `{{ x }}`; gotmpl rejects it.
///
/// These belong in the template engine's lexer and parser; they go when berth owns its engine
/// (see the crate docs).
fn lexer_fixes(action: &str) -> Option<String> {
    let inner = action.strip_prefix("{{")?.strip_suffix("}}")?;
    let newlines = "\n".repeat(inner.matches('\n').count());
    if let Some(rest) = inner.strip_prefix('-')
        && rest.starts_with(char::is_whitespace)
        && rest.trim_start().starts_with("/*")
    {
        let body = rest.trim_end();
        // `... */ -}}` trims on the right too, which gotmpl handles.
        if body.ends_with("*/") {
            return Some(format!("{{{{- \"\"{newlines} }}}}"));
        }
        return None;
    }
    if inner.trim_start_matches('-').trim_start().starts_with("/*") {
        return None;
    }
    let (body, close) = match inner.strip_suffix('-') {
        Some(b) if b.ends_with(char::is_whitespace) => (b, " -}}"),
        _ => (inner, "}}"),
    };
    let trimmed = body.trim_end();
    let head = trimmed.strip_suffix('|')?;
    if head.ends_with('|') || head.trim().is_empty() || head.trim() == "-" {
        return None;
    }
    // Not inside a string literal: the `|` must not be preceded by an open quote.
    let quotes = head.bytes().filter(|&b| b == b'"').count() - head.matches("\\\"").count();
    if quotes % 2 == 1 || head.bytes().filter(|&b| b == b'`').count() % 2 == 1 {
        return None;
    }
    let tail = &body[trimmed.len()..];
    Some(format!("{{{{{head}{tail}{close}"))
}

/// Appends the print hook to every printing action of a parsed tree: the same as
/// [`with_print_hook`] does to source text (declarations and control actions print nothing
/// and are left alone).
pub fn add_print_hook(list: &mut gotmpl::parse::ListNode) {
    use gotmpl::parse::{CommandNode, Expr, Node};
    for node in &mut list.nodes {
        match node {
            Node::Action(a) if a.pipe.decl.is_empty() => {
                let pos = a.pipe.pos;
                a.pipe.commands.push(CommandNode {
                    pos,
                    args: vec![Expr::Identifier(pos, super::funcs::PRINT_HOOK.into())],
                });
            }
            Node::List(l) => add_print_hook(l),
            Node::If(b) | Node::Range(b) | Node::With(b) => {
                add_print_hook(&mut b.body);
                if let Some(e) = b.else_body.as_mut() {
                    add_print_hook(e);
                }
            }
            Node::Define(d) => add_print_hook(&mut d.body),
            _ => {}
        }
    }
}

/// The length of the action at the start of `s` (which begins with `{{`) up to and including
/// its `}}`, skipping `}}` inside string literals (`{{ "}}" }}`), comments and raw strings.
fn action_len(s: &str) -> Option<usize> {
    // Byte-wise: every delimiter is ASCII, so positions found are char boundaries.
    let bytes = s.as_bytes();
    let mut i = 2;
    let mut quote: Option<u8> = None;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) => {
                if b == b'\\' && q == b'"' {
                    i += 1;
                } else if b == q {
                    quote = None;
                }
            }
            None if b == b'"' || b == b'`' => quote = Some(b),
            None if bytes[i..].starts_with(b"/*") => {
                let end = bytes[i + 2..].windows(2).position(|w| w == b"*/")?;
                i += end + 3;
            }
            None if bytes[i..].starts_with(b"}}") => return Some(i + 2),
            None => {}
        }
        i += 1;
    }
    None
}

/// The hidden function that answers `.Values` reads (see the module docs).
pub const VALUES_FN: &str = "__values";

/// Rewrites `RECEIVER.Values` outside string literals into `(__values RECEIVER)`, where
/// RECEIVER is `$`, `$var` or empty (dot), followed by any field names.
fn values_reads(action: &str) -> String {
    const FIELD: &str = ".Values";
    let b = action.as_bytes();
    let mut out = String::with_capacity(action.len() + 16);
    let mut copied = 0;
    let mut i = 0;
    let mut quote: Option<u8> = None;
    while i < b.len() {
        let c = b[i];
        if let Some(q) = quote {
            if c == b'\\' && q != b'`' {
                i += 1;
            } else if c == q {
                quote = None;
            }
            i += 1;
            continue;
        }
        if matches!(c, b'"' | b'`' | b'\'') {
            quote = Some(c);
            i += 1;
            continue;
        }
        // A comment is not code: skip to its end.
        if b[i..].starts_with(b"/*") {
            i = match b[i + 2..].windows(2).position(|w| w == b"*/") {
                Some(end) => i + 2 + end + 2,
                None => b.len(),
            };
            continue;
        }
        let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
        if b[i..].starts_with(FIELD.as_bytes())
            && !b.get(i + FIELD.len()).copied().is_some_and(is_ident)
        {
            // Walk back over `.field` parts and an optional `$var` to the receiver's start.
            let mut start = i;
            loop {
                let mut j = start;
                while j > 0 && is_ident(b[j - 1]) {
                    j -= 1;
                }
                if j > 0 && b[j - 1] == b'.' && j < start {
                    start = j - 1;
                    continue;
                }
                if j > 0 && b[j - 1] == b'$' {
                    start = j - 1;
                }
                break;
            }
            // A receiver glued to something else (`(x).Values`, `"a".Values`) is left alone, and
            // so is a field of what was just rewritten (`.Values.Values`).
            let glued = start < copied
                || start > 0
                    && !matches!(
                        b[start - 1],
                        b' ' | b'\t' | b'\n' | b'\r' | b'(' | b'{' | b'|' | b',' | b'=' | b'-'
                    );
            if !glued {
                let receiver = &action[start..i];
                out.push_str(&action[copied..start]);
                out.push('(');
                out.push_str(VALUES_FN);
                out.push(' ');
                out.push_str(if receiver.is_empty() { "." } else { receiver });
                out.push(')');
                i += FIELD.len();
                copied = i;
                continue;
            }
        }
        i += 1;
    }
    out.push_str(&action[copied..]);
    out
}

/// Words that open a control action rather than print a value.
const KEYWORDS: &[&str] = &[
    "if", "else", "end", "range", "with", "define", "template", "block", "break", "continue",
];

static DECLARATION: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"^\$[A-Za-z0-9_]*\s*(?:,\s*\$[A-Za-z0-9_]*\s*)?:?=").ok());

/// Pipes an output action (`{{ expr }}`) into the print hook so values print as Go prints
/// them; control actions, declarations and comments are returned unchanged.
fn with_print_hook(action: &str) -> String {
    let inner = &action[2..action.len() - 2];
    let (lead, body) = match inner.strip_prefix('-') {
        Some(rest) if rest.starts_with(char::is_whitespace) => ("-", rest),
        _ => ("", inner),
    };
    let (body, trail) = match body.strip_suffix('-') {
        Some(rest) if rest.ends_with(char::is_whitespace) => (rest, "-"),
        _ => (body, ""),
    };
    let expr = body.trim();
    let first_word = expr
        .split(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or_default();
    let is_decl = expr.starts_with('$') && DECLARATION.as_ref().is_some_and(|re| re.is_match(expr));
    if expr.is_empty() || expr.starts_with("/*") || KEYWORDS.contains(&first_word) || is_decl {
        return action.to_string();
    }
    format!(
        "{{{{{lead} {expr} | {} {trail}}}}}",
        super::funcs::PRINT_HOOK
    )
}

#[cfg(test)]
mod tests {
    use super::{add_print_hook, rewrite, rewrite_methods};

    #[test]
    fn output_actions_get_the_print_hook() {
        assert_eq!(
            rewrite("{{- .Release.Name -}}"),
            "{{- .Release.Name | __goprint -}}"
        );
        assert_eq!(
            rewrite("{{ if .a }}{{ $x := 1 }}{{/* c */}}{{ end }}"),
            "{{ if .a }}{{ $x := 1 }}{{/* c */}}{{ end }}"
        );
        assert_eq!(rewrite("{{ $x }}"), "{{ $x | __goprint }}");
        assert_eq!(rewrite(r#"{{ "}}" }}x"#), r#"{{ "}}" | __goprint }}x"#);
        assert_eq!(rewrite(r#"{{ "a\"}}" }}"#), r#"{{ "a\"}}" | __goprint }}"#);
        assert_eq!(rewrite("{{ $a, $b := 1, 2 }}"), "{{ $a, $b := 1, 2 }}");
    }

    #[test]
    fn values_reads_go_through_the_values_function_outside_strings() {
        assert_eq!(
            rewrite(r#"{{ required "set .Values.x" .Values.x }}"#),
            r#"{{ required "set .Values.x" (__values .).x | __goprint }}"#
        );
        assert_eq!(
            rewrite("{{- $_ := set $.Values.a \"k\" $ctx.Values.b }}"),
            "{{- $_ := set (__values $).a \"k\" (__values $ctx).b }}"
        );
        assert_eq!(
            rewrite("{{ with .context.Values }}{{ .ValuesX }}{{ end }}"),
            "{{ with (__values .context) }}{{ .ValuesX | __goprint }}{{ end }}"
        );
        // Text that is not ASCII, comments and a field named `Values` must not trip it up.
        assert_eq!(rewrite("{{/* é .Values */}}"), "{{/* é .Values */}}");
        assert_eq!(
            rewrite("{{- $v := .Values.Values -}}"),
            "{{- $v := (__values .).Values -}}"
        );
        assert_eq!(
            rewrite("{{ \"é\" }}{{ ($.Values.a).Values }}"),
            "{{ \"é\" | __goprint }}{{ ((__values $).a).Values | __goprint }}"
        );
        assert_eq!(
            rewrite("{{ (.Values) }}"),
            "{{ ((__values .)) | __goprint }}"
        );
    }

    #[test]
    fn the_print_hook_in_the_tree_matches_the_text_form() {
        use gotmpl::parse::Parser;
        let src = "a {{ .x }} {{ $y := 1 }}{{ if .c }}{{ $y }}{{ else }}{{ 2 | add 1 }}{{ end }}\
                   {{ range .l }}{{ . }}{{ end }}{{ with .w }}{{ . }}{{ end }}{{/* c */}}";
        let parse = |s: &str| Parser::with_name(Some("t"), s, "{{", "}}").and_then(Parser::parse);
        let (mut tree, _) = parse(&rewrite_methods(src)).unwrap_or_else(|e| panic!("{e}"));
        add_print_hook(&mut tree);
        let (text_form, _) = parse(&rewrite(src)).unwrap_or_else(|e| panic!("{e}"));
        // Positions differ (the text form is longer); the shape must not.
        let shape = |t: &gotmpl::parse::ListNode| format!("{t:?}").split("pos").count();
        assert_eq!(shape(&tree), shape(&text_form));
        assert_eq!(
            format!("{tree:?}").matches("__goprint").count(),
            format!("{text_form:?}").matches("__goprint").count()
        );
        assert!(matches!(
            rewrite_methods("{{ .x }}"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn rewrites_method_calls_into_functions() {
        assert_eq!(
            rewrite(r#"{{ if .Capabilities.APIVersions.Has "policy/v1" }}"#),
            r#"{{ if __apiVersionsHas .Capabilities.APIVersions "policy/v1" }}"#
        );
        assert_eq!(
            rewrite(r#"{{ $.Files.Get "a.txt" }}"#),
            r#"{{ __filesGet $.Files "a.txt" | __goprint }}"#
        );
        assert_eq!(
            rewrite(r#"{{ (.Files.Glob "conf/*").AsConfig }}"#),
            r#"{{ (__filesAsConfig (__filesGlob .Files "conf/*")) | __goprint }}"#
        );
        assert_eq!(
            rewrite(r#"{{- $_ := set $ctx "k" 1 }}"#),
            r#"{{- $ctx = set $ctx "k" 1 }}"#
        );
        assert_eq!(rewrite("text .Files.Get x"), "text .Files.Get x");
    }
}
