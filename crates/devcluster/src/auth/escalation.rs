//! RBAC's escalation prevention, as kube-apiserver's RBAC storage applies it to creates and
//! updates (patches included) of Roles, ClusterRoles and their bindings:
//!
//! - a Role or ClusterRole may be written by a member of `system:masters`, by a user allowed
//!   the verb `escalate` on it, or by a user who holds every rule it grants (in its namespace,
//!   or cluster-wide for a ClusterRole); a ClusterRole with an `aggregationRule` counts as
//!   granting everything;
//! - a binding may be written by a member of `system:masters`, by a user allowed the verb `bind`
//!   on the role it refers to (checked in the binding's namespace), or by a user who holds every
//!   rule of that role; a role that does not exist is NotFound;
//! - an update that changes only what the garbage collector changes (owner references,
//!   finalizers) is not checked.
//!
//! Refusals are worded as kube-apiserver words them, listing the missing rules compacted and
//! sorted.

use serde_json::Value;

use super::UserInfo;
use super::attributes::Attributes;
use super::rbac::{self, GROUP, MASTERS, PolicyRule, Rbac, RoleKind, compact, covers, go_quote};
use crate::resources::ResourceType;
use crate::status::ApiError;
use crate::store::meta_str;

/// A binding's `roleRef` cannot change once written, for anyone (kube-apiserver's validation
/// of binding updates): 422 naming the field, as kube-apiserver answers.
pub fn role_ref_unchanged(
    rt: &ResourceType,
    old: Option<&Value>,
    new: &Value,
) -> Result<(), ApiError> {
    let Some(old) = old else { return Ok(()) };
    if rt.group != GROUP || !matches!(rt.plural.as_str(), "rolebindings" | "clusterrolebindings") {
        return Ok(());
    }
    let field = |o: &Value, f: &str| {
        o.pointer(&format!("/roleRef/{f}"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let parts = |o: &Value| (field(o, "apiGroup"), field(o, "kind"), field(o, "name"));
    let wanted = parts(new);
    if parts(old) == wanted {
        return Ok(());
    }
    let (group, kind, name) = wanted;
    Err(ApiError::invalid(
        GROUP,
        &rt.kind,
        &meta_str(new, "name"),
        format!(
            "roleRef: Invalid value: rbac.RoleRef{{APIGroup:{}, Kind:{}, Name:{}}}: \
             cannot change roleRef",
            go_quote(&group),
            go_quote(&kind),
            go_quote(&name)
        ),
    ))
}

/// Checks a write of `new` (replacing `old`, if any) of an RBAC kind by `user`.
pub fn check(
    rbac: &Rbac,
    user: &UserInfo,
    rt: &ResourceType,
    old: Option<&Value>,
    new: &Value,
) -> Result<(), ApiError> {
    if rt.group != GROUP || user.groups.iter().any(|g| g == MASTERS) {
        return Ok(());
    }
    if old.is_some_and(|old| only_gc_fields_differ(old, new)) {
        return Ok(());
    }
    let name = meta_str(new, "name");
    let namespace = meta_str(new, "namespace");
    match rt.plural.as_str() {
        "roles" | "clusterroles" => {
            let asked = Attributes {
                verb: "escalate".into(),
                resource_request: true,
                api_group: GROUP.into(),
                api_version: rt.version.clone(),
                namespace: namespace.clone(),
                resource: rt.plural.clone(),
                name: name.clone(),
                ..Default::default()
            };
            if rbac.authorize(user, &asked).allowed {
                return Ok(());
            }
            let aggregated = |o: &Value| o.get("aggregationRule").is_some_and(|a| !a.is_null());
            if rt.plural == "clusterroles" && (aggregated(new) || old.is_some_and(aggregated)) {
                return Err(ApiError::forbidden_object(
                    rt,
                    &name,
                    "must have cluster-admin privileges to use the aggregationRule",
                ));
            }
            confirm_no_escalation(rbac, user, rt, &name, &namespace, &PolicyRule::all_of(new))
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = new.get("roleRef").cloned().unwrap_or_default();
            let role_name = role_ref
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let kind = match role_ref.get("kind").and_then(Value::as_str) {
                Some("ClusterRole") => RoleKind::ClusterRole,
                Some("Role") if rt.plural == "rolebindings" => RoleKind::Role,
                _ => {
                    return Err(ApiError::invalid(
                        GROUP,
                        &rt.kind,
                        &name,
                        "roleRef.kind: Unsupported value",
                    ));
                }
            };
            let asked = Attributes {
                verb: "bind".into(),
                resource_request: true,
                api_group: role_ref
                    .get("apiGroup")
                    .and_then(Value::as_str)
                    .unwrap_or(GROUP)
                    .to_string(),
                namespace: namespace.clone(),
                resource: match kind {
                    RoleKind::Role => "roles",
                    RoleKind::ClusterRole => "clusterroles",
                }
                .into(),
                name: role_name.clone(),
                ..Default::default()
            };
            if rbac.authorize(user, &asked).allowed {
                return Ok(());
            }
            let Some(rules) = rbac.read().role(kind, &namespace, &role_name) else {
                // As kube-apiserver words it: the missing role is named as if it were a binding.
                return Err(ApiError::not_found(GROUP, &rt.plural, &role_name));
            };
            confirm_no_escalation(rbac, user, rt, &name, &namespace, &rules)
        }
        _ => Ok(()),
    }
}

/// Refuses `wanted` unless `user` holds all of it in `namespace`.
fn confirm_no_escalation(
    rbac: &Rbac,
    user: &UserInfo,
    rt: &ResourceType,
    name: &str,
    namespace: &str,
    wanted: &[PolicyRule],
) -> Result<(), ApiError> {
    let held = rbac.read().rules_for(user, namespace);
    let missing = covers(&held.rules, wanted);
    if missing.is_empty() {
        return Ok(());
    }
    let mut lines: Vec<String> = compact(missing)
        .iter()
        .map(PolicyRule::compact_string)
        .collect();
    lines.sort();
    lines.dedup();
    let mut message = format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.name),
        rbac::go_quoted_list(&user.groups),
        lines.join("\n")
    );
    if let Some(errors) = held.error_text() {
        message.push_str(&format!("; resolution errors: [{errors}]"));
    }
    Err(ApiError::forbidden_object(rt, name, &message))
}

/// Whether `new` differs from `old` only in owner references and finalizers (and the fields
/// the server maintains).
fn only_gc_fields_differ(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for f in [
                "ownerReferences",
                "finalizers",
                "managedFields",
                "resourceVersion",
                "generation",
            ] {
                meta.remove(f);
            }
        }
        v
    };
    strip(old) == strip(new)
}
