//! History: the release's revisions as `helm history` lists them.

use super::*;

/// One revision, as `helm history` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RevisionSummary {
    pub revision: i32,
    pub status: String,
    /// `<chart name>-<chart version>`.
    pub chart: String,
    pub app_version: String,
    pub description: String,
    pub updated: String,
}

impl ReleaseManager {
    /// Every revision berth wrote, oldest first; empty when the release does not exist (records
    /// berth did not write are not its history).
    pub async fn history(&self, release: &ReleaseId) -> Result<Vec<RevisionSummary>, ReleaseError> {
        let (name, namespace) = (release.name(), release.namespace());
        let store = self.store(namespace);
        Ok(store
            .history(name)
            .await?
            .iter()
            .map(|r| {
                let meta = |k: &str| {
                    r.chart
                        .metadata
                        .get(k)
                        .and_then(|v| v.as_str())
                        .unwrap_or_default()
                        .to_string()
                };
                RevisionSummary {
                    revision: r.version,
                    status: r.info.status.clone(),
                    chart: format!("{}-{}", meta("name"), meta("version")),
                    app_version: meta("appVersion"),
                    description: r.info.description.clone(),
                    updated: r.info.last_deployed.clone(),
                }
            })
            .collect())
    }
}
