//! proto ↔ domain conversions for the lifecycle service, in one place.

use berth_proto::lifecycle as pb;
use berth_proto::lifecycle::report_request::Report as Rpt;
use berth_proto::{json, v1};

use crate::dump::QueueDoc;
use crate::error::LifecycleError;
use crate::model::{
    Condition, ConditionSet, ConditionStatus, ConditionType, Generation, Kind, PackageId,
    PackageKey, Phase,
};
use crate::report::{Change, Report};
use crate::scheduler::{self, Constraint, LoadedSpec};
use crate::store::PackageRow;
use crate::update::{MAX_REPOSITORY_LEN, MAX_SETTINGS_BYTES, MAX_VERSION_LEN, UpdateSpec};

/// Parses a requested package reference. Apps are the default kind.
pub fn package_id(r: Option<&v1::PackageRef>) -> Result<PackageId, LifecycleError> {
    let invalid = LifecycleError::InvalidArgument;
    let r = r.ok_or_else(|| invalid("ref: required (the package's name)".into()))?;
    let kind = match v1::PackageKind::try_from(r.kind) {
        Ok(v1::PackageKind::Unspecified | v1::PackageKind::App) => Kind::App,
        Ok(v1::PackageKind::Module) => Kind::Module,
        Err(_) => {
            return Err(invalid(format!("ref.kind: unknown value {}", r.kind)));
        }
    };
    PackageId::new(kind, &r.name, &r.namespace).map_err(|e| invalid(format!("ref.{e}")))
}

/// Settings as JSON, refused when larger than [`MAX_SETTINGS_BYTES`].
pub fn settings(s: Option<&prost_types::Struct>) -> Result<serde_json::Value, LifecycleError> {
    let settings = json::from_opt_struct(s);
    if settings.to_string().len() > MAX_SETTINGS_BYTES {
        return Err(LifecycleError::InvalidArgument(format!(
            "settings: larger than the {MAX_SETTINGS_BYTES}-byte limit"
        )));
    }
    Ok(settings)
}

/// Parses an Update request; each refusal names the field. The repository must be one of
/// `repositories` (a configured name, or a directory under a configured root): nothing else on a
/// worker's disk is reachable through the API.
pub fn update_spec(
    req: &v1::UpdateRequest,
    repositories: &berth_package::Repositories,
) -> Result<UpdateSpec, LifecycleError> {
    let invalid = LifecycleError::InvalidArgument;
    let id = package_id(req.r#ref.as_ref())?;
    if req.repository.is_empty() {
        return Err(invalid(format!(
            "repository: required (a configured repository or a directory under a repository root; {})",
            repositories.describe()
        )));
    }
    if req.version.is_empty() {
        return Err(invalid("version: required".into()));
    }
    if req.version.len() > MAX_VERSION_LEN {
        return Err(invalid(format!(
            "version: longer than the {MAX_VERSION_LEN}-byte limit"
        )));
    }
    if req.repository.len() > MAX_REPOSITORY_LEN {
        return Err(invalid(format!(
            "repository: longer than the {MAX_REPOSITORY_LEN}-byte limit"
        )));
    }
    let package = if req.package.is_empty() {
        id.name.clone()
    } else {
        req.package.clone()
    };
    crate::model::check_label("package", &package).map_err(invalid)?;
    let settings = settings(req.settings.as_ref())?;
    repositories
        .check_exists(&req.repository)
        .map_err(|e| invalid(format!("repository: {e}")))?;
    // Only a registry lists versions to choose from; elsewhere a constraint names nothing.
    if crate::flows::is_constraint(&req.version)
        && !matches!(
            repositories.check(&req.repository),
            Ok(berth_package::Requested::Named(
                _,
                berth_package::Source::Oci(_)
            ))
        )
    {
        return Err(invalid(format!(
            "version: {:?} is a constraint, and only an OCI repository resolves constraints; {:?} is not one, so name an exact version",
            req.version, req.repository
        )));
    }
    if req.settings_version > berth_package::MAX_SETTINGS_VERSION {
        return Err(invalid(format!(
            "settings_version: {} is over the limit of {}",
            req.settings_version,
            berth_package::MAX_SETTINGS_VERSION
        )));
    }
    Ok(UpdateSpec {
        id,
        repository: req.repository.clone(),
        package,
        version: req.version.clone(),
        settings,
        settings_version: req.settings_version,
        converted: None,
        force: req.force,
    })
}

/// A queue as the broker's Dump describes it, for lifecycle's Dump.
pub fn queue_doc(q: berth_proto::queue::QueueInfo) -> QueueDoc {
    QueueDoc {
        name: q.name,
        length: q.length,
        head: if q.head_kind.is_empty() {
            String::new()
        } else {
            format!("{} {}", q.head_kind, q.head_id)
        },
        head_attempts: q.head_attempts,
        head_last_error: q.head_last_error,
        lease_holder: q.lease_holder,
    }
}

pub fn package_ref(id: &PackageId) -> v1::PackageRef {
    v1::PackageRef {
        kind: match id.kind {
            Kind::App => v1::PackageKind::App,
            Kind::Module => v1::PackageKind::Module,
        } as i32,
        name: id.name.clone(),
        namespace: id.namespace.clone(),
    }
}

fn timestamp(rfc3339: &str) -> Option<prost_types::Timestamp> {
    let t = chrono::DateTime::parse_from_rfc3339(rfc3339).ok()?;
    Some(prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: t.timestamp_subsec_nanos() as i32,
    })
}

