//! The hookevent gRPC adapter: checks requests, hands them to the watch manager, the scheduler
//! and the store, and maps their errors to gRPC codes (`error`).

use berth_names::{Generation, PackageKey};
use berth_operator::limits::MAX_OPERATORS_PER_PACKAGE;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use berth_proto::hookevent::hook_events_server::HookEvents;
use berth_proto::hookevent::{
    AdoptGenerationRequest, AdoptGenerationResponse, AnswerWebhookRequest, AnswerWebhookResponse,
    ApplyObjectOperationsRequest, ApplyObjectOperationsResponse, GetSnapshotsRequest,
    GetSnapshotsResponse, GetViewsRequest, GetViewsResponse, RemoveBindingsRequest,
    RemoveBindingsResponse, SetBindingsRequest, SetBindingsResponse, StartOperatorsRequest,
    StartOperatorsResponse, SynchronizationDoneRequest, SynchronizationDoneResponse, ViewChange,
    ViewEvent, ViewKind,
};
use prost::Message;
use tonic::{Request, Response, Status};

use crate::convert::{binding_snapshot, schedule_of};
use crate::enqueue::Enqueuer;
use crate::error::ServiceError;
use crate::kube::{KubeManager, apply_operations};
use crate::scheduler::Scheduler;
use crate::shards::{Route, ShardHandler, Shards};
use crate::store::Store;
use crate::webhook::Webhooks;
use berth_clients::scope::PackageScopes;

/// Most schedule bindings one package may register.
const MAX_BINDINGS_PER_PACKAGE: usize = 1000;

#[derive(Clone)]
pub struct HookEventService {
    store: Store,
    scheduler: Scheduler,
    /// `None` when hookevent has no Kubernetes access: kubernetes bindings are refused.
    kube: Option<Arc<KubeManager>>,
    /// Lifecycle, asked what a package is: an app's bindings and object operations are
    /// confined to its namespace by lifecycle's answer, never by the caller's word.
    scopes: PackageScopes,
    /// `None` without a webhook server: webhook bindings are refused.
    webhooks: Option<Arc<Webhooks>>,
    /// Which packages this replica serves; the others' calls go to their owner.
    shards: Arc<Shards>,
    peers: Peers,
}

/// Metadata marking a call one replica forwarded to another: it is not forwarded again.
const FORWARDED: &str = "x-berth-hookevent-forwarded";
/// Longest advertised endpoint a replica forwards to.
const MAX_ENDPOINT_LEN: usize = 512;
/// Most peer clients kept (one per replica endpoint seen).
const MAX_PEERS: usize = 64;

/// Clients of the other replicas, by endpoint, over mutual TLS as role hookevent.
#[derive(Clone)]
struct Peers {
    tls: Option<berth_runtime::Tls>,
    clients: Arc<Mutex<HashMap<String, berth_clients::HookEvents>>>,
}

impl Peers {
    fn client(&self, endpoint: &str) -> Result<berth_clients::HookEvents, Status> {
        if endpoint.len() > MAX_ENDPOINT_LEN {
            return Err(Status::unavailable(format!(
                "hookevent: the owner's advertised endpoint is longer than {MAX_ENDPOINT_LEN} bytes"
            )));
        }
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = clients.get(endpoint) {
            return Ok(c.clone());
        }
        let client = berth_clients::hookevent(endpoint, self.tls.as_ref()).map_err(|e| {
            Status::unavailable(format!(
                "hookevent: the owner's endpoint {endpoint:?} is unusable: {e}"
            ))
        })?;
        if clients.len() >= MAX_PEERS {
            clients.clear();
        }
        clients.insert(endpoint.to_owned(), client.clone());
        Ok(client)
    }
}

/// `inner` as a call forwarded to the owner of its package's shard.
fn forwarded<T>(inner: T) -> Request<T> {
    let mut req = Request::new(inner);
    req.metadata_mut()
        .insert(FORWARDED, tonic::metadata::MetadataValue::from_static("1"));
    req
}

