//! Authentication and authorization as kube-apiserver does them (with `--authorization-mode=RBAC`
//! and anonymous requests allowed, its defaults):
//!
//! - **who**: a bearer token is the dev cluster's admin token (user `admin` in
//!   `system:masters`, generated at the first start and kept in the 0600 `auth.json` of the
//!   data directory, written into the kubeconfig) or a ServiceAccount token minted by the
//!   TokenRequest API ([`token`]); a wrong token is refused with 401; no token at all is the
//!   user `system:anonymous` in `system:unauthenticated`, whom the bootstrap policy lets read
//!   only `/healthz`, `/livez`, `/readyz`, `/version` and `/.well-known/*`;
//! - **as whom**: `Impersonate-*` headers switch to another identity when the caller may
//!   impersonate it ([`impersonation`]);
//! - **what**: members of `system:masters` may do anything; everyone else what the RBAC objects
//!   in the store grant ([`rbac`], starting from the bootstrap policy of [`bootstrap`]); writes
//!   of Roles and bindings are further checked against escalation ([`escalation`]).

pub mod attributes;
pub mod bootstrap;
pub mod escalation;
pub mod impersonation;
pub mod rbac;
pub mod token;

use std::collections::BTreeMap;
use std::path::Path;

use rand::RngCore as _;
use serde_json::{Value, json};

use crate::store::{Store, meta_str};

pub const AUTHENTICATED: &str = "system:authenticated";
pub const UNAUTHENTICATED: &str = "system:unauthenticated";
pub const ANONYMOUS: &str = "system:anonymous";
pub const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";
const SA_PREFIX: &str = "system:serviceaccount:";

/// The admin user of the dev cluster's kubeconfig.
pub const ADMIN: &str = "admin";

/// `system:serviceaccount:<namespace>:<name>`.
pub fn service_account_username(namespace: &str, name: &str) -> String {
    format!("{SA_PREFIX}{namespace}:{name}")
}

/// The namespace and name of a ServiceAccount user name.
pub fn split_service_account(username: &str) -> Option<(&str, &str)> {
    let (namespace, name) = username.strip_prefix(SA_PREFIX)?.split_once(':')?;
    (!namespace.is_empty() && !name.is_empty() && !name.contains(':')).then_some((namespace, name))
}

/// The groups every ServiceAccount of `namespace` is in (before `system:authenticated`).
pub fn service_account_groups(namespace: &str) -> Vec<String> {
    vec![
        SERVICE_ACCOUNTS.to_string(),
        format!("{SERVICE_ACCOUNTS}:{namespace}"),
    ]
}

/// Who a request is made by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    pub fn anonymous() -> UserInfo {
        UserInfo {
            name: ANONYMOUS.into(),
            groups: vec![UNAUTHENTICATED.into()],
            ..Default::default()
        }
    }

    fn admin() -> UserInfo {
        UserInfo {
            name: ADMIN.into(),
            uid: ADMIN.into(),
            groups: vec![rbac::MASTERS.into(), AUTHENTICATED.into()],
            ..Default::default()
        }
    }

    /// `UserInfo` as the authentication API shows it (`username`, `uid`, `groups`, `extra`;
    /// empty ones left out).
    pub fn to_json(&self) -> Value {
        let mut v = json!({ "username": self.name });
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        if !self.groups.is_empty() {
            v["groups"] = json!(self.groups);
        }
        if !self.extra.is_empty() {
            v["extra"] = json!(self.extra);
        }
        v
    }
}

/// The dev cluster's secrets: the admin token and the key ServiceAccount tokens are signed
/// with. Kept in `<data dir>/auth.json` (0600) so both survive restarts.
pub struct Credentials {
    pub admin_token: String,
    signing_key: Vec<u8>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credentials")
    }
}

const STATE_FILE: &str = "auth.json";

