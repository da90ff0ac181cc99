//! The table of servable resource types: the built-in kinds and the kinds that
//! CustomResourceDefinitions add at run time.
//!
//! Objects are stored schemalessly, so a resource type is only what the REST layer and
//! discovery need: where it lives in the URL space, its names, its scope and whether it
//! has a `/status` subresource (which changes what a write to the main resource may touch).

use std::collections::BTreeMap;

/// The verbs every stored resource supports; discovery advertises them and kubectl
/// checks them (for example `deletecollection` before `kubectl delete --all`).
pub const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// One servable resource type at one group/version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group; empty for the core (`/api/v1`) group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    /// Lower-case plural used in URLs (`deployments`).
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub namespaced: bool,
    /// Whether `/status` is a separate subresource; when it is, writes to the main
    /// resource keep the stored status and writes to `/status` keep everything else.
    pub has_status: bool,
    /// Whether `metadata.generation` is maintained (bumped on non-metadata changes).
    pub tracks_generation: bool,
    /// Whether this type came from a CustomResourceDefinition.
    pub custom: bool,
    /// Whether the only verb is `create`: the access and token reviews, which are answered,
    /// never stored (`http::reviews`).
    pub create_only: bool,
    /// A custom resource's `additionalPrinterColumns` (of its version), as its CRD gives them:
    /// the columns of its `kubectl get` tables.
    pub printer_columns: Vec<serde_json::Value>,
}

impl ResourceType {
    /// `group/version`, or just `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Identity of the stored collection: objects are shared across versions of one
    /// group/resource, as in a real apiserver.
    pub fn gr(&self) -> GroupResource {
        GroupResource {
            group: self.group.clone(),
            resource: self.plural.clone(),
        }
    }

    /// The `group.resource` form used in error messages (`deployments.apps`).
    pub fn qualified_name(&self) -> String {
        self.gr().to_string()
    }

    /// The verbs discovery advertises.
    pub fn verbs(&self) -> &'static [&'static str] {
        if self.create_only { &["create"] } else { VERBS }
    }
}

/// A group and resource plural, the key of one stored collection.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// Compact row of the built-in table below.
struct Builtin {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    short: &'static [&'static str],
    namespaced: bool,
    has_status: bool,
    categories: &'static [&'static str],
    create_only: bool,
}

const ALL: &[&str] = &["all"];
const NONE: &[&str] = &[];