/// Checks a package's operators as Load did (parsed at this edge too: the request is the
/// contract, not the worker), and refuses an app's operator whose source names a namespace
/// other than the app's.
fn check_operators(
    operators: &[prost_types::Struct],
    app_namespace: &str,
) -> Result<Vec<berth_operator::Operator>, ServiceError> {
    if operators.len() > MAX_OPERATORS_PER_PACKAGE {
        return Err(ServiceError::Invalid(format!(
            "operators: {} exceed the limit of {MAX_OPERATORS_PER_PACKAGE}",
            operators.len()
        )));
    }
    let mut out = Vec::with_capacity(operators.len());
    for (i, doc) in operators.iter().enumerate() {
        let op = berth_operator::Operator::from_value(&berth_proto::json::from_struct(doc))
            .map_err(|e| ServiceError::Invalid(format!("operators[{i}]: {e}")))?;
        if !app_namespace.is_empty() {
            for c in &op.controllers {
                for (j, s) in c.sources.iter().enumerate() {
                    if let Some(ns) = s.namespace.as_deref().filter(|ns| *ns != app_namespace) {
                        return Err(ServiceError::Invalid(format!(
                            "operators[{i}] ({}): controller {:?}: sources[{j}] watches \
                             namespace {ns}; an app's operators stay in namespace \
                             {app_namespace}",
                            op.name, c.name
                        )));
                    }
                }
            }
        }
        out.push(op);
    }
    Ok(out)
}

/// A snapshot of a package's views as GetViews answers it.
fn views_response(s: crate::kube::ViewSnapshot) -> GetViewsResponse {
    GetViewsResponse {
        running: true,
        kinds: s
            .kinds
            .into_iter()
            .map(|(group, kind)| ViewKind {
                group,
                version: berth_operator::spec::VIEW_VERSION.to_owned(),
                kind,
            })
            .collect(),
        objects: s.objects.iter().map(berth_proto::json::to_struct).collect(),
        revision: s.revision,
    }
}

/// The views as they stand (each ADDED), then their changes; a reader that lagged behind gets
/// an error saying to list again, and the stream ends with the operators.
fn view_events(
    snapshot: crate::kube::ViewSnapshot,
    changes: tokio::sync::broadcast::Receiver<crate::kube::ViewUpdate>,
) -> impl futures::Stream<Item = Result<ViewEvent, Status>> + Send {
    let initial: Vec<Result<ViewEvent, Status>> = snapshot
        .objects
        .iter()
        .map(|o| {
            Ok(ViewEvent {
                change: ViewChange::Added as i32,
                object: Some(berth_proto::json::to_struct(o)),
                revision: snapshot.revision,
            })
        })
        .collect();
    let later = futures::stream::unfold(Some(changes), |changes| async move {
        let mut changes = changes?;
        match changes.recv().await {
            Ok(u) => Some((
                Ok(ViewEvent {
                    change: u.change as i32,
                    object: Some(berth_proto::json::to_struct(&u.object)),
                    revision: u.revision,
                }),
                Some(changes),
            )),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => Some((
                Err(Status::aborted(format!(
                    "the watch fell {n} changes behind; list again"
                ))),
                None,
            )),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => None,
        }
    });
    futures::StreamExt::chain(futures::stream::iter(initial), later)
}

impl HookEventService {
    pub async fn new(
        store: Store,
        enqueuer: Enqueuer,
        kube: Option<Arc<KubeManager>>,
        scopes: PackageScopes,
        webhooks: Option<Arc<Webhooks>>,
        shards: Arc<Shards>,
        tls: Option<berth_runtime::Tls>,
    ) -> Result<Self, crate::store::StoreError> {
        // The schedules of the shards owned now; those of shards taken over later come with
        // them (`take`).
        let schedules = store
            .load_all()
            .await?
            .into_iter()
            .filter(|s| shards.owns(s.package.as_str()))
            .collect();
        let scheduler = Scheduler::new(schedules, enqueuer, kube.clone(), shards.clone());
        Ok(HookEventService {
            store,
            scheduler,
            kube,
            scopes,
            webhooks,
            shards,
            peers: Peers {
                tls,
                clients: Arc::default(),
            },
        })
    }