fn random_bytes() -> Vec<u8> {
    let mut bytes = vec![0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes
}

impl Credentials {
    /// The credentials of the data directory `dir` (created at the first start), or fresh ones
    /// for an in-memory cluster. `admin_token` replaces the admin token when given.
    pub fn load_or_create(
        dir: Option<&Path>,
        admin_token: Option<String>,
    ) -> Result<Credentials, crate::Error> {
        let path = dir.map(|d| d.join(STATE_FILE));
        let stored: Option<Value> =
            match &path {
                Some(p) => match std::fs::read(p) {
                    Ok(bytes) => Some(serde_json::from_slice(&bytes).map_err(|e| {
                        crate::Error::Credentials {
                            path: p.clone(),
                            source: std::io::Error::other(e),
                        }
                    })?),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                    Err(source) => {
                        return Err(crate::Error::Credentials {
                            path: p.clone(),
                            source,
                        });
                    }
                },
                None => None,
            };
        let field = |k: &str| {
            stored
                .as_ref()
                .and_then(|s| s.get(k))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(String::from)
        };
        let signing_key = field("signingKey")
            .and_then(|k| hex::decode(k).ok())
            .filter(|k| k.len() >= 32)
            .unwrap_or_else(random_bytes);
        let admin_token = admin_token
            .or_else(|| field("adminToken"))
            .unwrap_or_else(|| hex::encode(random_bytes()));
        let credentials = Credentials {
            admin_token,
            signing_key,
        };
        if let Some(p) = &path {
            let body = json!({
                "adminToken": credentials.admin_token,
                "signingKey": hex::encode(&credentials.signing_key),
            });
            crate::private::write_private(p, body.to_string().as_bytes()).map_err(|source| {
                crate::Error::Credentials {
                    path: p.clone(),
                    source,
                }
            })?;
        }
        Ok(credentials)
    }
}

/// What a request's credentials come to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authenticated {
    /// No bearer token: `system:anonymous`.
    Anonymous,
    User(UserInfo),
    /// A bearer token that is not valid (the reason is logged, never sent).
    Invalid(String),
}

/// Checks bearer tokens.
#[derive(Debug, Clone)]
pub struct Authenticator {
    admin_token: String,
    signer: token::Signer,
}

impl Authenticator {
    pub fn new(credentials: &Credentials) -> Authenticator {
        Authenticator {
            admin_token: credentials.admin_token.clone(),
            signer: token::Signer::new(credentials.signing_key.clone()),
        }
    }

    pub fn signer(&self) -> &token::Signer {
        &self.signer
    }

    /// Authenticates an `Authorization` header value as kube-apiserver's bearer-token
    /// authenticator does: `Bearer <token>` (scheme case-insensitive); any other header, or
    /// none, is anonymous.
    pub fn authenticate(&self, header: Option<&str>, store: &Store) -> Authenticated {
        let Some(token) = header.map(str::trim).and_then(bearer) else {
            return Authenticated::Anonymous;
        };
        self.authenticate_token(token, &[token::ISSUER], store)
    }

    /// Authenticates a bearer token meant for one of `audiences` (the admin token is meant for
    /// this server only).
    pub fn authenticate_token(
        &self,
        token: &str,
        audiences: &[&str],
        store: &Store,
    ) -> Authenticated {
        if constant_time_eq(token.as_bytes(), self.admin_token.as_bytes()) {
            return Authenticated::User(UserInfo::admin());
        }
        let now = chrono::Utc::now().timestamp();
        let claims = match self.signer.verify_for(token, now, audiences) {
            Ok(c) => c,
            Err(e) => return Authenticated::Invalid(e.to_string()),
        };
        match live_uid(store, "serviceaccounts", &claims.namespace, &claims.name) {
            Some(uid) if uid == claims.uid => {}
            Some(_) => {
                return Authenticated::Invalid(format!(
                    "service account {}/{} was re-created: the token was for its uid {}",
                    claims.namespace, claims.name, claims.uid
                ));
            }
            None => {
                return Authenticated::Invalid(format!(
                    "service account {}/{} does not exist",
                    claims.namespace, claims.name
                ));
            }
        }
        let mut extra = BTreeMap::new();
        if let Some((kind, name, uid)) = &claims.bound {
            let resource = if kind == "Pod" { "pods" } else { "secrets" };
            if live_uid(store, resource, &claims.namespace, name).as_deref() != Some(uid) {
                return Authenticated::Invalid(format!(
                    "the {kind} {}/{name} the token is bound to is gone",
                    claims.namespace
                ));
            }
            if kind == "Pod" {
                extra.insert(
                    "authentication.kubernetes.io/pod-name".into(),
                    vec![name.clone()],
                );
                extra.insert(
                    "authentication.kubernetes.io/pod-uid".into(),
                    vec![uid.clone()],
                );
            }
        }
        extra.insert(
            "authentication.kubernetes.io/credential-id".into(),
            vec![format!("JTI={}", claims.id)],
        );
        let mut groups = service_account_groups(&claims.namespace);
        groups.push(AUTHENTICATED.into());
        Authenticated::User(UserInfo {
            name: service_account_username(&claims.namespace, &claims.name),
            uid: claims.uid,
            groups,
            extra,
        })
    }
}

