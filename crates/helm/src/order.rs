//! Helm's install order by kind. Uninstall walks the same list backwards.

/// Kinds in the order Helm installs them; kinds not listed come after, sorted by name.
pub const INSTALL_ORDER: &[&str] = &[
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

/// A sort key: known kinds by position, unknown kinds after them by name.
pub fn install_rank(kind: &str) -> (usize, String) {
    match INSTALL_ORDER.iter().position(|k| *k == kind) {
        Some(i) => (i, String::new()),
        None => (INSTALL_ORDER.len(), kind.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::install_rank;

    #[test]
    fn namespaces_before_workloads_and_unknown_last() {
        let mut kinds = vec![
            "Deployment",
            "Widget",
            "Service",
            "Namespace",
            "Alpha",
            "CustomResourceDefinition",
        ];
        kinds.sort_by_key(|k| install_rank(k));
        assert_eq!(
            kinds,
            vec![
                "Namespace",
                "CustomResourceDefinition",
                "Service",
                "Deployment",
                "Alpha",
                "Widget"
            ]
        );
    }
}
