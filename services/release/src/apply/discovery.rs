//! Kind → API resource resolution with a cache. A miss asks the API server about that one
//! group-version (cheap, and it picks up CRDs installed since the last lookup).

use super::ApplyError;
use kube::Client;
use kube::api::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Scope};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bound on one discovery request.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Clone, Default)]
pub struct DiscoveryCache {
    // A std mutex: held only to read or insert, never across an await.
    entries: Arc<Mutex<HashMap<GroupVersionKind, (ApiResource, bool)>>>,
}

impl DiscoveryCache {
    /// The API resource for `api_version`/`kind` and whether it is namespaced.
    pub async fn resolve(
        &self,
        client: &Client,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, bool), ApplyError> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        if let Some(hit) = self.lookup(&gvk) {
            return Ok(hit);
        }
        let found = tokio::time::timeout(
            DISCOVERY_TIMEOUT,
            kube::discovery::pinned_kind(client, &gvk),
        )
        .await
        .map_err(|_| ApplyError::Timeout {
            op: "discover",
            object: format!("{api_version}/{kind}"),
        })?;
        let (ar, caps): (ApiResource, ApiCapabilities) = match found {
            Ok(v) => v,
            Err(e) if is_missing(&e) => {
                return Err(ApplyError::UnknownKind {
                    api_version: api_version.into(),
                    kind: kind.into(),
                });
            }
            Err(source) => {
                return Err(ApplyError::Kube {
                    op: "discover",
                    object: format!("{api_version}/{kind}"),
                    source,
                });
            }
        };
        let entry = (ar, matches!(caps.scope, Scope::Namespaced));
        if let Ok(mut map) = self.entries.lock() {
            map.insert(gvk, entry.clone());
        }
        Ok(entry)
    }

    fn lookup(&self, gvk: &GroupVersionKind) -> Option<(ApiResource, bool)> {
        self.entries.lock().ok()?.get(gvk).cloned()
    }

    /// Forgets everything, e.g. after CRDs were applied.
    pub fn clear(&self) {
        if let Ok(mut map) = self.entries.lock() {
            map.clear();
        }
    }
}

/// kube reports an unknown kind in a known group-version as a discovery error, and an unknown
/// group-version (also one a CRD established a moment ago) as a 404.
fn is_missing(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => super::is_not_found(s),
        kube::Error::Discovery(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_text_404_from_an_unserved_group_means_the_kind_is_missing() {
        // What kube makes of a real API server's `404 page not found` for a group it does not
        // serve yet (a CRD established a moment ago).
        let status =
            kube::core::Status::failure("404 page not found", "Failed to parse error data")
                .with_code(404);
        assert!(is_missing(&kube::Error::Api(Box::new(status))));
        let forbidden = kube::core::Status::failure("forbidden", "Forbidden").with_code(403);
        assert!(!is_missing(&kube::Error::Api(Box::new(forbidden))));
    }
}
