//! RBAC as kube-apiserver's RBAC authorizer evaluates it: PolicyRules and their matching, the
//! bindings that apply to a user, the rules a user holds (for access reviews and escalation
//! checks), and the coverage check that refuses granting what one does not hold.
//!
//! The Roles, ClusterRoles and bindings live in the store like every other object; the store
//! keeps this index of them current on every commit ([`RbacIndex::apply`]), so evaluating a
//! request is a few hash lookups by the user's name and groups, never a scan of the bindings.
//! A change to one RBAC object updates only its own entries: a burst of RoleBinding creates
//! (one per installed package) costs each a map insert, not a rebuild.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use serde_json::{Value, json};
use tokio::sync::watch;

use super::UserInfo;
use super::attributes::Attributes;

/// The API group of the RBAC kinds.
pub const GROUP: &str = "rbac.authorization.k8s.io";
/// The group every request of a system:masters member is allowed in, before RBAC is asked
/// (kube-apiserver's privileged-group authorizer).
pub const MASTERS: &str = "system:masters";

/// One rule of a Role or ClusterRole.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PolicyRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

impl PolicyRule {
    pub fn from_json(v: &Value) -> PolicyRule {
        PolicyRule {
            verbs: strings(v, "verbs"),
            api_groups: strings(v, "apiGroups"),
            resources: strings(v, "resources"),
            resource_names: strings(v, "resourceNames"),
            non_resource_urls: strings(v, "nonResourceURLs"),
        }
    }

    /// The rules of a Role or ClusterRole object.
    pub fn all_of(role: &Value) -> Vec<PolicyRule> {
        role.get("rules")
            .and_then(Value::as_array)
            .map(|rules| rules.iter().map(PolicyRule::from_json).collect())
            .unwrap_or_default()
    }

    /// The rule as it is stored (`verbs`, `apiGroups`, `resources`, `resourceNames`,
    /// `nonResourceURLs`, empty ones left out).
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("verbs".into(), json!(self.verbs));
        for (key, list) in [
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !list.is_empty() {
                m.insert(key.into(), json!(list));
            }
        }
        Value::Object(m)
    }

    /// Whether this rule allows the request.
    pub fn allows(&self, a: &Attributes) -> bool {
        if !has_or_all(&self.verbs, &a.verb) {
            return false;
        }
        if !a.resource_request {
            return self
                .non_resource_urls
                .iter()
                .any(|u| url_matches(u, &a.path));
        }
        has_or_all(&self.api_groups, &a.api_group)
            && resource_matches(&self.resources, &a.resource, &a.subresource)
            && (self.resource_names.is_empty() || self.resource_names.contains(&a.name))
    }

    /// kube-apiserver's compact form, as its escalation refusals list missing rules:
    /// `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get" "list"]}`.
    pub fn compact_string(&self) -> String {
        let mut parts = Vec::new();
        for (label, list) in [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ] {
            if !list.is_empty() {
                parts.push(format!("{label}:{}", go_quoted_list(list)));
            }
        }
        format!("{{{}}}", parts.join(", "))
    }
}

/// A list of strings as Go's `%q` prints a `[]string`: `["a" "b"]`.
pub fn go_quoted_list(list: &[String]) -> String {
    let items: Vec<String> = list.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", items.join(" "))
}

/// A string as Go's `%q` prints it (printable ASCII as is, the rest escaped).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn has_or_all(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

/// A rule's resources against a request's: `*`, the exact `resource` or `resource/sub`, or
/// `*/sub` for any resource's subresource `sub`.
fn resource_matches(rule: &[String], resource: &str, subresource: &str) -> bool {
    rule.iter().any(|r| {
        if r == "*" {
            return true;
        }
        if subresource.is_empty() {
            return r == resource;
        }
        (r.len() == resource.len() + 1 + subresource.len()
            && r.starts_with(resource)
            && r.as_bytes()[resource.len()] == b'/'
            && r.ends_with(subresource))
            || r.strip_prefix("*/") == Some(subresource)
    })
}

/// A rule's non-resource URL against a request path: equal, `*`, or a prefix ending in `*`.
fn url_matches(rule: &str, path: &str) -> bool {
    rule == "*"
        || rule == path
        || rule
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix))
}

/// What a binding refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleKind {
    Role,
    ClusterRole,
}

impl RoleKind {
    fn as_str(self) -> &'static str {
        match self {
            RoleKind::Role => "Role",
            RoleKind::ClusterRole => "ClusterRole",
        }
    }
}

