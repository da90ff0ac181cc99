//! Impersonation (`Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid`,
//! `Impersonate-Extra-<key>`), authorised as kube-apiserver 1.36 does with constrained
//! impersonation on (its default):
//!
//! 1. *constrained*: the caller needs `impersonate-on:<mode>:<verb>` on what the request does
//!    (its own resource, namespace and name, or path), then `impersonate:<mode>` on each
//!    impersonated attribute in the `authentication.k8s.io` group (`users`, `serviceaccounts`
//!    in their namespace, `groups`, `userextras/<key>`, `uids`). The mode is `serviceaccount`
//!    for a ServiceAccount user (`system:serviceaccount:<ns>:<name>`), `arbitrary-node` for a
//!    node (`system:node:<name>`, resource `nodes`), `user-info` otherwise;
//! 2. *legacy*, when the constrained checks fail: the verb `impersonate` on each attribute
//!    (`users`, `serviceaccounts`, `groups` in the core group; `userextras/<key>` and `uids` in
//!    `authentication.k8s.io`).
//!
//! When both fail the request is refused with the constrained check's refusal.
//! (kube-apiserver remembers which way a caller last succeeded and tries that way first, which
//! can make it word a later refusal by the legacy check instead; the dev cluster always words
//! the constrained one.)
//!
//! The impersonated user: the name (a ServiceAccount gets its two groups unless groups are
//! given), the groups given, `system:authenticated` unless `system:authenticated` or
//! `system:unauthenticated` is among them (`system:unauthenticated` for `system:anonymous`),
//! the uid and the extras.

use std::collections::BTreeMap;

use http::HeaderMap;

use super::attributes::Attributes;
use super::rbac::{Rbac, go_quote};
use super::{ANONYMOUS, AUTHENTICATED, UNAUTHENTICATED, UserInfo};
use crate::status::ApiError;

pub const USER: &str = "impersonate-user";
pub const GROUP: &str = "impersonate-group";
pub const UID: &str = "impersonate-uid";
pub const EXTRA_PREFIX: &str = "impersonate-extra-";
const AUTHN_GROUP: &str = "authentication.k8s.io";

/// One impersonated attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wanted {
    User(String),
    ServiceAccount { namespace: String, name: String },
    Group(String),
    Extra { key: String, value: String },
    Uid(String),
}

/// Whether the request carries impersonation headers.
pub fn requested(headers: &HeaderMap) -> bool {
    headers.keys().any(|k| {
        let k = k.as_str();
        k == USER || k == GROUP || k == UID || k.starts_with(EXTRA_PREFIX)
    })
}

fn header_values<'a>(headers: &'a HeaderMap, name: &str) -> Vec<&'a str> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect()
}

