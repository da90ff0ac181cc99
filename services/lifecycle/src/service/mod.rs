//! The gRPC adapter of the lifecycle service: each RPC parses its request into domain values
//! (`convert`), calls the writer or the store, and answers; its errors become a `Status` in
//! one place (`error`).
//!
//! - `write`: Update, Remove, the workers' reports and the cluster's version;
//! - `read`: Get, List, Watch, Dump, GetSpec and ValidateSettings.

#[cfg(test)]
mod cost;
mod read;
mod repositories;
mod write;

use std::pin::Pin;
use std::sync::Arc;

use berth_lifecycle_core::{Owner, PackageKey};
use berth_proto::lifecycle::lifecycle_server::Lifecycle;
use berth_proto::lifecycle::{
    AnswerValidationRequest, AnswerValidationResponse, ClusterVersionReport,
    ClusterVersionReportResponse, DeleteRepositoryRequest, DeleteRepositoryResponse,
    GetSpecRequest, OperatorsHealth, OperatorsHealthResponse, OwnedRemove, OwnedSuspend,
    OwnedUpdate, PutRepositoryResponse, ReleaseHealth, ReleaseHealthResponse, ReportBatchRequest,
    ReportRequest, ReportResponse, RepositoryDefinition, Spec, SuspendChange,
};
use berth_proto::v1;
use futures::Stream;
use tokio::sync::broadcast;
use tonic::{Request, Response, Status};

use crate::convert;
use crate::error::Error;
use crate::store::Store;
use crate::validation::Validations;
use crate::writer::Writer;

#[derive(Clone)]
pub struct LifecycleService {
    store: Store,
    /// Every write of package state goes through it.
    writer: Writer,
    broker: berth_clients::Broker,
    repositories: Arc<berth_package::Repositories>,
    validations: Validations,
    /// The bounded jq evaluators settings conversions run on.
    jq: berth_jq::Jq,
}

impl LifecycleService {
    pub fn new(
        store: Store,
        writer: Writer,
        broker: berth_clients::Broker,
        repositories: Arc<berth_package::Repositories>,
        validations: Validations,
        jq: berth_jq::Jq,
    ) -> Self {
        LifecycleService {
            store,
            writer,
            broker,
            repositories,
            validations,
            jq,
        }
    }

    /// Notifications of package changes, as Watch streams get them.
    pub(crate) fn subscribe_changes(&self) -> broadcast::Receiver<Option<PackageKey>> {
        self.writer.changes().subscribe()
    }