fn condition(c: &Condition) -> v1::Condition {
    v1::Condition {
        r#type: c.type_.clone(),
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        observed_generation: c.observed_generation,
        last_transition_time: timestamp(&c.last_transition_time),
    }
}

pub fn package(row: &PackageRow) -> v1::Package {
    v1::Package {
        r#ref: Some(package_ref(&row.id)),
        key: row.key.to_string(),
        repository: row.repository.clone(),
        package: row.package.clone(),
        version: row.version.clone(),
        generation: row.generation.get(),
        phase: row.phase.as_str().to_owned(),
        conditions: row.conditions.iter().map(condition).collect(),
        settings: Some(json::to_struct(&row.settings)),
        values: Some(json::to_struct(&row.values)),
        hooks: row
            .hooks
            .iter()
            .map(|h| v1::Hook {
                name: h.name.clone(),
                bindings: h.bindings.clone(),
                runs: h.runs,
                last_run: h.last_run.as_deref().and_then(timestamp),
                last_error: h.last_error.clone(),
            })
            .collect(),
        last_error: row.last_error.clone(),
        observed_generation: row.observed_generation.get(),
        resolved_version: row
            .loaded
            .as_ref()
            .map(|l| l.version.to_string())
            .unwrap_or_default(),
        settings_version: row.settings_version,
    }
}

/// Most reports in one call (`ReportBatchRequest` says so too).
pub const MAX_REPORTS_PER_CALL: usize = 64;

/// A task's reports, parsed: the package generation they are of, and what they do to it.
pub enum Reports {
    /// The Cleanup task finished (it comes alone).
    Removed,
    /// Changes to apply in order, as one write.
    Changes(Vec<Change>),
}

/// Parses one call's reports (a `Report`'s one, a `ReportBatch`'s list): at least one, at most
/// [`MAX_REPORTS_PER_CALL`], all of one package generation, `Removed` only alone. The error
/// names the report at fault by its index in the list.
pub fn reports(reqs: &[pb::ReportRequest]) -> Result<(PackageKey, Generation, Reports), String> {
    let first = reqs.first().ok_or("reports: at least one")?;
    if reqs.len() > MAX_REPORTS_PER_CALL {
        return Err(format!(
            "reports: {} in one call, at most {MAX_REPORTS_PER_CALL}",
            reqs.len()
        ));
    }
    let at = |i: usize, e: String| {
        if reqs.len() == 1 {
            e
        } else {
            format!("reports[{i}]: {e}")
        }
    };
    let mut changes = Vec::with_capacity(reqs.len());
    for (i, req) in reqs.iter().enumerate() {
        if req.key != first.key || req.generation != first.generation {
            return Err(at(
                i,
                format!(
                    "of {} generation {}, where reports[0] is of {} generation {}: one call carries one package generation's reports",
                    req.key, req.generation, first.key, first.generation
                ),
            ));
        }
        match report(req).map_err(|e| at(i, e))? {
            Report::Removed if reqs.len() == 1 => {
                return Ok((
                    PackageKey::from_issued(first.key.clone()),
                    Generation::new(first.generation),
                    Reports::Removed,
                ));
            }
            Report::Removed => return Err(at(i, "a Removed report comes alone".into())),
            Report::Change(change) => changes.push(*change),
        }
    }
    Ok((
        PackageKey::from_issued(first.key.clone()),
        Generation::new(first.generation),
        Reports::Changes(changes),
    ))
}