/// One subject of a binding.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Subject {
    /// A user, by name (`kind: User`).
    User(String),
    Group(String),
    /// A service account; it matches the user `system:serviceaccount:<ns>:<name>`.
    ServiceAccount {
        namespace: String,
        name: String,
    },
}

impl Subject {
    /// The key it is found under: a user name (service accounts by their user name) or a group.
    fn key(&self) -> SubjectKey {
        match self {
            Subject::User(n) => SubjectKey::User(n.clone()),
            Subject::Group(g) => SubjectKey::Group(g.clone()),
            Subject::ServiceAccount { namespace, name } => {
                SubjectKey::User(super::service_account_username(namespace, name))
            }
        }
    }

    /// As kube-apiserver names it in an "allowed by" reason.
    fn describe(&self) -> String {
        match self {
            Subject::User(n) => format!("User {}", go_quote(n)),
            Subject::Group(g) => format!("Group {}", go_quote(g)),
            Subject::ServiceAccount { namespace, name } => {
                format!(
                    "ServiceAccount {}",
                    go_quote(&format!("{name}/{namespace}"))
                )
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum SubjectKey {
    User(String),
    Group(String),
}

/// A RoleBinding (namespace set) or ClusterRoleBinding (namespace empty).
#[derive(Debug, Clone)]
struct Binding {
    name: String,
    namespace: String,
    role_kind: Option<RoleKind>,
    role_name: String,
    subjects: Vec<Subject>,
}

impl Binding {
    fn from_json(v: &Value, namespace: &str) -> Binding {
        let role_ref = v.get("roleRef").cloned().unwrap_or_default();
        let role_kind = match role_ref.get("kind").and_then(Value::as_str) {
            Some("Role") if !namespace.is_empty() => Some(RoleKind::Role),
            Some("ClusterRole") => Some(RoleKind::ClusterRole),
            _ => None,
        };
        let subjects = v
            .get("subjects")
            .and_then(Value::as_array)
            .map(|subjects| {
                subjects
                    .iter()
                    .filter_map(|s| {
                        let name = s.get("name")?.as_str()?.to_string();
                        match s.get("kind")?.as_str()? {
                            "User" => Some(Subject::User(name)),
                            "Group" => Some(Subject::Group(name)),
                            "ServiceAccount" => {
                                let ns = s
                                    .get("namespace")
                                    .and_then(Value::as_str)
                                    .filter(|n| !n.is_empty())
                                    .unwrap_or(namespace);
                                // A ClusterRoleBinding's service account needs its namespace.
                                (!ns.is_empty()).then(|| Subject::ServiceAccount {
                                    namespace: ns.to_string(),
                                    name,
                                })
                            }
                            _ => None,
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        Binding {
            name: crate::store::meta_str(v, "name"),
            namespace: namespace.to_string(),
            role_kind,
            role_name: role_ref
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            subjects,
        }
    }

    /// The first subject that names the user, if any.
    fn subject_for(&self, user: &UserInfo) -> Option<&Subject> {
        self.subjects.iter().find(|s| match s.key() {
            SubjectKey::User(n) => n == user.name,
            SubjectKey::Group(g) => user.groups.contains(&g),
        })
    }

    fn describe(&self, subject: &Subject) -> String {
        let (kind, name) = if self.namespace.is_empty() {
            ("ClusterRoleBinding", self.name.clone())
        } else {
            ("RoleBinding", format!("{}/{}", self.name, self.namespace))
        };
        format!(
            "{kind} {} of {} {} to {}",
            go_quote(&name),
            self.role_kind.map_or("", RoleKind::as_str),
            go_quote(&self.role_name),
            subject.describe()
        )
    }
}

/// Every Role, ClusterRole and binding, indexed by the subjects bindings name.
#[derive(Debug, Default)]
pub struct RbacIndex {
    cluster_roles: HashMap<String, Arc<[PolicyRule]>>,
    roles: HashMap<(String, String), Arc<[PolicyRule]>>,
    /// Bindings by scope (the namespace; empty for ClusterRoleBindings), then name.
    bindings: HashMap<String, BTreeMap<String, Arc<Binding>>>,
    /// (scope, subject) → names of the bindings in that scope that name the subject.
    by_subject: HashMap<(String, SubjectKey), BTreeSet<String>>,
}

/// The outcome of asking RBAC about a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    /// "RBAC: allowed by ..." when allowed; the resolution errors ("RBAC: ...") otherwise,
    /// or empty.
    pub reason: String,
}

/// The rules a user holds in a namespace, with the errors met collecting them (bindings whose
/// role does not exist).
#[derive(Debug, Default)]
pub struct HeldRules {
    pub rules: Vec<PolicyRule>,
    pub errors: Vec<String>,
}

impl HeldRules {
    /// The errors as kube-apiserver aggregates them: one as it is, several in brackets.
    pub fn error_text(&self) -> Option<String> {
        aggregate(&self.errors)
    }
}

/// kube-apiserver's aggregate error text: nothing, the one message, or `[a, b]`.
pub fn aggregate(errors: &[String]) -> Option<String> {
    let mut seen = BTreeSet::new();
    let unique: Vec<&String> = errors.iter().filter(|e| seen.insert(*e)).collect();
    match unique.as_slice() {
        [] => None,
        [one] => Some((*one).clone()),
        many => Some(format!(
            "[{}]",
            many.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

fn not_found(kind: RoleKind, name: &str) -> String {
    let resource = match kind {
        RoleKind::Role => "role",
        RoleKind::ClusterRole => "clusterrole",
    };
    format!("{resource}.{GROUP} {} not found", go_quote(name))
}

impl RbacIndex {
    /// Takes in a committed write of an RBAC object (`object` None: deleted).
    pub fn apply(&mut self, resource: &str, namespace: &str, name: &str, object: Option<&Value>) {
        match resource {
            "clusterroles" => match object {
                Some(o) => {
                    self.cluster_roles
                        .insert(name.to_string(), PolicyRule::all_of(o).into());
                }
                None => {
                    self.cluster_roles.remove(name);
                }
            },
            "roles" => {
                let key = (namespace.to_string(), name.to_string());
                match object {
                    Some(o) => {
                        self.roles.insert(key, PolicyRule::all_of(o).into());
                    }
                    None => {
                        self.roles.remove(&key);
                    }
                }
            }
            "clusterrolebindings" | "rolebindings" => {
                let scope = if resource == "rolebindings" {
                    namespace
                } else {
                    ""
                };
                self.remove_binding(scope, name);
                if let Some(o) = object {
                    let binding = Arc::new(Binding::from_json(o, scope));
                    for s in &binding.subjects {
                        self.by_subject
                            .entry((scope.to_string(), s.key()))
                            .or_default()
                            .insert(name.to_string());
                    }
                    self.bindings
                        .entry(scope.to_string())
                        .or_default()
                        .insert(name.to_string(), binding);
                }
            }
            _ => {}
        }
    }

    fn remove_binding(&mut self, scope: &str, name: &str) {
        let Some(scoped) = self.bindings.get_mut(scope) else {
            return;
        };
        let Some(old) = scoped.remove(name) else {
            return;
        };
        if scoped.is_empty() {
            self.bindings.remove(scope);
        }
        for s in &old.subjects {
            let key = (scope.to_string(), s.key());
            if let Some(names) = self.by_subject.get_mut(&key) {
                names.remove(name);
                if names.is_empty() {
                    self.by_subject.remove(&key);
                }
            }
        }
    }

    /// The bindings of `scope` that name the user, in name order.
    fn applicable<'a>(&'a self, scope: &str, user: &UserInfo) -> Vec<&'a Arc<Binding>> {
        let Some(scoped) = self.bindings.get(scope) else {
            return Vec::new();
        };
        let mut names: BTreeSet<&String> = BTreeSet::new();
        let keys = std::iter::once(SubjectKey::User(user.name.clone()))
            .chain(user.groups.iter().cloned().map(SubjectKey::Group));
        for key in keys {
            if let Some(found) = self.by_subject.get(&(scope.to_string(), key)) {
                names.extend(found.iter());
            }
        }
        names.into_iter().filter_map(|n| scoped.get(n)).collect()
    }

    /// The rules a binding grants, or the error naming its missing role.
    fn role_rules(&self, binding: &Binding) -> Result<Arc<[PolicyRule]>, String> {
        match binding.role_kind {
            Some(RoleKind::ClusterRole) => self
                .cluster_roles
                .get(&binding.role_name)
                .cloned()
                .ok_or_else(|| not_found(RoleKind::ClusterRole, &binding.role_name)),
            Some(RoleKind::Role) => self
                .roles
                .get(&(binding.namespace.clone(), binding.role_name.clone()))
                .cloned()
                .ok_or_else(|| not_found(RoleKind::Role, &binding.role_name)),
            None => Ok(Arc::from(Vec::new())),
        }
    }

    /// The scopes a request in `namespace` is evaluated in: cluster bindings, then the
    /// namespace's bindings.
    fn scopes(namespace: &str) -> Vec<&str> {
        if namespace.is_empty() {
            vec![""]
        } else {
            vec!["", namespace]
        }
    }

    /// RBAC's answer for a request (without the system:masters short cut: see
    /// [`Rbac::authorize`]).
    pub fn decide(&self, user: &UserInfo, a: &Attributes) -> Decision {
        let mut errors = Vec::new();
        for scope in Self::scopes(&a.namespace) {
            for binding in self.applicable(scope, user) {
                let Some(subject) = binding.subject_for(user) else {
                    continue;
                };
                match self.role_rules(binding) {
                    Ok(rules) => {
                        if rules.iter().any(|r| r.allows(a)) {
                            return Decision {
                                allowed: true,
                                reason: format!("RBAC: allowed by {}", binding.describe(subject)),
                            };
                        }
                    }
                    Err(e) => errors.push(e),
                }
            }
        }
        Decision {
            allowed: false,
            reason: aggregate(&errors)
                .map(|e| format!("RBAC: {e}"))
                .unwrap_or_default(),
        }
    }

    /// Every rule the user holds in `namespace` (cluster-wide ones included; empty namespace:
    /// cluster-wide only).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> HeldRules {
        let mut held = HeldRules::default();
        for scope in Self::scopes(namespace) {
            for binding in self.applicable(scope, user) {
                if binding.subject_for(user).is_none() {
                    continue;
                }
                match self.role_rules(binding) {
                    Ok(rules) => held.rules.extend(rules.iter().cloned()),
                    Err(e) => held.errors.push(e),
                }
            }
        }
        held
    }

    /// The rules of the role a binding would refer to (`kind`, `name`, in `namespace` for a
    /// Role), or None when it does not exist.
    pub fn role(&self, kind: RoleKind, namespace: &str, name: &str) -> Option<Arc<[PolicyRule]>> {
        match kind {
            RoleKind::ClusterRole => self.cluster_roles.get(name).cloned(),
            RoleKind::Role => self
                .roles
                .get(&(namespace.to_string(), name.to_string()))
                .cloned(),
        }
    }
}

/// The index behind its lock, and a signal for the aggregation controller.
#[derive(Debug)]
pub struct Rbac {
    index: RwLock<RbacIndex>,
    /// Bumped whenever a ClusterRole changes (aggregated roles may have to follow).
    cluster_roles_changed: watch::Sender<u64>,
}

impl Default for Rbac {
    fn default() -> Self {
        Rbac {
            index: RwLock::default(),
            cluster_roles_changed: watch::channel(0).0,
        }
    }
}

impl Rbac {
    pub fn read(&self) -> RwLockReadGuard<'_, RbacIndex> {
        // Updates are single map operations: a panic mid-way leaves a usable index.
        self.index.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes in a committed write (the store calls this under its own lock, so the index
    /// follows the commit order).
    pub fn apply(&self, resource: &str, namespace: &str, name: &str, object: Option<&Value>) {
        self.index
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .apply(resource, namespace, name, object);
        if resource == "clusterroles" {
            self.cluster_roles_changed.send_modify(|n| *n += 1);
        }
    }

    pub fn subscribe_cluster_roles(&self) -> watch::Receiver<u64> {
        self.cluster_roles_changed.subscribe()
    }

    /// kube-apiserver's authorizer chain: system:masters may do anything; everyone else what
    /// RBAC allows.
    pub fn authorize(&self, user: &UserInfo, a: &Attributes) -> Decision {
        if user.groups.iter().any(|g| g == MASTERS) {
            return Decision {
                allowed: true,
                reason: String::new(),
            };
        }
        self.read().decide(user, a)
    }
}

/// Whether `owner`'s rules cover every one of `wanted`; the uncovered ones, broken down to one
/// verb, group, resource and name (or URL) each, in the order met.
pub fn covers(owner: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<PolicyRule> {
    wanted
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owner.iter().any(|o| rule_covers(o, sub)))
        .collect()
}

/// One rule per (group, resource, verb, name) and per (URL, verb).
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    let one = |s: &String| vec![s.clone()];
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let base = PolicyRule {
                    verbs: one(verb),
                    api_groups: one(group),
                    resources: one(resource),
                    ..Default::default()
                };
                if rule.resource_names.is_empty() {
                    out.push(base);
                } else {
                    for n in &rule.resource_names {
                        out.push(PolicyRule {
                            resource_names: one(n),
                            ..base.clone()
                        });
                    }
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            out.push(PolicyRule {
                verbs: one(verb),
                non_resource_urls: one(url),
                ..Default::default()
            });
        }
    }
    out
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| set.contains(w))
}

fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = owner.verbs.iter().any(|v| v == "*") || has_all(&owner.verbs, &sub.verbs);
    let groups =
        owner.api_groups.iter().any(|g| g == "*") || has_all(&owner.api_groups, &sub.api_groups);
    let resources = owner.resources.iter().any(|r| r == "*")
        || sub.resources.iter().all(|r| {
            owner.resources.contains(r)
                || r.split_once('/')
                    .is_some_and(|(_, s)| owner.resources.contains(&format!("*/{s}")))
        });
    let urls = sub.non_resource_urls.iter().all(|u| {
        owner.non_resource_urls.iter().any(|o| {
            o == u
                || o.strip_suffix('*')
                    .is_some_and(|prefix| u.starts_with(prefix))
        })
    });
    let names =
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &sub.resource_names);
    verbs && groups && resources && urls && names
}

/// kube-apiserver's compaction of uncovered rules before it lists them: rules for one group
/// and resource (and at most one name) are merged into one with all their verbs.
pub fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    // (group, resource, name) → the merged rule.
    type Simple = (String, String, Option<String>);
    let mut simple: Vec<(Simple, PolicyRule)> = Vec::new();
    for rule in rules {
        let is_simple = rule.resource_names.len() <= 1
            && rule.non_resource_urls.is_empty()
            && rule.api_groups.len() == 1
            && rule.resources.len() == 1;
        if !is_simple {
            out.push(rule);
            continue;
        }
        let key = (
            rule.api_groups[0].clone(),
            rule.resources[0].clone(),
            rule.resource_names.first().cloned(),
        );
        match simple.iter_mut().find(|(k, _)| *k == key) {
            Some((_, existing)) => existing.verbs.extend(rule.verbs),
            None => simple.push((key, rule)),
        }
    }
    out.extend(simple.into_iter().map(|(_, r)| r));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        PolicyRule {
            verbs: v(verbs),
            api_groups: v(groups),
            resources: v(resources),
            ..Default::default()
        }
    }

    fn attrs(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            api_group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn rules_match_verbs_groups_resources_subresources_and_names() {
        let r = rule(&["get", "list"], &[""], &["pods", "pods/log"]);
        assert!(r.allows(&attrs("get", "", "pods", "", "x")));
        assert!(r.allows(&attrs("get", "", "pods", "log", "x")));
        assert!(!r.allows(&attrs("get", "", "pods", "exec", "x")));
        assert!(!r.allows(&attrs("create", "", "pods", "", "x")));
        assert!(!r.allows(&attrs("get", "apps", "pods", "", "x")));
        let scale = rule(&["*"], &["*"], &["*/scale"]);
        assert!(scale.allows(&attrs("update", "apps", "deployments", "scale", "x")));
        assert!(!scale.allows(&attrs("update", "apps", "deployments", "", "x")));
        let mut named = rule(&["get"], &[""], &["secrets"]);
        named.resource_names = vec!["a".into()];
        assert!(named.allows(&attrs("get", "", "secrets", "", "a")));
        assert!(!named.allows(&attrs("get", "", "secrets", "", "b")));
        assert!(
            !named.allows(&attrs("get", "", "secrets", "", "")),
            "a list has no name"
        );
        let urls = PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["/healthz".into(), "/apis/*".into()],
            ..Default::default()
        };
        let path = |p: &str| Attributes {
            verb: "get".into(),
            path: p.into(),
            ..Default::default()
        };
        assert!(urls.allows(&path("/healthz")));
        assert!(urls.allows(&path("/apis/apps")));
        assert!(!urls.allows(&path("/healthz/etcd")));
        assert!(!urls.allows(&path("/api")));
    }

    #[test]
    fn coverage_breaks_rules_down_and_compaction_merges_verbs() {
        let owner = vec![rule(&["get", "list"], &[""], &["configmaps", "*/status"])];
        let wanted = vec![
            rule(&["get", "list", "watch"], &[""], &["configmaps"]),
            rule(&["get"], &[""], &["pods/status"]),
        ];
        let missing = covers(&owner, &wanted);
        assert_eq!(missing, vec![rule(&["watch"], &[""], &["configmaps"])]);
        let merged = compact(vec![
            rule(&["get"], &[""], &["secrets"]),
            rule(&["list"], &[""], &["secrets"]),
        ]);
        assert_eq!(
            merged
                .iter()
                .map(PolicyRule::compact_string)
                .collect::<Vec<_>>(),
            vec![r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}"#]
        );
    }
}
