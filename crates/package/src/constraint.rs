//! Version constraints in the syntax package authors already write for Helm and Deckhouse
//! (`>=1.28`, `>= 1.2, < 2`, `v1.2.3`, `1.2 - 1.4`, `^1.2 || ~2.0`, `!=1.3.0`, `1.2.x`).
//!
//! The `semver` crate parses Cargo's syntax, which differs in ways that silently change meaning:
//! a bare `1.2` is a caret requirement in Cargo but an exact (wildcard) match in Helm, Cargo has no
//! `||`, no hyphen ranges, no `!=` and rejects a `v` prefix. This module rewrites each Helm-style
//! term into Cargo syntax and keeps the pieces Cargo cannot express (`||`, `!=`) itself.
//! Prerelease versions follow Cargo's rule: they only match an alternative that names a
//! prerelease of the same `major.minor.patch`.

use std::fmt;
use std::str::FromStr;

use semver::{Version, VersionReq};

/// A parse failure, naming the constraint and the offending term.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid version constraint {constraint:?}: {message}")]
pub struct ConstraintError {
    pub constraint: String,
    pub message: String,
}

/// A parsed constraint: alternatives separated by `||`, each a conjunction of comparators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionConstraint {
    source: String,
    alternatives: Vec<Alternative>,
}

/// One `||` branch. All comparators Cargo understands are kept in one `VersionReq` so its
/// prerelease rule sees the whole branch; `!=` terms are checked separately.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Alternative {
    required: VersionReq,
    excluded: Vec<VersionReq>,
}

impl VersionConstraint {
    /// Parses a Helm-style constraint; see the module documentation for the accepted syntax.
    pub fn parse(text: &str) -> Result<Self, ConstraintError> {
        let fail = |message: String| ConstraintError {
            constraint: text.to_owned(),
            message,
        };
        if text.trim().is_empty() {
            return Err(fail("constraint is empty".to_owned()));
        }
        let alternatives = text
            .split("||")
            .map(|branch| parse_alternative(branch).map_err(&fail))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            source: text.trim().to_owned(),
            alternatives,
        })
    }

    /// Whether `version` satisfies at least one alternative.
    pub fn matches(&self, version: &Version) -> bool {
        self.alternatives.iter().any(|alt| {
            alt.required.matches(version) && !alt.excluded.iter().any(|req| req.matches(version))
        })
    }

    /// The constraint as written (trimmed).
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl FromStr for VersionConstraint {
    type Err = ConstraintError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl fmt::Display for VersionConstraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Parses a version written the way packages do: an optional `v` prefix, then semver.
pub fn parse_version(text: &str) -> Result<Version, semver::Error> {
    let trimmed = text.trim();
    Version::parse(trimmed.strip_prefix('v').unwrap_or(trimmed))
}

const OPERATORS: [&str; 9] = [">=", "<=", "!=", "~>", ">", "<", "=", "~", "^"];

fn parse_alternative(branch: &str) -> Result<Alternative, String> {
    let tokens = join_operators(branch);
    if tokens.is_empty() {
        return Err("empty alternative around `||`".to_owned());
    }
    let mut required = Vec::new();
    let mut excluded = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens.get(i + 1).map(String::as_str) == Some("-") {
            let upper = tokens
                .get(i + 2)
                .ok_or("hyphen range without an upper bound")?;
            required.push(format!(">={}", strip_v(&tokens[i])));
            required.push(format!("<={}", strip_v(upper)));
            i += 3;
            continue;
        }
        let (op, version) = split_operator(&tokens[i]);
        let version = strip_v(version);
        if version.is_empty() {
            return Err(format!("operator `{op}` without a version"));
        }
        match op {
            "!=" => excluded.push(to_req(&format!("={version}"))?),
            "" | "=" if is_wildcard(version) => required.push("*".to_owned()),
            // Helm treats a bare version as `=`; Cargo would read it as `^`.
            "" => required.push(format!("={version}")),
            "~>" => required.push(format!("~{version}")),
            _ => required.push(format!("{op}{version}")),
        }
        i += 1;
    }
    let required = if required.is_empty() {
        VersionReq::STAR
    } else {
        to_req(&required.join(", "))?
    };
    Ok(Alternative { required, excluded })
}