/// Parses a worker's report; the error names the field.
pub fn report(req: &pb::ReportRequest) -> Result<Report, String> {
    let mut c = Change::new(Generation::new(req.generation));
    match req.report.as_ref().ok_or("report: required")? {
        Rpt::Removed(pb::Removed {}) => return Ok(Report::Removed),
        Rpt::Progress(p) => {
            c.phase = phase(p.phase)?;
            c.conditions = p
                .conditions
                .iter()
                .map(condition_set)
                .collect::<Result<_, _>>()?;
        }
        Rpt::Loaded(l) => {
            c.phase = Some(Phase::Loaded);
            c.conditions = vec![ConditionSet::new(
                ConditionType::Loaded,
                ConditionStatus::True,
                "Loaded",
            )];
            c.settings_schema = Some(l.settings_schema.as_ref().map(json::from_struct));
            c.hooks = Some(
                l.hooks
                    .iter()
                    .map(|h| (h.name.clone(), h.bindings.clone()))
                    .collect(),
            );
            c.loaded = Some(loaded_spec(l)?);
            c.hook_configs = Some(stored_hook_configs(l.hook_configs.as_ref()));
            c.conversions = Some(
                berth_package::Conversions::from_steps(
                    l.settings_version,
                    l.conversions.iter().map(|s| berth_package::Step {
                        version: s.version,
                        expressions: s.expressions.clone(),
                    }),
                )
                .map_err(|(file, e)| format!("loaded.conversions: {file}: {e}"))?,
            );
        }
        Rpt::Values(v) => values(&mut c, v, "values")?,
        Rpt::SettingsApplied(s) => {
            c.conditions = vec![ConditionSet::new(
                ConditionType::SettingsValid,
                ConditionStatus::True,
                "Valid",
            )];
            c.values = s.values.as_ref().map(json::from_struct);
        }
        Rpt::HookRun(h) => {
            c.hook_run = Some((h.name.clone(), h.error.clone()));
            if let Some(v) = &h.values {
                values(&mut c, v, "hook_run.values")?;
            }
        }
        Rpt::RunSucceeded(pb::RunSucceeded {}) => {
            c.phase = Some(Phase::Running);
            c.run_succeeded = true;
            c.conditions = vec![ConditionSet::new(
                ConditionType::Ready,
                ConditionStatus::True,
                "Ready",
            )];
            c.error = Some(String::new());
        }
        Rpt::TaskFailed(f) => {
            let error = stored_text(&f.error);
            c.error = (!error.is_empty()).then(|| error.clone());
            if f.permanent {
                c.phase = Some(Phase::Failed);
                let mut ready =
                    ConditionSet::new(ConditionType::Ready, ConditionStatus::False, "Failed");
                ready.message = format!("{error} (fix the package or its settings, then Update)");
                c.conditions = vec![ready];
            }
        }
    }
    // Workers refuse values past the limit themselves; should such a report come anyway, it is
    // not stored.
    let size = c.values.as_ref().map_or(0, |v| v.to_string().len());
    if size > berth_proto::MAX_VALUES_BYTES {
        return Err(format!(
            "values: {size} bytes exceed the limit of {} bytes",
            berth_proto::MAX_VALUES_BYTES
        ));
    }
    Ok(Report::Change(Box::new(c)))
}

