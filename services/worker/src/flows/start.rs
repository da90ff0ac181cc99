//! Bringing a package up: Download, Load, ApplySettings and Startup (Synchronization, then
//! onStartup hooks), and Start (ApplySettings, Startup and Run in one task).

use berth_hooks::LifecycleBinding;
use berth_hooks::binding_context::{self, BindingContext};
use berth_proto::lifecycle::report_request::Report;
use berth_proto::lifecycle::{
    ConditionStatus, ConditionType, Dependency, DependencyGroup, HookConfigAnswer, HookConfigs,
    HookInfo, Loaded, Phase, PolicyRule, Rbac, Requirements, SettingsApplied, SettingsConversion,
    StartupDone,
};
use berth_proto::queue::Task;
use berth_proto::tasks::{self, Start as StartPayload, TaskKind};
use berth_queue::worker::TaskError;

use crate::bindings::{self, hook_snapshots};
use crate::client::CallError;
use crate::context::TaskContext;
use crate::hooks::{apply_outputs, check_settings, report_run, run_hook, run_lifecycle};
use crate::package::{Unavailable, Values, ensure, ensure_files, report_values};

/// A Download task: the package's files into this worker's cache. Lifecycle no longer queues
/// it (Load downloads first, see [`load`]); it still runs, for tasks queued before that.
pub async fn download(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    fetch(cx).await.map(drop)
}

/// The package's files in this worker's cache, with the Downloading phase and the
/// `Downloaded` condition reported (gathered with the task's other reports).
async fn fetch(cx: &TaskContext<'_>) -> Result<berth_package::Package, TaskError> {
    cx.set_phase(Phase::Downloading).await?;
    match ensure_files(cx).await {
        Ok(pkg) => {
            cx.set_condition(
                ConditionType::Downloaded,
                ConditionStatus::True,
                "Downloaded",
                "",
            )
            .await?;
            Ok(pkg)
        }
        // The files are here but are not a package (package.yaml refused, a schema that
        // does not compile): the Deckhouse runtime's `LoadFailed` on Loaded, naming why.
        Err(Unavailable {
            error,
            load_failed: true,
        }) => {
            cx.set_condition(
                ConditionType::Loaded,
                ConditionStatus::False,
                "LoadFailed",
                &error.message,
            )
            .await?;
            Err(error)
        }
        Err(Unavailable { error, .. }) => {
            cx.set_condition(
                ConditionType::Downloaded,
                ConditionStatus::False,
                "DownloadFailed",
                &error.message,
            )
            .await?;
            Err(error)
        }
    }
}

/// Hooks bound to what this kind of package never runs, refused at Load rather than silently
/// never run (as addon-operator: `beforeAll`/`afterAll` are global hooks' bindings, and the
/// global package has no chart for the Helm bindings).
fn misplaced_bindings(hooks: &[berth_hooks::Hook], global: bool) -> Option<String> {
    use LifecycleBinding::*;
    let (refused, why): (&[LifecycleBinding], &str) = if global {
        (
            &[BeforeHelm, AfterHelm, BeforeDeleteHelm, AfterDeleteHelm],
            "the global package has no chart: its hooks may bind onStartup, beforeAll, afterAll, schedule and kubernetes",
        )
    } else {
        (
            &[BeforeAll, AfterAll],
            "beforeAll and afterAll are global hooks' bindings: put such hooks in the global package (the module `global`, type Global)",
        )
    };
    let found: Vec<String> = hooks
        .iter()
        .flat_map(|h| {
            refused
                .iter()
                .filter(|b| h.config.order(**b).is_some())
                .map(move |b| format!("{} ({})", h.name, b.as_str()))
        })
        .collect();
    (!found.is_empty()).then(|| format!("hooks {}: {why}", found.join(", ")))
}

