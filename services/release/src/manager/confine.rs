//! An App's confinement: its chart may create only namespaced objects in the app's namespace
//! (hooks included, no `crds/`). Checked on the whole render before anything is applied, so a
//! refused chart changes nothing; the refusal names every offending object.
//!
//! Two rules hold for every package, App or Module:
//! - no chart writes release records (a Secret of type `helm.sh/release.v1`, labelled
//!   `owner: helm`, or named as a record): the records are berth's (see `record::key`);
//! - objects taken from a record (prune, uninstall, rollback, drift repair, hooks) are confined
//!   as rendered ones are, by the owner the record names (`recorded`).

use super::*;
use crate::apply::KindScope;
use crate::record::store::{SECRET_TYPE, Stored};

/// The prefix of every release record's Secret name.
const RECORD_NAME_PREFIX: &str = "sh.helm.release.v1.";

/// Why `object` would be a release record, if it would: a core Secret of Helm's record type,
/// labelled `owner: helm` (what Helm and berth list records by) or named as a record. Named
/// with its namespace (`namespace` when it names none).
pub fn record_forgery(object: &serde_json::Value, namespace: &str) -> Option<String> {
    let str_at = |p: &str| object.pointer(p).and_then(|v| v.as_str()).unwrap_or("");
    if str_at("/apiVersion") != "v1" || str_at("/kind") != "Secret" {
        return None;
    }
    let why = if str_at("/type") == SECRET_TYPE {
        format!("type {SECRET_TYPE}")
    } else if str_at("/metadata/labels/owner") == "helm" {
        "labelled owner: helm".to_owned()
    } else if str_at("/metadata/name").starts_with(RECORD_NAME_PREFIX) {
        format!("named {RECORD_NAME_PREFIX}*")
    } else {
        return None;
    };
    let ns = match str_at("/metadata/namespace") {
        "" => namespace,
        ns => ns,
    };
    Some(format!("Secret {ns}/{} ({why})", str_at("/metadata/name")))
}

/// Refuses a render (chart objects and hooks) of a release in `namespace` holding release
/// records, naming each.
pub fn refuse_record_writes(
    rendered: &render::Rendered,
    namespace: &str,
) -> Result<(), ReleaseError> {
    let forged: Vec<String> = rendered
        .manifests
        .iter()
        .chain(&rendered.hooks)
        .filter_map(|m| {
            record_forgery(&m.object, namespace).map(|o| format!("{o} in {}", m.source))
        })
        .collect();
    if forged.is_empty() {
        return Ok(());
    }
    Err(ReleaseError::Confined(format!(
        "a chart may not write release records (they are berth's own); refused: {}",
        forged.join(", ")
    )))
}

/// The objects of `record` that its owner may touch, for an operation (`what`) that acts on
/// them: a Module's, all; an App's, only namespaced objects in its namespace. The rest are left
/// out and named in a warning. The owner is the record's own (its MAC covers it), so a record
/// cannot widen what an App reaches.
pub async fn recorded(
    applier: &Applier,
    record: &Stored,
    what: &str,
    objects: Vec<serde_json::Value>,
) -> Result<Vec<serde_json::Value>, ApplyError> {
    let Some(ns) = &record.owner.app_namespace else {
        return Ok(objects);
    };
    let app = AppNamespace(ns.clone());
    let mut kept = Vec::with_capacity(objects.len());
    let mut offences = Vec::new();
    for object in objects {
        let scope = applier.kind_scope(&object).await?;
        match offence(&app, scope, &object).or_else(|| record_forgery(&object, ns)) {
            Some(o) => offences.push(o),
            None => kept.push(object),
        }
    }
    if !offences.is_empty() {
        tracing::warn!(
            record = %record.release.secret_name(),
            namespace = %ns,
            "{what}: leaving alone objects of the record that app {} may not touch: {}",
            record.owner.package,
            offences.join(", ")
        );
    }
    Ok(kept)
}

/// The hooks of `record` its owner may run (see [`recorded`]).
pub async fn recorded_hooks(
    applier: &Applier,
    record: &Stored,
    what: &str,
) -> Result<Vec<Hook>, ApplyError> {
    let hooks = helm_hooks::from_record(&record.release);
    let objects = hooks.iter().map(|h| h.object.clone()).collect();
    let kept = recorded(applier, record, what, objects).await?;
    Ok(hooks
        .into_iter()
        .filter(|h| kept.contains(&h.object))
        .collect())
}

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
    fn release_records_are_named_by_type_label_or_name() {
        let secret = |extra: serde_json::Value| {
            let mut o = json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "x", "namespace": "team"}});
            if let Some(t) = extra.get("type") {
                o["type"] = t.clone();
            }
            if let Some(l) = extra.pointer("/metadata/labels") {
                o["metadata"]["labels"] = l.clone();
            }
            if let Some(n) = extra.pointer("/metadata/name") {
                o["metadata"]["name"] = n.clone();
            }
            o
        };
        assert_eq!(record_forgery(&secret(json!({})), "team"), None);
        assert_eq!(
            record_forgery(&secret(json!({"type": "helm.sh/release.v1"})), "team").as_deref(),
            Some("Secret team/x (type helm.sh/release.v1)")
        );
        assert_eq!(
            record_forgery(
                &secret(json!({"metadata": {"labels": {"owner": "helm"}}})),
                "other"
            )
            .as_deref(),
            Some("Secret team/x (labelled owner: helm)")
        );
        assert!(
            record_forgery(
                &secret(json!({"metadata": {"name": "sh.helm.release.v1.web.v9"}})),
                "team"
            )
            .is_some()
        );
        // Other kinds may carry the label.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "labels": {"owner": "helm"}}});
        assert_eq!(record_forgery(&cm, "team"), None);
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