/// A worker's free text (a hook's output in an error) as both databases store it: PostgreSQL's
/// `text` refuses NUL bytes, so each becomes U+FFFD, as undecodable output already does.
fn stored_text(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}

/// One hook config answer as the `hook_configs` column holds it.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredAnswer {
    path: String,
    batch: bool,
    output: String,
}

/// A Loaded report's hook configs as stored: `None` without them, past
/// [`berth_proto::MAX_HOOK_CONFIGS_BYTES`], or with a NUL byte (PostgreSQL's `text` refuses it, and a
/// changed output is not what the hook said).
fn stored_hook_configs(configs: Option<&pb::HookConfigs>) -> Option<String> {
    let configs = configs?;
    let answers = &configs.answers;
    if configs.size() > berth_proto::MAX_HOOK_CONFIGS_BYTES
        || answers
            .iter()
            .any(|a| a.path.contains('\0') || a.output.contains('\0'))
    {
        return None;
    }
    let stored: Vec<StoredAnswer> = answers
        .iter()
        .map(|a| StoredAnswer {
            path: a.path.clone(),
            batch: a.batch,
            output: a.output.clone(),
        })
        .collect();
    serde_json::to_string(&stored).ok()
}

/// The stored hook configs as a spec carries them; `None` for text that is not theirs (the
/// workers then discover).
pub fn hook_configs(stored: &str) -> Option<pb::HookConfigs> {
    let stored: Vec<StoredAnswer> = serde_json::from_str(stored).ok()?;
    Some(pb::HookConfigs {
        answers: stored
            .into_iter()
            .map(|a| pb::HookConfigAnswer {
                path: a.path,
                batch: a.batch,
                output: a.output,
            })
            .collect(),
    })
}

/// What the scheduler needs from a Loaded report; the error names the field.
fn loaded_spec(l: &pb::Loaded) -> Result<LoadedSpec, String> {
    let version = berth_package::parse_version(&l.version)
        .map_err(|e| format!("loaded.version: {:?}: {e}", l.version))?;
    let r = l.requirements.clone().unwrap_or_default();
    let constraint = |text: &str, field: &str| -> Result<Option<Constraint>, String> {
        if text.is_empty() {
            return Ok(None);
        }
        berth_package::VersionConstraint::parse(text)
            .map(|c| Some(Constraint(c)))
            .map_err(|e| format!("loaded.requirements.{field}: {e}"))
    };
    let deps =
        |list: &[pb::Dependency], field: &str| -> Result<Vec<scheduler::Dependency>, String> {
            list.iter()
                .map(|d| {
                    Ok(scheduler::Dependency {
                        name: d.name.clone(),
                        constraint: constraint(&d.constraint, field)?,
                    })
                })
                .collect()
        };
    let groups =
        |list: &[pb::DependencyGroup], field: &str| -> Result<Vec<scheduler::Group>, String> {
            list.iter()
                .map(|g| {
                    Ok(scheduler::Group {
                        name: g.name.clone(),
                        members: deps(&g.members, field)?,
                    })
                })
                .collect()
        };
    Ok(LoadedSpec {
        version,
        weight: l.weight,
        requirements: scheduler::Requirements {
            kubernetes: constraint(&r.kubernetes, "kubernetes")?,
            platform: constraint(&r.platform, "platform")?,
            mandatory: deps(&r.mandatory, "mandatory")?,
            conditional: deps(&r.conditional, "conditional")?,
            any_of: groups(&r.any_of, "any_of")?,
            none_of: groups(&r.none_of, "none_of")?,
        },
        reads_global: l.reads_global,
    })
}

