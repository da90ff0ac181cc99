//! The RPCs that change package state: Update, Remove, the workers' reports and the cluster's
//! version. What runs outside the write (settings conversions on the jq evaluators, a
//! worker's validation) runs here, before the writer takes the engine's lock.

use berth_lifecycle_core::engine::{Change, Refused};
use berth_lifecycle_core::report::Report;
use berth_lifecycle_core::update;
use berth_lifecycle_core::{Generation, Owner, PackageKey};
use berth_proto::lifecycle::{ClusterVersionReport, ReportRequest, SuspendChange};
use berth_proto::v1;

use super::LifecycleService;
use crate::conversion::{self, AtLoad};
use crate::convert;
use crate::error::Error;
use crate::validation::{Described, Outcome};
use berth_proto::json;

impl LifecycleService {
    /// An Update through `owner`'s front door (the public API's, or a resource's).
    pub(super) async fn apply_update(
        &self,
        req: v1::UpdateRequest,
        owner: Owner,
    ) -> Result<v1::UpdateResponse, Error> {
        let (repositories, definition) = self.repositories_for(&req.repository).await?;
        let mut spec = convert::update_spec(&req, &repositories)?;
        drop(repositories);
        let key = spec.id.key();
        tracing::Span::current().record("package.key", key.as_str());
        // Settings of an older version for the loaded version: converted now, outside the
        // write (the plan checks the conversions are still the loaded ones).
        let current = self.store.get(&key).await?;
        // Refused before any validation runs (the write decides again, under its lock).
        if let Some(existing) = &current
            && existing.owner != owner
        {
            return Err(Error::Refused(Refused::OtherOwner {
                key,
                owner: existing.owner.clone(),
            }));
        }
        // (Never with kept settings: `settings_version` without settings is refused.)
        if spec.settings_version != 0 {
            spec.converted = conversion::for_update(&self.jq, current.as_ref(), &spec).await?;
        }
        // Another version: the settings it would have (kept or given) must fit it.
        if let Some(existing) = &current
            && update::changes_loaded_version(&spec, existing)
        {
            self.check_new_version(&key, &spec, existing, definition)
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
                Outcome::Invalid(reason) => return Err(Error::SettingsInvalid { key, reason }),
                Outcome::Deferred(why) => {
                    tracing::info!(package.key = %key, reason = %why, "settings checked against the schema only");
                }
                Outcome::Valid { .. } => {}
            }
        }
        let (generation, changed) = self.writer.update(spec, owner).await?;
        if changed {
            tracing::info!(package.key = %key, generation = generation.get(), "update accepted");
        } else {
            tracing::info!(package.key = %key, generation = generation.get(), "update identical to the current spec: nothing to do");
        }
        Ok(v1::UpdateResponse {
            key: key.into_string(),
            generation: generation.get(),
        })
    }

    /// Issue 31.1: an Update that moves a loaded package to another version keeps its settings
    /// (or takes the ones it sends) only if they fit that version. A worker fetches the version
    /// and describes it; the settings are converted with its conversions and checked against
    /// its schema here, and a misfit refuses the Update naming the field and the version, so
    /// nothing changes. Without a worker's answer in time, or for files that do not load, the
    /// Update goes ahead and the version's Load decides, as before.
    async fn check_new_version(
        &self,
        key: &PackageKey,
        spec: &update::UpdateSpec,
        existing: &berth_lifecycle_core::Package,
        definition: Option<berth_proto::lifecycle::RepositoryDefinition>,
    ) -> Result<(), Error> {
        let version = spec.version.as_str();
        let described = self
            .validations
            .describe(
                key,
                existing.generation,
                (&spec.repository, definition),
                &spec.package,
                version,
            )
            .await;
        let loaded = match described {
            Described::Loaded(loaded) => loaded,
            Described::Unloadable(why) => {
                tracing::info!(package.key = %key, version, reason = %why, "the new version does not load; its Load reports it");
                return Ok(());
            }
            Described::Deferred(why) => {
                tracing::info!(package.key = %key, version, reason = %why, "the new version's settings are checked when it loads");
                return Ok(());
            }
        };
        let misfit = |reason: String| Error::SettingsDoNotFit {
            key: key.clone(),
            version: version.to_owned(),
            reason,
        };
        let conversions = convert::loaded_conversions(&loaded)
            .map_err(|(file, e)| misfit(format!("its conversions ({file}): {e}")))?;
        let (settings, from) = update::resulting_settings(spec, existing);
        let converted = conversion::convert(&self.jq, &conversions, settings, from)
            .await
            .map_err(|failure| misfit(failure.to_string()))?;
        let schema = loaded.settings_schema.as_ref().map(json::from_struct);
        match update::check_settings(Some(&schema), &converted.settings) {
            Ok(_) => Ok(()),
            Err(e) => Err(misfit(e.to_string())),
        }
    }

    pub(super) async fn apply_remove(
        &self,
        req: v1::RemoveRequest,
        owner: Owner,
    ) -> Result<v1::RemoveResponse, Error> {
        let v1::RemoveRequest { r#ref, force } = req;
        let key = convert::package_id(r#ref.as_ref())?.key();
        tracing::Span::current().record("package.key", key.as_str());
        let generation = self.writer.remove(&key, force, owner).await?;
        Ok(v1::RemoveResponse {
            found: generation.is_some(),
            generation: generation.map(Generation::get).unwrap_or_default(),
            key: key.into_string(),
        })
    }

    /// Suspends or resumes a package through `owner`'s front door.
    pub(super) async fn apply_suspend(
        &self,
        req: SuspendChange,
        owner: Owner,
    ) -> Result<v1::SuspendResponse, Error> {
        let SuspendChange { r#ref, suspended } = req;
        let key = convert::package_id(r#ref.as_ref())?.key();
        tracing::Span::current().record("package.key", key.as_str());
        let Some(changed) = self.writer.suspend(&key, owner, suspended).await? else {
            return Err(Error::NotFound { key });
        };
        if changed {
            tracing::info!(package.key = %key, suspended, "package suspension changed");
        }
        Ok(v1::SuspendResponse {
            key: key.into_string(),
            changed,
        })
    }

    pub(super) async fn record_cluster_version(
        &self,
        req: ClusterVersionReport,
    ) -> Result<(), Error> {
        let ClusterVersionReport { git_version } = req;
        let version = convert::cluster_version(&git_version)?;
        match self.writer.cluster_version(version.clone()).await {
            Ok(true) => {
                tracing::info!(kubernetes.version = %version, "cluster version changed; rescheduled")
            }
            Ok(false) => {}
            // The release service reports again; its call is not the one that failed.
            Err(e) => tracing::error!(error = %e, "scheduling pass failed"),
        }
        Ok(())
    }

    /// Release's view of a Running package's release (`ReleaseHealth`) as its Ready
    /// condition, at the package's generation: ignored unless the package is Running and not
    /// being removed (then a task's reports decide Ready: answers false), and when Ready
    /// already says it.
    pub(super) async fn apply_release_health(
        &self,
        health: berth_proto::lifecycle::ReleaseHealth,
    ) -> Result<bool, Error> {
        let ready = convert::release_health(&health).map_err(convert::RequestError::Report)?;
        let key = PackageKey::from_issued(health.key);
        let Some(row) = self.store.get(&key).await? else {
            return Ok(false);
        };
        if row.phase != berth_lifecycle_core::Phase::Running || row.removing {
            return Ok(false);
        }
        let current = berth_lifecycle_core::model::condition::find(
            &row.conditions,
            berth_lifecycle_core::model::condition::ConditionType::Ready,
        );
        if current.is_some_and(|c| {
            c.status == ready.status && c.reason == ready.reason && c.message == ready.message
        }) {
            return Ok(true);
        }
        tracing::info!(status = ?ready.status, reason = %ready.reason, message = %ready.message, "release health changed");
        let mut report = Report::new(row.generation);
        report.conditions = vec![ready];
        let change = Change::Report {
            key,
            generation: row.generation,
            reports: vec![report],
        };
        Ok(self.writer.report(change).await?)
    }

    /// Hookevent's view of a Running package's operators (`OperatorsHealth`) as its
    /// OperatorsReady condition: applied only while the package is Running at the reported
    /// generation and not being removed (answers false otherwise), and a no-op when the
    /// condition already says it.
    pub(super) async fn apply_operators_health(
        &self,
        health: berth_proto::lifecycle::OperatorsHealth,
    ) -> Result<bool, Error> {
        use berth_lifecycle_core::model::condition::{ConditionType, find};
        let set = convert::operators_health(&health).map_err(convert::RequestError::Report)?;
        let key = PackageKey::from_issued(health.key);
        let Some(row) = self.store.get(&key).await? else {
            return Ok(false);
        };
        if row.phase != berth_lifecycle_core::Phase::Running
            || row.removing
            || row.generation.get() != health.generation
        {
            return Ok(false);
        }
        let current = find(&row.conditions, ConditionType::OperatorsReady);
        if current.is_some_and(|c| {
            c.status == set.status && c.reason == set.reason && c.message == set.message
        }) {
            return Ok(true);
        }
        tracing::info!(status = ?set.status, reason = %set.reason, message = %set.message, "operators health changed");
        let mut report = Report::new(row.generation);
        report.conditions = vec![set];
        let change = Change::Report {
            key,
            generation: row.generation,
            reports: vec![report],
        };
        Ok(self.writer.report(change).await?)
    }

    /// Applies a task's reports (one, or a worker's batch: the same package and generation,
    /// in order) as one write: each report applied to the row in turn, then one scheduling
    /// pass. Whether the write was applied (false: a stale generation, ignored).
    pub(super) async fn apply_reports(&self, reqs: Vec<ReportRequest>) -> Result<bool, Error> {
        let (key, generation, parsed) =
            convert::reports(&reqs).map_err(convert::RequestError::Report)?;
        let change = match parsed {
            convert::Reports::Removed => Change::Delete { key, generation },
            convert::Reports::Changes(mut reports) => {
                for report in &mut reports {
                    self.convert_at_load(&key, generation, report).await?;
                }
                Change::Report {
                    key,
                    generation,
                    reports,
                }
            }
        };
        Ok(self.writer.report(change).await?)
    }

    /// A Load report: the stored settings taken to the loaded version's settings version
    /// before the write (jq runs outside the engine's lock). On success the report carries the
    /// converted settings and the settings they were converted from, which the write checks
    /// are still the stored ones; on failure it becomes the package's failure.
    async fn convert_at_load(
        &self,
        key: &PackageKey,
        generation: Generation,
        report: &mut Report,
    ) -> Result<(), Error> {
        let Some(conversions) = report.conversions.as_ref() else {
            return Ok(());
        };
        let Some(row) = self.store.get(key).await? else {
            return Ok(());
        };
        if row.generation != generation {
            // Stale: the write ignores it.
            return Ok(());
        }
        let at_load =
            conversion::at_load(&self.jq, conversions, &row.settings, row.settings_version).await;
        match at_load {
            AtLoad::Failed(e) => {
                tracing::warn!(package.key = %key, error = %e, "settings conversion failed; the package fails");
                *report = Report::failed(generation, e.to_string());
            }
            done => {
                if let AtLoad::Converted(c) = &done {
                    tracing::info!(package.key = %key, from = row.settings_version, to = c.version, "stored settings converted");
                }
                report.stored_settings = Some(done);
            }
        }
        report.converted_from = Some((row.settings, row.settings_version));
        Ok(())
    }
}
