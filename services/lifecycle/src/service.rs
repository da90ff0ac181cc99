//! The gRPC adapter of the lifecycle service: parses requests into domain values at the edge and
//! calls the store and flows.

use std::pin::Pin;
use std::sync::Arc;

use berth_proto::json;
use berth_proto::lifecycle::lifecycle_server::Lifecycle;
use berth_proto::lifecycle::{
    AnswerValidationRequest, AnswerValidationResponse, ClusterVersionReport,
    ClusterVersionReportResponse, GetSpecRequest, ReportBatchRequest, ReportRequest,
    ReportResponse, Spec,
};
use berth_proto::v1;
use futures::Stream;
use serde_json::Value;
use tokio::sync::{Mutex, Notify, broadcast};
use tonic::{Request, Response, Status};

use crate::conversion;
use crate::convert;
use crate::dump;
use crate::error::LifecycleError;
use crate::flows;
use crate::model::{Generation, PackageKey, Phase};
use crate::report;
use crate::scheduler::Scheduler;
use crate::store::{self, Store, Write, WriteOp};
use crate::update::{self, NotPlanned};
use crate::validation::{Outcome, Validations};

/// Packages in a List or Dump page when the request does not say.
const DEFAULT_PAGE_SIZE: usize = 100;
/// Most packages a List or Dump page may ask for.
const MAX_PAGE_SIZE: usize = 1000;
/// A page ends before its packages pass this many bytes (encoded), well under the 4 MiB a gRPC
/// reply may have; a page always holds at least one package.
const MAX_PAGE_BYTES: usize = 3 << 20;
/// Longest page token accepted (a package key).
const MAX_PAGE_TOKEN: usize = 512;
/// Status-change notifications buffered for Watch streams; a slow watcher that falls further
/// behind is resynchronised from the store instead of holding memory.
const WATCH_CHANNEL: usize = 256;

/// The scheduler's index, shared by the service and the cluster-version poller. A tokio mutex
/// held across each write transaction: every write of package state goes through it, so the
/// index and the store change together (SQLite serialises the writers anyway).
pub type SharedScheduler = Arc<Mutex<Scheduler>>;

#[derive(Clone)]
pub struct LifecycleService {
    store: Store,
    broker: berth_clients::Broker,
    outbox_wake: Arc<Notify>,
    /// `Some(key)`: that package changed; `None`: changes may have been missed (resend all).
    changes: broadcast::Sender<Option<PackageKey>>,
    scheduler: SharedScheduler,
    repositories: Arc<berth_package::Repositories>,
    validations: Validations,
    /// The bounded jq evaluators settings conversions run on.
    jq: berth_jq::Jq,
    /// Reports waiting to be written ([`LifecycleService::write_report`]).
    reports: Arc<std::sync::Mutex<std::collections::VecDeque<PendingReport>>>,
}

/// A report waiting in [`LifecycleService::write_report`]'s queue, and where its outcome goes.
struct PendingReport {
    write: Write<'static>,
    reply: tokio::sync::oneshot::Sender<Result<store::Outcome, Status>>,
}

/// Most reports written in one transaction.
const MAX_REPORT_BATCH: usize = 64;
/// Most reports waiting to be written; more are refused (Unavailable) and the worker reports
/// again. Far above what the workers' task slots can send at once.
const MAX_QUEUED_REPORTS: usize = 4096;