fn values(c: &mut Change, v: &pb::Values, field: &str) -> Result<(), String> {
    c.values = v.values.as_ref().map(json::from_struct);
    let limit = berth_proto::MAX_VALUES_BYTES;
    let size = v
        .values_patch
        .as_ref()
        .map_or(0, prost::Message::encoded_len);
    if size > limit {
        return Err(format!(
            "{field}.values_patch: {size} bytes exceed the limit of {limit} bytes"
        ));
    }
    c.patch = v.values_patch.as_ref().map_or_else(Vec::new, |ops| {
        ops.values.iter().map(json::from_value).collect()
    });
    c.patch_inside_run = v.patch_inside_run;
    c.settings = v.settings.as_ref().map(json::from_struct);
    if let Some(settings) = &c.settings {
        let size = settings.to_string().len();
        if size > berth_package::MAX_SETTINGS_BYTES {
            return Err(format!(
                "{field}.settings: {size} bytes exceed the limit of {} bytes",
                berth_package::MAX_SETTINGS_BYTES
            ));
        }
    }
    Ok(())
}

/// A reported phase; `None` (keep the phase) when unspecified.
fn phase(value: i32) -> Result<Option<Phase>, String> {
    Ok(Some(match pb::Phase::try_from(value) {
        Ok(pb::Phase::Unspecified) => return Ok(None),
        Ok(pb::Phase::Pending) => Phase::Pending,
        Ok(pb::Phase::Downloading) => Phase::Downloading,
        Ok(pb::Phase::Loaded) => Phase::Loaded,
        Ok(pb::Phase::Running) => Phase::Running,
        Ok(pb::Phase::Removing) => Phase::Removing,
        Ok(pb::Phase::Failed) => Phase::Failed,
        Err(_) => return Err(format!("progress.phase: unknown value {value}")),
    }))
}

