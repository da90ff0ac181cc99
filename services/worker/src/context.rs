//! Per-task context: the package spec as lifecycle has it, the clients, and reporting helpers.

use berth_proto::lifecycle::RepositoryDefinition;
use berth_proto::lifecycle::report_request::Report;
use berth_proto::lifecycle::{
    ConditionStatus, ConditionType, ConditionUpdate, GetSpecRequest, Phase, Progress, Spec,
    TaskFailed,
};
use berth_proto::queue::Task;
use berth_proto::tasks::TaskKind;
use berth_queue::worker::TaskError;
use tokio_util::sync::CancellationToken;

use crate::client::{CallError, Services};
use crate::config::TaskConfig;
use crate::hook_cache::HookCache;
use crate::identity::Identities;
use crate::reporter::Reporter;

/// Where shell-operator's images hold their hooks (its `--hooks-dir` default), and where a
/// package's `hooks/` directory shows in its hooks' mount namespace.
pub const SHELL_OPERATOR_HOOKS_DIR: &str = "/hooks";

pub struct TaskContext<'a> {
    pub spec: Spec,
    /// This task's reports, gathered and sent together; flushed before the task settles.
    reports: Reporter,
    pub services: Services,
    pub config: &'a TaskConfig,
    pub hooks: &'a HookCache,
    /// Packages' Kubernetes identities on this worker.
    pub identities: &'a Identities,
    pub cancel: CancellationToken,
}

impl<'a> TaskContext<'a> {
    /// Fetches the spec. `None` when the task is stale: the package is gone or has a newer
    /// generation (its tasks superseded this one).
    pub async fn start(
        services: &Services,
        config: &'a TaskConfig,
        hooks: &'a HookCache,
        identities: &'a Identities,
        task: &Task,
        cancel: CancellationToken,
    ) -> Result<Option<TaskContext<'a>>, TaskError> {
        let mut lifecycle = services.lifecycle.clone();
        let spec = match lifecycle
            .get_spec(GetSpecRequest {
                key: task.package.clone(),
            })
            .await
            .map_err(|s| CallError::new("lifecycle GetSpec", s))
        {
            Ok(spec) => spec.into_inner(),
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        // Superseded by a newer generation, or this generation failed permanently (its
        // remaining tasks, hook runs included, wait for the next Update). A validation runs
        // whatever the generation: its caller waits for the answer, and the settings are
        // checked against the package as it is now (a failed one too: checking the settings
        // that would repair it is its use).
        let validation = TaskKind::parse(&task.kind) == Some(TaskKind::ValidateRun);
        if !validation
            && (spec.generation > task.generation
                || (spec.failed && spec.generation == task.generation))
        {
            return Ok(None);
        }
        Ok(Some(TaskContext {
            reports: Reporter::new(services, &spec.key, spec.generation),
            spec,
            services: services.clone(),
            config,
            hooks,
            identities,
            cancel,
        }))
    }