/// Load: download the package (a task of its own before: one lease, spec read, report write and
/// completion more per package, for a step every Load repeated anyway on a worker without the
/// files), read it, discover its hooks, apply its CRDs, register its bindings, report it loaded.
pub async fn load(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    let pkg = fetch(cx).await?;
    // The global package is one per installation: the module `global`, and that module is
    // always a Global package (lifecycle takes its values for the global values).
    let is_module =
        cx.spec.r#ref.as_ref().map(|r| r.kind) == Some(berth_proto::v1::PackageKind::Module as i32);
    let is_global = pkg.definition.package_type == berth_package::PackageType::Global;
    let named_global = is_module
        && cx.spec.r#ref.as_ref().map(|r| r.name.as_str()) == Some(berth_package::GLOBAL_NAME);
    if is_global != named_global {
        let message = "a Global package (global hooks and values) installs as the module `global` (--kind module), and the module `global` must be a Global package";
        let e = TaskError::permanent(message);
        return Err(cx
            .condition_failed(ConditionType::Loaded, "GlobalNotModule", e)
            .await);
    }
    let reads_global = crate::package::reads_global(&pkg).await?;
    let sandbox = cx.sandbox(&pkg)?;
    let (hooks, answers) = match cx.hooks.load(&pkg, cx.config.hook_timeout, &sandbox).await {
        Ok(found) => found,
        Err(e) => {
            return Err(cx
                .condition_failed(ConditionType::Loaded, "HookConfigInvalid", e)
                .await);
        }
    };
    if let Some(message) = misplaced_bindings(&hooks, is_global) {
        let e = TaskError::permanent(message);
        return Err(cx
            .condition_failed(ConditionType::Loaded, "HookConfigInvalid", e)
            .await);
    }
    apply_crds(cx, &pkg).await?;
    if bindings::event_bound(&hooks, &pkg.operators) {
        register_bindings(cx, &hooks, &pkg.operators).await?;
    }
    cx.report(Report::Loaded(Loaded {
        settings_schema: settings_schema(&pkg),
        hooks: hooks
            .iter()
            .map(|h| HookInfo {
                name: h.name.clone(),
                bindings: h.binding_summaries(),
            })
            .collect(),
        version: pkg.definition.version.to_string(),
        weight: pkg.definition.weight.unwrap_or_default(),
        requirements: Some(requirements(&implied_requirements(&pkg))),
        reads_global,
        settings_version: pkg.conversions.latest(),
        hook_configs: recorded_configs(&answers),
        rbac: Some(rbac(pkg.definition.rbac.as_ref())),
        conversions: conversions(&pkg),
    }))
    .await?;
    Ok(())
}

/// The package's settings schema as a Loaded report carries it.
pub(super) fn settings_schema(pkg: &berth_package::Package) -> Option<prost_types::Struct> {
    pkg.settings_schema
        .as_ref()
        .map(|s| berth_proto::json::to_struct(s.as_json()))
}

/// The package's settings conversions as a Loaded report carries them.
pub(super) fn conversions(pkg: &berth_package::Package) -> Vec<SettingsConversion> {
    pkg.conversions
        .steps()
        .map(|s| SettingsConversion {
            version: s.version,
            expressions: s.expressions.clone(),
        })
        .collect()
}

/// Registers the hooks' schedule, Kubernetes and webhook bindings with hookevent.
async fn register_bindings(
    cx: &TaskContext<'_>,
    hooks: &[berth_hooks::Hook],
    operators: &[berth_operator::Operator],
) -> Result<(), TaskError> {
    let request = bindings::set_bindings_request(cx, hooks, operators);
    let set = cx.services.hookevent.clone().set_bindings(request).await;
    if let Err(status) = set.map_err(|s| CallError::new("hookevent SetBindings", s)) {
        // A binding the cluster cannot serve (unknown kind, bad jqFilter) is a broken package.
        if status.is_invalid() {
            cx.set_condition(
                ConditionType::Loaded,
                ConditionStatus::False,
                "BindingInvalid",
                status.message(),
            )
            .await?;
            return Err(TaskError::permanent(format!(
                "hookevent SetBindings: {}",
                status.message()
            )));
        }
        return Err(status.into());
    }
    Ok(())
}

/// The hook configs the Load's discovery got, for lifecycle to keep (the other workers build
/// the hooks from them instead of running each hook with `--config`); none when larger than it
/// keeps.
fn recorded_configs(answers: &[berth_hooks::ConfigAnswer]) -> Option<HookConfigs> {
    let configs = HookConfigs {
        answers: answers
            .iter()
            .map(|a| HookConfigAnswer {
                path: a.path.clone(),
                batch: a.batch,
                output: a.output.clone(),
            })
            .collect(),
    };
    (configs.size() <= berth_proto::MAX_HOOK_CONFIGS_BYTES).then_some(configs)
}

/// The package's requirements, plus what its values layout implies: a nested package (not the
/// Global one) depends conditionally on the module `global`, so when there is a global package
/// it is Running — its onStartup, beforeAll and afterAll hooks have run — before the nested
/// package's settings, hooks and chart see the global values. Without one, nothing waits.
fn implied_requirements(pkg: &berth_package::Package) -> berth_package::Requirements {
    let mut r = pkg.definition.requirements.clone();
    let nested = berth_package::values_section(pkg).is_some()
        && pkg.definition.package_type != berth_package::PackageType::Global;
    let named = |d: &berth_package::Dependency| d.name == berth_package::GLOBAL_NAME;
    if nested && !r.mandatory.iter().any(named) && !r.conditional.iter().any(named) {
        r.conditional.push(berth_package::Dependency {
            name: berth_package::GLOBAL_NAME.to_owned(),
            constraint: None,
        });
    }
    r
}

