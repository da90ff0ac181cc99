//! What a package may touch, as lifecycle knows it. Release and hookevent ask here (lifecycle's
//! `GetSpec`) instead of trusting their caller, a worker, to say whether a package is an App and
//! in which namespace: a worker's certificate must not be enough to widen an App's reach.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use berth_proto::lifecycle::{GetSpecRequest, Rbac};
use berth_proto::v1::{PackageKind, PackageRef};
use berth_runtime::Tls;

use crate::{ConnectError, Lifecycle};

/// Packages remembered. A key's answer never changes (lifecycle makes the key from the kind,
/// name and namespace), so past this the cache simply starts over: forgetting costs one more
/// `GetSpec` per package.
const MAX_CACHED: usize = 4096;

/// A package's reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PackageScope {
    /// A module: cluster scope.
    Module { name: String },
    /// An app: only namespaced objects in `namespace`; its release is `name` there.
    App { name: String, namespace: String },
}

/// The namespace of Modules' releases and ServiceAccounts (lifecycle gives every Module it);
/// Apps may not live there (docs/decisions/principals.md).
pub const SYSTEM_NAMESPACE: &str = "berth-system";

/// A package instance's ServiceAccount: its Kubernetes identity
/// (docs/decisions/package-identity.md).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ServiceAccountRef {
    pub namespace: String,
    pub name: String,
}

