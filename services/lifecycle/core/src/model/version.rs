//! [`VersionRequest`]: the version an Update names, parsed once.

use berth_package::VersionConstraint;

/// The version an Update asks for: one version (a tag: `1.2.3`, `latest`), or a semver
/// constraint (`~1.2`, `>=1 <2`) that an OCI repository resolves to the newest tag it allows
/// when the package is downloaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionRequest {
    Exact(String),
    Constraint(VersionConstraint),
}

impl VersionRequest {
    /// Reads a requested or stored version: a constraint when it is one and not a version.
    pub fn parse(text: &str) -> VersionRequest {
        if berth_package::parse_version(text).is_err()
            && let Ok(c) = VersionConstraint::parse(text)
        {
            return VersionRequest::Constraint(c);
        }
        VersionRequest::Exact(text.to_owned())
    }

    /// The version as it was written.
    pub fn as_str(&self) -> &str {
        match self {
            VersionRequest::Exact(v) => v,
            VersionRequest::Constraint(c) => c.as_str(),
        }
    }

    pub fn is_constraint(&self) -> bool {
        matches!(self, VersionRequest::Constraint(_))
    }
}

impl std::fmt::Display for VersionRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constraints_are_told_from_versions_once() {
        for exact in ["1.2.3", "latest", "v1.2.3-rc.1"] {
            let v = VersionRequest::parse(exact);
            assert!(!v.is_constraint(), "{exact}");
            assert_eq!(v.as_str(), exact);
        }
        for constraint in ["^1", "~1.2", ">=1 <2"] {
            let v = VersionRequest::parse(constraint);
            assert!(v.is_constraint(), "{constraint}");
            assert_eq!(v.to_string(), constraint);
        }
    }
}
