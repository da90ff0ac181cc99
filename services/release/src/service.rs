//! The gRPC adapter: parses requests at the edge, calls the [`ReleaseManager`], and maps
//! errors to status codes (bad charts and values are the caller's problem, an unreachable
//! cluster is retryable, everything else is internal).

use crate::apply::ObjectKey;
use crate::manager::{PlanAction, ReleaseError, ReleaseId, ReleaseManager};
use crate::record::StoreError;
use crate::record::format::FormatError;
use berth_proto::release as pb;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// Longest a Status call with `wait_ms` holds on; callers that wait longer call again.
const MAX_STATUS_WAIT: Duration = Duration::from_secs(60);

/// Longest a ClusterVersion call waits for the API server.
const CLUSTER_VERSION_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest `values_json` accepted, so one request cannot make the service parse gigabytes.
const MAX_VALUES_BYTES: usize = 4 << 20;
/// Largest nesting accepted in `values_json`.
const MAX_VALUES_DEPTH: usize = 64;

#[derive(Clone)]
pub struct ReleaseService {
    manager: ReleaseManager,
}

impl ReleaseService {
    pub fn new(client: kube::Client) -> Self {
        ReleaseService {
            manager: ReleaseManager::new(client),
        }
    }

    /// Switches drift repair (on by default) on or off; see `manager::drift`.
    pub fn with_drift_repair(mut self, on: bool) -> Self {
        self.manager = self.manager.with_drift_repair(on);
        self
    }

    /// Keeps at most `revisions` release records per release (default
    /// [`crate::manager::HISTORY_MAX`]).
    pub fn with_history_max(mut self, revisions: usize) -> Self {
        self.manager = self.manager.with_history_max(revisions);
        self
    }

    /// Bounds every render's time and output (default [`crate::manager::RenderLimits`]).
    pub fn with_render_limits(mut self, limits: crate::manager::RenderLimits) -> Self {
        self.manager = self.manager.with_render_limits(limits);
        self
    }

    /// Ends the service's background work (drift watches) when `shutdown` is cancelled.
    pub fn with_shutdown(mut self, shutdown: tokio_util::sync::CancellationToken) -> Self {
        self.manager = self.manager.with_shutdown(shutdown);
        self
    }

    /// Resumes drift repair for the releases berth deployed before this process started
    /// (see [`ReleaseManager::resume_drift_repair`]); logs the outcome. Run once at start.
    pub async fn resume_drift_repair(&self) {
        match self.manager.resume_drift_repair().await {
            Ok(n) => tracing::info!(releases = n, "drift repair resumed"),
            Err(e) => tracing::warn!(error = %e, "cannot resume drift repair"),
        }
    }
}

fn to_status(e: ReleaseError) -> Status {
    // Render errors nest (helm's `include` chains): the message is bounded to fit a header.
    let message = berth_telemetry::bounded_status_message(e.to_string());
    match &e {
        ReleaseError::InvalidArgument(_)
        | ReleaseError::Render(_)
        | ReleaseError::Store(StoreError::Format {
            source: FormatError::TooLargeToStore { .. },
            ..
        }) => Status::invalid_argument(message),
        ReleaseError::NotFound(_) => Status::failed_precondition(message),
        _ if e.is_unavailable() => Status::unavailable(message),
        _ => Status::internal(message),
    }
}

fn object_ref(k: ObjectKey) -> pb::ObjectRef {
    pb::ObjectRef {
        api_version: k.api_version,
        kind: k.kind,
        namespace: k.namespace,
        name: k.name,
    }
}

