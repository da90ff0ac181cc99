//! Package identity: kind, name and namespace, and the key they make.

pub use berth_names::{Generation, PackageKey};

/// The system namespace modules run in.
pub const SYSTEM_NAMESPACE: &str = "berth-system";

/// The name of the package that holds the global values and the global hooks: the module
/// `global` (its package is of type Global, which the worker checks at Load).
pub const GLOBAL: &str = berth_package::GLOBAL_NAME;

/// The `global` package's key.
pub fn global_key() -> PackageKey {
    PackageKey::from_issued(GLOBAL.to_owned())
}

/// Apps are namespaced and many-instanced; modules are cluster-level singletons.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, strum::IntoStaticStr, strum::EnumString, strum::EnumIter,
)]
pub enum Kind {
    App,
    Module,
}

impl Kind {
    /// The kind's name, as stored and shown.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A name that is not a DNS-1123 label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{field} {value:?} must be 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit"
)]
pub struct InvalidName {
    /// The request field it came in (`name`, `namespace`, `package`).
    pub field: &'static str,
    pub value: String,
}

/// The identity of a package instance. Its key is `<namespace>.<name>` for apps and `<name>` for
/// modules; the key names the package's queues and its Helm release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackageId {
    pub kind: Kind,
    pub name: String,
    pub namespace: String,
}

impl PackageId {
    /// Validates a requested identity. Names follow Kubernetes DNS-1123 label rules because they
    /// become release, queue and object names.
    pub fn new(kind: Kind, name: &str, namespace: &str) -> Result<PackageId, InvalidName> {
        check_label("name", name)?;
        let namespace = match kind {
            Kind::Module => SYSTEM_NAMESPACE.to_owned(),
            Kind::App if namespace.is_empty() => "default".to_owned(),
            Kind::App => {
                check_label("namespace", namespace)?;
                namespace.to_owned()
            }
        };
        Ok(PackageId {
            kind,
            name: name.to_owned(),
            namespace,
        })
    }

    pub fn key(&self) -> PackageKey {
        PackageKey::from_issued(match self.kind {
            Kind::App => format!("{}.{}", self.namespace, self.name),
            Kind::Module => self.name.clone(),
        })
    }

    /// Whether this is the `global` package.
    pub fn is_global(&self) -> bool {
        self.kind == Kind::Module && self.name == GLOBAL
    }
}

/// Checks a DNS-1123 label: 1–63 lowercase alphanumerics or '-', starting and ending alphanumeric.
pub fn check_label(field: &'static str, value: &str) -> Result<(), InvalidName> {
    if berth_names::is_dns_label(value) {
        Ok(())
    } else {
        Err(InvalidName {
            field,
            value: value.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_kind() {
        let app = PackageId::new(Kind::App, "hello", "").unwrap();
        assert_eq!(app.key().as_str(), "default.hello");
        let module = PackageId::new(Kind::Module, "hello", "ignored").unwrap();
        assert_eq!(module.key().as_str(), "hello");
        assert_eq!(module.namespace, SYSTEM_NAMESPACE);
        assert!(
            PackageId::new(Kind::Module, GLOBAL, "")
                .unwrap()
                .is_global()
        );
        assert!(!PackageId::new(Kind::App, GLOBAL, "").unwrap().is_global());
    }

    #[test]
    fn bad_names_are_named_in_the_error() {
        let err = PackageId::new(Kind::App, "Hello_World", "").unwrap_err();
        assert!(err.to_string().starts_with("name \"Hello_World\""), "{err}");
        let err = PackageId::new(Kind::App, "ok", "-bad").unwrap_err();
        assert_eq!(err.field, "namespace");
    }

    #[test]
    fn kinds_have_their_names() {
        assert_eq!(Kind::App.as_str(), "App");
        assert_eq!("Module".parse::<Kind>(), Ok(Kind::Module));
        assert!("module".parse::<Kind>().is_err());
    }
}