    /// Listens to the replicas' database (PostgreSQL) until `shutdown`: package changes reach
    /// Watch streams and the metrics, stored validation answers their waiting validation.
    pub async fn listen(&self, shutdown: tokio_util::sync::CancellationToken) {
        use berth_sql::listen::Notice;
        // Answers heard and not yet looked up; when full, the next reconnection looks every
        // pending request up.
        let (answers, mut answered) = tokio::sync::mpsc::channel::<Option<String>>(256);
        let validations = self.validations.clone();
        let deliver = tokio::spawn(async move {
            while let Some(id) = answered.recv().await {
                validations.notice(id).await;
            }
        });
        let url = self.store.database_url().to_owned();
        let changes = self.writer.changes().clone();
        berth_sql::listen::relay(
            &url,
            &[crate::store::CHANGES_CHANNEL, crate::store::ANSWERS_CHANNEL],
            |notice| match notice {
                Notice::Message { channel, payload }
                    if channel == crate::store::CHANGES_CHANNEL =>
                {
                    changes.heard(Some(PackageKey::from_issued(payload.to_owned())));
                }
                Notice::Message { payload, .. } => {
                    let _ = answers.try_send(Some(payload.to_owned()));
                }
                Notice::Reconnected => {
                    changes.heard(None);
                    let _ = answers.try_send(None);
                }
            },
            shutdown,
        )
        .await;
        drop(answers);
        let _ = deliver.await;
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<v1::Package, Status>> + Send>>;

/// The RPCs, each a call of an inherent method; `?` maps its error to a `Status`.
#[tonic::async_trait]
impl Lifecycle for LifecycleService {
    #[tracing::instrument(skip_all, fields(package.key))]
    async fn update(
        &self,
        req: Request<v1::UpdateRequest>,
    ) -> Result<Response<v1::UpdateResponse>, Status> {
        Ok(Response::new(
            self.apply_update(req.into_inner(), Owner::Api).await?,
        ))
    }

    #[tracing::instrument(skip_all, fields(package.key))]
    async fn remove(
        &self,
        req: Request<v1::RemoveRequest>,
    ) -> Result<Response<v1::RemoveResponse>, Status> {
        Ok(Response::new(
            self.apply_remove(req.into_inner(), Owner::Api).await?,
        ))
    }

    #[tracing::instrument(skip_all, fields(package.key))]
    async fn suspend(
        &self,
        req: Request<SuspendChange>,
    ) -> Result<Response<v1::SuspendResponse>, Status> {
        Ok(Response::new(
            self.apply_suspend(req.into_inner(), Owner::Api).await?,
        ))
    }

    #[tracing::instrument(skip_all, fields(package.key, owner))]
    async fn update_owned(
        &self,
        req: Request<OwnedUpdate>,
    ) -> Result<Response<v1::UpdateResponse>, Status> {
        let OwnedUpdate { owner, update } = req.into_inner();
        let owner = convert::owner(owner).map_err(Error::from)?;
        let update = update
            .ok_or(convert::RequestError::Missing("update"))
            .map_err(Error::from)?;
        Ok(Response::new(self.apply_update(update, owner).await?))
    }

    #[tracing::instrument(skip_all, fields(package.key, owner))]
    async fn remove_owned(
        &self,
        req: Request<OwnedRemove>,
    ) -> Result<Response<v1::RemoveResponse>, Status> {
        let OwnedRemove { owner, remove } = req.into_inner();
        let owner = convert::owner(owner).map_err(Error::from)?;
        let remove = remove
            .ok_or(convert::RequestError::Missing("remove"))
            .map_err(Error::from)?;
        Ok(Response::new(self.apply_remove(remove, owner).await?))
    }

    #[tracing::instrument(skip_all, fields(package.key, owner))]
    async fn suspend_owned(
        &self,
        req: Request<OwnedSuspend>,
    ) -> Result<Response<v1::SuspendResponse>, Status> {
        let OwnedSuspend { owner, change } = req.into_inner();
        let owner = convert::owner(owner).map_err(Error::from)?;
        let change = change
            .ok_or(convert::RequestError::Missing("change"))
            .map_err(Error::from)?;
        Ok(Response::new(self.apply_suspend(change, owner).await?))
    }

    #[tracing::instrument(skip_all, fields(repository = %req.get_ref().name))]
    async fn put_repository(
        &self,
        req: Request<RepositoryDefinition>,
    ) -> Result<Response<PutRepositoryResponse>, Status> {
        Ok(Response::new(
            LifecycleService::put_repository(self, req.into_inner()).await?,
        ))
    }

    #[tracing::instrument(skip_all, fields(repository = %req.get_ref().name))]
    async fn delete_repository(
        &self,
        req: Request<DeleteRepositoryRequest>,
    ) -> Result<Response<DeleteRepositoryResponse>, Status> {
        LifecycleService::delete_repository(self, req.into_inner()).await?;
        Ok(Response::new(DeleteRepositoryResponse {}))
    }

    async fn dump(
        &self,
        req: Request<v1::DumpRequest>,
    ) -> Result<Response<v1::DumpResponse>, Status> {
        Ok(Response::new(self.dump_page(req.into_inner()).await?))
    }

    async fn validate_settings(
        &self,
        req: Request<v1::ValidateSettingsRequest>,
    ) -> Result<Response<v1::ValidateSettingsResponse>, Status> {
        Ok(Response::new(self.validate(req.into_inner()).await?))
    }

    async fn get(&self, req: Request<v1::GetRequest>) -> Result<Response<v1::Package>, Status> {
        Ok(Response::new(self.get_package(req.into_inner()).await?))
    }

    async fn list(
        &self,
        req: Request<v1::ListRequest>,
    ) -> Result<Response<v1::ListResponse>, Status> {
        Ok(Response::new(self.list_page(req.into_inner()).await?))
    }

    type WatchStream = WatchStream;

    async fn watch(&self, req: Request<v1::WatchRequest>) -> Result<Response<WatchStream>, Status> {
        Ok(Response::new(self.watch_packages(req.into_inner())?))
    }

    async fn get_spec(&self, req: Request<GetSpecRequest>) -> Result<Response<Spec>, Status> {
        // Registry credentials of a defined repository go to workers only (and, in one
        // process without certificates, to the worker beside it).
        let worker = matches!(
            berth_runtime::authz::caller_role(&req),
            None | Some(berth_runtime::Role::Worker)
        );
        let mut spec = self.spec(req.into_inner()).await?;
        spec.repository_definition = self.definition_of(&spec.repository).await?;
        if !worker && let Some(def) = spec.repository_definition.as_mut() {
            def.credentials = None;
        }
        Ok(Response::new(spec))
    }

    /// The release service reports the cluster's version (at its start and every 30 s);
    /// a change runs a scheduling pass.
    #[tracing::instrument(skip_all, fields(git_version = %req.get_ref().git_version))]
    async fn report_cluster_version(
        &self,
        req: Request<ClusterVersionReport>,
    ) -> Result<Response<ClusterVersionReportResponse>, Status> {
        self.record_cluster_version(req.into_inner()).await?;
        Ok(Response::new(ClusterVersionReportResponse {}))
    }

    /// The release service reports what a Running package's drift watch sees; Ready follows.
    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().key, ready = req.get_ref().ready))]
    async fn report_release_health(
        &self,
        req: Request<ReleaseHealth>,
    ) -> Result<Response<ReleaseHealthResponse>, Status> {
        let applied = self.apply_release_health(req.into_inner()).await?;
        Ok(Response::new(ReleaseHealthResponse { applied }))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().key, status = req.get_ref().status))]
    async fn report_operators_health(
        &self,
        req: Request<OperatorsHealth>,
    ) -> Result<Response<OperatorsHealthResponse>, Status> {
        let applied = self.apply_operators_health(req.into_inner()).await?;
        Ok(Response::new(OperatorsHealthResponse { applied }))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn answer_validation(
        &self,
        req: Request<AnswerValidationRequest>,
    ) -> Result<Response<AnswerValidationResponse>, Status> {
        if !self.validations.receive(req.into_inner()).await {
            tracing::debug!("a validation answer nobody waits for (late, or another package's)");
        }
        Ok(Response::new(AnswerValidationResponse {}))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().key, generation = req.get_ref().generation))]
    async fn report(
        &self,
        req: Request<ReportRequest>,
    ) -> Result<Response<ReportResponse>, Status> {
        let accepted = self.apply_reports(vec![req.into_inner()]).await?;
        Ok(Response::new(ReportResponse { accepted }))
    }

    #[tracing::instrument(skip_all, fields(package.key, generation, reports = req.get_ref().reports.len()))]
    async fn report_batch(
        &self,
        req: Request<ReportBatchRequest>,
    ) -> Result<Response<ReportResponse>, Status> {
        let ReportBatchRequest { reports } = req.into_inner();
        if let Some(first) = reports.first() {
            let span = tracing::Span::current();
            span.record("package.key", first.key.as_str());
            span.record("generation", first.generation);
        }
        let accepted = self.apply_reports(reports).await?;
        Ok(Response::new(ReportResponse { accepted }))
    }
}