/// kube-apiserver's 403 for a request `user` may not make: `<resource> "<name>" is forbidden:
/// User "<user>" cannot <verb> resource "<resource>" in API group "<group>" in the namespace
/// "<ns>"` (or `at the cluster scope`, or `cannot <verb> path "<path>"`), with RBAC's `reason`
/// (resolution errors) after a colon when there is one.
pub fn forbidden(user: &UserInfo, a: &attributes::Attributes, reason: &str) -> crate::ApiError {
    use rbac::go_quote;
    let what = if !a.resource_request {
        format!(
            "User {} cannot {} path {}",
            go_quote(&user.name),
            a.verb,
            go_quote(&a.path)
        )
    } else {
        let resource = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        let scope = if a.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {}", go_quote(&a.namespace))
        };
        format!(
            "User {} cannot {} resource {} in API group {} {scope}",
            go_quote(&user.name),
            a.verb,
            go_quote(&resource),
            go_quote(&a.api_group)
        )
    };
    let message = if reason.is_empty() {
        what
    } else {
        format!("{what}: {reason}")
    };
    crate::ApiError::forbidden_for(&a.api_group, &a.resource, &a.name, &message)
}

/// The token of `Bearer <token>` (more words after it are ignored, as kube-apiserver does).
fn bearer(header: &str) -> Option<&str> {
    let mut parts = header.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The uid of a live (not terminating) core object.
pub fn live_uid(store: &Store, resource: &str, namespace: &str, name: &str) -> Option<String> {
    let rt = store.resolve("", "v1", resource)?;
    let obj = store.get(&rt, namespace, name).ok()?;
    if obj.pointer("/metadata/deletionTimestamp").is_some() {
        return None;
    }
    Some(meta_str(&obj, "uid"))
}

/// Compares without an early exit, so response time does not reveal a token prefix.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    #[test]
    fn bearer_headers_are_read_as_kube_apiserver_reads_them() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer abc extra"), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer "), None);
        assert_eq!(bearer("Bearer"), None);
    }

    #[test]
    fn service_account_names_split_only_when_well_formed() {
        assert_eq!(
            split_service_account("system:serviceaccount:ns:sa"),
            Some(("ns", "sa"))
        );
        assert_eq!(split_service_account("system:serviceaccount:ns"), None);
        assert_eq!(split_service_account("system:serviceaccount::sa"), None);
        assert_eq!(split_service_account("bob"), None);
    }

    #[test]
    fn credentials_are_kept_private_and_across_starts() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let first = Credentials::load_or_create(Some(dir.path()), None).unwrap();
        let mode = std::fs::metadata(dir.path().join(STATE_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let again = Credentials::load_or_create(Some(dir.path()), None).unwrap();
        assert_eq!(first.admin_token, again.admin_token);
        assert_eq!(first.signing_key, again.signing_key);
        assert_eq!(first.admin_token.len(), 64);
    }
}