    /// This context for another version of the package (an Update's candidate, which a
    /// validation describes): the same spec but for where the files come from. Its reports go
    /// nowhere: nothing is reported for a version that is not the package's.
    pub fn for_version(
        &self,
        (repository, definition): (&str, Option<&RepositoryDefinition>),
        package: &str,
        version: &str,
    ) -> TaskContext<'a> {
        let mut spec = self.spec.clone();
        repository.clone_into(&mut spec.repository);
        spec.repository_definition = definition.cloned();
        package.clone_into(&mut spec.package);
        version.clone_into(&mut spec.version);
        TaskContext {
            reports: Reporter::new(&self.services, &spec.key, spec.generation),
            spec,
            services: self.services.clone(),
            config: self.config,
            hooks: self.hooks,
            identities: self.identities,
            cancel: self.cancel.clone(),
        }
    }

    /// The package's hooks (on first use by this worker: built from the configs the Load
    /// recorded, or discovered).
    pub async fn package_hooks(
        &self,
        pkg: &berth_package::Package,
    ) -> Result<std::sync::Arc<Vec<berth_hooks::Hook>>, TaskError> {
        let recorded = self.spec.hook_configs.as_ref();
        let sandbox = self.sandbox(pkg)?;
        self.hooks
            .get(pkg, recorded, self.config.hook_timeout, &sandbox)
            .await
    }

    pub fn key(&self) -> &str {
        &self.spec.key
    }

    /// How the package's hook processes are confined: its principal's identity (lifecycle's
    /// `Spec.principal`), its package.yaml `limits:` (within this worker's caps) and its files.
    /// A principal past the uid range or limits past a cap fail the package for good, naming
    /// them.
    pub fn sandbox(&self, pkg: &berth_package::Package) -> Result<berth_hooks::Sandbox, TaskError> {
        let principal = self.spec.principal;
        if let Err(reason) = berth_hooks::principal_user(principal) {
            if principal == 0 {
                // An older lifecycle, which gives none: a newer one will.
                return Err(TaskError::retry(format!(
                    "lifecycle gave package {} no principal number (is it older than this worker?)",
                    self.key()
                )));
            }
            return Err(TaskError::permanent(format!(
                "package {}: {reason}",
                self.key()
            )));
        }
        let limits = self
            .config
            .hook_limit_caps
            .check(&pkg.definition.limits)
            .map_err(|e| TaskError::permanent(format!("package {}: {e}", self.key())))?;
        let mut sandbox = berth_hooks::Sandbox::new(principal, limits, pkg.root.clone());
        // shell-operator's images hold the hooks at /hooks, and hooks written for it name
        // their shared files there (`source /hooks/common/functions.sh`): the package's
        // hooks directory is shown there, read-only, in the hook's own mount namespace
        // (where the worker is root; elsewhere such hooks find nothing there).
        let hooks = pkg
            .root
            .join(SHELL_OPERATOR_HOOKS_DIR.trim_start_matches('/'));
        if hooks.is_absolute() && std::fs::symlink_metadata(&hooks).is_ok_and(|m| m.is_dir()) {
            sandbox.dirs.push(berth_hooks::DirMount {
                source: hooks,
                target: std::path::PathBuf::from(SHELL_OPERATOR_HOOKS_DIR),
            });
        }
        Ok(sandbox)
    }

    /// What release's Install, Plan and ApplyCrds take for this package: its release, the
    /// chart's files and `values`.
    pub fn install_request(
        &self,
        files: Vec<(String, Vec<u8>)>,
        values: &serde_json::Value,
    ) -> berth_proto::release::InstallRequest {
        let (name, namespace) = self.release();
        berth_proto::release::InstallRequest {
            name,
            namespace,
            files: files
                .into_iter()
                .map(|(path, content)| berth_proto::release::ChartFile { path, content })
                .collect(),
            values: Some(berth_proto::json::to_struct(values)),
            package: self.key().to_owned(),
            wait_ms: 0,
        }
    }

    /// The Helm release name and namespace of this package instance.
    pub fn release(&self) -> (String, String) {
        let r = self.spec.r#ref.clone().unwrap_or_default();
        (r.name, r.namespace)
    }

    /// Reports to lifecycle: sent within [`crate::reporter::GATHER_FOR`], together with the
    /// task's other reports of that moment (see [`Reporter`]).
    pub async fn report(&self, report: Report) -> Result<(), TaskError> {
        self.reports.report(report).await
    }

    /// Sends the reports still gathering; the runner calls it before the task settles.
    pub async fn flush_reports(&self) -> Result<(), TaskError> {
        self.reports.flush().await
    }

    /// Reports a new phase.
    pub async fn set_phase(&self, phase: Phase) -> Result<(), TaskError> {
        self.report(Report::Progress(Progress {
            phase: phase as i32,
            conditions: vec![],
        }))
        .await
    }

    /// Reports a condition of the package: type, status, reason, message.
    pub async fn set_condition(
        &self,
        type_: ConditionType,
        status: ConditionStatus,
        reason: &str,
        message: &str,
    ) -> Result<(), TaskError> {
        self.report(Report::Progress(Progress {
            phase: Phase::Unspecified as i32,
            conditions: vec![ConditionUpdate {
                r#type: type_ as i32,
                status: status as i32,
                reason: reason.to_owned(),
                message: message.to_owned(),
            }],
        }))
        .await
    }

    /// Sets `type_` False for `reason` with the error's message, and gives the error back to
    /// return (or the report's error, when saying so failed): a task failure that the
    /// package's condition names.
    pub async fn condition_failed(
        &self,
        type_: ConditionType,
        reason: &str,
        error: TaskError,
    ) -> TaskError {
        match self
            .set_condition(type_, ConditionStatus::False, reason, &error.message)
            .await
        {
            Ok(()) => error,
            Err(report) => report,
        }
    }

    /// Records a task failure on the package; best effort. `permanent`: retrying cannot fix
    /// it, so the generation fails.
    pub async fn report_error(&self, kind: TaskKind, message: &str, permanent: bool) {
        let error = format!("{}: {message}", kind.as_str());
        // With what the task reported before it failed, if that is still gathering.
        let queued = self
            .report(Report::TaskFailed(TaskFailed { error, permanent }))
            .await;
        if let Err(e) = queued.and(self.flush_reports().await) {
            tracing::warn!(error = %e.message, "could not report a task failure");
        }
    }

    /// Environment every hook of this package gets besides the contract's files.
    pub fn hook_env(&self) -> Vec<(String, String)> {
        let r = self.spec.r#ref.clone().unwrap_or_default();
        let mut env = vec![
            ("BERTH_PACKAGE_KEY".to_owned(), self.spec.key.clone()),
            (
                "BERTH_PACKAGE_VERSION".to_owned(),
                // The loaded version, which a constraint (`~1.2`) resolved to.
                match self.spec.loaded_version.as_str() {
                    "" => self.spec.version.clone(),
                    loaded => loaded.to_owned(),
                },
            ),
            (
                "TRACEPARENT".to_owned(),
                berth_runtime::current_traceparent(),
            ),
        ];
        if r.kind == berth_proto::v1::PackageKind::Module as i32 {
            env.push(("MODULE_NAME".to_owned(), r.name));
        } else {
            env.push(("APPLICATION_NAME".to_owned(), r.name));
            env.push(("APPLICATION_NAMESPACE".to_owned(), r.namespace));
        }
        env
    }
}