    /// The owner of `package`'s shard when another replica owns it (`Ok(None)`: this one
    /// does). A call another replica forwarded here, or one whose shard has no known owner,
    /// is refused with `Unavailable`, so the worker's task retries.
    async fn peer<T>(
        &self,
        package: &str,
        req: &Request<T>,
    ) -> Result<Option<berth_clients::HookEvents>, Status> {
        match self.shards.resolve(package).await {
            Route::Local => Ok(None),
            Route::Remote { shard, .. } | Route::Unknown { shard }
                if req.metadata().contains_key(FORWARDED) =>
            {
                Err(Status::unavailable(format!(
                    "hookevent: package {package:?} (shard {shard}) is not this replica's any more; retry"
                )))
            }
            Route::Remote { endpoint, .. } => Ok(Some(self.peers.client(&endpoint)?)),
            Route::Unknown { shard } => Err(Status::unavailable(format!(
                "hookevent: no replica is known to own shard {shard} (package {package:?}) yet: it is being handed over; retry"
            ))),
        }
    }

    fn webhooks(&self) -> Result<&Arc<Webhooks>, ServiceError> {
        self.webhooks.as_ref().ok_or_else(|| {
            ServiceError::Invalid(
                "webhooks: hookevent serves no webhooks (start it with --webhook-listen)".into(),
            )
        })
    }

    /// The namespace `package` is confined to (empty for a module), as lifecycle says.
    async fn app_namespace(&self, package: &str) -> Result<String, ServiceError> {
        let scope = self.scopes.get(package).await?;
        Ok(scope.app_namespace().unwrap_or_default().to_owned())
    }

    /// The scheduler that fires this service's schedules; run it beside the service.
    pub fn scheduler(&self) -> Scheduler {
        self.scheduler.clone()
    }

    /// Watches the stored kubernetes registrations again (after a restart). Their
    /// Synchronization runs are queued by hookevent itself, ahead of their events.
    pub async fn restore(&self) {
        let owned = self.shards.owned();
        self.restore_where(|p| owned.contains(&self.shards.shard(p)))
            .await;
    }