/// `rbac:` as the Loaded report carries it to lifecycle (the release service builds the
/// package's ServiceAccount bindings from lifecycle's copy).
fn rbac(declared: Option<&berth_package::Rbac>) -> Rbac {
    let Some(declared) = declared else {
        return Rbac {
            declared: false,
            rules: vec![],
        };
    };
    Rbac {
        declared: true,
        rules: declared
            .rules
            .iter()
            .map(|r| PolicyRule {
                api_groups: r.api_groups.clone(),
                resources: r.resources.clone(),
                verbs: r.verbs.clone(),
                resource_names: r.resource_names.clone(),
                non_resource_urls: r.non_resource_urls.clone(),
            })
            .collect(),
    }
}

/// `requirements` as the Loaded report carries them to lifecycle's scheduler.
fn requirements(r: &berth_package::Requirements) -> Requirements {
    let text = |c: &Option<berth_package::VersionConstraint>| {
        c.as_ref()
            .map(|c| c.as_str().to_owned())
            .unwrap_or_default()
    };
    let deps = |list: &[berth_package::Dependency]| {
        list.iter()
            .map(|d| Dependency {
                name: d.name.clone(),
                constraint: text(&d.constraint),
            })
            .collect()
    };
    let groups = |list: &[berth_package::DependencyGroup]| {
        list.iter()
            .map(|g| DependencyGroup {
                name: g.name.clone(),
                members: deps(&g.members),
            })
            .collect()
    };
    Requirements {
        kubernetes: text(&r.kubernetes),
        platform: text(&r.platform),
        mandatory: deps(&r.mandatory),
        conditional: deps(&r.conditional),
        any_of: groups(&r.any_of),
        none_of: groups(&r.none_of),
    }
}

/// CRDs first: the chart's `crds/` are applied and Established before the hooks' bindings are
/// registered, so a hook may watch the kinds its own package brings (as the Deckhouse runtime
/// does). CRDs are plain YAML in Helm; the values only pick which subcharts count, so values
/// that cannot be computed yet (settings checked by ApplySettings) fall back to the package's
/// static ones.
async fn apply_crds(cx: &TaskContext<'_>, pkg: &berth_package::Package) -> Result<(), TaskError> {
    let files = crate::package::chart_files(pkg).await?;
    if !files.iter().any(|(path, _)| is_crd_path(path)) {
        return Ok(());
    }
    let values = match Values::compute(pkg, cx) {
        Ok(v) => v.current,
        Err(_) => pkg.static_values.clone(),
    };
    let request = cx.install_request(files, &values);
    let applied = cx.services.release.clone().apply_crds(request).await;
    match applied.map_err(|s| CallError::new("release ApplyCrds", s)) {
        Ok(answer) => {
            let crds = answer.into_inner().crds;
            tracing::info!(crds = crds.len(), "CRDs applied before the bindings");
            Ok(())
        }
        Err(status) if status.is_invalid() || status.is_confined() => {
            cx.set_condition(
                ConditionType::Loaded,
                ConditionStatus::False,
                if status.is_confined() {
                    "CrdRefused"
                } else {
                    "CrdInvalid"
                },
                status.message(),
            )
            .await?;
            Err(TaskError::permanent(format!(
                "release ApplyCrds: {}",
                status.message()
            )))
        }
        Err(status) => Err(status.into()),
    }
}

/// A file of a chart's (or a subchart's) `crds/` directory.
fn is_crd_path(path: &str) -> bool {
    path.starts_with("crds/") || path.contains("/crds/")
}

pub async fn apply_settings(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    let pkg = ensure(cx).await?;
    settings(cx, &pkg).await.map(drop)
}

