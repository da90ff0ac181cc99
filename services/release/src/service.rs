//! The gRPC adapter: parses requests at the edge, calls the [`ReleaseManager`], and maps
//! errors to status codes (bad charts and values are the caller's problem, an unreachable
//! cluster is retryable, everything else is internal).

use crate::apply::ObjectKey;
use crate::manager::{AppNamespace, Owner, PlanAction, ReleaseError, ReleaseId, ReleaseManager};
use crate::principal::{PrincipalError, Rights};
use crate::record::format::FormatError;
use crate::record::{RecordKey, StoreError};
use berth_clients::scope::{PackageScope, PackageScopes, ScopeError};
use berth_proto::release as pb;
use std::time::Duration;
use tonic::{Request, Response, Status};

/// Longest a Status or Install call with `wait_ms` holds on; callers that wait longer call
/// (Status) again.
const MAX_STATUS_WAIT: Duration = Duration::from_secs(60);

/// How long a call asking for `wait_ms` (> 0) waits for readiness.
fn requested_wait(wait_ms: i32) -> Duration {
    Duration::from_millis(wait_ms as u64).min(MAX_STATUS_WAIT)
}

/// Largest `values` accepted (encoded), so one request cannot make the service convert
/// gigabytes.
const MAX_VALUES_BYTES: usize = 4 << 20;
/// Largest nesting accepted in `values`.
const MAX_VALUES_DEPTH: usize = 64;

#[derive(Clone)]
pub struct ReleaseService {
    manager: ReleaseManager,
    /// Lifecycle, asked what a request's package is. Without it, requests naming a package
    /// are refused and the others are not confined (only in-process tests run so).
    scopes: Option<PackageScopes>,
}

impl ReleaseService {
    /// The service for `client`'s cluster, writing and checking release records with `key`
    /// (every replica of one installation shares it).
    pub fn new(client: kube::Client, key: RecordKey) -> Self {
        ReleaseService {
            manager: ReleaseManager::new(client, key),
            scopes: None,
        }
    }

    /// Looks packages up in lifecycle through `scopes`: Install and ApplyCrds then need a
    /// package, and an App's release is confined to its namespace.
    pub fn with_package_scopes(mut self, scopes: PackageScopes) -> Self {
        self.manager = self.manager.with_package_scopes(scopes.clone());
        self.scopes = Some(scopes);
        self
    }

    /// Whose `release` is, from lifecycle's answer about `package`: the package's key and, for
    /// an App, the namespace it is confined to. An App's release must be its own (its name, in
    /// its namespace). `required`: a request without a package is refused (Install, ApplyCrds,
    /// Uninstall); otherwise it has no owner and is not confined (the operator's Render and
    /// Plan).
    async fn owner(
        &self,
        package: &str,
        release: &ReleaseId,
        required: bool,
    ) -> Result<Owner, Status> {
        let Some(scopes) = &self.scopes else {
            if package.is_empty() {
                return Ok(Owner::default());
            }
            return Err(Status::failed_precondition(format!(
                "package {package}: this release service has no lifecycle endpoint to look it up"
            )));
        };
        if package.is_empty() {
            if required {
                return Err(Status::invalid_argument(
                    "package: required (the key of the package the release belongs to)",
                ));
            }
            return Ok(Owner::default());
        }
        match scopes.get(package).await.map_err(|e| e.to_status())? {
            PackageScope::Module { name } => {
                if release.name() != name {
                    return Err(to_status(ReleaseError::Confined(format!(
                        "release {release} is not module {package}'s: a module's release is named {name}"
                    ))));
                }
                Ok(Owner {
                    package: package.to_owned(),
                    app_namespace: None,
                })
            }
            PackageScope::App { name, namespace } => {
                if release.name() != name || release.namespace() != namespace {
                    return Err(to_status(ReleaseError::Confined(format!(
                        "release {release} is not app {package}'s: an app's release is {namespace}/{name}"
                    ))));
                }
                Ok(Owner {
                    package: package.to_owned(),
                    app_namespace: Some(namespace),
                })
            }
        }
    }

