//! An App's confinement: its chart may create only namespaced objects in the app's namespace
//! (hooks included, no `crds/`). Checked on the whole render before anything is applied, so a
//! refused chart changes nothing; the refusal names every offending object.

use super::*;
use crate::apply::KindScope;

/// The namespace an App's release is confined to. Modules have none: cluster scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppNamespace(pub String);

/// Why one rendered object is outside `app`'s reach, if it is: `namespace` is the one the
/// manifest names (empty: none, so the app's namespace, as Helm defaults it).
pub fn offence(
    app: &AppNamespace,
    kind_scope: KindScope,
    object: &serde_json::Value,
) -> Option<String> {
    let str_at = |p: &str| object.pointer(p).and_then(|v| v.as_str()).unwrap_or("");
    let (api_version, kind) = (str_at("/apiVersion"), str_at("/kind"));
    let (namespace, name) = (str_at("/metadata/namespace"), str_at("/metadata/name"));
    let shown_ns = if namespace.is_empty() {
        &app.0
    } else {
        namespace
    };
    let what = format!("{kind} {shown_ns}/{name}");
    match kind_scope {
        KindScope::Unknown => Some(format!(
            "{what} ({api_version} {kind} is not served by the cluster, so it cannot be known to be namespaced)"
        )),
        KindScope::Cluster => Some(format!("{kind} /{name} (cluster-scoped)")),
        KindScope::Namespaced if !namespace.is_empty() && namespace != app.0 => {
            Some(format!("{what} (another namespace)"))
        }
        KindScope::Namespaced => None,
    }
}

/// The refusal for `offences` (at least one).
pub fn refusal(app: &AppNamespace, offences: &[String]) -> ReleaseError {
    ReleaseError::Confined(format!(
        "an app may only create namespaced objects in its namespace {}; refused: {}",
        app.0,
        offences.join(", ")
    ))
}

/// The refusal for a chart that ships `crds/`, naming them.
pub fn crds_refusal(app: &AppNamespace, crds: &[render::Manifest]) -> ReleaseError {
    let names: Vec<String> = crds
        .iter()
        .map(|m| {
            let name = m
                .object
                .pointer("/metadata/name")
                .and_then(|v| v.as_str())
                .unwrap_or("");
            format!("{} /{name} ({})", m.kind(), m.source)
        })
        .collect();
    refusal(
        app,
        &[format!(
            "crds/ (CustomResourceDefinitions are cluster-scoped; install them with a module): {}",
            names.join(", ")
        )],
    )
}

impl ReleaseManager {
    /// Refuses the render when any of its objects or hooks is outside `app`'s namespace.
    pub(super) async fn confine(
        &self,
        app: &AppNamespace,
        rendered: &render::Rendered,
    ) -> Result<(), ReleaseError> {
        if !rendered.crds.is_empty() {
            return Err(crds_refusal(app, &rendered.crds));
        }
        let mut offences = Vec::new();
        for m in rendered.manifests.iter().chain(&rendered.hooks) {
            let kind_scope = self.applier.kind_scope(&m.object).await?;
            offences.extend(offence(app, kind_scope, &m.object));
        }
        if offences.is_empty() {
            Ok(())
        } else {
            Err(refusal(app, &offences))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app() -> AppNamespace {
        AppNamespace("team".into())
    }

    fn object(kind: &str, namespace: Option<&str>) -> serde_json::Value {
        let mut o = json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "x"}});
        if let Some(ns) = namespace {
            o["metadata"]["namespace"] = ns.into();
        }
        o
    }

    #[test]
    fn namespaced_objects_in_the_apps_namespace_pass() {
        let ns = KindScope::Namespaced;
        assert_eq!(offence(&app(), ns, &object("ConfigMap", None)), None);
        assert_eq!(
            offence(&app(), ns, &object("ConfigMap", Some("team"))),
            None
        );
    }

    #[test]
    fn everything_else_is_named() {
        assert_eq!(
            offence(
                &app(),
                KindScope::Namespaced,
                &object("ConfigMap", Some("kube-system"))
            )
            .as_deref(),
            Some("ConfigMap kube-system/x (another namespace)")
        );
        assert_eq!(
            offence(
                &app(),
                KindScope::Cluster,
                &object("ClusterRoleBinding", None)
            )
            .as_deref(),
            Some("ClusterRoleBinding /x (cluster-scoped)")
        );
        // A cluster-scoped kind with a namespace set is still cluster-scoped.
        assert!(
            offence(
                &app(),
                KindScope::Cluster,
                &object("Namespace", Some("team"))
            )
            .is_some()
        );
        let unknown = offence(&app(), KindScope::Unknown, &object("Widget", None)).unwrap();
        assert!(unknown.starts_with("Widget team/x"), "{unknown}");
    }

    #[test]
    fn the_refusal_names_every_object_and_the_namespace() {
        let e = refusal(&app(), &["A /a (cluster-scoped)".into(), "B x/b".into()]).to_string();
        assert!(e.contains("namespace team"), "{e}");
        assert!(
            e.contains("A /a (cluster-scoped)") && e.contains("B x/b"),
            "{e}"
        );
    }
}
