//! The hookevent gRPC adapter and the scheduler that fires schedule bindings as HookRun tasks.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_hooks::binding_context::{self, BindingContext};
use berth_hooks::{HookConfig, ScheduleBinding};
use berth_proto::hookevent::hook_events_server::HookEvents;
use berth_proto::hookevent::{
    AdoptGenerationRequest, AdoptGenerationResponse, ApplyObjectOperationsRequest, ApplyObjectOperationsResponse, BindingSnapshot, GetSnapshotsRequest,
    GetSnapshotsResponse, RemoveBindingsRequest, RemoveBindingsResponse, SetBindingsRequest, SetBindingsResponse,
    SynchronizationDoneRequest, SynchronizationDoneResponse,
};
use chrono::Utc;
use prost::Message;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::enqueue::Enqueuer;
use crate::kube::{KubeManager, apply_operations, hook_run_task, schedule_spec_of};
use crate::schedule::{Schedule, parse_crontab};
use crate::store::Store;

/// Most schedule bindings one package may register.
const MAX_BINDINGS_PER_PACKAGE: usize = 1000;
/// Longest the scheduler sleeps without re-checking (clock jumps, missed wake-ups).
const MAX_SLEEP: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct HookEventService {
    store: Store,
    schedules: Arc<Mutex<Vec<Schedule>>>,
    wake: Arc<Notify>,
    enqueuer: Enqueuer,
    /// `None` when hookevent has no Kubernetes access: kubernetes bindings are refused.
    kube: Option<Arc<KubeManager>>,
}

impl HookEventService {
    pub async fn new(store: Store, enqueuer: Enqueuer, kube: Option<Arc<KubeManager>>) -> Result<Self, crate::store::StoreError> {
        let schedules = store.load_all().await?;
        Ok(HookEventService { store, schedules: Arc::new(Mutex::new(schedules)), wake: Arc::new(Notify::new()), enqueuer, kube })
    }

