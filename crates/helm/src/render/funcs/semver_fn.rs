//! `semverCompare`, following the constraint language of Masterminds/semver (which Sprig uses),
//! evaluated with the `semver` crate's version ordering.
//!
//! The `semver` crate's `VersionReq` follows Cargo's rules (`1.2` means `^1.2`, no `||`, no
//! `x` wildcards with operators, different prerelease rules), so Masterminds' grammar is parsed
//! here: `||` separates alternatives, `,` or spaces separate conjuncts, and each conjunct is an
//! operator (`=`, `!=`, `>`, `<`, `>=`, `=<`, `<=`, `~`, `^`) or a hyphen range over a lenient
//! version (`v` prefix, missing parts, `x`/`*` wildcards). As in Masterminds, a prerelease
//! version only satisfies constraints that themselves carry a prerelease (hence Helm's `-0`).

use super::args::{exact, fail, str_arg};
use gotmpl::{FuncMap, Result, Value};
use semver::{Prerelease, Version};
use std::sync::Arc;

pub fn register(fm: &mut FuncMap) {
    fm.insert("semverCompare".into(), Arc::new(semver_compare));
    fm.insert("semver".into(), Arc::new(semver_parse));
}

fn semver_compare(args: &[Value]) -> Result<Value> {
    exact("semverCompare", args, 2)?;
    let constraint = str_arg("semverCompare", args, 0)?;
    let version = str_arg("semverCompare", args, 1)?;
    let v =
        parse_version(&version).ok_or_else(|| fail("semverCompare", "invalid semantic version"))?;
    matches(&constraint, &v)
        .map(Value::Bool)
        .map_err(|_| fail("semverCompare", improper(&constraint)))
}

fn semver_parse(args: &[Value]) -> Result<Value> {
    exact("semver", args, 1)?;
    let text = str_arg("semver", args, 0)?;
    let v = parse_version(&text).ok_or_else(|| fail("semver", "invalid semantic version"))?;
    let entries = [
        // What its `String` method gives (how it prints, and what `toJson` writes).
        ("String", Value::String(version_text(&v).into())),
        ("Major", Value::Uint(v.major)),
        ("Minor", Value::Uint(v.minor)),
        ("Patch", Value::Uint(v.patch)),
        ("Prerelease", Value::String(v.pre.as_str().into())),
        ("Metadata", Value::String(v.build.as_str().into())),
        ("Original", Value::String(text.as_str().into())),
    ];
    Ok(Value::Map(Arc::new(
        entries
            .into_iter()
            .map(|(k, v)| (Arc::from(k), v))
            .collect(),
    )))
}

/// A version as Masterminds' `NewVersion` reads it: `v1.2`, `1`, `1.2.3-rc.1+b`, missing
/// parts 0; no surrounding space, no wildcard, no capital `V`.
pub fn parse_version(s: &str) -> Option<Version> {
    if s.is_empty() || s.starts_with('V') || s != s.trim() {
        return None;
    }
    let core = s.trim_start_matches('v');
    let core = core.split(['-', '+']).next().unwrap_or("");
    if core
        .split('.')
        .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let (parts, _) = parse_partial(s)?;
    Some(parts)
}

/// Masterminds' `Version.String`: the three numbers, then `-prerelease` and `+metadata`.
fn version_text(v: &Version) -> String {
    let mut out = format!("{}.{}.{}", v.major, v.minor, v.patch);
    if !v.pre.is_empty() {
        out.push('-');
        out.push_str(v.pre.as_str());
    }
    if !v.build.is_empty() {
        out.push('+');
        out.push_str(v.build.as_str());
    }
    out
}

/// Parses a possibly partial version; the flag tells whether a part was missing or a wildcard.
fn parse_partial(s: &str) -> Option<(Version, bool)> {
    let s = s.trim().trim_start_matches(['v', 'V']);
    let (core, build) = s.split_once('+').map_or((s, ""), |(c, b)| (c, b));
    let (core, pre) = core.split_once('-').map_or((core, ""), |(c, p)| (c, p));
    let mut nums = [0u64; 3];
    let mut wild = false;
    let pieces: Vec<&str> = core.split('.').collect();
    if pieces.is_empty() || pieces.len() > 3 {
        return None;
    }
    for (i, slot) in nums.iter_mut().enumerate() {
        match pieces.get(i) {
            None | Some(&("x" | "X" | "*")) => wild = true,
            Some(p) => *slot = p.parse().ok()?,
        }
    }
    let mut v = Version::new(nums[0], nums[1], nums[2]);
    if !pre.is_empty() {
        v.pre = Prerelease::new(pre).ok()?;
    }
    if !build.is_empty() {
        v.build = semver::BuildMetadata::new(build).ok()?;
    }
    Some((v, wild))
}

/// Which parts of a partial version were given (1 = major only, 3 = all).
fn given_parts(s: &str) -> usize {
    let core = s.trim().trim_start_matches(['v', 'V']);
    let core = core.split(['-', '+']).next().unwrap_or("");
    core.split('.')
        .take_while(|p| !matches!(*p, "x" | "X" | "*" | ""))
        .count()
}