impl ServiceAccountRef {
    /// The user name the API server gives the ServiceAccount's requests (and impersonation).
    pub fn username(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

impl std::fmt::Display for ServiceAccountRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl PackageScope {
    /// The principal of a release berth made, by where it lives: Modules' releases are in
    /// [`SYSTEM_NAMESPACE`] (where Apps may not be), an App's release is named after the app in
    /// its namespace. The drift repairer and the operator's rollback, which start from a
    /// release, act as the package through this.
    pub fn of_release(name: &str, namespace: &str) -> PackageScope {
        if namespace == SYSTEM_NAMESPACE {
            PackageScope::Module {
                name: name.to_owned(),
            }
        } else {
            PackageScope::App {
                name: name.to_owned(),
                namespace: namespace.to_owned(),
            }
        }
    }

    /// The release of the package (name, namespace), as [`PackageScope::of_release`] reads it
    /// back.
    pub fn release(&self) -> (String, String) {
        match self {
            PackageScope::Module { name } => (name.clone(), SYSTEM_NAMESPACE.to_owned()),
            PackageScope::App { name, namespace } => (name.clone(), namespace.clone()),
        }
    }

    /// The scope a package key names: `<namespace>.<name>` for an app, `<name>` for a module
    /// (names and namespaces are DNS labels, so only an app's key holds a dot).
    pub fn of_key(key: &str) -> PackageScope {
        match key.split_once('.') {
            Some((namespace, name)) => PackageScope::App {
                name: name.to_owned(),
                namespace: namespace.to_owned(),
            },
            None => PackageScope::Module {
                name: key.to_owned(),
            },
        }
    }

    /// The package's ServiceAccount: `berth-app-<name>` in an app's namespace,
    /// `berth-module-<name>` in [`SYSTEM_NAMESPACE`] for a module.
    pub fn service_account(&self) -> ServiceAccountRef {
        match self {
            PackageScope::Module { name } => ServiceAccountRef {
                namespace: SYSTEM_NAMESPACE.to_owned(),
                name: format!("berth-module-{name}"),
            },
            PackageScope::App { name, namespace } => ServiceAccountRef {
                namespace: namespace.clone(),
                name: format!("berth-app-{name}"),
            },
        }
    }

    /// The namespace an app is confined to; `None` for a module.
    pub fn app_namespace(&self) -> Option<&str> {
        match self {
            PackageScope::Module { .. } => None,
            PackageScope::App { namespace, .. } => Some(namespace),
        }
    }

    /// The scope lifecycle's `r` gives the package `key`, checked against the key (an app's key
    /// is `<namespace>.<name>`, a module's its name), so a confused answer confines nothing
    /// wrongly.
    pub fn of_ref(key: &str, r: &PackageRef) -> Result<PackageScope, ScopeError> {
        let inconsistent = |reason: String| ScopeError::Inconsistent {
            key: key.to_owned(),
            reason,
        };
        match PackageKind::try_from(r.kind) {
            Ok(PackageKind::Module) if key == r.name => Ok(PackageScope::Module {
                name: r.name.clone(),
            }),
            Ok(PackageKind::App)
                if !r.namespace.is_empty() && key == format!("{}.{}", r.namespace, r.name) =>
            {
                Ok(PackageScope::App {
                    name: r.name.clone(),
                    namespace: r.namespace.clone(),
                })
            }
            Ok(PackageKind::Module | PackageKind::App) => Err(inconsistent(format!(
                "its ref names {} {} in namespace {:?}",
                if r.kind == PackageKind::Module as i32 {
                    "module"
                } else {
                    "app"
                },
                r.name,
                r.namespace
            ))),
            _ => Err(inconsistent(format!("unknown package kind {}", r.kind))),
        }
    }
}

/// What lifecycle says about a package now (not cached): its scope, whether it is still
/// present (not being removed), and its loaded `rbac:` (`None`: not loaded).
#[derive(Clone, Debug)]
pub struct PackageFacts {
    pub scope: PackageScope,
    pub present: bool,
    pub rbac: Option<Rbac>,
    /// Suspended: release leaves its drift alone.
    pub suspended: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ScopeError {
    #[error("package {0} is unknown to lifecycle")]
    Unknown(String),
    #[error("lifecycle's answer for package {key} does not fit it: {reason}")]
    Inconsistent { key: String, reason: String },
    #[error("asking lifecycle about package {key}: {}", status.message())]
    Lookup { key: String, status: tonic::Status },
}

impl ScopeError {
    /// The status a service answers its own caller with: an unknown package is the caller's
    /// mistake, an unreachable lifecycle is retryable.
    pub fn to_status(&self) -> tonic::Status {
        match self {
            ScopeError::Unknown(_) => tonic::Status::failed_precondition(self.to_string()),
            ScopeError::Inconsistent { .. } => tonic::Status::internal(self.to_string()),
            ScopeError::Lookup { status, .. } => match status.code() {
                tonic::Code::PermissionDenied | tonic::Code::Unauthenticated => {
                    tonic::Status::internal(self.to_string())
                }
                _ => tonic::Status::unavailable(self.to_string()),
            },
        }
    }
}

/// Asks lifecycle what a package is, and remembers the answer (bounded, see [`MAX_CACHED`]).
#[derive(Clone)]
pub struct PackageScopes {
    client: Lifecycle,
    // A std mutex: held only to read or insert, never across an await.
    cache: Arc<Mutex<HashMap<String, PackageScope>>>,
}

impl PackageScopes {
    /// Lifecycle at `endpoint`, reached lazily (with `tls`: it must present lifecycle's
    /// certificate, and this process's role must be allowed `GetSpec`).
    pub fn connect_lazy(endpoint: &str, tls: Option<&Tls>) -> Result<PackageScopes, ConnectError> {
        Ok(PackageScopes {
            client: crate::lifecycle(endpoint, tls)?,
            cache: Arc::default(),
        })
    }

    /// The scope of the package `key`, as lifecycle has it.
    pub async fn get(&self, key: &str) -> Result<PackageScope, ScopeError> {
        if let Some(hit) = self.cache.lock().ok().and_then(|c| c.get(key).cloned()) {
            return Ok(hit);
        }
        Ok(self.facts(key).await?.scope)
    }

    /// What lifecycle says about the package `key` now: asked every time (its rights change
    /// with the loaded version, its presence with a Remove); the scope is remembered.
    pub async fn facts(&self, key: &str) -> Result<PackageFacts, ScopeError> {
        let spec = self
            .client
            .clone()
            .get_spec(GetSpecRequest {
                key: key.to_owned(),
            })
            .await
            .map_err(|status| match status.code() {
                tonic::Code::NotFound => ScopeError::Unknown(key.to_owned()),
                _ => ScopeError::Lookup {
                    key: key.to_owned(),
                    status,
                },
            })?
            .into_inner();
        if spec.key != key {
            return Err(ScopeError::Inconsistent {
                key: key.to_owned(),
                reason: format!("lifecycle answered for {}", spec.key),
            });
        }
        let scope = PackageScope::of_ref(key, &spec.r#ref.unwrap_or_default())?;
        if let Ok(mut cache) = self.cache.lock() {
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
            cache.insert(key.to_owned(), scope.clone());
        }
        Ok(PackageFacts {
            scope,
            present: spec.present,
            rbac: spec.rbac,
            suspended: spec.suspended,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(kind: PackageKind, name: &str, namespace: &str) -> PackageRef {
        PackageRef {
            kind: kind as i32,
            name: name.into(),
            namespace: namespace.into(),
        }
    }

    #[test]
    fn principals_are_named_after_the_package() {
        let app = PackageScope::of_key("team.web");
        assert_eq!(
            app,
            PackageScope::App {
                name: "web".into(),
                namespace: "team".into()
            }
        );
        assert_eq!(PackageScope::of_release("web", "team"), app);
        let sa = app.service_account();
        assert_eq!(sa.to_string(), "team/berth-app-web");
        assert_eq!(sa.username(), "system:serviceaccount:team:berth-app-web");
        let module = PackageScope::of_key("dns");
        assert_eq!(PackageScope::of_release("dns", SYSTEM_NAMESPACE), module);
        assert_eq!(
            module.service_account().username(),
            "system:serviceaccount:berth-system:berth-module-dns"
        );
    }

    #[test]
    fn the_scope_must_fit_the_key() {
        assert_eq!(
            PackageScope::of_ref("team.web", &r(PackageKind::App, "web", "team")).unwrap(),
            PackageScope::App {
                name: "web".into(),
                namespace: "team".into()
            }
        );
        assert_eq!(
            PackageScope::of_ref("dns", &r(PackageKind::Module, "dns", "berth-system")).unwrap(),
            PackageScope::Module { name: "dns".into() }
        );
        // An app's ref cannot be read as a module's, nor for another key.
        assert!(PackageScope::of_ref("web", &r(PackageKind::App, "web", "")).is_err());
        assert!(PackageScope::of_ref("team.web", &r(PackageKind::Module, "web", "team")).is_err());
        assert!(PackageScope::of_ref("other.web", &r(PackageKind::App, "web", "team")).is_err());
        assert!(PackageScope::of_ref("web", &r(PackageKind::Unspecified, "web", "team")).is_err());
    }
}
