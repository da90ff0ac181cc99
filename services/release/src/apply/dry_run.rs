//! Server-side apply in dry-run mode, for Plan: the API server computes the object an apply
//! would produce (defaulting, admission, field ownership) without persisting it, and that is
//! compared with what is live now.

use super::object::{stamp, str_at};
use super::{Applier, ApplyError, FIELD_MANAGER, ObjectKey};
use kube::api::{Patch, PatchParams};
use serde_json::Value;

/// What an apply would do to one object.
#[derive(Debug, Clone)]
pub struct DryRun {
    pub key: ObjectKey,
    /// `None` when the object does not exist yet.
    pub live: Option<Value>,
    /// The object as the apply would leave it.
    pub would_be: Value,
}

impl DryRun {
    /// The top-level fields (other than bookkeeping metadata) whose values differ between the
    /// live object and the would-be one; empty means the apply changes nothing.
    pub fn changed_fields(&self) -> Vec<String> {
        let Some(live) = &self.live else {
            return Vec::new();
        };
        let (a, b) = (comparable(live), comparable(&self.would_be));
        let mut keys: Vec<&String> = a
            .as_object()
            .into_iter()
            .flat_map(|m| m.keys())
            .chain(b.as_object().into_iter().flat_map(|m| m.keys()))
            .collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .filter(|k| a.get(k.as_str()) != b.get(k.as_str()))
            .map(|k| k.to_string())
            .collect()
    }
}

/// The object without what every write changes (managed fields, resource version,
/// generation, timestamps, status) and without `apiVersion`/`kind` (which list responses
/// leave out of their items), so only meaningful differences remain.
pub(crate) fn comparable(object: &Value) -> Value {
    let mut o = object.clone();
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "managedFields",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "uid",
        ] {
            meta.remove(k);
        }
    }
    if let Some(m) = o.as_object_mut() {
        for k in ["status", "apiVersion", "kind"] {
            m.remove(k);
        }
    }
    o
}

impl Applier {
    /// Server-side applies `object` with `dryRun=All` and returns the live and would-be forms.
    pub async fn dry_run(
        &self,
        object: &Value,
        release: &str,
        release_ns: &str,
    ) -> Result<DryRun, ApplyError> {
        let (key, ar) = self.key_for(object, release_ns).await?;
        let mut obj = object.clone();
        let ns = (!key.namespace.is_empty()).then_some(key.namespace.as_str());
        stamp(&mut obj, release, release_ns, ns);
        let live = Self::call("get", &key, self.api(&key, &ar).get_opt(&key.name)).await?;
        if let Some(current) = &live {
            let current = serde_json::to_value(current).unwrap_or_default();
            super::object::ownership(&key, &current, release, release_ns)
                .map_err(ApplyError::Taken)?;
        }
        let mut pp = PatchParams::apply(FIELD_MANAGER).force();
        pp.dry_run = true;
        // As the apply it stands for: in the package's name, so a dry run the API server
        // would refuse the package is refused here too.
        let would_be = Self::call(
            "dry-run apply",
            &key,
            self.api_writing(&key, &ar)
                .patch(&key.name, &pp, &Patch::Apply(&obj)),
        )
        .await
        .map_err(|e| self.refused(e))?;
        let to_json = |o| {
            serde_json::to_value(o).map_err(|e| ApplyError::Invalid {
                object: key.to_string(),
                reason: format!("cannot encode the object: {e}"),
            })
        };
        let live = live.map(to_json).transpose()?;
        let would_be = to_json(would_be)?;
        debug_assert!(str_at(&would_be, "/metadata/name") == key.name || would_be.is_null());
        Ok(DryRun {
            key,
            live,
            would_be,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn bookkeeping_fields_are_not_changes() {
        let key = ObjectKey {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: "a".into(),
        };
        let live = json!({"metadata": {"name": "a", "resourceVersion": "1"}, "data": {"k": "v"}});
        let same = json!({"metadata": {"name": "a", "resourceVersion": "2"}, "data": {"k": "v"}});
        let changed = json!({"metadata": {"name": "a"}, "data": {"k": "w"}});
        let run = |would_be| DryRun {
            key: key.clone(),
            live: Some(live.clone()),
            would_be,
        };
        assert!(run(same).changed_fields().is_empty());
        assert_eq!(run(changed).changed_fields(), vec!["data".to_string()]);
    }
}