fn depth(v: &serde_json::Value) -> usize {
    match v {
        serde_json::Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Parses `values_json`: empty means no values; otherwise a bounded JSON object.
fn parse_values(text: &str) -> Result<serde_json::Value, Status> {
    if text.trim().is_empty() {
        return Ok(serde_json::json!({}));
    }
    if text.len() > MAX_VALUES_BYTES {
        return Err(Status::invalid_argument(format!(
            "values_json is larger than {MAX_VALUES_BYTES} bytes"
        )));
    }
    let v: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| Status::invalid_argument(format!("values_json: {e}")))?;
    let v = berth_helm::render::values::as_go_numbers(v);
    if !v.is_object() {
        return Err(Status::invalid_argument(
            "values_json must be a JSON object",
        ));
    }
    if depth(&v) > MAX_VALUES_DEPTH {
        return Err(Status::invalid_argument(format!(
            "values_json nests deeper than {MAX_VALUES_DEPTH}"
        )));
    }
    Ok(v)
}

/// A request's release name and namespace, checked.
fn release_id(name: &str, namespace: &str) -> Result<ReleaseId, Status> {
    ReleaseId::new(name, namespace).map_err(to_status)
}

#[tonic::async_trait]
impl pb::releases_server::Releases for ReleaseService {
    #[tracing::instrument(skip_all, fields(release.name = %request.get_ref().name, release.namespace = %request.get_ref().namespace))]
    async fn install(
        &self,
        request: Request<pb::InstallRequest>,
    ) -> Result<Response<pb::InstallResponse>, Status> {
        let req = request.into_inner();
        let values = parse_values(&req.values_json)?;
        let files = req.files.into_iter().map(|f| (f.path, f.content)).collect();
        let installed = self
            .manager
            .install(&release_id(&req.name, &req.namespace)?, files, values)
            .await
            .map_err(to_status)?;
        tracing::info!(
            revision = installed.revision,
            unchanged = installed.unchanged,
            objects = installed.objects.len(),
            "installed"
        );
        Ok(Response::new(pb::InstallResponse {
            revision: installed.revision,
            objects: installed.objects.into_iter().map(object_ref).collect(),
        }))
    }

    #[tracing::instrument(skip_all, fields(release.name = %request.get_ref().name, release.namespace = %request.get_ref().namespace))]
    async fn apply_crds(
        &self,
        request: Request<pb::InstallRequest>,
    ) -> Result<Response<pb::ApplyCrdsResponse>, Status> {
        let req = request.into_inner();
        let values = parse_values(&req.values_json)?;
        let files = req.files.into_iter().map(|f| (f.path, f.content)).collect();
        let applied = self
            .manager
            .apply_chart_crds(&release_id(&req.name, &req.namespace)?, files, values)
            .await
            .map_err(to_status)?;
        tracing::info!(crds = applied.len(), "CRDs applied");
        Ok(Response::new(pb::ApplyCrdsResponse {
            crds: applied.into_iter().map(|a| object_ref(a.key)).collect(),
        }))
    }

    async fn cluster_version(
        &self,
        _request: Request<pb::ClusterVersionRequest>,
    ) -> Result<Response<pb::ClusterVersionResponse>, Status> {
        let git_version =
            tokio::time::timeout(CLUSTER_VERSION_TIMEOUT, self.manager.cluster_version())
                .await
                .map_err(|_| {
                    Status::unavailable("the Kubernetes API server did not answer /version in time")
                })?
                .map_err(|e| {
                    Status::unavailable(format!("the Kubernetes API server's /version: {e}"))
                })?;
        Ok(Response::new(pb::ClusterVersionResponse { git_version }))
    }

    #[tracing::instrument(skip_all, fields(release.name = %request.get_ref().name, release.namespace = %request.get_ref().namespace))]
    async fn uninstall(
        &self,
        request: Request<pb::UninstallRequest>,
    ) -> Result<Response<pb::UninstallResponse>, Status> {
        let req = request.into_inner();
        let done = self
            .manager
            .uninstall(&release_id(&req.name, &req.namespace)?)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::UninstallResponse {
            found: done.found,
            deleted: done.deleted.into_iter().map(object_ref).collect(),
        }))
    }

    #[tracing::instrument(skip_all, fields(release.name = %request.get_ref().name, release.namespace = %request.get_ref().namespace))]
    async fn status(
        &self,
        request: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let req = request.into_inner();
        let seen = if req.wait_ms > 0 {
            let wait = Duration::from_millis(req.wait_ms as u64).min(MAX_STATUS_WAIT);
            match self
                .manager
                .wait_ready(&release_id(&req.name, &req.namespace)?, wait)
                .await
            {
                Ok(seen) => seen,
                // No release (yet): answer as Status does, `found: false`.
                Err(ReleaseError::NotFound(_)) => self
                    .manager
                    .status(&release_id(&req.name, &req.namespace)?)
                    .await
                    .map_err(to_status)?,
                Err(e) => return Err(to_status(e)),
            }
        } else {
            self.manager
                .status(&release_id(&req.name, &req.namespace)?)
                .await
                .map_err(to_status)?
        };
        Ok(Response::new(pb::StatusResponse {
            found: seen.found,
            revision: seen.revision,
            objects: seen.objects.into_iter().map(object_ref).collect(),
            ready: seen.ready,
            drift: seen
                .drift
                .into_iter()
                .map(|d| pb::DriftEvent {
                    object: Some(object_ref(d.object)),
                    kind: d.kind.as_str().into(),
                    fields: d.fields,
                    at: d.at,
                    repaired: d.repaired,
                    error: d.error,
                })
                .collect(),
            not_ready: seen.not_ready,
        }))
    }

    #[tracing::instrument(skip_all, fields(release.name = %request.get_ref().name, release.namespace = %request.get_ref().namespace))]
    async fn render(
        &self,
        request: Request<pb::RenderRequest>,
    ) -> Result<Response<pb::RenderResponse>, Status> {
        let req = request.into_inner();
        let values = parse_values(&req.values_json)?;
        let files = req.files.into_iter().map(|f| (f.path, f.content)).collect();
        let rendered = self
            .manager
            .render_for_cluster(&release_id(&req.name, &req.namespace)?, files, values)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::RenderResponse {
            manifest: berth_helm::template::output(&rendered, req.include_crds),
            notes: rendered.notes,
        }))
    }

    #[tracing::instrument(skip_all, fields(release.name = %request.get_ref().name, release.namespace = %request.get_ref().namespace))]
    async fn plan(
        &self,
        request: Request<pb::InstallRequest>,
    ) -> Result<Response<pb::PlanResponse>, Status> {
        let req = request.into_inner();
        let values = parse_values(&req.values_json)?;
        let files = req.files.into_iter().map(|f| (f.path, f.content)).collect();
        let changes = self
            .manager
            .plan(&release_id(&req.name, &req.namespace)?, files, values)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::PlanResponse {
            changes: changes
                .into_iter()
                .map(|c| pb::PlannedChange {
                    object: Some(object_ref(c.key)),
                    action: match c.action {
                        PlanAction::Create => pb::PlanAction::Create,
                        PlanAction::Update => pb::PlanAction::Update,
                        PlanAction::Delete => pb::PlanAction::Delete,
                        PlanAction::Unchanged => pb::PlanAction::Unchanged,
                    } as i32,
                    changed: c.changed,
                })
                .collect(),
        }))
    }

    #[tracing::instrument(skip_all, fields(release.name = %request.get_ref().name, release.namespace = %request.get_ref().namespace))]
    async fn history(
        &self,
        request: Request<pb::HistoryRequest>,
    ) -> Result<Response<pb::HistoryResponse>, Status> {
        let req = request.into_inner();
        let revisions = self
            .manager
            .history(&release_id(&req.name, &req.namespace)?)
            .await
            .map_err(to_status)?;
        Ok(Response::new(pb::HistoryResponse {
            revisions: revisions
                .into_iter()
                .map(|r| pb::Revision {
                    revision: r.revision,
                    status: r.status,
                    chart: r.chart,
                    app_version: r.app_version,
                    description: r.description,
                    updated: r.updated,
                })
                .collect(),
        }))
    }

    #[tracing::instrument(skip_all, fields(release.name = %request.get_ref().name, release.namespace = %request.get_ref().namespace))]
    async fn rollback(
        &self,
        request: Request<pb::RollbackRequest>,
    ) -> Result<Response<pb::InstallResponse>, Status> {
        let req = request.into_inner();
        let done = self
            .manager
            .rollback(&release_id(&req.name, &req.namespace)?, req.revision)
            .await
            .map_err(to_status)?;
        tracing::info!(revision = done.revision, "rolled back");
        Ok(Response::new(pb::InstallResponse {
            revision: done.revision,
            objects: done.objects.into_iter().map(object_ref).collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_must_be_a_bounded_object() {
        assert!(parse_values("").is_ok());
        assert_eq!(
            parse_values("[1]").err().map(|s| s.code()),
            Some(tonic::Code::InvalidArgument)
        );
        let deep = format!("{}{}", "{\"a\":".repeat(70), "}".repeat(70));
        assert_eq!(
            parse_values(&deep).err().map(|s| s.code()),
            Some(tonic::Code::InvalidArgument)
        );
    }

    #[test]
    fn render_errors_are_invalid_argument() {
        let e = ReleaseError::Render(berth_helm::RenderError::Chart("x".into()));
        assert_eq!(to_status(e).code(), tonic::Code::InvalidArgument);
    }
}