#[rustfmt::skip]
const BUILTINS: &[Builtin] = &[
    Builtin { group: "", version: "v1", kind: "Namespace", plural: "namespaces", short: &["ns"], namespaced: false, has_status: true, categories: NONE, create_only: false },
    Builtin { group: "", version: "v1", kind: "ConfigMap", plural: "configmaps", short: &["cm"], namespaced: true, has_status: false, categories: NONE, create_only: false },
    Builtin { group: "", version: "v1", kind: "Secret", plural: "secrets", short: &[], namespaced: true, has_status: false, categories: NONE, create_only: false },
    Builtin { group: "", version: "v1", kind: "Service", plural: "services", short: &["svc"], namespaced: true, has_status: true, categories: ALL, create_only: false },
    Builtin { group: "", version: "v1", kind: "ServiceAccount", plural: "serviceaccounts", short: &["sa"], namespaced: true, has_status: false, categories: NONE, create_only: false },
    Builtin { group: "", version: "v1", kind: "Pod", plural: "pods", short: &["po"], namespaced: true, has_status: true, categories: ALL, create_only: false },
    Builtin { group: "", version: "v1", kind: "Event", plural: "events", short: &["ev"], namespaced: true, has_status: false, categories: NONE, create_only: false },
    Builtin { group: "", version: "v1", kind: "PersistentVolumeClaim", plural: "persistentvolumeclaims", short: &["pvc"], namespaced: true, has_status: true, categories: NONE, create_only: false },
    Builtin { group: "apps", version: "v1", kind: "Deployment", plural: "deployments", short: &["deploy"], namespaced: true, has_status: true, categories: ALL, create_only: false },
    Builtin { group: "apps", version: "v1", kind: "ReplicaSet", plural: "replicasets", short: &["rs"], namespaced: true, has_status: true, categories: ALL, create_only: false },
    Builtin { group: "apps", version: "v1", kind: "StatefulSet", plural: "statefulsets", short: &["sts"], namespaced: true, has_status: true, categories: ALL, create_only: false },
    Builtin { group: "apps", version: "v1", kind: "DaemonSet", plural: "daemonsets", short: &["ds"], namespaced: true, has_status: true, categories: ALL, create_only: false },
    Builtin { group: "batch", version: "v1", kind: "Job", plural: "jobs", short: &[], namespaced: true, has_status: true, categories: ALL, create_only: false },
    Builtin { group: "batch", version: "v1", kind: "CronJob", plural: "cronjobs", short: &["cj"], namespaced: true, has_status: true, categories: ALL, create_only: false },
    Builtin { group: "discovery.k8s.io", version: "v1", kind: "EndpointSlice", plural: "endpointslices", short: &[], namespaced: true, has_status: false, categories: NONE, create_only: false },
    Builtin { group: "networking.k8s.io", version: "v1", kind: "Ingress", plural: "ingresses", short: &["ing"], namespaced: true, has_status: true, categories: NONE, create_only: false },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "Role", plural: "roles", short: &[], namespaced: true, has_status: false, categories: NONE, create_only: false },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "RoleBinding", plural: "rolebindings", short: &[], namespaced: true, has_status: false, categories: NONE, create_only: false },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "ClusterRole", plural: "clusterroles", short: &[], namespaced: false, has_status: false, categories: NONE, create_only: false },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "ClusterRoleBinding", plural: "clusterrolebindings", short: &[], namespaced: false, has_status: false, categories: NONE, create_only: false },
    Builtin { group: "coordination.k8s.io", version: "v1", kind: "Lease", plural: "leases", short: &[], namespaced: true, has_status: false, categories: NONE, create_only: false },
    Builtin { group: "events.k8s.io", version: "v1", kind: "Event", plural: "events", short: &["ev"], namespaced: true, has_status: false, categories: NONE, create_only: false },
    Builtin { group: "apiextensions.k8s.io", version: "v1", kind: "CustomResourceDefinition", plural: "customresourcedefinitions", short: &["crd", "crds"], namespaced: false, has_status: true, categories: NONE, create_only: false },
    Builtin { group: "admissionregistration.k8s.io", version: "v1", kind: "ValidatingWebhookConfiguration", plural: "validatingwebhookconfigurations", short: &[], namespaced: false, has_status: false, categories: NONE, create_only: false },
    Builtin { group: "admissionregistration.k8s.io", version: "v1", kind: "MutatingWebhookConfiguration", plural: "mutatingwebhookconfigurations", short: &[], namespaced: false, has_status: false, categories: NONE, create_only: false },
    Builtin { group: "policy", version: "v1", kind: "PodDisruptionBudget", plural: "poddisruptionbudgets", short: &["pdb"], namespaced: true, has_status: true, categories: NONE, create_only: false },
    Builtin { group: "autoscaling", version: "v2", kind: "HorizontalPodAutoscaler", plural: "horizontalpodautoscalers", short: &["hpa"], namespaced: true, has_status: true, categories: ALL, create_only: false },
    Builtin { group: "autoscaling", version: "v1", kind: "HorizontalPodAutoscaler", plural: "horizontalpodautoscalers", short: &["hpa"], namespaced: true, has_status: true, categories: ALL, create_only: false },
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "LocalSubjectAccessReview", plural: "localsubjectaccessreviews", short: &[], namespaced: true, has_status: false, categories: NONE, create_only: true },
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "SelfSubjectAccessReview", plural: "selfsubjectaccessreviews", short: &[], namespaced: false, has_status: false, categories: NONE, create_only: true },
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "SelfSubjectRulesReview", plural: "selfsubjectrulesreviews", short: &[], namespaced: false, has_status: false, categories: NONE, create_only: true },
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "SubjectAccessReview", plural: "subjectaccessreviews", short: &[], namespaced: false, has_status: false, categories: NONE, create_only: true },
    Builtin { group: "authentication.k8s.io", version: "v1", kind: "SelfSubjectReview", plural: "selfsubjectreviews", short: &[], namespaced: false, has_status: false, categories: NONE, create_only: true },
    Builtin { group: "authentication.k8s.io", version: "v1", kind: "TokenReview", plural: "tokenreviews", short: &[], namespaced: false, has_status: false, categories: NONE, create_only: true },
];

