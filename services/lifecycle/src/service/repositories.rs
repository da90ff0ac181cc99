//! Repositories PackageRepository resources define (docs/decisions/package-repositories.md):
//! the controller puts and deletes them; an Update naming one is checked against the
//! configuration with it added, and a worker's spec carries its definition.

use std::borrow::Cow;

use berth_package::Repositories;
use berth_proto::lifecycle::{
    DeleteRepositoryRequest, PutRepositoryResponse, RepositoryDefinition,
};

use super::LifecycleService;
use crate::error::Error;

impl LifecycleService {
    /// Checks `def` against the configuration (a configured name wins; a directory must be
    /// under a repository root) and stores it.
    pub(super) async fn put_repository(
        &self,
        def: RepositoryDefinition,
    ) -> Result<PutRepositoryResponse, Error> {
        let source = self.defined_source(&def)?;
        if !self.store.put_repository(&def).await? {
            return Err(Error::TooManyRepositories { name: def.name });
        }
        tracing::info!(repository = %def.name, "repository defined");
        Ok(PutRepositoryResponse {
            source: source.describe(),
        })
    }

    pub(super) async fn delete_repository(
        &self,
        req: DeleteRepositoryRequest,
    ) -> Result<(), Error> {
        if self.store.delete_repository(&req.name).await? {
            tracing::info!(repository = %req.name, "repository definition deleted");
        }
        Ok(())
    }

    /// The defined repositories as Dump shows them: what each resolves to (or why it cannot
    /// be used now), without credentials.
    pub(super) async fn repository_docs(&self) -> Result<Vec<crate::dump::RepositoryDoc>, Error> {
        Ok(self
            .store
            .repositories()
            .await?
            .into_iter()
            .map(|def| crate::dump::RepositoryDoc {
                source: match self.defined_source(&def) {
                    Ok(source) => source.describe(),
                    Err(e) => format!("unusable: {e}"),
                },
                plain_http: def.plain_http,
                credentials: def.credentials.is_some(),
                name: def.name,
            })
            .collect())
    }

    fn defined_source(&self, def: &RepositoryDefinition) -> Result<berth_package::Source, Error> {
        let invalid = |reason: String| Error::RepositoryInvalid {
            name: def.name.clone(),
            reason,
        };
        let defined = berth_clients::repositories::defined(def).map_err(invalid)?;
        self.repositories
            .define(&def.name, defined)
            .map_err(invalid)
    }

    /// The definition of `repository` when a resource defines it (a DNS label the
    /// configuration does not resolve); `None` for what the configuration resolves (a
    /// configured name, or a directory under a root: the installation's own come first, and
    /// cost no read of the database).
    pub(super) async fn definition_of(
        &self,
        repository: &str,
    ) -> Result<Option<RepositoryDefinition>, Error> {
        if !berth_names::is_dns_label(repository)
            || self.repositories.check_exists(repository).is_ok()
        {
            return Ok(None);
        }
        Ok(self.store.repository(repository).await?)
    }

    /// The configuration an Update naming `repository` is checked against: the installation's,
    /// with `repository` added when a resource defines it.
    pub(super) async fn repositories_for(
        &self,
        repository: &str,
    ) -> Result<(Cow<'_, Repositories>, Option<RepositoryDefinition>), Error> {
        let Some(def) = self.definition_of(repository).await? else {
            return Ok((Cow::Borrowed(&*self.repositories), None));
        };
        let source = self.defined_source(&def)?;
        let with = self
            .repositories
            .with_defined(&def.name, source)
            .map_err(|reason| Error::RepositoryInvalid {
                name: def.name.clone(),
                reason,
            })?;
        Ok((Cow::Owned(with), Some(def)))
    }
}