fn condition_set(c: &pb::ConditionUpdate) -> Result<ConditionSet, String> {
    let type_ = match pb::ConditionType::try_from(c.r#type) {
        Ok(pb::ConditionType::RequirementsMet) => ConditionType::RequirementsMet,
        Ok(pb::ConditionType::Downloaded) => ConditionType::Downloaded,
        Ok(pb::ConditionType::Loaded) => ConditionType::Loaded,
        Ok(pb::ConditionType::SettingsValid) => ConditionType::SettingsValid,
        Ok(pb::ConditionType::HooksProcessed) => ConditionType::HooksProcessed,
        Ok(pb::ConditionType::ManifestsApplied) => ConditionType::ManifestsApplied,
        Ok(pb::ConditionType::Ready) => ConditionType::Ready,
        Ok(pb::ConditionType::Unspecified) | Err(_) => {
            return Err(format!(
                "progress.conditions.type: unknown value {}",
                c.r#type
            ));
        }
    };
    let status = match pb::ConditionStatus::try_from(c.status) {
        Ok(pb::ConditionStatus::True) => ConditionStatus::True,
        Ok(pb::ConditionStatus::False) => ConditionStatus::False,
        Ok(pb::ConditionStatus::Unknown) => ConditionStatus::Unknown,
        Ok(pb::ConditionStatus::Unspecified) | Err(_) => {
            return Err(format!(
                "progress.conditions.status: unknown value {}",
                c.status
            ));
        }
    };
    Ok(ConditionSet {
        type_,
        status,
        reason: c.reason.clone(),
        message: c.message.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_configs_are_kept_within_their_bound_and_come_back_as_given() {
        let answer = |path: &str, output: String| pb::HookConfigAnswer {
            path: path.into(),
            batch: path == "batch",
            output,
        };
        let configs = pb::HookConfigs {
            answers: vec![
                answer("010-a.sh", "beforeHelm: 1".into()),
                answer("batch", r#"{"configVersion":"v1"}"#.into()),
            ],
        };
        let stored = stored_hook_configs(Some(&configs)).expect("kept");
        assert_eq!(hook_configs(&stored), Some(configs));
        assert_eq!(stored_hook_configs(None), None);

        let big = pb::HookConfigs {
            answers: vec![answer(
                "big.sh",
                "#".repeat(berth_proto::MAX_HOOK_CONFIGS_BYTES),
            )],
        };
        assert_eq!(stored_hook_configs(Some(&big)), None, "past the bound");
        let nul = pb::HookConfigs {
            answers: vec![answer("nul.sh", "a\0b".into())],
        };
        assert_eq!(
            stored_hook_configs(Some(&nul)),
            None,
            "not storable as said"
        );
        assert_eq!(hook_configs("not json"), None);
    }

    fn progress(key: &str, generation: i64, reason: &str) -> pb::ReportRequest {
        pb::ReportRequest {
            key: key.into(),
            generation,
            report: Some(Rpt::Progress(pb::Progress {
                phase: pb::Phase::Unspecified as i32,
                conditions: vec![pb::ConditionUpdate {
                    r#type: pb::ConditionType::ManifestsApplied as i32,
                    status: pb::ConditionStatus::True as i32,
                    reason: reason.into(),
                    message: String::new(),
                }],
            })),
        }
    }

    fn removed(key: &str) -> pb::ReportRequest {
        pb::ReportRequest {
            key: key.into(),
            generation: 1,
            report: Some(Rpt::Removed(pb::Removed {})),
        }
    }

    fn refused(reqs: &[pb::ReportRequest]) -> String {
        match reports(reqs) {
            Err(e) => e,
            Ok(_) => panic!("{} reports were taken", reqs.len()),
        }
    }

    /// A batch keeps its reports' order, and is of the generation they all name.
    #[test]
    fn a_batch_is_one_package_generations_reports_in_order() {
        let batch = [
            progress("default.a", 3, "First"),
            progress("default.a", 3, "Second"),
        ];
        let Ok((key, generation, Reports::Changes(changes))) = reports(&batch) else {
            panic!("the batch is taken")
        };
        assert_eq!((key.as_str(), generation.get()), ("default.a", 3));
        let reasons: Vec<&str> = changes
            .iter()
            .map(|c| c.conditions[0].reason.as_str())
            .collect();
        assert_eq!(reasons, ["First", "Second"]);
        assert!(matches!(
            reports(&[removed("default.a")]),
            Ok((_, _, Reports::Removed))
        ));
    }

    /// What a batch may not be, each refused with the report at fault named.
    #[test]
    fn batches_that_mix_packages_or_exceed_the_bound_are_refused() {
        assert_eq!(refused(&[]), "reports: at least one");
        let other_package =
            refused(&[progress("default.a", 1, "A"), progress("default.b", 1, "B")]);
        assert!(
            other_package.starts_with("reports[1]: of default.b generation 1, where reports[0] is of default.a generation 1"),
            "{other_package}"
        );
        let other_generation =
            refused(&[progress("default.a", 1, "A"), progress("default.a", 2, "B")]);
        assert!(
            other_generation.starts_with("reports[1]: of default.a generation 2"),
            "{other_generation}"
        );
        assert_eq!(
            refused(&[progress("default.a", 1, "A"), removed("default.a")]),
            "reports[1]: a Removed report comes alone"
        );
        let too_many: Vec<_> = (0..=MAX_REPORTS_PER_CALL)
            .map(|_| progress("default.a", 1, "A"))
            .collect();
        assert_eq!(refused(&too_many), "reports: 65 in one call, at most 64");
        let mut empty = progress("default.a", 1, "A");
        empty.report = None;
        assert_eq!(
            refused(&[progress("default.a", 1, "A"), empty]),
            "reports[1]: report: required"
        );
    }

    /// A hook's output with NUL bytes in a failure is stored with U+FFFD in their place: as it
    /// came, PostgreSQL refuses it and the failure would never show.
    #[test]
    fn nul_bytes_in_a_failure_become_replacement_characters() {
        let req = pb::ReportRequest {
            key: "default.a".into(),
            generation: 1,
            report: Some(Rpt::TaskFailed(pb::TaskFailed {
                error: "hook said \0\0 then died".into(),
                permanent: true,
            })),
        };
        let Ok(Report::Change(c)) = report(&req) else {
            panic!("a failure report parses")
        };
        assert_eq!(
            c.error.as_deref(),
            Some("hook said \u{FFFD}\u{FFFD} then died")
        );
        assert!(c.conditions.iter().all(|c| !c.message.contains('\0')));
    }
}
