//! proto ↔ domain conversions for the lifecycle service, in one place. Requests are parsed into
//! the domain's typed values here, and refused with a [`RequestError`] naming the field.

use berth_lifecycle_core::condition::{Condition, ConditionSet, ConditionStatus, ConditionType};
use berth_lifecycle_core::id::{InvalidName, SYSTEM_NAMESPACE, check_label};
use berth_lifecycle_core::report::Report;
use berth_lifecycle_core::scheduler::{self, Constraint, LoadedSpec};
use berth_lifecycle_core::update::{
    MAX_REPOSITORY_LEN, MAX_SETTINGS_BYTES, MAX_VERSION_LEN, UpdateSpec,
};
use berth_lifecycle_core::{
    Generation, Kind, Owner, Package, PackageId, PackageKey, Phase, Timestamp, VersionRequest,
};
use berth_proto::lifecycle as pb;
use berth_proto::lifecycle::report_request::Report as Rpt;
use berth_proto::{json, v1};

use crate::dump::QueueDoc;

/// A request the service cannot take: the message starts with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("ref: required (the package's name)")]
    MissingRef,
    #[error("{field}: unknown value {value}")]
    UnknownValue { field: &'static str, value: i32 },
    /// A name that is not a DNS label (`ref.name`, `ref.namespace`).
    #[error("ref.{0}")]
    RefName(InvalidName),
    /// The package name an Update gives (`package`).
    #[error("{0}")]
    PackageName(InvalidName),
    #[error(
        "repository: required (a configured repository or a directory under a repository root; {configured})"
    )]
    MissingRepository { configured: String },
    /// A repository the configuration does not name or hold.
    #[error("repository: {reason}")]
    UnknownRepository { reason: String },
    /// The modules' namespace takes no app: named like a module, it could reach for the
    /// module's release, its objects and its records.
    #[error(
        "ref.namespace: {namespace:?} belongs to modules; install the app in a namespace of its own"
    )]
    AppInModulesNamespace { namespace: String },
    #[error("version: required")]
    MissingVersion,
    #[error("{field}: longer than the {limit}-byte limit")]
    TooLong { field: &'static str, limit: usize },
    #[error(
        "version: {version:?} is a constraint, and only an OCI repository resolves constraints; {repository:?} is not one, so name an exact version"
    )]
    ConstraintOutsideRegistry { version: String, repository: String },
    #[error("settings_version: {version} is over the limit of {limit}")]
    SettingsVersionOverLimit { version: u32, limit: u32 },
    #[error("settings: larger than the {MAX_SETTINGS_BYTES}-byte limit")]
    SettingsTooLarge,
    #[error(
        "reset_settings: replaces the stored settings with none, so it takes no settings or settings_version"
    )]
    ResetWithSettings,
    #[error(
        "settings_version: names the version of the settings an Update sends, and this one sends none (the stored settings are kept)"
    )]
    VersionWithoutSettings,
    /// A worker's reports.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// A controller's change without its part (`update`, `remove`, `change`).
    #[error("{0}: required")]
    Missing(&'static str),
    /// A controller's change naming no resource, or not one.
    #[error("owner.resource: {0}")]
    Owner(#[from] berth_lifecycle_core::owner::OwnerError),
    #[error("page_token: longer than {limit} bytes")]
    PageToken { limit: usize },
    #[error("page_size: {size} is outside 0..={max}")]
    PageSize { size: i32, max: usize },
    #[error("git_version: {0:?} is not a Kubernetes version (vMAJOR.MINOR.PATCH)")]
    ClusterVersion(String),
}

/// Parses a requested package reference. Apps are the default kind.
pub fn package_id(r: Option<&v1::PackageRef>) -> Result<PackageId, RequestError> {
    let r = r.ok_or(RequestError::MissingRef)?;
    let kind = match v1::PackageKind::try_from(r.kind) {
        Ok(v1::PackageKind::Unspecified | v1::PackageKind::App) => Kind::App,
        Ok(v1::PackageKind::Module) => Kind::Module,
        Err(_) => {
            return Err(RequestError::UnknownValue {
                field: "ref.kind",
                value: r.kind,
            });
        }
    };
    PackageId::new(kind, &r.name, &r.namespace).map_err(RequestError::RefName)
}

/// Settings as JSON, refused when larger than [`MAX_SETTINGS_BYTES`].
pub fn settings(s: Option<&prost_types::Struct>) -> Result<serde_json::Value, RequestError> {
    let settings = json::from_opt_struct(s);
    if settings.to_string().len() > MAX_SETTINGS_BYTES {
        return Err(RequestError::SettingsTooLarge);
    }
    Ok(settings)
}

/// Parses an Update request; each refusal names the field. The repository must be one of
/// `repositories` (a configured name, or a directory under a configured root): nothing else on a
/// worker's disk is reachable through the API.
pub fn update_spec(
    req: &v1::UpdateRequest,
    repositories: &berth_package::Repositories,
) -> Result<UpdateSpec, RequestError> {
    let v1::UpdateRequest {
        r#ref,
        repository,
        package,
        version,
        settings: requested_settings,
        settings_version,
        force,
        reset_settings,
    } = req;
    let id = package_id(r#ref.as_ref())?;
    if *reset_settings && (requested_settings.is_some() || *settings_version != 0) {
        return Err(RequestError::ResetWithSettings);
    }
    if requested_settings.is_none() && *settings_version != 0 {
        return Err(RequestError::VersionWithoutSettings);
    }
    if id.kind == Kind::App && id.namespace == SYSTEM_NAMESPACE {
        return Err(RequestError::AppInModulesNamespace {
            namespace: id.namespace,
        });
    }
    if repository.is_empty() {
        return Err(RequestError::MissingRepository {
            configured: repositories.describe(),
        });
    }
    if version.is_empty() {
        return Err(RequestError::MissingVersion);
    }
    if version.len() > MAX_VERSION_LEN {
        return Err(RequestError::TooLong {
            field: "version",
            limit: MAX_VERSION_LEN,
        });
    }
    if repository.len() > MAX_REPOSITORY_LEN {
        return Err(RequestError::TooLong {
            field: "repository",
            limit: MAX_REPOSITORY_LEN,
        });
    }
    let package = if package.is_empty() {
        id.name.clone()
    } else {
        package.clone()
    };
    check_label("package", &package).map_err(RequestError::PackageName)?;
    let settings = settings(requested_settings.as_ref())?;
    repositories
        .check_exists(repository)
        .map_err(|reason| RequestError::UnknownRepository { reason })?;
    let version = VersionRequest::parse(version);
    // Only a registry lists versions to choose from; elsewhere a constraint names nothing.
    if version.is_constraint()
        && !matches!(
            repositories.check(repository),
            Ok(berth_package::Requested::Named(
                _,
                berth_package::Source::Oci(_)
            ))
        )
    {
        return Err(RequestError::ConstraintOutsideRegistry {
            version: req.version.clone(),
            repository: repository.clone(),
        });
    }
    if *settings_version > berth_package::MAX_SETTINGS_VERSION {
        return Err(RequestError::SettingsVersionOverLimit {
            version: *settings_version,
            limit: berth_package::MAX_SETTINGS_VERSION,
        });
    }
    Ok(UpdateSpec {
        id,
        repository: repository.clone(),
        package,
        version,
        settings,
        settings_version: *settings_version,
        keep_settings: requested_settings.is_none() && !*reset_settings,
        converted: None,
        force: *force,
    })
}

/// Packages in a List or Dump page when the request does not say.
const DEFAULT_PAGE_SIZE: usize = 100;
/// Most packages a List or Dump page may ask for.
const MAX_PAGE_SIZE: usize = 1000;
/// Longest page token accepted (a package key).
const MAX_PAGE_TOKEN: usize = 512;

/// The page size a List or Dump asked for.
pub fn page_size(requested: i32, token: &str) -> Result<usize, RequestError> {
    if token.len() > MAX_PAGE_TOKEN {
        return Err(RequestError::PageToken {
            limit: MAX_PAGE_TOKEN,
        });
    }
    match usize::try_from(requested) {
        Ok(0) => Ok(DEFAULT_PAGE_SIZE),
        Ok(n) if n <= MAX_PAGE_SIZE => Ok(n),
        _ => Err(RequestError::PageSize {
            size: requested,
            max: MAX_PAGE_SIZE,
        }),
    }
}

/// The cluster's version from the API server's `gitVersion` the release service reports.
pub fn cluster_version(git_version: &str) -> Result<semver::Version, RequestError> {
    scheduler::kubernetes_version(git_version)
        .ok_or_else(|| RequestError::ClusterVersion(git_version.chars().take(64).collect()))
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

fn timestamp(t: Timestamp) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: t.unix_seconds(),
        nanos: 0,
    }
}

fn condition(c: &Condition) -> v1::Condition {
    v1::Condition {
        r#type: c.type_.as_str().to_owned(),
        status: c.status.as_str().to_owned(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        observed_generation: c.observed_generation,
        last_transition_time: Some(timestamp(c.last_transition_time)),
    }
}

/// The resource a controller's change names as its owner.
pub fn owner(owner: Option<berth_proto::lifecycle::Owner>) -> Result<Owner, RequestError> {
    let resource = owner.map(|o| o.resource).unwrap_or_default();
    Ok(Owner::resource(&resource)?)
}

pub fn package(row: &Package) -> v1::Package {
    v1::Package {
        r#ref: Some(package_ref(&row.id)),
        key: row.key.to_string(),
        repository: row.repository.clone(),
        package: row.package.clone(),
        version: row.version.as_str().to_owned(),
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
                last_run: h.last_run.map(timestamp),
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
        owner: row.owner.stored().unwrap_or_default().to_owned(),
        suspended: row.suspended,
        gone: false,
    }
}

/// Most reports in one call (`ReportBatchRequest` says so too).
pub const MAX_REPORTS_PER_CALL: usize = 64;

/// A task's reports, parsed: the package generation they are of, and what they do to it.
pub enum Reports {
    /// The Cleanup task finished (it comes alone).
    Removed,
    /// Reports to apply in order, as one write.
    Changes(Vec<Report>),
}

/// A worker's report the service cannot take. The message starts with the field at fault;
/// in a call of several reports, with the report's index in the list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error("reports: at least one")]
    NoReports,
    #[error("reports: {count} in one call, at most {MAX_REPORTS_PER_CALL}")]
    TooMany { count: usize },
    /// Report `index` of a call of several.
    #[error("reports[{index}]: {error}")]
    At {
        index: usize,
        error: Box<ReportError>,
    },
    #[error(
        "of {key} generation {generation}, where reports[0] is of {first_key} generation {first_generation}: one call carries one package generation's reports"
    )]
    OtherGeneration {
        key: String,
        generation: i64,
        first_key: String,
        first_generation: i64,
    },
    #[error("a Removed report comes alone")]
    RemovedNotAlone,
    #[error("report: required")]
    Missing,
    #[error("{field}: unknown value {value}")]
    UnknownValue { field: &'static str, value: i32 },
    #[error("loaded.version: {version:?}: {reason}")]
    LoadedVersion { version: String, reason: String },
    /// A requirement's version constraint (`kubernetes`, `platform`, a dependency's).
    #[error("loaded.requirements.{field}: {reason}")]
    Requirement { field: &'static str, reason: String },
    /// The loaded package's `rbac:` section (see [`stored_rbac`]); the message names the field.
    #[error("{0}")]
    Rbac(String),
    #[error("loaded.conversions: {file}: {reason}")]
    Conversions { file: String, reason: String },
    /// Values, a values patch or settings past their limit (`field` names which: `values`,
    /// `hook_run.values.settings`, ...).
    #[error("{field}: {size} bytes exceed the limit of {limit} bytes")]
    TooLarge {
        field: String,
        size: usize,
        limit: usize,
    },
}

/// One parsed report.
pub enum Parsed {
    /// The Cleanup task finished: forget the package unless it was re-created meanwhile.
    Removed,
    Change(Box<Report>),
}

/// Parses one call's reports (a `Report`'s one, a `ReportBatch`'s list): at least one, at most
/// [`MAX_REPORTS_PER_CALL`], all of one package generation, `Removed` only alone. The error
/// names the report at fault by its index in the list.
pub fn reports(
    reqs: &[pb::ReportRequest],
) -> Result<(PackageKey, Generation, Reports), ReportError> {
    let first = reqs.first().ok_or(ReportError::NoReports)?;
    if reqs.len() > MAX_REPORTS_PER_CALL {
        return Err(ReportError::TooMany { count: reqs.len() });
    }
    let at = |index: usize, error: ReportError| {
        if reqs.len() == 1 {
            error
        } else {
            ReportError::At {
                index,
                error: Box::new(error),
            }
        }
    };
    let mut changes = Vec::with_capacity(reqs.len());
    for (i, req) in reqs.iter().enumerate() {
        if req.key != first.key || req.generation != first.generation {
            return Err(at(
                i,
                ReportError::OtherGeneration {
                    key: req.key.clone(),
                    generation: req.generation,
                    first_key: first.key.clone(),
                    first_generation: first.generation,
                },
            ));
        }
        match report(req).map_err(|e| at(i, e))? {
            Parsed::Removed if reqs.len() == 1 => {
                return Ok((
                    PackageKey::from_issued(first.key.clone()),
                    Generation::new(first.generation),
                    Reports::Removed,
                ));
            }
            Parsed::Removed => return Err(at(i, ReportError::RemovedNotAlone)),
            Parsed::Change(change) => changes.push(*change),
        }
    }
    Ok((
        PackageKey::from_issued(first.key.clone()),
        Generation::new(first.generation),
        Reports::Changes(changes),
    ))
}

/// The Ready condition a `ReleaseHealth` sets: its reason at most 128 characters, its message
/// at most `MAX_STATUS_MESSAGE_BYTES`.
pub fn release_health(h: &pb::ReleaseHealth) -> Result<ConditionSet, ReportError> {
    let status = if h.ready {
        pb::ConditionStatus::True
    } else {
        pb::ConditionStatus::False
    };
    condition_set(&pb::ConditionUpdate {
        r#type: pb::ConditionType::Ready as i32,
        status: status as i32,
        reason: h.reason.chars().take(128).collect(),
        message: berth_runtime::bounded_status_message(stored_text(&h.message)),
    })
}

/// The OperatorsReady condition an `OperatorsHealth` sets: its reason at most 128 characters,
/// its message at most `MAX_STATUS_MESSAGE_BYTES`.
pub fn operators_health(h: &pb::OperatorsHealth) -> Result<ConditionSet, ReportError> {
    condition_set(&pb::ConditionUpdate {
        r#type: pb::ConditionType::OperatorsReady as i32,
        status: h.status,
        reason: h.reason.chars().take(128).collect(),
        message: berth_runtime::bounded_status_message(stored_text(&h.message)),
    })
}

/// Parses a worker's report; the error names the field.
pub fn report(req: &pb::ReportRequest) -> Result<Parsed, ReportError> {
    let mut c = Report::new(Generation::new(req.generation));
    match req.report.as_ref().ok_or(ReportError::Missing)? {
        Rpt::Removed(pb::Removed {}) => return Ok(Parsed::Removed),
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
            c.rbac = Some(stored_rbac(l.rbac.as_ref()).map_err(ReportError::Rbac)?);
            c.conversions =
                Some(
                    loaded_conversions(l).map_err(|(file, e)| ReportError::Conversions {
                        file,
                        reason: e.to_string(),
                    })?,
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
        Rpt::StartupDone(pb::StartupDone {}) => c.startup_done = true,
        Rpt::TaskFailed(f) => {
            let error = stored_text(&f.error);
            c.error = (!error.is_empty()).then(|| error.clone());
            if f.permanent {
                c.phase = Some(Phase::Failed);
                let ready =
                    ConditionSet::new(ConditionType::Ready, ConditionStatus::False, "Failed")
                        .with_message(format!(
                            "{error} (fix the package or its settings, then Update)"
                        ));
                c.conditions = vec![ready];
            }
        }
    }
    // Workers refuse values past the limit themselves; should such a report come anyway, it is
    // not stored.
    let size = c.values.as_ref().map_or(0, |v| v.to_string().len());
    if size > berth_proto::MAX_VALUES_BYTES {
        return Err(ReportError::TooLarge {
            field: "values".to_owned(),
            size,
            limit: berth_proto::MAX_VALUES_BYTES,
        });
    }
    Ok(Parsed::Change(Box::new(c)))
}

/// A worker's free text (a hook's output in an error) as both databases store it: PostgreSQL's
/// `text` refuses NUL bytes, so each becomes U+FFFD, as undecodable output already does.
fn stored_text(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}

/// Most bytes of a Loaded report's `rbac` lifecycle keeps (rules of some hundred entries fit
/// many times over; berth-package bounds each list and entry too).
pub const MAX_RBAC_BYTES: usize = 64 << 10;

/// `rbac:` as the `rbac` column holds it.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredRbac {
    declared: bool,
    rules: Vec<StoredRule>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct StoredRule {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    api_groups: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    resources: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    verbs: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    resource_names: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    non_resource_urls: Vec<String>,
}

/// A Loaded report's `rbac` as stored (unset: a worker from before the section, which
/// declared none); refused past [`MAX_RBAC_BYTES`] or with a NUL byte, naming the field.
fn stored_rbac(rbac: Option<&pb::Rbac>) -> Result<String, String> {
    let stored = match rbac {
        None => StoredRbac {
            declared: false,
            rules: vec![],
        },
        Some(r) => StoredRbac {
            declared: r.declared,
            rules: r
                .rules
                .iter()
                .map(|r| StoredRule {
                    api_groups: r.api_groups.clone(),
                    resources: r.resources.clone(),
                    verbs: r.verbs.clone(),
                    resource_names: r.resource_names.clone(),
                    non_resource_urls: r.non_resource_urls.clone(),
                })
                .collect(),
        },
    };
    if !stored.declared && !stored.rules.is_empty() {
        return Err("loaded.rbac: rules without the section declared".into());
    }
    let text = serde_json::to_string(&stored).map_err(|e| format!("loaded.rbac: {e}"))?;
    if text.len() > MAX_RBAC_BYTES {
        return Err(format!(
            "loaded.rbac: {} bytes exceed the limit of {MAX_RBAC_BYTES}",
            text.len()
        ));
    }
    if text.contains('\0') || text.contains("\\u0000") {
        return Err("loaded.rbac: holds a NUL character".into());
    }
    Ok(text)
}

/// The stored `rbac` as a spec carries it; `None` for text that is not one (then the rights
/// are unknown: the release service leaves a Module's bindings as they are).
pub fn rbac(stored: &str) -> Option<pb::Rbac> {
    let stored: StoredRbac = serde_json::from_str(stored).ok()?;
    Some(pb::Rbac {
        declared: stored.declared,
        rules: stored
            .rules
            .into_iter()
            .map(|r| pb::PolicyRule {
                api_groups: r.api_groups,
                resources: r.resources,
                verbs: r.verbs,
                resource_names: r.resource_names,
                non_resource_urls: r.non_resource_urls,
            })
            .collect(),
    })
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
/// The settings conversions a Loaded report (or a validation's description of a version)
/// carries; the error names the file at fault.
pub fn loaded_conversions(
    l: &pb::Loaded,
) -> Result<berth_package::Conversions, (String, berth_package::ConversionError)> {
    berth_package::Conversions::from_steps(
        l.settings_version,
        l.conversions.iter().map(|s| berth_package::Step {
            version: s.version,
            expressions: s.expressions.clone(),
        }),
    )
}

fn loaded_spec(l: &pb::Loaded) -> Result<LoadedSpec, ReportError> {
    let version =
        berth_package::parse_version(&l.version).map_err(|e| ReportError::LoadedVersion {
            version: l.version.clone(),
            reason: e.to_string(),
        })?;
    let r = l.requirements.clone().unwrap_or_default();
    let constraint = |text: &str, field: &'static str| -> Result<Option<Constraint>, ReportError> {
        if text.is_empty() {
            return Ok(None);
        }
        berth_package::VersionConstraint::parse(text)
            .map(|c| Some(Constraint(c)))
            .map_err(|e| ReportError::Requirement {
                field,
                reason: e.to_string(),
            })
    };
    let deps = |list: &[pb::Dependency],
                field: &'static str|
     -> Result<Vec<scheduler::Dependency>, ReportError> {
        list.iter()
            .map(|d| {
                Ok(scheduler::Dependency {
                    name: d.name.clone(),
                    constraint: constraint(&d.constraint, field)?,
                })
            })
            .collect()
    };
    let groups = |list: &[pb::DependencyGroup],
                  field: &'static str|
     -> Result<Vec<scheduler::Group>, ReportError> {
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

fn values(c: &mut Report, v: &pb::Values, field: &str) -> Result<(), ReportError> {
    c.values = v.values.as_ref().map(json::from_struct);
    let limit = berth_proto::MAX_VALUES_BYTES;
    let size = v
        .values_patch
        .as_ref()
        .map_or(0, prost::Message::encoded_len);
    if size > limit {
        return Err(ReportError::TooLarge {
            field: format!("{field}.values_patch"),
            size,
            limit,
        });
    }
    c.patch = v.values_patch.as_ref().map_or_else(Vec::new, |ops| {
        ops.values.iter().map(json::from_value).collect()
    });
    c.patch_inside_run = v.patch_inside_run;
    c.settings = v.settings.as_ref().map(json::from_struct);
    if let Some(settings) = &c.settings {
        let size = settings.to_string().len();
        if size > berth_package::MAX_SETTINGS_BYTES {
            return Err(ReportError::TooLarge {
                field: format!("{field}.settings"),
                size,
                limit: berth_package::MAX_SETTINGS_BYTES,
            });
        }
    }
    Ok(())
}

/// A reported phase; `None` (keep the phase) when unspecified.
fn phase(value: i32) -> Result<Option<Phase>, ReportError> {
    Ok(Some(match pb::Phase::try_from(value) {
        Ok(pb::Phase::Unspecified) => return Ok(None),
        Ok(pb::Phase::Pending) => Phase::Pending,
        Ok(pb::Phase::Downloading) => Phase::Downloading,
        Ok(pb::Phase::Loaded) => Phase::Loaded,
        Ok(pb::Phase::Running) => Phase::Running,
        Ok(pb::Phase::Removing) => Phase::Removing,
        Ok(pb::Phase::Failed) => Phase::Failed,
        Err(_) => {
            return Err(ReportError::UnknownValue {
                field: "progress.phase",
                value,
            });
        }
    }))
}

fn condition_set(c: &pb::ConditionUpdate) -> Result<ConditionSet, ReportError> {
    let type_ = match pb::ConditionType::try_from(c.r#type) {
        Ok(pb::ConditionType::RequirementsMet) => ConditionType::RequirementsMet,
        Ok(pb::ConditionType::Downloaded) => ConditionType::Downloaded,
        Ok(pb::ConditionType::Loaded) => ConditionType::Loaded,
        Ok(pb::ConditionType::SettingsValid) => ConditionType::SettingsValid,
        Ok(pb::ConditionType::HooksProcessed) => ConditionType::HooksProcessed,
        Ok(pb::ConditionType::ManifestsApplied) => ConditionType::ManifestsApplied,
        Ok(pb::ConditionType::Ready) => ConditionType::Ready,
        Ok(pb::ConditionType::OperatorsReady) => ConditionType::OperatorsReady,
        Ok(pb::ConditionType::Unspecified) | Err(_) => {
            return Err(ReportError::UnknownValue {
                field: "progress.conditions.type",
                value: c.r#type,
            });
        }
    };
    let status = match pb::ConditionStatus::try_from(c.status) {
        Ok(pb::ConditionStatus::True) => ConditionStatus::True,
        Ok(pb::ConditionStatus::False) => ConditionStatus::False,
        Ok(pb::ConditionStatus::Unknown) => ConditionStatus::Unknown,
        Ok(pb::ConditionStatus::Unspecified) | Err(_) => {
            return Err(ReportError::UnknownValue {
                field: "progress.conditions.status",
                value: c.status,
            });
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
    fn rbac_is_kept_as_declared_and_bounded() {
        let rule = pb::PolicyRule {
            api_groups: vec!["".into()],
            resources: vec!["secrets".into()],
            verbs: vec!["get".into()],
            ..Default::default()
        };
        let declared = pb::Rbac {
            declared: true,
            rules: vec![rule.clone()],
        };
        let stored = stored_rbac(Some(&declared)).expect("kept");
        assert_eq!(rbac(&stored), Some(declared));
        // A worker from before the section: as declaring none (the default rights).
        let none = stored_rbac(None).expect("kept");
        assert_eq!(
            rbac(&none),
            Some(pb::Rbac {
                declared: false,
                rules: vec![]
            })
        );
        let confused = pb::Rbac {
            declared: false,
            rules: vec![rule.clone()],
        };
        assert!(stored_rbac(Some(&confused)).is_err());
        let big = pb::Rbac {
            declared: true,
            rules: vec![
                pb::PolicyRule {
                    resource_names: vec!["x".repeat(200); 100],
                    ..rule
                };
                10
            ],
        };
        let err = stored_rbac(Some(&big)).unwrap_err();
        assert!(
            err.contains("loaded.rbac") && err.contains("limit"),
            "{err}"
        );
        assert_eq!(rbac("not json"), None);
    }

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
            Err(e) => e.to_string(),
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

    /// A report's error names what is wrong as a value (the field, the value, the report's
    /// place in a batch), and is an invalid argument of the call.
    #[test]
    fn a_bad_report_is_refused_naming_the_field_and_its_place() {
        let mut unknown = progress("default.a", 1, "A");
        if let Some(Rpt::Progress(p)) = &mut unknown.report {
            p.phase = 99;
        }
        let field = ReportError::UnknownValue {
            field: "progress.phase",
            value: 99,
        };
        assert_eq!(reports(&[unknown.clone()]).err(), Some(field.clone()));
        assert_eq!(
            reports(&[progress("default.a", 1, "A"), unknown]).err(),
            Some(ReportError::At {
                index: 1,
                error: Box::new(field),
            })
        );
        let patch = pb::ReportRequest {
            key: "default.a".into(),
            generation: 1,
            report: Some(Rpt::HookRun(pb::HookRunReport {
                name: "hooks/a".into(),
                error: String::new(),
                values: Some(pb::Values {
                    values_patch: Some(prost_types::ListValue {
                        values: vec![json::to_value(&serde_json::json!(
                            "x".repeat(berth_proto::MAX_VALUES_BYTES)
                        ))],
                    }),
                    ..Default::default()
                }),
            })),
        };
        let Err(ReportError::TooLarge { field, limit, .. }) = reports(&[patch]) else {
            panic!("a patch past the limit is refused")
        };
        assert_eq!(
            (field.as_str(), limit),
            (
                "hook_run.values.values_patch",
                berth_proto::MAX_VALUES_BYTES
            )
        );
        let status = tonic::Status::from(crate::error::Error::from(RequestError::from(
            ReportError::RemovedNotAlone,
        )));
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), "a Removed report comes alone");
    }

    /// The modules' namespace takes no app (named like a module, it would reach for the
    /// module's release); modules themselves are installed there.
    #[test]
    fn an_app_in_the_modules_namespace_is_refused_naming_it() {
        let mut repositories = berth_package::Repositories::default();
        repositories
            .add("r", berth_package::Source::Directory("/nonexistent".into()))
            .unwrap();
        let update = |kind: v1::PackageKind, namespace: &str| v1::UpdateRequest {
            r#ref: Some(v1::PackageRef {
                kind: kind as i32,
                name: "dns".into(),
                namespace: namespace.into(),
            }),
            repository: "r".into(),
            version: "1.0.0".into(),
            ..Default::default()
        };
        let refused = update_spec(&update(v1::PackageKind::App, "berth-system"), &repositories)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            refused.contains("ref.namespace") && refused.contains("berth-system"),
            "{refused}"
        );
        assert!(update_spec(&update(v1::PackageKind::App, "team"), &repositories).is_ok());
        let module = update_spec(&update(v1::PackageKind::Module, ""), &repositories).unwrap();
        assert_eq!(module.id.namespace, "berth-system");
    }

    /// Issue 31.1: no settings keeps the stored ones; a reset takes no settings and no settings
    /// version, and a settings version needs settings to describe. Each refusal names the field.
    #[test]
    fn settings_are_kept_replaced_or_reset_and_contradictions_are_refused() {
        let mut repositories = berth_package::Repositories::default();
        repositories
            .add("r", berth_package::Source::Directory("/nonexistent".into()))
            .unwrap();
        let base = v1::UpdateRequest {
            r#ref: Some(v1::PackageRef {
                name: "web".into(),
                namespace: "team".into(),
                ..Default::default()
            }),
            repository: "r".into(),
            version: "1.0.0".into(),
            ..Default::default()
        };
        let sent = Some(json::to_struct(&serde_json::json!({"size": 2})));
        let keep = update_spec(&base, &repositories).unwrap();
        assert!(keep.keep_settings);
        let replace = v1::UpdateRequest {
            settings: sent.clone(),
            ..base.clone()
        };
        assert!(!update_spec(&replace, &repositories).unwrap().keep_settings);
        let reset = v1::UpdateRequest {
            reset_settings: true,
            ..base.clone()
        };
        let reset = update_spec(&reset, &repositories).unwrap();
        assert!(!reset.keep_settings && reset.settings == serde_json::json!({}));
        let refused = |req: v1::UpdateRequest| {
            update_spec(&req, &repositories)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let both = refused(v1::UpdateRequest {
            reset_settings: true,
            settings: sent,
            ..base.clone()
        });
        assert!(both.starts_with("reset_settings:"), "{both}");
        let versioned_reset = refused(v1::UpdateRequest {
            reset_settings: true,
            settings_version: 2,
            ..base.clone()
        });
        assert!(
            versioned_reset.starts_with("reset_settings:"),
            "{versioned_reset}"
        );
        let bare_version = refused(v1::UpdateRequest {
            settings_version: 2,
            ..base
        });
        assert!(
            bare_version.starts_with("settings_version:"),
            "{bare_version}"
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
        let Ok(Parsed::Change(c)) = report(&req) else {
            panic!("a failure report parses")
        };
        assert_eq!(
            c.error.as_deref(),
            Some("hook said \u{FFFD}\u{FFFD} then died")
        );
        assert!(c.conditions.iter().all(|c| !c.message.contains('\0')));
    }
}
