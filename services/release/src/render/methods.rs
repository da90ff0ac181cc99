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
        let Some(len) = rest[start..].find("}}") else {
            break;
        };
        let end = start + len + 2;
        out.push_str(&rest[..start]);
        let mut action = rest[start..end].to_string();
        for rw in REWRITES.iter() {
            action = rw.pattern.replace_all(&action, rw.replacement).into_owned();
        }
        out.push_str(&action);
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    #[test]
    fn rewrites_method_calls_into_functions() {
        assert_eq!(
            rewrite(r#"{{ if .Capabilities.APIVersions.Has "policy/v1" }}"#),
            r#"{{ if __apiVersionsHas .Capabilities.APIVersions "policy/v1" }}"#
        );
        assert_eq!(
            rewrite(r#"{{ $.Files.Get "a.txt" }}"#),
            r#"{{ __filesGet $.Files "a.txt" }}"#
        );
        assert_eq!(
            rewrite(r#"{{ (.Files.Glob "conf/*").AsConfig }}"#),
            r#"{{ (__filesAsConfig (__filesGlob .Files "conf/*")) }}"#
        );
        assert_eq!(
            rewrite(r#"{{- $_ := set $ctx "k" 1 }}"#),
            r#"{{- $ctx = set $ctx "k" 1 }}"#
        );
        assert_eq!(rewrite("text .Files.Get x"), "text .Files.Get x");
    }
}