/// Splits on whitespace and commas, then glues a lone operator (`>= 1.2`) to its version.
fn join_operators(branch: &str) -> Vec<String> {
    let mut tokens: Vec<String> = Vec::new();
    let mut pending_op: Option<String> = None;
    for raw in branch
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|t| !t.is_empty())
    {
        if let Some(op) = pending_op.take() {
            tokens.push(format!("{op}{raw}"));
        } else if OPERATORS.contains(&raw) {
            pending_op = Some(raw.to_owned());
        } else {
            tokens.push(raw.to_owned());
        }
    }
    if let Some(op) = pending_op {
        tokens.push(op);
    }
    tokens
}

fn split_operator(token: &str) -> (&str, &str) {
    OPERATORS
        .iter()
        .find_map(|op| token.strip_prefix(op).map(|rest| (*op, rest)))
        .unwrap_or(("", token))
}

fn strip_v(version: &str) -> &str {
    version.strip_prefix(['v', 'V']).unwrap_or(version)
}

fn is_wildcard(version: &str) -> bool {
    matches!(version, "*" | "x" | "X")
}

fn to_req(text: &str) -> Result<VersionReq, String> {
    VersionReq::parse(text).map_err(|e| format!("`{text}`: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(constraint: &str, version: &str) -> bool {
        let c = VersionConstraint::parse(constraint).expect("constraint parses");
        c.matches(&parse_version(version).expect("version parses"))
    }

    #[test]
    fn bare_version_is_exact_not_caret() {
        assert!(ok("1.2.3", "1.2.3"));
        assert!(!ok("1.2.3", "1.2.4"));
        assert!(ok("1.2", "1.2.9"));
        assert!(!ok("1.2", "1.3.0"));
    }

    #[test]
    fn v_prefix_and_spaced_operators() {
        assert!(ok(">= v1.28", "1.30.1"));
        assert!(!ok(">= v1.28", "1.27.9"));
        assert!(ok(">=1.2.0, <2", "1.9.0"));
        assert!(ok(">=1.2.0 <2", "1.9.0"));
        assert!(!ok(">=1.2.0 <2", "2.0.0"));
    }

    #[test]
    fn or_alternatives() {
        assert!(ok("^1.2 || ~3.1", "1.5.0"));
        assert!(ok("^1.2 || ~3.1", "3.1.7"));
        assert!(!ok("^1.2 || ~3.1", "3.2.0"));
        assert!(!ok("^1.2 || ~3.1", "2.0.0"));
    }

    #[test]
    fn hyphen_range_is_inclusive() {
        assert!(ok("1.2 - 1.4.5", "1.2.0"));
        assert!(ok("1.2 - 1.4.5", "1.4.5"));
        assert!(!ok("1.2 - 1.4.5", "1.4.6"));
        assert!(!ok("1.2 - 1.4.5", "1.1.9"));
    }

    #[test]
    fn not_equal_and_wildcards() {
        assert!(ok(">=1.0 != 1.3.0", "1.3.1"));
        assert!(!ok(">=1.0 != 1.3.0", "1.3.0"));
        assert!(ok("*", "0.0.1"));
        assert!(ok("1.x", "1.9.9"));
        assert!(!ok("1.x", "2.0.0"));
    }

    #[test]
    fn prereleases_only_match_when_named() {
        assert!(!ok(">=1.0.0", "1.5.0-rc.1"));
        assert!(ok(">=1.5.0-rc.0 <2", "1.5.0-rc.1"));
    }

    #[test]
    fn rejects_malformed_constraints() {
        for bad in ["", "   ", ">=", "1.2 -", "||", ">=banana", "1.2 || "] {
            let err = VersionConstraint::parse(bad).expect_err(bad);
            assert_eq!(err.constraint, bad, "error names the constraint");
        }
    }
}