/// Decodes `%XX` escapes in an extra's key (keys may hold characters headers cannot).
fn unescape(key: &str) -> String {
    let hex = |b: u8| (b as char).to_digit(16);
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 3 <= bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Go's `%#v` of a string list, as kube-apiserver prints the impersonated user it refuses.
fn go_slice(list: &[String]) -> String {
    if list.is_empty() {
        return "[]string(nil)".into();
    }
    let items: Vec<String> = list.iter().map(|s| go_quote(s)).collect();
    format!("[]string{{{}}}", items.join(", "))
}

/// The impersonated attributes, in the order kube-apiserver checks them: user, groups, extras,
/// uid.
fn wanted(headers: &HeaderMap) -> Result<(Vec<Wanted>, bool), ApiError> {
    let user = header_values(headers, USER).first().copied().unwrap_or("");
    let groups: Vec<String> = header_values(headers, GROUP)
        .into_iter()
        .map(String::from)
        .collect();
    let uid = header_values(headers, UID).first().copied().unwrap_or("");
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in headers.keys() {
        if let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) {
            extra.entry(unescape(key)).or_default().extend(
                header_values(headers, name.as_str())
                    .into_iter()
                    .map(String::from),
            );
        }
    }
    if user.is_empty() {
        let extra_text = if extra.is_empty() {
            "map[string][]string(nil)".to_string()
        } else {
            let entries: Vec<String> = extra
                .iter()
                .map(|(k, v)| format!("{}:{}", go_quote(k), go_slice(v)))
                .collect();
            format!("map[string][]string{{{}}}", entries.join(", "))
        };
        return Err(ApiError::bad_request(format!(
            "requested &user.DefaultInfo{{Name:\"\", UID:{}, Groups:{}, Extra:{extra_text}}} without impersonating a user name",
            go_quote(uid),
            go_slice(&groups)
        )));
    }
    let mut out = Vec::new();
    match super::split_service_account(user) {
        Some((namespace, name)) => out.push(Wanted::ServiceAccount {
            namespace: namespace.into(),
            name: name.into(),
        }),
        None => out.push(Wanted::User(user.into())),
    }
    let groups_given = !groups.is_empty();
    out.extend(groups.into_iter().map(Wanted::Group));
    for (key, values) in extra {
        out.extend(values.into_iter().map(|value| Wanted::Extra {
            key: key.clone(),
            value,
        }));
    }
    if !uid.is_empty() {
        out.push(Wanted::Uid(uid.into()));
    }
    Ok((out, groups_given))
}

fn identity_check(w: &Wanted, verb_prefix: Option<&str>) -> Attributes {
    // verb_prefix: Some(constrained identity verb for users) or None for legacy.
    let legacy = verb_prefix.is_none();
    let (verb, group, namespace, resource, subresource, name) = match w {
        Wanted::User(n) => match (n.strip_prefix("system:node:"), verb_prefix) {
            (Some(node), Some(_)) => (
                "impersonate:arbitrary-node".to_string(),
                AUTHN_GROUP,
                "",
                "nodes",
                "",
                node.to_string(),
            ),
            _ => (
                verb_prefix.unwrap_or("impersonate").to_string(),
                if legacy { "" } else { AUTHN_GROUP },
                "",
                "users",
                "",
                n.clone(),
            ),
        },
        Wanted::ServiceAccount { namespace, name } => (
            if legacy {
                "impersonate".into()
            } else {
                "impersonate:serviceaccount".into()
            },
            if legacy { "" } else { AUTHN_GROUP },
            namespace.as_str(),
            "serviceaccounts",
            "",
            name.clone(),
        ),
        Wanted::Group(g) => (
            verb_prefix.unwrap_or("impersonate").to_string(),
            if legacy { "" } else { AUTHN_GROUP },
            "",
            "groups",
            "",
            g.clone(),
        ),
        Wanted::Extra { key, value } => (
            verb_prefix.unwrap_or("impersonate").to_string(),
            AUTHN_GROUP,
            "",
            "userextras",
            key.as_str(),
            value.clone(),
        ),
        Wanted::Uid(u) => (
            verb_prefix.unwrap_or("impersonate").to_string(),
            AUTHN_GROUP,
            "",
            "uids",
            "",
            u.clone(),
        ),
    };
    Attributes {
        verb,
        resource_request: true,
        api_group: group.into(),
        api_version: "v1".into(),
        namespace: namespace.into(),
        resource: resource.into(),
        subresource: subresource.into(),
        name,
        ..Default::default()
    }
}

/// The mode of a constrained impersonation (the first attribute is always the user).
fn mode(first: &Wanted) -> &'static str {
    match first {
        Wanted::ServiceAccount { .. } => "serviceaccount",
        Wanted::User(n) if n.starts_with("system:node:") => "arbitrary-node",
        _ => "user-info",
    }
}