    /// The namespace `release` is confined to (see [`Self::owner`]).
    async fn confinement(
        &self,
        package: &str,
        release: &ReleaseId,
        required: bool,
    ) -> Result<Option<AppNamespace>, Status> {
        let owner = self.owner(package, release, required).await?;
        Ok(owner.app_namespace.map(AppNamespace))
    }

    /// Acts for packages as their principals (see [`ReleaseManager::with_principals`]): the
    /// principal RPCs work, and what is written for a package goes through its identity.
    /// Needs [`ReleaseService::with_package_scopes`]: what a package is comes from lifecycle.
    pub fn with_principals(
        mut self,
        endpoint: crate::principal::HookEndpoint,
        pod_security: crate::principal::PodSecurity,
    ) -> Self {
        self.manager = self.manager.with_principals(endpoint, pod_security);
        self
    }

    /// The principals and lifecycle's answers, which every principal RPC needs.
    fn principals(&self) -> Result<(&crate::principal::Principals, &PackageScopes), Status> {
        match (self.manager.principals(), &self.scopes) {
            (Some(p), Some(s)) => Ok((p, s)),
            _ => Err(Status::unimplemented(
                "this release service acts as no package (no lifecycle endpoint, or principals off)",
            )),
        }
    }

    /// Makes `package`'s principal what lifecycle says it is now.
    async fn ensure_principal_of(
        &self,
        package: &str,
    ) -> Result<(PackageScope, Vec<crate::apply::ObjectKey>), Status> {
        let (principals, scopes) = self.principals()?;
        let facts = scopes.facts(package).await.map_err(|e| e.to_status())?;
        let rights = Rights::of(&facts.scope, facts.rbac.as_ref());
        let written = principals
            .ensure(&facts.scope, &rights)
            .await
            .map_err(principal_status)?;
        Ok((facts.scope, written))
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

    /// Keeps the release metrics in `metrics` (see [`crate::manager::ReleaseMetrics`]).
    pub fn with_metrics(mut self, metrics: &berth_runtime::Metrics) -> Self {
        self.manager = self.manager.with_metrics(metrics);
        self
    }

    /// Ends the service's background work (drift watches) when `shutdown` is cancelled.
    /// Tells lifecycle each change of a watched release's health (see `manager::health`).
    pub fn with_health(mut self, health: crate::manager::HealthReporter) -> Self {
        self.manager = self.manager.with_health(health);
        self
    }

    pub fn with_shutdown(mut self, shutdown: tokio_util::sync::CancellationToken) -> Self {
        self.manager = self.manager.with_shutdown(shutdown);
        self
    }

    /// Shares the releases' drift repair with the other replicas as `config` says (see
    /// `manager::shards`).
    pub fn with_shards(mut self, config: crate::manager::ShardConfig) -> Self {
        self.manager = self.manager.with_shards(config);
        self
    }

    /// Takes part in the shard Leases until `shutdown` (see
    /// [`ReleaseManager::run_shards`]); returns the Lease loop to await before exiting.
    pub fn run_shards(
        &self,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Option<tokio::task::JoinHandle<()>> {
        self.manager.run_shards(shutdown)
    }
}

/// The service's one mapping of its errors to gRPC codes, exhaustive: a new error variant
/// breaks the build here, where its code must be chosen.
fn to_status(e: ReleaseError) -> Status {
    use tonic::Code;
    let code = match &e {
        ReleaseError::InvalidArgument(_) | ReleaseError::Render(_) => Code::InvalidArgument,
        // A release too large to record is the chart's or the values' doing.
        ReleaseError::Store(StoreError::Format {
            source: FormatError::TooLargeToStore { .. },
            ..
        }) => Code::InvalidArgument,
        ReleaseError::Store(s) if s.is_unavailable() => Code::Unavailable,
        ReleaseError::Store(_) => Code::Internal,
        ReleaseError::Apply(a) if a.is_unavailable() => Code::Unavailable,
        // What the package may not do: the API server refused its principal's write.
        // Retrying the same chart cannot help.
        ReleaseError::Apply(crate::apply::ApplyError::Refused { .. }) => Code::PermissionDenied,
        ReleaseError::Apply(crate::apply::ApplyError::Taken(_)) => Code::FailedPrecondition,
        ReleaseError::Apply(_) => Code::Internal,
        ReleaseError::Task(_) => Code::Internal,
        // A render limit: the one status that says "this chart and these values exceed what a
        // render may use" (workers fail the generation for good on it, see the worker's
        // `CallError::is_render_limit`).
        ReleaseError::RenderLimit(_) => Code::ResourceExhausted,
        ReleaseError::NotFound(_) => Code::FailedPrecondition,
        ReleaseError::Confined(_) | ReleaseError::NotOwned(_) => Code::PermissionDenied,
        ReleaseError::Busy(_) => Code::Unavailable,
        ReleaseError::RemoveBlocked(_) => Code::FailedPrecondition,
        ReleaseError::Principal(PrincipalError::NotServed(_)) => Code::Unimplemented,
        ReleaseError::Principal(p) if p.is_unavailable() => Code::Unavailable,
        ReleaseError::Principal(_) => Code::Internal,
    };
    // Render errors nest (helm's `include` chains): the message is bounded to fit a header.
    let message = berth_runtime::bounded_status_message(e.to_string());
    // What callers act on carries its reason (`berth_proto::failure`).
    match &e {
        ReleaseError::RemoveBlocked(_) => {
            berth_proto::failure::status(code, message, berth_proto::failure::REMOVE_BLOCKED)
        }
        ReleaseError::Apply(crate::apply::ApplyError::Taken(_)) => {
            berth_proto::failure::status(code, message, berth_proto::failure::OBJECT_TAKEN)
        }
        _ => Status::new(code, message),
    }
}

/// A Plan's error: as [`to_status`], except that an object the API server refuses (the dry
/// run's 400 or 422, a kind it does not serve) is the chart's or the values' fault, and says so
/// with `InvalidArgument` (a ValidateSettings answers such settings as invalid).
fn plan_status(e: ReleaseError) -> Status {
    use crate::apply::ApplyError;
    let refused = match &e {
        ReleaseError::Apply(
            ApplyError::Invalid { .. }
            | ApplyError::UnknownKind { .. }
            | ApplyError::Refused { .. },
        ) => true,
        ReleaseError::Apply(ApplyError::Kube {
            source: kube::Error::Api(s),
            ..
        }) => matches!(s.code, 400 | 404 | 422),
        _ => false,
    };
    if refused {
        Status::invalid_argument(berth_runtime::bounded_status_message(e.to_string()))
    } else {
        to_status(e)
    }
}

/// A principal's error as the status its RPC answers.
fn principal_status(e: PrincipalError) -> Status {
    to_status(ReleaseError::Principal(e))
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

/// A request's `values` as JSON: unset means no values; otherwise bounded in size and depth.
fn parse_values(values: Option<&prost_types::Struct>) -> Result<serde_json::Value, Status> {
    let Some(values) = values else {
        return Ok(serde_json::json!({}));
    };
    let size = prost::Message::encoded_len(values);
    if size > MAX_VALUES_BYTES {
        return Err(Status::invalid_argument(format!(
            "values are {size} bytes, larger than {MAX_VALUES_BYTES}"
        )));
    }
    let v = berth_helm::render::values::as_go_numbers(berth_proto::json::from_struct(values));
    if depth(&v) > MAX_VALUES_DEPTH {
        return Err(Status::invalid_argument(format!(
            "values nest deeper than {MAX_VALUES_DEPTH}"
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
        let values = parse_values(req.values.as_ref())?;
        let release = release_id(&req.name, &req.namespace)?;
        let owner = self.owner(&req.package, &release, true).await?;
        let files = req.files.into_iter().map(|f| (f.path, f.content)).collect();
        let installed = self
            .manager
            .install(&release, files, values, &owner)
            .await
            .map_err(to_status)?;
        tracing::info!(
            revision = installed.revision,
            unchanged = installed.unchanged,
            objects = installed.objects.len(),
            "installed"
        );
        let mut response = pb::InstallResponse {
            revision: installed.revision,
            objects: installed.objects.into_iter().map(object_ref).collect(),
            ..Default::default()
        };
        if req.wait_ms > 0 {
            let wait = requested_wait(req.wait_ms);
            let seen = self
                .manager
                .wait_revision(
                    &release,
                    installed.revision,
                    &installed.manifest,
                    tokio::time::Instant::now() + wait,
                )
                .await;
            // The install itself succeeded: a wait that could not start (e.g. a kind's
            // discovery failed) leaves readiness to the caller's Status calls.
            match seen {
                Ok(seen) => {
                    response.waited = true;
                    response.ready = seen.ready;
                    response.not_ready = seen.not_ready;
                }
                Err(e) => tracing::warn!(error = %e, "waiting for readiness after the install"),
            }
        }
        Ok(Response::new(response))
    }

    #[tracing::instrument(skip_all, fields(release.name = %request.get_ref().name, release.namespace = %request.get_ref().namespace))]
    async fn apply_crds(
        &self,
        request: Request<pb::InstallRequest>,
    ) -> Result<Response<pb::ApplyCrdsResponse>, Status> {
        let req = request.into_inner();
        let values = parse_values(req.values.as_ref())?;
        let release = release_id(&req.name, &req.namespace)?;
        let app = self.confinement(&req.package, &release, true).await?;
        let files = req.files.into_iter().map(|f| (f.path, f.content)).collect();
        let applied = self
            .manager
            .apply_chart_crds(&release, files, values, app.as_ref())
            .await
            .map_err(to_status)?;
        tracing::info!(crds = applied.len(), "CRDs applied");
        Ok(Response::new(pb::ApplyCrdsResponse {
            crds: applied.into_iter().map(|a| object_ref(a.key)).collect(),
        }))
    }

    #[tracing::instrument(skip_all, fields(release.name = %request.get_ref().name, release.namespace = %request.get_ref().namespace))]
    async fn uninstall(
        &self,
        request: Request<pb::UninstallRequest>,
    ) -> Result<Response<pb::UninstallResponse>, Status> {
        let req = request.into_inner();
        let release = release_id(&req.name, &req.namespace)?;
        // Only the package's own release (a worker's certificate cannot remove another's).
        let owner = self.owner(&req.package, &release, true).await?;
        let done = self
            .manager
            .uninstall(&release, &owner)
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
            let wait = requested_wait(req.wait_ms);
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
        let values = parse_values(req.values.as_ref())?;
        let release = release_id(&req.name, &req.namespace)?;
        let app = self.confinement(&req.package, &release, false).await?;
        let files = req.files.into_iter().map(|f| (f.path, f.content)).collect();
        let rendered = self
            .manager
            .render_for_cluster(&release, files, values, app.as_ref())
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
        // A worker plans for a package (a ValidateRun) and must name it, to be confined as its
        // install would be; the operator may plan any chart.
        let worker =
            berth_runtime::authz::caller_role(&request) == Some(berth_runtime::Role::Worker);
        let req = request.into_inner();
        let values = parse_values(req.values.as_ref())?;
        let release = release_id(&req.name, &req.namespace)?;
        let app = self.confinement(&req.package, &release, worker).await?;
        let files = req.files.into_iter().map(|f| (f.path, f.content)).collect();
        let changes = self
            .manager
            .plan(
                &release,
                files,
                values,
                app.as_ref(),
                !req.package.is_empty(),
            )
            .await
            .map_err(plan_status)?;
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
            ..Default::default()
        }))
    }

    #[tracing::instrument(skip_all, fields(package.key = %request.get_ref().package))]
    async fn ensure_principal(
        &self,
        request: Request<pb::PrincipalRequest>,
    ) -> Result<Response<pb::EnsurePrincipalResponse>, Status> {
        let pb::PrincipalRequest { package } = request.into_inner();
        let (scope, written) = self.ensure_principal_of(&package).await?;
        let sa = scope.service_account();
        Ok(Response::new(pb::EnsurePrincipalResponse {
            username: sa.username(),
            namespace: sa.namespace,
            service_account: sa.name,
            written: written.into_iter().map(object_ref).collect(),
        }))
    }

    #[tracing::instrument(skip_all, fields(package.key = %request.get_ref().package))]
    async fn remove_principal(
        &self,
        request: Request<pb::PrincipalRequest>,
    ) -> Result<Response<pb::RemovePrincipalResponse>, Status> {
        let pb::PrincipalRequest { package } = request.into_inner();
        let (principals, scopes) = self.principals()?;
        let scope = match scopes.facts(&package).await {
            Ok(facts) if facts.present => {
                return Err(Status::failed_precondition(format!(
                    "package {package} is not being removed: its principal stays"
                )));
            }
            Ok(facts) => facts.scope,
            // Lifecycle forgot it (its Cleanup went through): what is left is named by the key.
            Err(ScopeError::Unknown(_)) => {
                let scope = PackageScope::of_key(&package);
                let names_ok = match &scope {
                    PackageScope::App { name, namespace } => {
                        berth_names::is_dns_label(name) && berth_names::is_dns_label(namespace)
                    }
                    PackageScope::Module { name } => berth_names::is_dns_label(name),
                };
                if !names_ok {
                    return Err(Status::invalid_argument(format!(
                        "package {package:?} is not a package key"
                    )));
                }
                scope
            }
            Err(e) => return Err(e.to_status()),
        };
        let deleted = principals.remove(&scope).await.map_err(principal_status)?;
        tracing::info!(deleted = deleted.len(), "principal removed");
        Ok(Response::new(pb::RemovePrincipalResponse {
            deleted: deleted.into_iter().map(object_ref).collect(),
        }))
    }

    #[tracing::instrument(skip_all, fields(package.key = %request.get_ref().package))]
    async fn mint_token(
        &self,
        request: Request<pb::PrincipalRequest>,
    ) -> Result<Response<pb::MintTokenResponse>, Status> {
        let pb::PrincipalRequest { package } = request.into_inner();
        let (principals, scopes) = self.principals()?;
        let scope = scopes.get(&package).await.map_err(|e| e.to_status())?;
        let minted = match principals.mint(&scope).await {
            Err(e) if crate::principal::missing_account(&e) => {
                // Its ServiceAccount is gone (removed by hand, or by a Remove this generation
                // overtook): made again as lifecycle says, then asked once more.
                self.ensure_principal_of(&package).await?;
                principals.mint(&scope).await
            }
            minted => minted,
        }
        .map_err(principal_status)?;
        let sa = scope.service_account();
        Ok(Response::new(pb::MintTokenResponse {
            token: minted.token,
            expires_unix: minted.expires_unix,
            server: minted.endpoint.server,
            ca_pem: minted.endpoint.ca_pem,
            namespace: sa.namespace.clone(),
            username: sa.username(),
            insecure_skip_tls_verify: minted.endpoint.insecure_skip_tls_verify,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_must_be_bounded() {
        assert_eq!(parse_values(None).unwrap(), serde_json::json!({}));
        let mut deep = serde_json::json!(1);
        for _ in 0..70 {
            deep = serde_json::json!({ "a": deep });
        }
        let deep = berth_proto::json::to_struct(&deep);
        assert_eq!(
            parse_values(Some(&deep)).err().map(|s| s.code()),
            Some(tonic::Code::InvalidArgument)
        );
        let big =
            berth_proto::json::to_struct(&serde_json::json!({"a": "x".repeat(MAX_VALUES_BYTES)}));
        let err = parse_values(Some(&big)).unwrap_err();
        assert_eq!(err.code(), tonic::Code::InvalidArgument);
        assert!(err.message().contains("larger than"), "{}", err.message());
    }

    #[test]
    fn confinement_refusals_are_permission_denied() {
        let e = ReleaseError::Confined("ClusterRoleBinding /x (cluster-scoped)".into());
        let status = to_status(e);
        assert_eq!(status.code(), tonic::Code::PermissionDenied);
        assert!(status.message().contains("ClusterRoleBinding /x"));
    }

    #[test]
    fn a_busy_service_is_unavailable_not_the_charts_fault() {
        let e = ReleaseError::Busy("every render slot stayed taken for 4s; try again".into());
        let status = to_status(e);
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert!(status.message().contains("render slot"), "{status}");
    }

    #[test]
    fn render_errors_are_invalid_argument() {
        let e = ReleaseError::Render(berth_helm::RenderError::Chart("x".into()));
        assert_eq!(to_status(e).code(), tonic::Code::InvalidArgument);
    }
}
