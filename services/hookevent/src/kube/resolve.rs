//! Resolving a binding's `apiVersion`/`kind` to a resource, the way kubectl does: the kind, its
//! plural, singular or a short name, in any case (`Pod`, `pods`, `po`, `POD`).
//!
//! kube's `Discovery` exposes neither singular nor short names, so the API resource lists are
//! read directly. Answers are cached: kinds do not change meaning while the process runs.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResource, APIResourceList};
use kube::core::ApiResource;

/// Longest one discovery request may take.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("kind {kind:?}{}: the cluster serves no such resource", in_version(.api_version))]
    NotFound { api_version: String, kind: String },
    #[error("discovery of {what}: {source}")]
    Api { what: String, source: kube::Error },
    #[error("discovery of {what}: no answer within {DISCOVERY_TIMEOUT:?}")]
    Timeout { what: String },
    /// Not found in the groups that answered, but some did not (an aggregated API whose
    /// backend is down answers 503), so the kind may still exist.
    #[error("kind {kind:?}: not served by the API groups that answered; discovery of {} failed", .failed.join(", "))]
    Incomplete { kind: String, failed: Vec<String> },
}

impl ResolveError {
    /// The cluster definitely serves no such kind.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ResolveError::NotFound { .. })
    }
}

fn in_version(api_version: &str) -> String {
    if api_version.is_empty() {
        String::new()
    } else {
        format!(" in {api_version}")
    }
}

/// A resource a binding or an operation addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub resource: ApiResource,
    pub namespaced: bool,
}

pub struct Resolver {
    client: kube::Client,
    cache: Mutex<HashMap<(String, String), Resolved>>,
}

impl Resolver {
    pub fn new(client: kube::Client) -> Resolver {
        Resolver {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Resolves `kind` in `api_version`, or in the preferred version of any group when empty
    /// (the core group first).
    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<Resolved, ResolveError> {
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some(hit) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(hit.clone());
        }
        let found = if api_version.is_empty() {
            self.search_all(kind).await?
        } else {
            let list = self.resources(api_version).await?;
            find(&list, kind)
        };
        let resolved = found.ok_or_else(|| ResolveError::NotFound {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        })?;
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, resolved.clone());
        Ok(resolved)
    }

    /// Resolves `kind` of API group `group` (`""`: the core group) in `version`, or in the
    /// group's preferred version when `None` (how operator specs name resources).
    pub async fn resolve_in_group(
        &self,
        group: &str,
        version: Option<&str>,
        kind: &str,
    ) -> Result<Resolved, ResolveError> {
        let api_version = match (group, version) {
            ("", v) => v.unwrap_or("v1").to_owned(),
            (g, Some(v)) => format!("{g}/{v}"),
            (g, None) => {
                let groups = bounded("API groups", self.client.list_api_groups()).await?;
                let found = groups.groups.into_iter().find(|x| x.name == g);
                let version = found.and_then(|x| {
                    x.preferred_version
                        .or_else(|| x.versions.into_iter().next())
                });
                match version {
                    Some(v) => v.group_version,
                    None => {
                        return Err(ResolveError::NotFound {
                            api_version: g.to_owned(),
                            kind: kind.to_owned(),
                        });
                    }
                }
            }
        };
        self.resolve(&api_version, kind).await
    }

    async fn search_all(&self, kind: &str) -> Result<Option<Resolved>, ResolveError> {
        if let Some(found) = find(&self.resources("v1").await?, kind) {
            return Ok(Some(found));
        }
        let groups = bounded("API groups", self.client.list_api_groups()).await?;
        // One group that fails (typically an aggregated API whose backend is down) must not hide
        // the kinds of all the others: it is skipped, and named if the kind is found nowhere.
        let mut failed = Vec::new();
        for group in groups.groups {
            let Some(version) = group
                .preferred_version
                .or_else(|| group.versions.into_iter().next())
            else {
                continue;
            };
            match self.resources(&version.group_version).await {
                Ok(list) => {
                    if let Some(found) = find(&list, kind) {
                        return Ok(Some(found));
                    }
                }
                Err(e) => {
                    tracing::warn!(group_version = %version.group_version, error = %e, kind, "API discovery of a group failed; skipped while resolving a kind");
                    failed.push(version.group_version);
                }
            }
        }
        if failed.is_empty() {
            Ok(None)
        } else {
            Err(ResolveError::Incomplete {
                kind: kind.to_owned(),
                failed,
            })
        }
    }

