//! [`Owner`]: which front door a package was made through, and so the only one that may
//! change it (docs/decisions/front-doors.md).

/// Longest resource reference kept as an owner (`Application <namespace>/<name>`: a kind,
/// a DNS label and a DNS subdomain).
pub const MAX_OWNER_LEN: usize = 512;

/// Who may change a package: the gRPC API, or one Kubernetes resource through berth's
/// controller. Set when the package is first stored and kept until Cleanup deletes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Owner {
    /// The gRPC API (`berth update`, `berth remove`).
    #[default]
    Api,
    /// A resource, named as `<Kind> <namespace>/<name>` (`Application default/web`) or
    /// `<Kind> <name>` for a cluster-scoped one (`Module cert-manager`).
    Resource(String),
}

/// Why a resource reference is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("owner {given:?}: {reason}")]
pub struct OwnerError {
    pub given: String,
    pub reason: &'static str,
}

impl Owner {
    /// The owner a resource reference names (the controller's), checked: printable, one
    /// space between kind and name, bounded.
    pub fn resource(reference: &str) -> Result<Owner, OwnerError> {
        let bad = |reason| OwnerError {
            given: reference.chars().take(64).collect(),
            reason,
        };
        if reference.is_empty() || reference.len() > MAX_OWNER_LEN {
            return Err(bad("must be 1-512 characters"));
        }
        let Some((kind, name)) = reference.split_once(' ') else {
            return Err(bad(
                "must be `<Kind> <name>` or `<Kind> <namespace>/<name>`",
            ));
        };
        if kind.is_empty()
            || !kind.chars().all(|c| c.is_ascii_alphanumeric())
            || name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '/'))
        {
            return Err(bad(
                "must be `<Kind> <name>` or `<Kind> <namespace>/<name>`",
            ));
        }
        Ok(Owner::Resource(reference.to_owned()))
    }

    /// As stored: `None` for the API.
    pub fn stored(&self) -> Option<&str> {
        match self {
            Owner::Api => None,
            Owner::Resource(r) => Some(r),
        }
    }

    /// From the store: `None` is the API.
    pub fn from_stored(stored: Option<String>) -> Owner {
        stored.map_or(Owner::Api, Owner::Resource)
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::Api => f.write_str("the gRPC API (berth update/remove)"),
            Owner::Resource(r) => write!(f, "the berth.io resource {r}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_references_are_checked_and_round_trip() {
        let owner = Owner::resource("Application default/web").unwrap();
        assert_eq!(owner.stored(), Some("Application default/web"));
        assert_eq!(Owner::from_stored(owner.stored().map(String::from)), owner);
        assert_eq!(Owner::from_stored(None), Owner::Api);
        assert!(Owner::resource("Module cert-manager").is_ok());
        for bad in [
            "",
            "Application",
            "Application  web",
            "App\nx web",
            "Application a;b",
        ] {
            assert!(Owner::resource(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            Owner::resource("Module web").unwrap().to_string(),
            "the berth.io resource Module web"
        );
    }
}