/// ApplySettings' work: the settings checked and the values computed from them, reported;
/// the values, for the steps that follow in the same task.
async fn settings(cx: &TaskContext<'_>, pkg: &berth_package::Package) -> Result<Values, TaskError> {
    // A settings-only Update keeps the registered bindings: their runs must carry this
    // generation from now on, or workers would skip them as superseded. (After a Load the
    // bindings already carry it; adopting is then a no-op.) Hooks that bind no events have
    // nothing registered (`bindings::event_bound`).
    if bindings::event_bound(&cx.package_hooks(pkg).await?, &pkg.operators) {
        cx.services
            .hookevent
            .clone()
            .adopt_generation(berth_proto::hookevent::AdoptGenerationRequest {
                package: cx.key().to_owned(),
                generation: cx.spec.generation,
            })
            .await
            .map_err(|s| CallError::new("hookevent AdoptGeneration", s))?;
    }
    let computed = match Values::compute(pkg, cx) {
        // The package's own settings check has the last word (its verdict is permanent: the
        // same settings get the same answer until the next Update).
        Ok(values) => {
            let check =
                match check_settings(cx, pkg, &values.settings, cx.config.hook_timeout).await {
                    Ok(check) => check,
                    // No verdict (the check crashed, timed out or printed none): whether the
                    // settings are valid is not known, and the condition says so and why while the
                    // task retries (the Deckhouse runtime's `ApplySettings` reason).
                    Err(e) => {
                        cx.set_condition(
                            ConditionType::SettingsValid,
                            ConditionStatus::Unknown,
                            "ApplySettings",
                            &format!("the settings check gave no verdict: {}", e.message),
                        )
                        .await?;
                        return Err(e);
                    }
                };
            match check.and_then(|c| c.refusal()) {
                Some(refused) => Err(TaskError::permanent(refused)),
                None => Ok(values),
            }
        }
        Err(e) => Err(e),
    };
    match computed {
        Ok(values) => {
            cx.report(Report::SettingsApplied(SettingsApplied {
                values: Some(berth_proto::json::to_struct(&values.current)),
            }))
            .await?;
            Ok(values)
        }
        Err(e) => Err(cx
            .condition_failed(ConditionType::SettingsValid, "ValidationFailed", e)
            .await),
    }
}

pub async fn startup(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    let pkg = ensure(cx).await?;
    let values = Values::compute(&pkg, cx)?;
    start_hooks(cx, &pkg, values).await.map(drop)
}

/// Startup's work on `values`: Synchronization, then the onStartup hooks; their values
/// reported; the values, for the steps that follow in the same task.
async fn start_hooks(
    cx: &TaskContext<'_>,
    pkg: &berth_package::Package,
    mut values: Values,
) -> Result<Values, TaskError> {
    let hooks = cx.package_hooks(pkg).await?;
    // Decision (docs/decisions/synchronization-before-onstartup.md): Synchronization runs before onStartup, as in the Deckhouse
    // runtime.
    let started = async {
        synchronize(cx, pkg, &hooks, &mut values).await?;
        run_lifecycle(
            cx,
            pkg,
            &hooks,
            LifecycleBinding::OnStartup,
            "onStartup",
            &mut values,
        )
        .await
    }
    .await;
    if let Err(e) = started {
        // Said in the package's status while the task retries (the Deckhouse runtime's
        // `StartupHookFailed`), or a failing onStartup would show nothing but the task's error.
        let reason = "StartupHookFailed";
        return Err(cx
            .condition_failed(ConditionType::HooksProcessed, reason, e)
            .await);
    }
    report_values(cx, &values, true).await?;
    values.mark_reported();
    cx.report(Report::StartupDone(StartupDone {})).await?;
    Ok(values)
}

/// The steps of a Start task, in order (named as the task kinds that run them alone).
const SETTINGS_STEP: TaskKind = TaskKind::ApplySettings;
const STARTUP_STEP: TaskKind = TaskKind::Startup;
const RUN_STEP: TaskKind = TaskKind::Run;

/// How far a Start task got: its payload (`berth.tasks.v1.Start`), as the broker keeps it for
/// a retry.
struct Progress(StartPayload);

impl Progress {
    /// The task's payload: empty from lifecycle, or what an earlier attempt's failure recorded.
    fn of(task: &Task) -> Result<Progress, TaskError> {
        tasks::payload(task)
            .map(Progress)
            .map_err(|e| TaskError::permanent(e.to_string()))
    }

    fn has(&self, step: TaskKind) -> bool {
        self.0.done().any(|d| d == step)
    }

    fn record(&mut self, step: TaskKind) {
        self.0.done.push(step as i32);
    }

    /// The first step not done yet: the one a failure before any step's own work belongs to.
    fn next(&self) -> TaskKind {
        [SETTINGS_STEP, STARTUP_STEP]
            .into_iter()
            .find(|step| !self.has(*step))
            .unwrap_or(RUN_STEP)
    }