    /// What a restart does, for the packages `which` selects.
    async fn restore_where(&self, which: impl Fn(&str) -> bool) {
        let Some(kube) = &self.kube else { return };
        self.restore_webhooks(&which).await;
        let stored = match self.store.registrations().await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot read stored kubernetes bindings");
                return;
            }
        };
        for (package, bytes) in stored {
            if !which(&package) {
                continue;
            }
            let Ok(req) = SetBindingsRequest::decode(bytes.as_slice()) else {
                tracing::warn!(package, "skipping an unreadable stored registration");
                continue;
            };
            if let Err(e) = kube
                .set(
                    &PackageKey::from_issued(req.package.clone()),
                    Generation::new(req.generation),
                    &req.app_namespace,
                    &req.kubernetes,
                    &req.schedules,
                    true,
                )
                .await
            {
                tracing::error!(package, error = %e, "cannot watch the stored kubernetes bindings again");
            }
            if req.operators.is_empty() {
                continue;
            }
            // Operators stored were registered by a package that went on to run: they start
            // again at once.
            let restored = async {
                let operators = check_operators(&req.operators, &req.app_namespace)?;
                let scope = self.scopes.get(&req.package).await?;
                kube.set_operators(
                    &PackageKey::from_issued(req.package.clone()),
                    Generation::new(req.generation),
                    &req.app_namespace,
                    scope,
                    operators,
                    true,
                )
                .await?;
                Ok::<_, ServiceError>(())
            };
            if let Err(e) = restored.await {
                tracing::error!(package, error = %e, "cannot start the stored operators again");
            }
        }
    }

    /// Registers the stored webhook bindings again: this process has a new certificate, so
    /// every configuration gets its CA (and the same URLs).
    async fn restore_webhooks(&self, which: &impl Fn(&str) -> bool) {
        let Some(webhooks) = &self.webhooks else {
            return;
        };
        let Ok(stored) = self.store.registrations().await else {
            return;
        };
        for (package, bytes) in stored {
            if !which(&package) {
                continue;
            }
            let Ok(req) = SetBindingsRequest::decode(bytes.as_slice()) else {
                continue;
            };
            if req.webhooks.is_empty() {
                continue;
            }
            if let Err(e) = webhooks
                .set(
                    &PackageKey::from_issued(req.package.clone()),
                    Generation::new(req.generation),
                    &req.app_namespace,
                    &req.webhooks,
                    &req.kubernetes,
                )
                .await
            {
                tracing::error!(package, error = %e, "cannot register the stored webhook bindings again");
            }
        }
    }

    fn kube(&self) -> Result<&Arc<KubeManager>, ServiceError> {
        self.kube.as_ref().ok_or(ServiceError::NoKubernetes)
    }

    async fn set(&self, mut req: SetBindingsRequest) -> Result<(), ServiceError> {
        if req.package.is_empty() {
            return Err(ServiceError::Invalid("package: required".into()));
        }
        // Whatever the caller said, lifecycle's answer confines; it is stored with the
        // registration, so a restart watches as confined as now.
        req.app_namespace = self.app_namespace(&req.package).await?;
        if req.schedules.len() > MAX_BINDINGS_PER_PACKAGE {
            return Err(ServiceError::Invalid(format!(
                "schedules: {} bindings exceed the limit of {MAX_BINDINGS_PER_PACKAGE}",
                req.schedules.len()
            )));
        }
        let operators = check_operators(&req.operators, &req.app_namespace)?;
        if !operators.is_empty() && self.kube.is_none() {
            return Err(ServiceError::NoKubernetes);
        }
        let (package, generation) = (
            PackageKey::from_issued(req.package.clone()),
            Generation::new(req.generation),
        );
        let mut parsed = Vec::with_capacity(req.schedules.len());
        for (i, b) in req.schedules.iter().enumerate() {
            let schedule = schedule_of(&package, generation, b).map_err(|e| {
                ServiceError::Invalid(format!("schedules[{i}] (hook {}): {e}", b.hook))
            })?;
            parsed.push(schedule);
        }
        // Webhook bindings first: they may be refused (a bad rule, an app converting CRDs),
        // and then nothing else of the request takes effect.
        if !req.webhooks.is_empty() {
            self.webhooks()?
                .set(
                    &package,
                    generation,
                    &req.app_namespace,
                    &req.webhooks,
                    &req.kubernetes,
                )
                .await?;
        } else if let Some(webhooks) = &self.webhooks {
            webhooks
                .set(&package, generation, &req.app_namespace, &[], &[])
                .await?;
        }
        // Kubernetes bindings next: they may be refused (unknown kind, bad jqFilter), and then
        // nothing of the request takes effect.
        if req.kubernetes.is_empty() {
            if let Some(kube) = &self.kube {
                // Schedules may still include snapshots of nothing; keep hook configs current.
                kube.set(
                    &package,
                    generation,
                    &req.app_namespace,
                    &[],
                    &req.schedules,
                    false,
                )
                .await?;
            }
            let stored = (!req.webhooks.is_empty() || !req.operators.is_empty())
                .then(|| req.encode_to_vec());
            self.store
                .set_registration(&req.package, stored.as_deref())
                .await?;
        } else {
            let kube = self.kube()?;
            kube.set(
                &package,
                generation,
                &req.app_namespace,
                &req.kubernetes,
                &req.schedules,
                false,
            )
            .await?;
            self.store
                .set_registration(&req.package, Some(&req.encode_to_vec()))
                .await?;
        }
        if let Some(kube) = &self.kube {
            let scope = self.scopes.get(&req.package).await?;
            kube.set_operators(
                &package,
                generation,
                &req.app_namespace,
                scope,
                operators,
                false,
            )
            .await?;
        }
        self.store.replace(&req.package, &parsed).await?;
        self.scheduler.replace(&req.package, parsed);
        // The shard was given up while this call ran: the new owner restores the package
        // from the store (written above); this replica keeps nothing of it.
        if !self.shards.owns(&req.package) {
            self.drop_package(&req.package);
        }
        Ok(())
    }

    /// Forgets `package` here (watches, schedules, webhook routes), leaving the store and the
    /// cluster as they are.
    fn drop_package(&self, package: &str) {
        self.scheduler.replace(package, vec![]);
        if let Some(kube) = &self.kube {
            kube.remove(package);
        }
        if let Some(webhooks) = &self.webhooks {
            webhooks.forget_where(|p| p == package);
        }
    }

    async fn remove(&self, package: &str) -> Result<(), ServiceError> {
        self.store.replace(package, &[]).await?;
        self.store.set_registration(package, None).await?;
        self.scheduler.replace(package, vec![]);
        if let Some(kube) = &self.kube {
            kube.remove(package);
        }
        if let Some(webhooks) = &self.webhooks {
            webhooks.remove(package).await?;
        }
        Ok(())
    }

    async fn adopt(&self, package: &str, generation: Generation) -> Result<(), ServiceError> {
        self.store.adopt_generation(package, generation).await?;
        if let Some(kube) = &self.kube {
            kube.adopt_generation(package, generation);
        }
        self.scheduler.adopt_generation(package, generation);
        if let Some(webhooks) = &self.webhooks {
            webhooks.adopt_generation(package, generation);
        }
        // The stored registration too, so a restarted hookevent queues runs a worker accepts.
        if let Ok(Some(bytes)) = self.store.registration(package).await
            && let Ok(mut registration) = SetBindingsRequest::decode(bytes.as_slice())
            && registration.generation < generation.get()
        {
            registration.generation = generation.get();
            self.store
                .set_registration(package, Some(&registration.encode_to_vec()))
                .await?;
        }
        Ok(())
    }
}

