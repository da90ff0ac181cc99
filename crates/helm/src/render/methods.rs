//! Source respellings for the two forms gotmpl 0.6's lexer and parser read differently from
//! Go's text/template (see [`lexer_fixes`]). Method calls and in-place changes to maps are
//! no longer rewritten: `render::exec` runs them.

/// Applies [`lexer_fixes`] to every action of a template's source; the text outside `{{ }}`
/// is left untouched.
pub fn lexer_fixed(src: &str) -> std::borrow::Cow<'_, str> {
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
        if let Some(fixed) = lexer_fixes(&src[start..end]) {
            out.push_str(&src[copied..start]);
            out.push_str(&fixed);
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

#[cfg(test)]
mod tests {
    use super::lexer_fixed;

    #[test]
    fn only_the_two_lexer_forms_are_respelled() {
        assert_eq!(lexer_fixed("x\n{{- /* c */}}\ny"), "x\n{{- \"\" }}\ny");
        assert_eq!(lexer_fixed("{{ .a | }}"), "{{ .a  }}");
        assert_eq!(
            lexer_fixed(r#"{{ "}}" }}{{ .Files.Get "x" }}"#),
            r#"{{ "}}" }}{{ .Files.Get "x" }}"#
        );
        assert!(matches!(
            lexer_fixed("{{ .x }}"),
            std::borrow::Cow::Borrowed(_)
        ));
    }
}