    async fn resources(&self, api_version: &str) -> Result<APIResourceList, ResolveError> {
        if api_version.contains('/') {
            bounded(
                api_version,
                self.client.list_api_group_resources(api_version),
            )
            .await
        } else {
            bounded(
                api_version,
                self.client.list_core_api_resources(api_version),
            )
            .await
        }
    }
}

async fn bounded<T>(
    what: &str,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, ResolveError> {
    match tokio::time::timeout(DISCOVERY_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(ResolveError::Api {
            what: what.to_owned(),
            source,
        }),
        Err(_) => Err(ResolveError::Timeout {
            what: what.to_owned(),
        }),
    }
}

/// The resource of `list` that `name` designates, if any.
fn find(list: &APIResourceList, name: &str) -> Option<Resolved> {
    let lower = name.to_ascii_lowercase();
    let matches = |r: &APIResource| {
        !r.name.contains('/')
            && (r.kind.eq_ignore_ascii_case(name)
                || r.name == lower
                || r.singular_name.eq_ignore_ascii_case(name)
                || r.short_names
                    .as_ref()
                    .is_some_and(|s| s.iter().any(|s| s.eq_ignore_ascii_case(name))))
    };
    let r = list.resources.iter().find(|r| matches(r))?;
    let (group, version) = match list.group_version.split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), list.group_version.clone()),
    };
    Some(Resolved {
        resource: ApiResource {
            group,
            version,
            api_version: list.group_version.clone(),
            kind: r.kind.clone(),
            plural: r.name.clone(),
        },
        namespaced: r.namespaced,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> APIResourceList {
        serde_json::from_value(serde_json::json!({
            "groupVersion": "apps/v1",
            "resources": [
                {"name": "deployments", "singularName": "deployment", "namespaced": true, "kind": "Deployment", "verbs": [], "shortNames": ["deploy"]},
                {"name": "deployments/status", "singularName": "", "namespaced": true, "kind": "Deployment", "verbs": []}
            ]
        }))
        .unwrap()
    }

    #[test]
    fn kind_plural_singular_and_short_names_in_any_case() {
        for name in [
            "Deployment",
            "deployment",
            "DEPLOYMENTS",
            "deployments",
            "deploy",
            "Deploy",
        ] {
            let r = find(&list(), name).unwrap_or_else(|| panic!("{name} resolves"));
            assert_eq!(
                (
                    r.resource.api_version.as_str(),
                    r.resource.kind.as_str(),
                    r.resource.plural.as_str()
                ),
                ("apps/v1", "Deployment", "deployments")
            );
            assert!(r.namespaced);
        }
        assert!(find(&list(), "deployments/status").is_none());
        assert!(find(&list(), "Pod").is_none());
    }

    #[tokio::test]
    async fn an_unavailable_group_is_skipped_and_named_when_the_kind_is_not_found() {
        let resolver =
            Resolver::new(berth_devcluster::fake_api::client_with_an_unavailable_aggregated_api());
        let deploy = resolver
            .resolve("", "deploy")
            .await
            .expect("found past the broken group");
        assert_eq!(deploy.resource.api_version, "apps/v1");
        assert_eq!(deploy.resource.kind, "Deployment");
        match resolver.resolve("", "PodMetrics").await {
            Err(e @ ResolveError::Incomplete { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains("PodMetrics") && text.contains("metrics.k8s.io/v1beta1"),
                    "{text}"
                );
            }
            other => panic!("expected Incomplete, not a definite answer: {other:?}"),
        }
        // A kind missing from a fully answering cluster part is still NotFound.
        assert!(matches!(
            resolver.resolve("v1", "Widget").await,
            Err(ResolveError::NotFound { .. })
        ));
    }
}