impl HookEventService {
    /// What a restart does, for the packages of `shards` (taken over).
    async fn take_shards(&self, shards: Vec<u32>) {
        let which = |p: &str| shards.contains(&self.shards.shard(p));
        match self.store.load_all().await {
            Ok(all) => {
                let taken = all
                    .into_iter()
                    .filter(|s| which(s.package.as_str()))
                    .collect();
                self.scheduler.replace_where(which, taken);
            }
            Err(e) => {
                tracing::error!(error = %e, ?shards, "cannot read the stored schedules of shards taken over")
            }
        }
        self.restore_where(which).await;
    }
}

impl ShardHandler for HookEventService {
    fn take(&self, shards: Vec<u32>) {
        let this = self.clone();
        berth_runtime::spawn_in(
            tracing::info_span!(parent: None, "hookevent.take_shards"),
            async move { this.take_shards(shards).await },
        );
    }

    fn drop_shards(&self, shards: &[u32]) {
        let which = |p: &str| shards.contains(&self.shards.shard(p));
        self.scheduler.replace_where(which, vec![]);
        if let Some(kube) = &self.kube {
            for package in kube.packages() {
                if which(&package) {
                    kube.remove(&package);
                }
            }
        }
        if let Some(webhooks) = &self.webhooks {
            webhooks.forget_where(which);
        }
        tracing::info!(
            ?shards,
            "dropped the watches and schedules of shards given up"
        );
    }
}