/// Now, as conditions record it.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl LifecycleService {
    pub fn new(
        store: Store,
        broker: berth_clients::Broker,
        outbox_wake: Arc<Notify>,
        scheduler: SharedScheduler,
        repositories: Arc<berth_package::Repositories>,
        validations: Validations,
        jq: berth_jq::Jq,
    ) -> Self {
        let (changes, _) = broadcast::channel(WATCH_CHANNEL);
        LifecycleService {
            store,
            broker,
            outbox_wake,
            changes,
            scheduler,
            repositories,
            validations,
            jq,
            reports: Default::default(),
        }
    }

    /// A Load report: the stored settings taken to the loaded version's settings version
    /// before the write (jq runs outside the transaction). On success the change carries the
    /// converted settings; on failure it becomes the package's failure. Returns the settings
    /// and version it converted, which the write checks are still the stored ones.
    async fn convert_at_load(
        &self,
        key: &PackageKey,
        generation: Generation,
        change: &mut report::Change,
    ) -> Result<Option<(Value, u32)>, Status> {
        let Some(conversions) = change.conversions.as_ref() else {
            return Ok(None);
        };
        let Some(row) = self.store.get(key).await? else {
            return Ok(None);
        };
        if row.generation != generation {
            // Stale: the write ignores it.
            return Ok(None);
        }
        let at_load =
            conversion::at_load(&self.jq, conversions, &row.settings, row.settings_version).await;
        match at_load {
            conversion::AtLoad::Failed(e) => {
                tracing::warn!(package.key = %key, error = %e, "settings conversion failed; the package fails");
                *change = report::Change::failed(generation, e.to_string());
            }
            done => {
                if let conversion::AtLoad::Converted(c) = &done {
                    tracing::info!(package.key = %key, from = row.settings_version, to = c.version, "stored settings converted");
                }
                change.stored_settings = Some(done);
            }
        }
        Ok(Some((row.settings, row.settings_version)))
    }

    /// Notifications of package changes, as Watch streams get them.
    pub(crate) fn subscribe_changes(&self) -> broadcast::Receiver<Option<PackageKey>> {
        self.changes.subscribe()
    }

    /// A package this replica wrote. On PostgreSQL the database tells every replica, this one
    /// included, of every change ([`LifecycleService::listen`]), so nothing is sent here.
    fn changed(&self, key: &PackageKey) {
        if self.store.dialect() == berth_sql::Dialect::Sqlite {
            // No receivers is fine: nobody is watching.
            let _ = self.changes.send(Some(key.clone()));
        }
    }

    /// Listens to the replicas' database (PostgreSQL) until `shutdown`: package changes reach
    /// Watch streams and the metrics, stored validation answers their waiting validation.
    pub async fn listen(&self, shutdown: tokio_util::sync::CancellationToken) {
        use berth_sql::listen::Notice;
        let (answers, mut answered) = tokio::sync::mpsc::channel::<Option<String>>(256);
        let validations = self.validations.clone();
        let deliver = tokio::spawn(async move {
            while let Some(id) = answered.recv().await {
                validations.notice(id).await;
            }
        });
        let url = self.store.database_url().to_owned();
        let changes = self.changes.clone();
        berth_sql::listen::relay(
            &url,
            &[crate::store::CHANGES_CHANNEL, crate::store::ANSWERS_CHANNEL],
            |notice| match notice {
                Notice::Message { channel, payload }
                    if channel == crate::store::CHANGES_CHANNEL =>
                {
                    let _ = changes.send(Some(PackageKey::from_issued(payload.to_owned())));
                }
                Notice::Message { payload, .. } => {
                    // Full: the next reconnection looks every pending request up.
                    let _ = answers.try_send(Some(payload.to_owned()));
                }
                Notice::Reconnected => {
                    let _ = changes.send(None);
                    let _ = answers.try_send(None);
                }
            },
            shutdown,
        )
        .await;
        drop(answers);
        let _ = deliver.await;
    }

    /// Records the cluster's Kubernetes version; when it changed, a scheduling pass runs.
    pub async fn cluster_version(&self, version: semver::Version) {
        let mut sched = self.scheduler.lock().await;
        if sched.kubernetes() == Some(&version) {
            return;
        }
        let passed = self
            .store
            .reschedule(&mut sched, version.clone(), &now())
            .await;
        self.settled(&mut sched, &passed).await;
        match passed {
            Ok(false) => return,
            Ok(true) => {
                tracing::info!(kubernetes.version = %version, "cluster version changed; rescheduled")
            }
            Err(e) => tracing::error!(error = %e, "scheduling pass failed"),
        }
        self.outbox_wake.notify_one();
    }

    /// Applies a task's reports (one, or a worker's batch: the same package and generation,
    /// in order) as one write: each change applied to the row in turn, then one scheduling
    /// pass. Whether the write was applied (false: a stale generation, ignored).
    async fn apply_report(&self, reqs: Vec<ReportRequest>) -> Result<bool, Status> {
        let (key, generation, parsed) =
            convert::reports(&reqs).map_err(LifecycleError::InvalidArgument)?;
        let op = match parsed {
            convert::Reports::Removed => WriteOp::Delete,
            convert::Reports::Changes(mut changes) => {
                let mut converted = Vec::with_capacity(changes.len());
                for change in &mut changes {
                    converted.push(self.convert_at_load(&key, generation, change).await?);
                }
                let changes: Vec<_> = changes.into_iter().zip(converted).collect();
                let now = now();
                WriteOp::Modify(Box::new(move |row| {
                    let mut outbox = vec![];
                    for (change, converted_from) in &changes {
                        // The settings converted must still be the stored ones.
                        if let Some((settings, version)) = converted_from
                            && (row.settings != *settings || row.settings_version != *version)
                        {
                            return None;
                        }
                        outbox.extend(change.clone().apply(row, &now));
                    }
                    Some(outbox)
                }))
            }
        };
        let outcome = self
            .write_report(Write {
                key,
                generation,
                op,
                span: tracing::Span::current(),
            })
            .await?;
        if outcome == store::Outcome::Refused {
            return Err(LifecycleError::Aborted(
                "the package's settings changed while they were converted; report again".into(),
            )
            .into());
        }
        Ok(outcome == store::Outcome::Applied)
    }

    /// Applies a worker's report. Reports are written in batches ([`Store::write_batch`]): the
    /// report joins the queue, and a task that takes the scheduler's lock writes what is
    /// queued then (at most [`MAX_REPORT_BATCH`]) in one transaction. Each report spawns one
    /// such task, so every queued report is written by its own task or an earlier one, even if
    /// its caller goes away; and each task writes one batch, so Updates waiting for the lock
    /// take their turn between batches.
    async fn write_report(&self, write: Write<'static>) -> Result<store::Outcome, Status> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        {
            let mut queued = self.reports.lock().unwrap_or_else(|e| e.into_inner());
            if queued.len() >= MAX_QUEUED_REPORTS {
                return Err(Status::unavailable(format!(
                    "lifecycle has {MAX_QUEUED_REPORTS} reports waiting to be written; report again later"
                )));
            }
            queued.push_back(PendingReport { write, reply });
        }
        let service = self.clone();
        berth_runtime::spawn_here(async move {
            let mut sched = service.scheduler.lock().await;
            let batch: Vec<PendingReport> = {
                let mut queued = service.reports.lock().unwrap_or_else(|e| e.into_inner());
                let n = queued.len().min(MAX_REPORT_BATCH);
                queued.drain(..n).collect()
            };
            if !batch.is_empty() {
                service.apply_reports(&mut sched, batch).await;
            }
        });
        answer
            .await
            .map_err(|_| Status::internal("the report's write ended without an answer"))?
    }

    /// Writes `batch` ([`Store::write_batch`]) and answers each report.
    async fn apply_reports(&self, sched: &mut Scheduler, batch: Vec<PendingReport>) {
        let (mut writes, replies): (Vec<Write<'static>>, Vec<_>) =
            batch.into_iter().map(|p| (p.write, p.reply)).unzip();
        let outcomes = self.store.write_batch(sched, &now(), &mut writes).await;
        // Failed writes were undone and the index rebuilt: what settled was committed.
        self.notify_settled(sched);
        let mut applied = false;
        for ((write, reply), outcome) in writes.iter().zip(replies).zip(outcomes) {
            if matches!(outcome, Ok(store::Outcome::Applied)) {
                applied = true;
                self.changed(&write.key);
            }
            // The caller may have gone: its report is written all the same.
            let _ = reply.send(outcome.map_err(Status::from));
        }
        if applied {
            self.outbox_wake.notify_one();
        }
    }

    /// After a write: tells watchers about the packages its scheduling pass changed, or, when
    /// the write failed (perhaps half-way through a pass), rebuilds the scheduler's index from
    /// the store so it matches what was committed.
    async fn settled<T>(
        &self,
        sched: &mut Scheduler,
        written: &Result<T, crate::store::StoreError>,
    ) {
        if written.is_ok() {
            self.notify_settled(sched);
            return;
        }
        sched.take_settled();
        match self.store.scheduler(sched.platform().clone()).await {
            Ok(mut fresh) => {
                if let Some(v) = sched.kubernetes() {
                    fresh.set_kubernetes(v.clone());
                }
                *sched = fresh;
            }
            Err(e) => tracing::error!(error = %e, "rebuilding the scheduler's index failed"),
        }
    }

    /// Tells watchers about the packages the committed writes' passes changed.
    fn notify_settled(&self, sched: &mut Scheduler) {
        for key in &sched.take_settled() {
            self.changed(key);
        }
    }

    async fn load(&self, r: Option<&v1::PackageRef>) -> Result<crate::store::PackageRow, Status> {
        let id = convert::package_id(r)?;
        let key = id.key();
        self.store
            .get(&key)
            .await?
            .ok_or_else(|| LifecycleError::NotFound(key).into())
    }
}