/// The user a request acts as: `None` when it impersonates no one, the impersonated user when
/// the caller may, a refusal otherwise.
pub fn impersonate(
    rbac: &Rbac,
    caller: &UserInfo,
    request: &Attributes,
    headers: &HeaderMap,
) -> Result<Option<UserInfo>, ApiError> {
    if !requested(headers) {
        return Ok(None);
    }
    let (wanted, groups_given) = wanted(headers)?;
    let refusal = |a: &Attributes, reason: &str| super::forbidden(caller, a, reason);
    let mode = mode(&wanted[0]);
    // Constrained: the action first, then every attribute.
    let mut action = request.clone();
    action.verb = format!("impersonate-on:{mode}:{}", request.verb);
    let decision = rbac.authorize(caller, &action);
    let constrained = if decision.allowed {
        wanted.iter().find_map(|w| {
            let check = identity_check(w, Some("impersonate:user-info"));
            let d = rbac.authorize(caller, &check);
            (!d.allowed).then(|| refusal(&check, &d.reason))
        })
    } else {
        Some(refusal(&action, &decision.reason))
    };
    if let Some(constrained_refusal) = constrained {
        let legacy_ok = wanted
            .iter()
            .all(|w| rbac.authorize(caller, &identity_check(w, None)).allowed);
        if !legacy_ok {
            return Err(constrained_refusal);
        }
    }
    Ok(Some(build_user(&wanted, groups_given)))
}

fn build_user(wanted: &[Wanted], groups_given: bool) -> UserInfo {
    let mut user = UserInfo::default();
    for w in wanted {
        match w {
            Wanted::User(n) => user.name = n.clone(),
            Wanted::ServiceAccount { namespace, name } => {
                user.name = super::service_account_username(namespace, name);
                if !groups_given {
                    user.groups = super::service_account_groups(namespace);
                }
            }
            Wanted::Group(g) => user.groups.push(g.clone()),
            Wanted::Extra { key, value } => user
                .extra
                .entry(key.clone())
                .or_default()
                .push(value.clone()),
            Wanted::Uid(u) => user.uid = u.clone(),
        }
    }
    if user.name == ANONYMOUS {
        if !user.groups.iter().any(|g| g == UNAUTHENTICATED) {
            user.groups.push(UNAUTHENTICATED.into());
        }
    } else if !user
        .groups
        .iter()
        .any(|g| g == AUTHENTICATED || g == UNAUTHENTICATED)
    {
        user.groups.push(AUTHENTICATED.into());
    }
    user
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn the_impersonated_user_gets_the_groups_kube_apiserver_gives() {
        let (w, given) = wanted(&headers(&[
            ("Impersonate-User", "bob"),
            ("Impersonate-Group", "g1"),
            ("Impersonate-Group", "g2"),
            ("Impersonate-Extra-Foo%2fbar", "x"),
            ("Impersonate-Uid", "u-1"),
        ]))
        .unwrap();
        let u = build_user(&w, given);
        assert_eq!(u.name, "bob");
        assert_eq!(u.uid, "u-1");
        assert_eq!(u.groups, vec!["g1", "g2", "system:authenticated"]);
        assert_eq!(u.extra["foo/bar"], vec!["x"]);
        let (w, given) = wanted(&headers(&[(
            "Impersonate-User",
            "system:serviceaccount:ns:sa",
        )]))
        .unwrap();
        assert_eq!(
            build_user(&w, given).groups,
            vec![
                "system:serviceaccounts",
                "system:serviceaccounts:ns",
                "system:authenticated"
            ]
        );
        let (w, given) = wanted(&headers(&[("Impersonate-User", "system:anonymous")])).unwrap();
        assert_eq!(build_user(&w, given).groups, vec!["system:unauthenticated"]);
    }

    #[test]
    fn groups_without_a_user_are_a_bad_request() {
        let e = wanted(&headers(&[("Impersonate-Group", "g1")])).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "requested &user.DefaultInfo{Name:\"\", UID:\"\", Groups:[]string{\"g1\"}, Extra:map[string][]string(nil)} without impersonating a user name"
        );
    }
}