#[tonic::async_trait]
impl HookEvents for HookEventService {
    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn set_bindings(
        &self,
        req: Request<SetBindingsRequest>,
    ) -> Result<Response<SetBindingsResponse>, Status> {
        if req.get_ref().package.is_empty() {
            return Err(ServiceError::Invalid("package: required".into()).into());
        }
        if let Some(mut owner) = self.peer(&req.get_ref().package, &req).await? {
            return owner.set_bindings(forwarded(req.into_inner())).await;
        }
        self.set(req.into_inner()).await?;
        Ok(Response::new(SetBindingsResponse {}))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn remove_bindings(
        &self,
        req: Request<RemoveBindingsRequest>,
    ) -> Result<Response<RemoveBindingsResponse>, Status> {
        if let Some(mut owner) = self.peer(&req.get_ref().package, &req).await? {
            return owner.remove_bindings(forwarded(req.into_inner())).await;
        }
        self.remove(&req.get_ref().package).await?;
        Ok(Response::new(RemoveBindingsResponse {}))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn get_snapshots(
        &self,
        req: Request<GetSnapshotsRequest>,
    ) -> Result<Response<GetSnapshotsResponse>, Status> {
        if let Some(mut owner) = self.peer(&req.get_ref().package, &req).await? {
            return owner.get_snapshots(forwarded(req.into_inner())).await;
        }
        let req = req.into_inner();
        let Some(kube) = &self.kube else {
            return Ok(Response::new(GetSnapshotsResponse::default()));
        };
        let bindings = kube
            .snapshots(&req.package, req.for_synchronization)
            .into_iter()
            .map(binding_snapshot)
            .collect();
        Ok(Response::new(GetSnapshotsResponse { bindings }))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn synchronization_done(
        &self,
        req: Request<SynchronizationDoneRequest>,
    ) -> Result<Response<SynchronizationDoneResponse>, Status> {
        if let Some(mut owner) = self.peer(&req.get_ref().package, &req).await? {
            return owner
                .synchronization_done(forwarded(req.into_inner()))
                .await;
        }
        let req = req.into_inner();
        if let Some(kube) = &self.kube {
            kube.synchronization_done(&req.package, Generation::new(req.generation))
                .await;
        }
        Ok(Response::new(SynchronizationDoneResponse {}))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn adopt_generation(
        &self,
        req: Request<AdoptGenerationRequest>,
    ) -> Result<Response<AdoptGenerationResponse>, Status> {
        if let Some(mut owner) = self.peer(&req.get_ref().package, &req).await? {
            return owner.adopt_generation(forwarded(req.into_inner())).await;
        }
        let req = req.into_inner();
        self.adopt(&req.package, Generation::new(req.generation))
            .await?;
        Ok(Response::new(AdoptGenerationResponse {}))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn start_operators(
        &self,
        req: Request<StartOperatorsRequest>,
    ) -> Result<Response<StartOperatorsResponse>, Status> {
        if let Some(mut owner) = self.peer(&req.get_ref().package, &req).await? {
            return owner.start_operators(forwarded(req.into_inner())).await;
        }
        let req = req.into_inner();
        if let Some(kube) = &self.kube {
            kube.start_operators(
                &PackageKey::from_issued(req.package.clone()),
                Generation::new(req.generation),
            )
            .await
            .map_err(ServiceError::from)?;
        }
        Ok(Response::new(StartOperatorsResponse {}))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn get_views(
        &self,
        req: Request<GetViewsRequest>,
    ) -> Result<Response<GetViewsResponse>, Status> {
        if let Some(mut owner) = self.peer(&req.get_ref().package, &req).await? {
            return owner.get_views(forwarded(req.into_inner())).await;
        }
        let req = req.into_inner();
        let snapshot = match &self.kube {
            Some(kube) => kube.operator_views(&req.package).await,
            None => None,
        };
        Ok(Response::new(match snapshot {
            None => GetViewsResponse::default(),
            Some(s) => views_response(s),
        }))
    }

    type WatchViewsStream =
        std::pin::Pin<Box<dyn futures::Stream<Item = Result<ViewEvent, Status>> + Send>>;

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn watch_views(
        &self,
        req: Request<GetViewsRequest>,
    ) -> Result<Response<Self::WatchViewsStream>, Status> {
        if let Some(mut owner) = self.peer(&req.get_ref().package, &req).await? {
            let stream = owner
                .watch_views(forwarded(req.into_inner()))
                .await?
                .into_inner();
            return Ok(Response::new(Box::pin(stream)));
        }
        let req = req.into_inner();
        let watched = match &self.kube {
            Some(kube) => kube.watch_operator_views(&req.package).await,
            None => None,
        };
        let Some((snapshot, changes)) = watched else {
            return Err(Status::failed_precondition(format!(
                "package {:?} has no operators running",
                req.package
            )));
        };
        Ok(Response::new(Box::pin(view_events(snapshot, changes))))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn answer_webhook(
        &self,
        req: Request<AnswerWebhookRequest>,
    ) -> Result<Response<AnswerWebhookResponse>, Status> {
        // The owner of the package's shard registered its webhooks and waits for the answer.
        if let Some(mut owner) = self.peer(&req.get_ref().package, &req).await? {
            return owner.answer_webhook(forwarded(req.into_inner())).await;
        }
        if let Some(webhooks) = &self.webhooks {
            webhooks.answer(req.into_inner());
        }
        Ok(Response::new(AnswerWebhookResponse {}))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package, hook = %req.get_ref().hook))]
    async fn apply_object_operations(
        &self,
        req: Request<ApplyObjectOperationsRequest>,
    ) -> Result<Response<ApplyObjectOperationsResponse>, Status> {
        let req = req.into_inner();
        if req.operations.is_empty() {
            return Ok(Response::new(ApplyObjectOperationsResponse::default()));
        }
        let kube = self.kube()?;
        let scope = self
            .scopes
            .get(&req.package)
            .await
            .map_err(ServiceError::from)?;
        let app_namespace = scope.app_namespace().unwrap_or_default().to_owned();
        let principal = kube
            .acting_as(&scope.service_account())
            .map_err(ServiceError::Unavailable)?;
        let results = apply_operations(
            kube.resolver(),
            &principal,
            kube.jq(),
            &app_namespace,
            &req.operations,
        )
        .await
        .map_err(|e| ServiceError::operations(&req.hook, e))?;
        Ok(Response::new(ApplyObjectOperationsResponse { results }))
    }
}