/// The page size a List or Dump asked for, checked at the edge.
fn page_size(requested: i32, token: &str) -> Result<usize, Status> {
    if token.len() > MAX_PAGE_TOKEN {
        return Err(LifecycleError::InvalidArgument(format!(
            "page_token: longer than {MAX_PAGE_TOKEN} bytes"
        ))
        .into());
    }
    match usize::try_from(requested) {
        Ok(0) => Ok(DEFAULT_PAGE_SIZE),
        Ok(n) if n <= MAX_PAGE_SIZE => Ok(n),
        _ => Err(LifecycleError::InvalidArgument(format!(
            "page_size: {requested} is outside 0..={MAX_PAGE_SIZE}"
        ))
        .into()),
    }
}

/// Cuts `items` (up to `size` + 1 read, to know whether more follow) into a page of at most
/// `size` items and [`MAX_PAGE_BYTES`] by `weight`, at least one; returns the page and the next
/// page token (the last key on the page, or empty when nothing follows).
fn cut_page<T>(items: Vec<(String, T, usize)>, size: usize) -> (Vec<T>, String) {
    let more = items.len() > size;
    let mut page = Vec::new();
    let mut bytes = 0;
    let mut last = String::new();
    for (key, item, weight) in items.into_iter().take(size) {
        if !page.is_empty() && bytes + weight > MAX_PAGE_BYTES {
            return (page, last);
        }
        bytes += weight;
        last = key;
        page.push(item);
    }
    (page, if more { last } else { String::new() })
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<v1::Package, Status>> + Send>>;

#[tonic::async_trait]
impl Lifecycle for LifecycleService {
    #[tracing::instrument(skip_all, fields(package.key))]
    async fn update(
        &self,
        req: Request<v1::UpdateRequest>,
    ) -> Result<Response<v1::UpdateResponse>, Status> {
        let mut spec = convert::update_spec(req.get_ref(), &self.repositories)?;
        let key = spec.id.key();
        tracing::Span::current().record("package.key", key.as_str());
        // Settings of an older version for the loaded version: converted now, outside the
        // write transaction (the plan checks the conversions are still the loaded ones).
        let current = self.store.get(&key).await?;
        if spec.settings_version != 0 {
            spec.converted = conversion::for_update(
                &self.jq,
                current.as_ref(),
                |r| spec.same_loaded_version(r),
                &spec.settings,
                spec.settings_version,
            )
            .await?;
        }
        // New settings for a loaded package are validated as ValidateSettings would before
        // anything is written: the schema, then the package's settings check and the plan of
        // the install (a worker's verdict; without one in time, the schema check stands).
        if let Some(existing) = &current
            && update::validates_deeply(&spec, existing)
        {
            update::check_settings(existing.settings_schema.as_ref(), spec.effective_settings())?;
            match self
                .validations
                .validate(&key, existing.generation, spec.effective_settings())
                .await
            {
                Outcome::Invalid(why) => {
                    return Err(LifecycleError::InvalidArgument(format!("{key}: {why}")).into());
                }
                Outcome::Deferred(why) => {
                    tracing::info!(package.key = %key, reason = %why, "settings checked against the schema only");
                }
                Outcome::Valid { .. } => {}
            }
        }
        let mut sched = self.scheduler.lock().await;
        let planned = self
            .store
            .update(
                spec.desired(),
                &mut sched,
                &now(),
                |previous, key, generation| update::plan(&spec, previous, key, generation),
            )
            .await;
        self.settled(&mut sched, &planned).await;
        drop(sched);
        let planned = planned?;
        let outcome = match planned {
            Ok(outcome) => outcome,
            Err(NotPlanned::Refused(error)) => return Err(error.into()),
            Err(NotPlanned::Unchanged(generation)) => {
                tracing::info!(package.key = %key, generation = generation.get(), "update identical to the current spec: nothing to do");
                return Ok(Response::new(v1::UpdateResponse {
                    key: key.into_string(),
                    generation: generation.get(),
                }));
            }
        };
        self.outbox_wake.notify_one();
        self.changed(&outcome.key);
        tracing::info!(package.key = %outcome.key, generation = outcome.generation.get(), "update accepted");
        Ok(Response::new(v1::UpdateResponse {
            key: outcome.key.into_string(),
            generation: outcome.generation.get(),
        }))
    }

    #[tracing::instrument(skip_all, fields(package.key))]
    async fn remove(
        &self,
        req: Request<v1::RemoveRequest>,
    ) -> Result<Response<v1::RemoveResponse>, Status> {
        let id = convert::package_id(req.get_ref().r#ref.as_ref())?;
        let force = req.get_ref().force;
        let key = id.key();
        tracing::Span::current().record("package.key", key.as_str());
        let mut sched = self.scheduler.lock().await;
        // Read in the write transaction: the index is current there (other replicas' writes
        // included).
        let mut dependents = Vec::new();
        let removed = self
            .store
            .remove(&key, &mut sched, &now(), |_, g, sched| {
                dependents = sched.dependents(&key);
                if dependents.is_empty() || force {
                    return Ok(flows::remove(&key, g));
                }
                let names: Vec<&str> = dependents.iter().map(PackageKey::as_str).collect();
                Err(LifecycleError::FailedPrecondition(format!(
                    "{key} is a mandatory dependency of {}; remove them first, or remove with force",
                    names.join(", ")
                )))
            })
            .await;
        self.settled(&mut sched, &removed).await;
        drop(sched);
        let generation = removed??;
        if force && !dependents.is_empty() {
            tracing::warn!(package.key = %key, dependents = ?dependents, "forced removal of a mandatory dependency");
        }
        self.outbox_wake.notify_one();
        self.changed(&key);
        Ok(Response::new(v1::RemoveResponse {
            found: generation.is_some(),
            generation: generation.map(Generation::get).unwrap_or_default(),
            key: key.into_string(),
        }))
    }

    async fn dump(
        &self,
        req: Request<v1::DumpRequest>,
    ) -> Result<Response<v1::DumpResponse>, Status> {
        let req = req.into_inner();
        let size = page_size(req.page_size, &req.page_token)?;
        let first_page = req.page_token.is_empty();
        let rows = self.store.list_after(&req.page_token, size + 1).await?;
        // Weighed as the YAML each package becomes.
        let weighed = rows
            .into_iter()
            .map(|row| {
                let weight = dump::render(std::slice::from_ref(&row), &[], None)
                    .map_or(0, |yaml| yaml.len());
                (row.key.as_str().to_owned(), row, weight)
            })
            .collect();
        let (rows, next_page_token) = cut_page(weighed, size);
        let mut broker_error = None;
        let queues = match self
            .broker
            .clone()
            .dump(berth_proto::queue::DumpRequest {})
            .await
        {
            Ok(r) => r
                .into_inner()
                .queues
                .into_iter()
                .map(convert::queue_doc)
                .collect(),
            Err(status) => {
                tracing::warn!(error = %status.message(), "queue broker unavailable for Dump");
                broker_error = Some(format!(
                    "queue broker: {:?}: {}",
                    status.code(),
                    status.message()
                ));
                vec![]
            }
        };
        // Every queue is listed on the first page; each package lists its own queues on its page.
        let all_queues = if first_page { queues.as_slice() } else { &[] };
        let scheduler = match first_page {
            true => Some(dump::SchedulerDoc::of(&*self.scheduler.lock().await)),
            false => None,
        };
        let yaml = dump::render_with_queues(
            &rows,
            &queues,
            all_queues,
            broker_error.as_deref(),
            scheduler.as_ref(),
        )
        .map_err(LifecycleError::Internal)?;
        Ok(Response::new(v1::DumpResponse {
            yaml,
            next_page_token,
        }))
    }

    async fn validate_settings(
        &self,
        req: Request<v1::ValidateSettingsRequest>,
    ) -> Result<Response<v1::ValidateSettingsResponse>, Status> {
        let req = req.into_inner();
        let id = convert::package_id(req.r#ref.as_ref())?;
        let settings = convert::settings(req.settings.as_ref())?;
        let key = id.key();
        let row = self.store.get(&key).await?;
        let converted =
            conversion::for_validation(&self.jq, row.as_ref(), &settings, req.settings_version)
                .await?;
        let checked_settings = converted.as_ref().map_or(&settings, |c| &c.settings);
        let settings_version = converted
            .as_ref()
            .map_or(req.settings_version, |c| c.version);
        let converted_settings = converted
            .as_ref()
            .filter(|c| c.ran)
            .map(|c| json::to_struct(&c.settings));
        let answer = |deferred_reason: &str| v1::ValidateSettingsResponse {
            valid: true,
            deferred: !deferred_reason.is_empty(),
            deferred_reason: deferred_reason.to_owned(),
            settings_version,
            converted_settings: converted_settings.clone(),
            ..Default::default()
        };
        let Some(row) = row else {
            return Ok(Response::new(answer(
                "the package is not installed: its settings are checked when it loads",
            )));
        };
        if !update::check_settings(row.settings_schema.as_ref(), checked_settings)? {
            return Ok(Response::new(answer(
                "the package's version is not loaded yet: its settings are checked when it loads",
            )));
        }
        if row.removing {
            return Ok(Response::new(answer("the package is being removed")));
        }
        match self
            .validations
            .validate(&key, row.generation, checked_settings)
            .await
        {
            Outcome::Valid { plan, warnings } => Ok(Response::new(v1::ValidateSettingsResponse {
                plan,
                warnings,
                ..answer("")
            })),
            Outcome::Invalid(why) => {
                Err(LifecycleError::InvalidArgument(format!("{key}: {why}")).into())
            }
            Outcome::Deferred(why) => Ok(Response::new(answer(&why))),
        }
    }

    async fn get(&self, req: Request<v1::GetRequest>) -> Result<Response<v1::Package>, Status> {
        let row = self.load(req.get_ref().r#ref.as_ref()).await?;
        Ok(Response::new(convert::package(&row)))
    }

    async fn list(
        &self,
        req: Request<v1::ListRequest>,
    ) -> Result<Response<v1::ListResponse>, Status> {
        let req = req.into_inner();
        let size = page_size(req.page_size, &req.page_token)?;
        let rows = self.store.list_after(&req.page_token, size + 1).await?;
        let weighed = rows
            .iter()
            .map(|row| {
                let p = convert::package(row);
                let weight = prost::Message::encoded_len(&p) + 16;
                (row.key.as_str().to_owned(), p, weight)
            })
            .collect();
        let (packages, next_page_token) = cut_page(weighed, size);
        Ok(Response::new(v1::ListResponse {
            packages,
            next_page_token,
        }))
    }

    type WatchStream = WatchStream;

    async fn watch(&self, req: Request<v1::WatchRequest>) -> Result<Response<WatchStream>, Status> {
        let filter = match req.get_ref().r#ref.as_ref() {
            Some(r) if !r.name.is_empty() => Some(convert::package_id(Some(r))?.key()),
            _ => None,
        };
        let mut changes = self.changes.subscribe();
        let store = self.store.clone();
        let stream = async_stream(move |tx| async move {
            let initial = match &filter {
                Some(key) => match store.get(key).await {
                    Ok(Some(row)) => vec![row],
                    Ok(None) => {
                        let _ = tx
                            .send(Err(LifecycleError::NotFound(key.clone()).into()))
                            .await;
                        return;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e.into())).await;
                        return;
                    }
                },
                None => store.list().await.unwrap_or_default(),
            };
            for row in initial {
                if tx.send(Ok(convert::package(&row))).await.is_err() {
                    return;
                }
            }
            loop {
                let keys: Vec<PackageKey> = match changes.recv().await {
                    Ok(Some(key)) => vec![key],
                    // Fell behind, or changes may have been missed: resend everything in scope.
                    Ok(None) | Err(broadcast::error::RecvError::Lagged(_)) => match &filter {
                        Some(k) => vec![k.clone()],
                        None => store
                            .list()
                            .await
                            .unwrap_or_default()
                            .into_iter()
                            .map(|r| r.key)
                            .collect(),
                    },
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                for key in keys {
                    if filter.as_ref().is_some_and(|f| f != &key) {
                        continue;
                    }
                    let item = match store.get(&key).await {
                        Ok(Some(row)) => Ok(convert::package(&row)),
                        Ok(None) => Err(LifecycleError::NotFound(key).into()),
                        Err(e) => Err(e.into()),
                    };
                    let gone = item.is_err();
                    if tx.send(item).await.is_err() || (gone && filter.is_some()) {
                        return;
                    }
                }
            }
        });
        Ok(Response::new(stream))
    }

    async fn get_spec(&self, req: Request<GetSpecRequest>) -> Result<Response<Spec>, Status> {
        let key = PackageKey::from_issued(req.into_inner().key);
        let (row, global) = self.store.get_with_global(&key).await?;
        let row = row.ok_or_else(|| LifecycleError::NotFound(key.clone()))?;
        let (global_values, global_settings) = match &global {
            Some(g) => (
                g.values.get(berth_package::GLOBAL_NAME).cloned(),
                Some(g.settings.clone()),
            ),
            None => (None, None),
        };
        Ok(Response::new(Spec {
            key: row.key.to_string(),
            r#ref: Some(convert::package_ref(&row.id)),
            repository: row.repository.clone(),
            package: row.package.clone(),
            version: row.version.clone(),
            generation: row.generation.get(),
            settings: Some(json::to_struct(&row.settings)),
            values_patch: Some(prost_types::ListValue {
                values: row.values_patch.iter().map(json::to_value).collect(),
            }),
            present: !row.removing,
            failed: row.phase == Phase::Failed,
            enabled: row.enabled,
            loaded_version: row
                .loaded
                .as_ref()
                .map(|l| l.version.to_string())
                .unwrap_or_default(),
            global_values: Some(json::to_struct(
                &global_values.unwrap_or_else(|| Value::Object(Default::default())),
            )),
            global_settings: Some(json::to_struct(
                &global_settings.unwrap_or_else(|| Value::Object(Default::default())),
            )),
            // With the loaded version only: the answers describe that version's files.
            hook_configs: row
                .loaded
                .as_ref()
                .and(row.hook_configs.as_deref())
                .and_then(convert::hook_configs),
            principal: row.principal,
        }))
    }

    /// The release service reports the cluster's version (at its start and every 30 s);
    /// a change runs a scheduling pass.
    #[tracing::instrument(skip_all, fields(git_version = %req.get_ref().git_version))]
    async fn report_cluster_version(
        &self,
        req: Request<ClusterVersionReport>,
    ) -> Result<Response<ClusterVersionReportResponse>, Status> {
        let text = req.into_inner().git_version;
        let version = crate::scheduler::kubernetes_version(&text).ok_or_else(|| {
            Status::invalid_argument(format!(
                "git_version: {:?} is not a Kubernetes version (vMAJOR.MINOR.PATCH)",
                text.chars().take(64).collect::<String>()
            ))
        })?;
        self.cluster_version(version).await;
        Ok(Response::new(ClusterVersionReportResponse {}))
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
        let accepted = self.apply_report(vec![req.into_inner()]).await?;
        Ok(Response::new(ReportResponse { accepted }))
    }

    #[tracing::instrument(skip_all, fields(package.key, generation, reports = req.get_ref().reports.len()))]
    async fn report_batch(
        &self,
        req: Request<ReportBatchRequest>,
    ) -> Result<Response<ReportResponse>, Status> {
        let reports = req.into_inner().reports;
        if let Some(first) = reports.first() {
            let span = tracing::Span::current();
            span.record("package.key", first.key.as_str());
            span.record("generation", first.generation);
        }
        let accepted = self.apply_report(reports).await?;
        Ok(Response::new(ReportResponse { accepted }))
    }
}

/// A bounded channel turned into a stream, fed by `producer`.
fn async_stream<F, Fut>(producer: F) -> WatchStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<v1::Package, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    // Watch items waiting for a slow client; the producer waits when it is full.
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    berth_runtime::spawn_here(producer(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
