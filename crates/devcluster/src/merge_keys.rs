//! Which lists of built-in kinds are merged by key rather than replaced whole.
//!
//! A real apiserver reads this from the Go struct tags (`patchMergeKey`,
//! `listType=map`/`listMapKeys`). We keep only the lists that charts and controllers
//! actually touch; every other list is atomic, which is also what the apiserver does for
//! lists without a merge key. Strategic merge patch and server-side apply both consult
//! this table, so the two stay consistent.

/// The merge key of the list at `path` (field names from the object root, list
/// positions omitted), or None when the list is atomic.
pub fn merge_key(path: &[String]) -> Option<&'static str> {
    let last = path.last()?.as_str();
    let parent = path.len().checked_sub(2).map(|i| path[i].as_str());
    match last {
        "containers" | "initContainers" | "ephemeralContainers" => Some("name"),
        "ports"
            if matches!(
                parent,
                Some("containers" | "initContainers" | "ephemeralContainers")
            ) =>
        {
            Some("containerPort")
        }
        "ports" if parent == Some("spec") => Some("port"),
        "env" | "volumes" | "imagePullSecrets" => Some("name"),
        "volumeMounts" => Some("mountPath"),
        "volumeDevices" => Some("devicePath"),
        "hostAliases" => Some("ip"),
        "conditions" => Some("type"),
        "ownerReferences" if parent == Some("metadata") => Some("uid"),
        "topologySpreadConstraints" => Some("topologyKey"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Vec<String> {
        s.split('.').map(String::from).collect()
    }

    #[test]
    fn container_ports_and_service_ports_use_different_keys() {
        assert_eq!(
            merge_key(&p("spec.template.spec.containers.ports")),
            Some("containerPort")
        );
        assert_eq!(merge_key(&p("spec.ports")), Some("port"));
        assert_eq!(
            merge_key(&p("spec.template.spec.containers.env")),
            Some("name")
        );
        assert_eq!(merge_key(&p("spec.template.spec.containers.args")), None);
    }
}