/// The built-in resource types, in discovery order.
pub fn builtins() -> Vec<ResourceType> {
    BUILTINS
        .iter()
        .map(|b| ResourceType {
            group: b.group.to_string(),
            version: b.version.to_string(),
            kind: b.kind.to_string(),
            list_kind: format!("{}List", b.kind),
            plural: b.plural.to_string(),
            singular: b.kind.to_lowercase(),
            short_names: b.short.iter().map(|s| s.to_string()).collect(),
            categories: b.categories.iter().map(|s| s.to_string()).collect(),
            namespaced: b.namespaced,
            has_status: b.has_status,
            tracks_generation: b.has_status && b.kind != "Namespace" && b.kind != "Service",
            custom: false,
            create_only: b.create_only,
            printer_columns: vec![],
        })
        .collect()
}

/// All servable resource types, keyed by group, then version, then plural.
///
/// Versions keep discovery order: the first version listed for a group is its
/// preferred version (for built-ins the table order; for CRDs the storage version).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    groups: Vec<GroupEntry>,
}

#[derive(Debug, Clone)]
struct GroupEntry {
    name: String,
    versions: Vec<(String, BTreeMap<String, ResourceType>)>,
}

impl Registry {
    pub fn with_builtins() -> Registry {
        let mut registry = Registry::default();
        for rt in builtins() {
            registry.insert(rt);
        }
        registry
    }

    pub fn insert(&mut self, rt: ResourceType) {
        let group = match self.groups.iter_mut().position(|g| g.name == rt.group) {
            Some(i) => &mut self.groups[i],
            None => {
                self.groups.push(GroupEntry {
                    name: rt.group.clone(),
                    versions: Vec::new(),
                });
                let last = self.groups.len() - 1;
                &mut self.groups[last]
            }
        };
        let version = match group
            .versions
            .iter_mut()
            .position(|(v, _)| *v == rt.version)
        {
            Some(i) => &mut group.versions[i].1,
            None => {
                group.versions.push((rt.version.clone(), BTreeMap::new()));
                let last = group.versions.len() - 1;
                &mut group.versions[last].1
            }
        };
        version.insert(rt.plural.clone(), rt);
    }

    /// Removes every custom type of `group` with `plural` (a deleted CRD).
    pub fn remove_custom(&mut self, group: &str, plural: &str) {
        for g in self.groups.iter_mut().filter(|g| g.name == group) {
            for (_, resources) in g.versions.iter_mut() {
                resources.retain(|p, rt| !(rt.custom && p == plural));
            }
            g.versions.retain(|(_, resources)| !resources.is_empty());
        }
        self.groups.retain(|g| !g.versions.is_empty());
    }

    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.version_resources(group, version)?.get(plural)
    }

    /// The resources of one group/version, or None when that group/version is not served.
    pub fn version_resources(
        &self,
        group: &str,
        version: &str,
    ) -> Option<&BTreeMap<String, ResourceType>> {
        let g = self.groups.iter().find(|g| g.name == group)?;
        g.versions
            .iter()
            .find(|(v, _)| v == version)
            .map(|(_, r)| r)
    }

    /// Named groups (everything except core) with their versions, preferred first.
    pub fn named_groups(&self) -> impl Iterator<Item = (&str, Vec<&str>)> {
        self.groups.iter().filter(|g| !g.name.is_empty()).map(|g| {
            (
                g.name.as_str(),
                g.versions.iter().map(|(v, _)| v.as_str()).collect(),
            )
        })
    }

    /// Any served version of a group/resource, preferring the first listed; used to
    /// find the type of a stored object from its group/resource alone.
    pub fn any_version(&self, gr: &GroupResource) -> Option<&ResourceType> {
        let g = self.groups.iter().find(|g| g.name == gr.group)?;
        g.versions.iter().find_map(|(_, r)| r.get(&gr.resource))
    }

    /// Every type, one entry per group/version/resource.
    pub fn all(&self) -> impl Iterator<Item = &ResourceType> {
        self.groups
            .iter()
            .flat_map(|g| g.versions.iter().flat_map(|(_, r)| r.values()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_served_and_crd_types_can_be_removed() {
        let mut r = Registry::with_builtins();
        assert_eq!(
            r.get("apps", "v1", "deployments").map(|d| d.kind.as_str()),
            Some("Deployment")
        );
        assert!(r.get("", "v1", "nothings").is_none());
        let mut custom = r.get("", "v1", "configmaps").cloned().expect("configmaps");
        custom.group = "example.com".into();
        custom.plural = "widgets".into();
        custom.custom = true;
        r.insert(custom);
        assert!(r.get("example.com", "v1", "widgets").is_some());
        r.remove_custom("example.com", "widgets");
        assert!(r.get("example.com", "v1", "widgets").is_none());
        assert!(r.named_groups().all(|(g, _)| g != "example.com"));
    }
}
