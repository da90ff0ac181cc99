//! Helm's `lookup` against the cluster. Templates execute on a blocking thread, so each
//! lookup blocks that thread on the async kube call (never a runtime worker thread).
//!
//! An App's templates see only the app's namespace: a lookup of another namespace, of a
//! cluster-scoped kind, or a list across namespaces answers what Helm answers when nothing is
//! there (an empty map; a list with no items), and the release service logs a warning.

use super::{Applier, ApplyError, ObjectKey};
use berth_helm::render::Lookup;
use kube::Api;
use kube::api::{DynamicObject, ListParams};
use std::time::Duration;

/// Bound on one lookup call.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(15);

pub struct KubeLookup {
    applier: Applier,
    handle: tokio::runtime::Handle,
    /// An App's namespace: the only one its lookups see.
    app_namespace: Option<String>,
}

/// What a lookup answers when it finds nothing: no object, or a list without items.
fn nothing(api_version: &str, kind: &str, name: &str) -> Option<serde_json::Value> {
    name.is_empty().then(|| {
        serde_json::json!({
            "apiVersion": api_version,
            "kind": format!("{kind}List"),
            "items": [],
        })
    })
}

impl KubeLookup {
    /// Must be created inside the runtime whose blocking pool will run the render. With
    /// `app_namespace`, lookups see only that namespace.
    pub fn new(applier: Applier, app_namespace: Option<String>) -> Self {
        KubeLookup {
            applier,
            handle: tokio::runtime::Handle::current(),
            app_namespace,
        }
    }

    async fn find(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, ApplyError> {
        let (ar, namespaced) = match self
            .applier
            .discovery
            .resolve(&self.applier.client, api_version, kind)
            .await
        {
            Ok(v) => v,
            // Helm returns an empty map for kinds the cluster does not serve.
            Err(ApplyError::UnknownKind { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        if let Some(app) = &self.app_namespace
            && (!namespaced || namespace != app)
        {
            tracing::warn!(
                api_version,
                kind,
                namespace,
                name,
                app_namespace = %app,
                "an app's lookup outside its namespace answered as nothing found"
            );
            return Ok(nothing(api_version, kind, name));
        }
        let client = self.applier.client.clone();
        let api: Api<DynamicObject> = match (namespaced, namespace.is_empty()) {
            (true, false) => Api::namespaced_with(client, namespace, &ar),
            _ => Api::all_with(client, &ar),
        };
        let key = ObjectKey {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        };
        // The object came from JSON, so turning it back cannot fail in practice.
        let to_json = |o: &DynamicObject| serde_json::to_value(o).unwrap_or_default();
        if name.is_empty() {
            let list = Applier::call("list", &key, api.list(&ListParams::default())).await?;
            // A real API server leaves apiVersion and kind out of list items; helm's client
            // fills both in from the list, so templates can read `.kind` of each item.
            let items: Vec<serde_json::Value> = list
                .items
                .iter()
                .map(|o| {
                    let mut item = to_json(o);
                    if let Some(map) = item.as_object_mut()
                        && !map.contains_key("apiVersion")
                        && !map.contains_key("kind")
                    {
                        map.insert("apiVersion".into(), api_version.into());
                        map.insert("kind".into(), kind.into());
                    }
                    item
                })
                .collect();
            return Ok(Some(serde_json::json!({
                "apiVersion": api_version,
                "kind": format!("{kind}List"),
                "items": items,
            })));
        }
        let found = Applier::call("get", &key, api.get_opt(name)).await?;
        Ok(found.as_ref().map(to_json))
    }
}

impl Lookup for KubeLookup {
    fn lookup(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<serde_json::Value>, String> {
        let fut = self.find(api_version, kind, namespace, name);
        match self
            .handle
            .block_on(tokio::time::timeout(LOOKUP_TIMEOUT, fut))
        {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "lookup of {api_version}/{kind} {namespace}/{name} timed out"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::nothing;

    #[test]
    fn nothing_found_is_no_object_or_a_list_without_items() {
        assert_eq!(nothing("v1", "Secret", "db"), None);
        assert_eq!(
            nothing("v1", "Secret", ""),
            Some(serde_json::json!({"apiVersion": "v1", "kind": "SecretList", "items": []}))
        );
    }
}