    /// `error` of `step`, named after it (the package's error reads `Start: Run: ...`), with
    /// the steps done so far for the task's retry.
    fn failed(&self, step: TaskKind, mut error: TaskError) -> TaskError {
        error.message = format!("{}: {}", step.as_str(), error.message);
        if self.0.done.is_empty() {
            return error;
        }
        error.with_progress(prost::Message::encode_to_vec(&self.0))
    }
}

/// Start: a package the scheduler enabled runs ApplySettings, Startup and Run in one task
/// (as addon-operator's ModuleRun runs onStartup, then the Helm steps): one lease, spec read,
/// report batch and completion instead of three. The values flow from step to step; each
/// step reports what its own task would. A failure records the steps done, so the retry
/// resumes after them: onStartup hooks run once per enable, as with a task of their own.
pub async fn start(cx: &TaskContext<'_>, task: &Task) -> Result<(), TaskError> {
    let mut progress = Progress::of(task)?;
    let pkg = ensure(cx)
        .await
        .map_err(|e| progress.failed(progress.next(), e))?;
    let mut values = None;
    if !progress.has(SETTINGS_STEP) {
        let applied = settings(cx, &pkg).await;
        values = Some(applied.map_err(|e| progress.failed(SETTINGS_STEP, e))?);
        progress.record(SETTINGS_STEP);
    }
    if !progress.has(STARTUP_STEP) {
        let computed = match values.take() {
            Some(v) => Ok(v),
            None => Values::compute(&pkg, cx),
        };
        let started = match computed {
            Ok(v) => start_hooks(cx, &pkg, v).await,
            Err(e) => Err(e),
        };
        values = Some(started.map_err(|e| progress.failed(STARTUP_STEP, e))?);
        progress.record(STARTUP_STEP);
    }
    let ran = match values.map_or_else(|| Values::compute(&pkg, cx), Ok) {
        Ok(v) => super::run::run_with(cx, &pkg, v).await,
        Err(e) => Err(e),
    };
    ran.map_err(|e| progress.failed(RUN_STEP, e))
}

/// Runs the Synchronization of every kubernetes binding that package start waits for
/// (`waitForSynchronization`, the default), hooks in name order, bindings in config order (the
/// bindings of one `group` in one run, as shell-operator does); then
/// tells hookevent to release the events it held meanwhile. Bindings that do not wait were
/// synchronized by hookevent on their own queue.
async fn synchronize(
    cx: &TaskContext<'_>,
    pkg: &berth_package::Package,
    hooks: &[berth_hooks::Hook],
    values: &mut Values,
) -> Result<(), TaskError> {
    let all = bindings::snapshots(cx, hooks, true).await?;
    if all.is_empty() {
        return Ok(());
    }
    let mut ordered: Vec<&berth_hooks::Hook> = hooks.iter().collect();
    ordered.sort_by(|a, b| a.name.cmp(&b.name));
    for hook in ordered {
        let snapshots = hook_snapshots(&all, &hook.name);
        // One run per binding, except that the bindings of one `group` share one run (at the
        // first of them), whose Group context carries all their snapshots.
        let mut groups_done: Vec<&str> = vec![];
        for k in &hook.config.kubernetes {
            if !k.wait_for_synchronization || !k.execute_hook_on_synchronization {
                continue;
            }
            let Some(b) = all.get(&hook.name).and_then(|h| h.get(&k.name)) else {
                continue;
            };
            if b.synchronized {
                continue;
            }
            let allow_failure = match k.group.as_deref() {
                Some(group) if groups_done.contains(&group) => continue,
                Some(group) => {
                    groups_done.push(group);
                    // A group's run may fail only when every member allows it.
                    hook.config
                        .kubernetes
                        .iter()
                        .filter(|m| m.group.as_deref() == Some(group))
                        .all(|m| m.allow_failure)
                }
                None => k.allow_failure,
            };
            let context = BindingContext::synchronization(k, &b.objects, &hook.config, &snapshots);
            let output = match run_hook(cx, pkg, hook, binding_context::to_json(&[context]), values)
                .await
            {
                Ok(o) => o,
                Err(e) if allow_failure => {
                    tracing::warn!(hook = %hook.name, binding = %k.name, error = %e.message, "Synchronization failed; allowed");
                    report_run(cx, &hook.name, &e.message).await;
                    continue;
                }
                Err(e) => {
                    report_run(cx, &hook.name, &e.message).await;
                    return Err(e);
                }
            };
            apply_outputs(cx, pkg, hook, output, values).await?;
            report_run(cx, &hook.name, "").await;
        }
    }
    bindings::synchronization_done(cx).await
}