    /// Watches the stored kubernetes registrations again (after a restart). Their
    /// Synchronization runs are queued by hookevent itself, ahead of their events.
    pub async fn restore(&self) {
        let Some(kube) = &self.kube else { return };
        let stored = match self.store.registrations().await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(error = %e, "cannot read stored kubernetes bindings");
                return;
            }
        };
        for (package, bytes) in stored {
            let Ok(req) = SetBindingsRequest::decode(bytes.as_slice()) else {
                tracing::warn!(package, "skipping an unreadable stored registration");
                continue;
            };
            if let Err(e) = kube.set(&req.package, req.generation, &req.app_namespace, &req.kubernetes, &req.schedules, true).await {
                tracing::error!(package, error = %e, "cannot watch the stored kubernetes bindings again");
            }
        }
    }

    fn replace(&self, package: &str, new: Vec<Schedule>) {
        let mut all = self.schedules.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|s| s.package != package);
        all.extend(new);
        drop(all);
        self.wake.notify_one();
    }

    /// Fires due schedules until `shutdown`. Fires missed while hookevent was down are not caught
    /// up, as with cron.
    pub async fn run_scheduler(self, shutdown: CancellationToken) {
        let mut last = Utc::now();
        loop {
            let now = Utc::now();
            let (due, next) = {
                let all = self.schedules.lock().unwrap_or_else(|p| p.into_inner());
                let due: Vec<Schedule> = all.iter().filter(|s| s.next_after(last).is_some_and(|t| t <= now)).cloned().collect();
                let next = all.iter().filter_map(|s| s.next_after(now)).min();
                (due, next)
            };
            last = now;
            if !due.is_empty() {
                let tasks = due.iter().map(|s| self.fire(s)).collect();
                self.enqueuer.send(tasks).await;
            }
            let sleep = next.and_then(|t| (t - Utc::now()).to_std().ok()).unwrap_or(MAX_SLEEP).min(MAX_SLEEP);
            tokio::select! {
                _ = tokio::time::sleep(sleep) => {}
                _ = self.wake.notified() => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }

    /// The HookRun of one schedule fire, with the snapshots it asks for.
    fn fire(&self, s: &Schedule) -> berth_proto::queue::Task {
        let span = tracing::info_span!("hookevent.schedule", package.key = %s.package, hook = %s.hook, binding = %s.binding);
        let _guard = span.enter();
        let binding = ScheduleBinding {
            name: s.binding.clone(),
            crontab: s.crontab.clone(),
            allow_failure: s.allow_failure,
            queue: (!s.queue.is_empty()).then(|| s.queue.clone()),
            include_snapshots_from: s.include_snapshots_from.clone(),
            group: (!s.group.is_empty()).then(|| s.group.clone()),
        };
        let (config, snapshots) = match &self.kube {
            Some(kube) if binding.group.is_some() || !binding.include_snapshots_from.is_empty() => {
                (kube.hook_config(&s.package, &s.hook), kube.hook_snapshots(&s.package, &s.hook))
            }
            _ => (HookConfig::default(), Default::default()),
        };
        let ctx = BindingContext::schedule(&binding, &config, &snapshots);
        hook_run_task(&s.package, s.generation, &s.hook, "Schedule", binding.queue.as_deref(), s.allow_failure, binding_context::to_json(&[ctx]))
    }

    fn kube(&self) -> Result<&Arc<KubeManager>, Status> {
        self.kube.as_ref().ok_or_else(|| Status::failed_precondition("hookevent has no Kubernetes access (start it with --kubeconfig)"))
    }
}

#[tonic::async_trait]
impl HookEvents for HookEventService {
    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn set_bindings(&self, req: Request<SetBindingsRequest>) -> Result<Response<SetBindingsResponse>, Status> {
        let req = req.into_inner();
        if req.package.is_empty() {
            return Err(Status::invalid_argument("package: required"));
        }
        if req.schedules.len() > MAX_BINDINGS_PER_PACKAGE {
            return Err(Status::invalid_argument(format!(
                "schedules: {} bindings exceed the limit of {MAX_BINDINGS_PER_PACKAGE}",
                req.schedules.len()
            )));
        }
        let mut parsed = Vec::with_capacity(req.schedules.len());
        for (i, b) in req.schedules.iter().enumerate() {
            let cron = parse_crontab(&b.crontab)
                .map_err(|e| Status::invalid_argument(format!("schedules[{i}] (hook {}): {e}", b.hook)))?;
            let spec = schedule_spec_of(b);
            parsed.push(Schedule {
                package: req.package.clone(),
                generation: req.generation,
                hook: b.hook.clone(),
                binding: spec.name,
                crontab: b.crontab.clone(),
                allow_failure: b.allow_failure,
                queue: b.queue.clone(),
                include_snapshots_from: b.include_snapshots_from.clone(),
                group: b.group.clone(),
                cron,
            });
        }
        // Kubernetes bindings first: they may be refused (unknown kind, bad jqFilter), and then
        // nothing of the request takes effect.
        match (&self.kube, req.kubernetes.is_empty()) {
            (_, true) => {
                if let Some(kube) = &self.kube {
                    // Schedules may still include snapshots of nothing; keep hook configs current.
                    kube.set(&req.package, req.generation, &req.app_namespace, &[], &req.schedules, false)
                        .await
                        .map_err(|e| Status::internal(e.to_string()))?;
                }
                self.store.set_registration(&req.package, None).await.map_err(|e| Status::internal(e.to_string()))?;
            }
            (None, false) => return Err(self.kube().err().unwrap_or_else(|| Status::internal("no kube"))),
            (Some(kube), false) => {
                kube.set(&req.package, req.generation, &req.app_namespace, &req.kubernetes, &req.schedules, false)
                    .await
                    .map_err(|e| if e.is_invalid() { Status::invalid_argument(e.to_string()) } else { Status::unavailable(e.to_string()) })?;
                self.store
                    .set_registration(&req.package, Some(&req.encode_to_vec()))
                    .await
                    .map_err(|e| Status::internal(e.to_string()))?;
            }
        }
        self.store.replace(&req.package, &parsed).await.map_err(|e| Status::internal(e.to_string()))?;
        self.replace(&req.package, parsed);
        Ok(Response::new(SetBindingsResponse {}))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn remove_bindings(&self, req: Request<RemoveBindingsRequest>) -> Result<Response<RemoveBindingsResponse>, Status> {
        let package = &req.get_ref().package;
        self.store.replace(package, &[]).await.map_err(|e| Status::internal(e.to_string()))?;
        self.store.set_registration(package, None).await.map_err(|e| Status::internal(e.to_string()))?;
        self.replace(package, vec![]);
        if let Some(kube) = &self.kube {
            kube.remove(package);
        }
        Ok(Response::new(RemoveBindingsResponse {}))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn get_snapshots(&self, req: Request<GetSnapshotsRequest>) -> Result<Response<GetSnapshotsResponse>, Status> {
        let req = req.into_inner();
        let Some(kube) = &self.kube else { return Ok(Response::new(GetSnapshotsResponse::default())) };
        let bindings = kube
            .snapshots(&req.package, req.for_synchronization)
            .into_iter()
            .map(|b| BindingSnapshot {
                hook: b.hook,
                binding: b.binding,
                objects_json: serde_json::to_string(&b.objects).unwrap_or_else(|_| "[]".into()),
                synchronized: b.synchronized,
            })
            .collect();
        Ok(Response::new(GetSnapshotsResponse { bindings }))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn synchronization_done(&self, req: Request<SynchronizationDoneRequest>) -> Result<Response<SynchronizationDoneResponse>, Status> {
        let req = req.into_inner();
        if let Some(kube) = &self.kube {
            kube.synchronization_done(&req.package, req.generation).await;
        }
        Ok(Response::new(SynchronizationDoneResponse {}))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package))]
    async fn adopt_generation(&self, req: Request<AdoptGenerationRequest>) -> Result<Response<AdoptGenerationResponse>, Status> {
        let req = req.into_inner();
        self.store.adopt_generation(&req.package, req.generation).await.map_err(|e| Status::internal(e.to_string()))?;
        if let Some(kube) = &self.kube {
            kube.adopt_generation(&req.package, req.generation);
        }
        {
            let mut all = self.schedules.lock().unwrap_or_else(|p| p.into_inner());
            for s in all.iter_mut().filter(|s| s.package == req.package) {
                s.generation = s.generation.max(req.generation);
            }
        }
        // The stored registration too, so a restarted hookevent queues runs a worker accepts.
        if let Ok(stored) = self.store.registrations().await
            && let Some((_, bytes)) = stored.into_iter().find(|(p, _)| *p == req.package)
            && let Ok(mut registration) = SetBindingsRequest::decode(bytes.as_slice())
            && registration.generation < req.generation
        {
            registration.generation = req.generation;
            self.store
                .set_registration(&req.package, Some(&registration.encode_to_vec()))
                .await
                .map_err(|e| Status::internal(e.to_string()))?;
        }
        Ok(Response::new(AdoptGenerationResponse {}))
    }

    #[tracing::instrument(skip_all, fields(package.key = %req.get_ref().package, hook = %req.get_ref().hook))]
    async fn apply_object_operations(&self, req: Request<ApplyObjectOperationsRequest>) -> Result<Response<ApplyObjectOperationsResponse>, Status> {
        let req = req.into_inner();
        if req.operations.is_empty() {
            return Ok(Response::new(ApplyObjectOperationsResponse::default()));
        }
        let kube = self.kube()?;
        let results = apply_operations(kube.resolver(), &req.app_namespace, &req.operations).await.map_err(|e| {
            let message = format!("hook {}: {e}", req.hook);
            if e.is_invalid() { Status::invalid_argument(message) } else { Status::aborted(message) }
        })?;
        Ok(Response::new(ApplyObjectOperationsResponse { results }))
    }
}
