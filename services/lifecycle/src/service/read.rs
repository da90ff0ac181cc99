//! The RPCs that read package state: Get, List, Watch, Dump, GetSpec, and ValidateSettings
//! (which writes nothing).

use berth_lifecycle_core::{Package, PackageKey, Phase};
use berth_proto::json;
use berth_proto::lifecycle::{GetSpecRequest, Spec};
use berth_proto::v1;
use serde_json::Value;
use tokio::sync::broadcast;
use tonic::Status;

use super::{LifecycleService, WatchStream};
use crate::conversion;
use crate::convert;
use crate::dump;
use crate::error::Error;
use crate::validation::Outcome;

/// A page ends before its packages pass this many bytes (encoded), well under the 4 MiB a gRPC
/// reply may have; a page always holds at least one package.
const MAX_PAGE_BYTES: usize = 3 << 20;
/// Watch items waiting for a slow client; the producer waits when it is full.
const WATCH_ITEMS: usize = 16;

impl LifecycleService {
    pub(super) async fn get_package(&self, req: v1::GetRequest) -> Result<v1::Package, Error> {
        let v1::GetRequest { r#ref } = req;
        let key = convert::package_id(r#ref.as_ref())?.key();
        let row = self.store.get(&key).await?;
        let row = row.ok_or(Error::NotFound { key })?;
        Ok(convert::package(&row))
    }

    pub(super) async fn list_page(&self, req: v1::ListRequest) -> Result<v1::ListResponse, Error> {
        let v1::ListRequest {
            page_size,
            page_token,
        } = req;
        let size = convert::page_size(page_size, &page_token)?;
        let rows = self.store.list_after(&page_token, size + 1).await?;
        let weighed = rows
            .iter()
            .map(|row| {
                let p = convert::package(row);
                let weight = prost::Message::encoded_len(&p) + 16;
                (row.key.as_str().to_owned(), p, weight)
            })
            .collect();
        let (packages, next_page_token) = cut_page(weighed, size);
        Ok(v1::ListResponse {
            packages,
            next_page_token,
        })
    }

    pub(super) async fn dump_page(&self, req: v1::DumpRequest) -> Result<v1::DumpResponse, Error> {
        let v1::DumpRequest {
            page_size,
            page_token,
        } = req;
        let size = convert::page_size(page_size, &page_token)?;
        let first_page = page_token.is_empty();
        let rows = self.store.list_after(&page_token, size + 1).await?;
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
            true => Some(
                self.writer
                    .with_engine(|e| dump::SchedulerDoc::of(e.scheduler()))
                    .await,
            ),
            false => None,
        };
        let repositories = match first_page {
            true => self.repository_docs().await?,
            false => vec![],
        };
        let yaml = dump::render_with_queues(
            &rows,
            &queues,
            all_queues,
            broker_error.as_deref(),
            scheduler.as_ref(),
            &repositories,
        )?;
        Ok(v1::DumpResponse {
            yaml,
            next_page_token,
        })
    }

    pub(super) async fn validate(
        &self,
        req: v1::ValidateSettingsRequest,
    ) -> Result<v1::ValidateSettingsResponse, Error> {
        let v1::ValidateSettingsRequest {
            r#ref,
            settings,
            settings_version,
        } = req;
        let id = convert::package_id(r#ref.as_ref())?;
        let settings = convert::settings(settings.as_ref())?;
        let key = id.key();
        // Issue 31.7: say what is known. A package that does not exist is NotFound; one whose
        // version failed to load cannot have its settings checked until an Update loads it.
        let row = self.store.get(&key).await?;
        let row = row.ok_or(Error::NotFound { key: key.clone() })?;
        if let Some(why) = load_failure(&row) {
            return Err(Error::NotLoaded {
                key,
                version: row.version.to_string(),
                why,
            });
        }
        let converted =
            conversion::for_validation(&self.jq, Some(&row), &settings, settings_version).await?;
        let checked_settings = converted.as_ref().map_or(&settings, |c| &c.settings);
        let settings_version = converted.as_ref().map_or(settings_version, |c| c.version);
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
        let checked = berth_lifecycle_core::update::check_settings(
            row.settings_schema.as_ref(),
            checked_settings,
        )?;
        if !checked {
            return Ok(answer(
                "the package's version is not loaded yet: its settings are checked when it loads",
            ));
        }
        if row.removing {
            return Ok(answer("the package is being removed"));
        }
        match self
            .validations
            .validate(&key, row.generation, checked_settings)
            .await
        {
            Outcome::Valid { plan, warnings } => Ok(v1::ValidateSettingsResponse {
                plan,
                warnings,
                ..answer("")
            }),
            Outcome::Invalid(reason) => Err(Error::SettingsInvalid { key, reason }),
            Outcome::Deferred(why) => Ok(answer(&why.to_string())),
        }
    }

    pub(super) fn watch_packages(&self, req: v1::WatchRequest) -> Result<WatchStream, Error> {
        let v1::WatchRequest { r#ref } = req;
        let filter = match r#ref.as_ref() {
            Some(r) if !r.name.is_empty() => Some(convert::package_id(Some(r))?.key()),
            _ => None,
        };
        let changes = self.subscribe_changes();
        let store = self.store.clone();
        Ok(async_stream(move |tx| watch(store, filter, changes, tx)))
    }

    pub(super) async fn spec(&self, req: GetSpecRequest) -> Result<Spec, Error> {
        let GetSpecRequest { key } = req;
        let key = PackageKey::from_issued(key);
        let (row, global) = self.store.get_with_global(&key).await?;
        let row = row.ok_or_else(|| Error::NotFound { key: key.clone() })?;
        Ok(spec(&row, global.as_ref()))
    }
}

/// What a worker (and release, and hookevent) reads of a package before it works on it.
fn spec(row: &Package, global: Option<&Package>) -> Spec {
    let object = || Value::Object(Default::default());
    let (global_values, global_settings) = match global {
        Some(g) => (
            g.global_values().cloned().unwrap_or_else(object),
            g.settings.clone(),
        ),
        None => (object(), object()),
    };
    Spec {
        key: row.key.to_string(),
        r#ref: Some(convert::package_ref(&row.id)),
        repository: row.repository.clone(),
        package: row.package.clone(),
        version: row.version.as_str().to_owned(),
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
        global_values: Some(json::to_struct(&global_values)),
        global_settings: Some(json::to_struct(&global_settings)),
        // With the loaded version only: the answers describe that version's files.
        hook_configs: row
            .loaded
            .as_ref()
            .and(row.hook_configs.as_deref())
            .and_then(convert::hook_configs),
        principal: row.principal,
        // With the loaded version only, as the hook configs.
        rbac: row
            .loaded
            .as_ref()
            .and(row.rbac.as_deref())
            .and_then(convert::rbac),
        suspended: row.suspended,
        // GetSpec adds it (a read of its own).
        repository_definition: None,
    }
}

/// A Watch: the packages in scope now, then each as it changes.
async fn watch(
    store: crate::store::Store,
    filter: Option<PackageKey>,
    mut changes: broadcast::Receiver<Option<PackageKey>>,
    tx: tokio::sync::mpsc::Sender<Result<v1::Package, Status>>,
) {
    let initial = match &filter {
        Some(key) => match store.get(key).await {
            Ok(Some(row)) => vec![row],
            Ok(None) => {
                let gone = Error::NotFound { key: key.clone() };
                let _ = tx.send(Err(gone.into())).await;
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
                Ok(None) if filter.is_none() => Ok(v1::Package {
                    key: key.into_string(),
                    gone: true,
                    ..Default::default()
                }),
                Ok(None) => Err(Error::NotFound { key }.into()),
                Err(e) => Err(e.into()),
            };
            let gone = item.is_err();
            if tx.send(item).await.is_err() || (gone && filter.is_some()) {
                return;
            }
        }
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

/// Why the package's current version failed to load, when it did: its generation failed
/// before a Load report (no schema yet), with the `Loaded` (or `Downloaded`) condition's
/// message of that generation, else its last error.
fn load_failure(row: &Package) -> Option<String> {
    use berth_lifecycle_core::model::condition::{ConditionStatus, ConditionType};
    if row.settings_schema.is_some() || row.phase != Phase::Failed {
        return None;
    }
    let failed = row.conditions.iter().find(|c| {
        matches!(c.type_, ConditionType::Loaded | ConditionType::Downloaded)
            && c.status == ConditionStatus::False
            && c.observed_generation == row.generation.get()
    });
    Some(failed.map_or_else(|| row.last_error.clone(), |c| c.message.clone()))
}

/// A bounded channel turned into a stream, fed by `producer`.
fn async_stream<F, Fut>(producer: F) -> WatchStream
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<v1::Package, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(WATCH_ITEMS);
    berth_runtime::spawn_here(producer(tx));
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
}