fn matches(constraint: &str, v: &Version) -> std::result::Result<bool, String> {
    for alternative in constraint.split("||") {
        if all_match(alternative, v)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Splits a conjunction into `op version` terms, joining an operator written apart from its
/// version (`>= 1.2`) and recognising hyphen ranges (`1.2 - 1.4`).
fn all_match(alternative: &str, v: &Version) -> std::result::Result<bool, String> {
    let tokens: Vec<&str> = alternative
        .split([',', ' '])
        .filter(|t| !t.is_empty())
        .collect();
    let mut terms: Vec<String> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i];
        if tokens.get(i + 1) == Some(&"-") && i + 2 < tokens.len() {
            terms.push(format!(">={}", t));
            terms.push(format!("<={}", tokens[i + 2]));
            i += 3;
        } else if t.chars().all(|c| "=!<>~^".contains(c)) && i + 1 < tokens.len() {
            terms.push(format!("{t}{}", tokens[i + 1]));
            i += 2;
        } else {
            terms.push(t.to_string());
            i += 1;
        }
    }
    if terms.is_empty() {
        return Err(improper(alternative));
    }
    let any_pre = terms.iter().any(|t| t.contains('-'));
    if !v.pre.is_empty() && !any_pre {
        return Ok(false);
    }
    for term in &terms {
        if !term_matches(term, v)? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn term_matches(term: &str, v: &Version) -> std::result::Result<bool, String> {
    let op_len = term
        .find(|c: char| !"=!<>~^".contains(c))
        .unwrap_or(term.len());
    let (op, ver) = term.split_at(op_len);
    let (c, wild) = parse_partial(ver).ok_or_else(|| improper(term))?;
    let parts = given_parts(ver);
    // Compare without build metadata, which has no ordering in SemVer.
    let cmp = cmp_no_build(v, &c);
    let upper = |bump_at: usize| -> Version {
        match bump_at {
            0 => Version::new(c.major + 1, 0, 0),
            1 => Version::new(c.major, c.minor + 1, 0),
            _ => Version::new(c.major, c.minor, c.patch + 1),
        }
    };
    Ok(match op {
        "" | "=" if wild => *v >= c && *v < upper(parts.saturating_sub(1).min(2)),
        "" | "=" => cmp.is_eq(),
        "!=" if wild => !(*v >= c && *v < upper(parts.saturating_sub(1).min(2))),
        "!=" => !cmp.is_eq(),
        ">" if wild => *v >= upper(parts.saturating_sub(1).min(2)),
        ">" => cmp.is_gt(),
        "<" => cmp.is_lt(),
        ">=" | "=>" => cmp.is_ge(),
        "<=" | "=<" if wild => *v < upper(parts.saturating_sub(1).min(2)),
        "<=" | "=<" => cmp.is_le(),
        "~" | "~>" => *v >= c && *v < upper(if parts <= 1 { 0 } else { 1 }),
        "^" => {
            let bump = if c.major > 0 || parts <= 1 {
                0
            } else if c.minor > 0 || parts == 2 {
                1
            } else {
                2
            };
            *v >= c && *v < upper(bump)
        }
        other => return Err(format!("unknown constraint operator {other:?}")),
    })
}

/// Helm's `IsCompatibleRange`: whether `version` parses and satisfies `constraint` (a
/// constraint that does not parse, an empty one included, allows nothing).
pub fn compatible(constraint: &str, version: &str) -> bool {
    parse_version(version).is_some_and(|v| matches(constraint, &v).unwrap_or(false))
}

/// Masterminds' refusal of a constraint.
fn improper(text: &str) -> String {
    format!(
        "improper constraint: {}",
        crate::render::value::go_quote(text)
    )
}

fn cmp_no_build(a: &Version, b: &Version) -> std::cmp::Ordering {
    let strip = |v: &Version| Version {
        build: semver::BuildMetadata::EMPTY,
        ..v.clone()
    };
    strip(a).cmp(&strip(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(c: &str, v: &str) -> bool {
        parse_version(v)
            .map(|v| matches(c, &v).unwrap_or(false))
            .unwrap_or(false)
    }

    #[test]
    fn helm_style_constraints() {
        assert!(check(">=1.19-0", "v1.37.0"));
        assert!(check(">= 1.19.0-0, < 2.0.0", "1.30.2"));
        assert!(!check("<1.19-0", "v1.37.0"));
        assert!(check("^1.2", "1.9.0"));
        assert!(!check("^1.2", "2.0.0"));
        assert!(check("~1.2.3", "1.2.9"));
        assert!(!check("~1.2.3", "1.3.0"));
        assert!(check("1.2.x", "1.2.7"));
        assert!(check("<1.0 || >=3", "3.1.0"));
        assert!(check("1.0 - 2.0", "1.5.0"));
        assert!(!check(">=1.0", "1.5.0-rc.1"));
        assert!(check(">=1.0-0", "1.5.0-rc.1"));
    }
}
