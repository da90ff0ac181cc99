//! Source rewrites that emulate the Go method calls and in-place mutations Helm templates use.
//!
//! Go templates can call methods on data (`.Capabilities.APIVersions.Has "apps/v1"`,
//! `.Files.Get "x"`), and Sprig's `set` mutates a dict in place. `gotmpl` has neither method
//! calls nor mutable values, so before parsing, the few method forms Helm defines are rewritten
//! into calls of hidden functions that take the receiver as their first argument, and the
//! `$_ := set $d ...` idiom becomes `$d = set $d ...`. The rewrites only touch these exact
//! spellings; anything else is left for the parser to accept or reject.

use regex::Regex;
use std::sync::LazyLock;

/// A receiver expression: `.`, `$`, `$var`, optionally followed by field names.
const RECEIVER: &str = r"((?:\$[A-Za-z0-9_]*)?(?:\.[A-Za-z0-9_]+)*?)";

struct Rewrite {
    pattern: Regex,
    replacement: &'static str,
}

static REWRITES: LazyLock<Vec<Rewrite>> = LazyLock::new(|| {
    let specs: [(String, &'static str); 4] = [
        // `(.Files.Glob "x").AsConfig` → `(__filesAsConfig (.Files.Glob "x"))`
        (
            r"\(([^()]*\.Files\.Glob\s[^()]*)\)\.(AsConfig|AsSecrets)\b".to_string(),
            "(__files${2} (${1}))",
        ),
        (
            format!(r"{RECEIVER}\.Files\.(Get|GetBytes|Glob|Lines)\b"),
            "__files${2} ${1}.Files",
        ),
        (
            format!(r"{RECEIVER}\.Capabilities\.APIVersions\.Has\b"),
            "__apiVersionsHas ${1}.Capabilities.APIVersions",
        ),
        (
            r"\$_\s*:?=\s*(set|unset|merge|mergeOverwrite)\s+(\$[A-Za-z0-9_]+)(\s)".to_string(),
            "${2} = ${1} ${2}${3}",
        ),
    ];
    specs
        .into_iter()
        .filter_map(|(p, r)| {
            Regex::new(&p).ok().map(|pattern| Rewrite {
                pattern,
                replacement: r,
            })
        })
        .collect()
});

/// Rewrites one template's source; the text outside `{{ }}` is left untouched.
pub fn rewrite(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(start) = rest.find("{{") {
        let Some(len) = action_len(&rest[start..]) else {
            break;
        };
        let end = start + len;
        out.push_str(&rest[..start]);
        let mut action = rest[start..end].to_string();
        for rw in REWRITES.iter() {
            action = rw.pattern.replace_all(&action, rw.replacement).into_owned();
        }
        out.push_str(&with_print_hook(&action));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
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
    let is_decl = DECLARATION.as_ref().is_some_and(|re| re.is_match(expr));
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
    use super::rewrite;

    #[test]
    fn output_actions_get_the_print_hook() {
        assert_eq!(
            rewrite("{{- .Values.x -}}"),
            "{{- .Values.x | __goprint -}}"
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
