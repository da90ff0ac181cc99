//! Run: beforeHelm hooks, the release install or upgrade, afterHelm hooks, then the wait for
//! readiness (the global package: its beforeAll hooks); AfterAll: the global package's afterAll
//! hooks.

use std::time::{Duration, Instant};

use berth_hooks::LifecycleBinding;
use berth_proto::lifecycle::report_request::Report;
use berth_proto::lifecycle::{ConditionStatus, ConditionType, RunSucceeded};
use berth_proto::release::StatusRequest;
use berth_queue::worker::TaskError;

use crate::client::CallError;
use crate::context::TaskContext;
use crate::hooks::run_lifecycle;
use crate::package::{Values, ensure, report_values};

/// What an Install that waited for readiness saw (`InstallRequest.wait_ms`).
struct Readiness {
    ready: bool,
    not_ready: Vec<String>,
}

/// Installs the chart. With `wait`, the release service also waits (as the first Status call
/// would) until the revision's objects are ready, and the answer says what it saw.
async fn install(
    cx: &TaskContext<'_>,
    pkg: &berth_package::Package,
    values: &Values,
    wait: bool,
) -> Result<Option<Readiness>, TaskError> {
    let files = crate::package::chart_files(pkg).await?;
    // Release writes the chart's objects as the package's principal: it must exist.
    cx.identities.ensure(cx).await?;
    let mut request = cx.install_request(files, &values.current);
    if wait {
        request.wait_ms = millis(first_wait(cx));
    }
    let installed = cx.services.release.clone().install(request).await;
    match installed.map_err(|s| CallError::new("release Install", s)) {
        Ok(r) => {
            let r = r.into_inner();
            let msg = format!("revision {} with {} objects", r.revision, r.objects.len());
            cx.set_condition(
                ConditionType::ManifestsApplied,
                ConditionStatus::True,
                "Applied",
                &msg,
            )
            .await?;
            Ok(r.waited.then_some(Readiness {
                ready: r.ready,
                not_ready: r.not_ready,
            }))
        }
        Err(s) => {
            cx.set_condition(
                ConditionType::ManifestsApplied,
                ConditionStatus::False,
                if s.is_confined() {
                    "Refused"
                } else if s.is(berth_proto::failure::OBJECT_TAKEN) {
                    // Another release's object (or no release's): retried with backoff, as
                    // the other release may give it up.
                    "NotOwned"
                } else if s.is_render_limit() {
                    "RenderLimit"
                } else {
                    "ApplyFailed"
                },
                s.message(),
            )
            .await?;
            if s.is_confined() || s.is_render_limit() {
                // An App's chart reaching outside its namespace, or a render past a render
                // limit: the same chart and values are refused again, so the package fails
                // for good with the release service's reasons (until a new Update).
                return Err(TaskError::permanent(format!(
                    "release Install: {}",
                    s.message()
                )));
            }
            Err(s.into())
        }
    }
}

pub async fn run(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    let pkg = ensure(cx).await?;
    let values = Values::compute(&pkg, cx)?;
    run_with(cx, &pkg, values).await
}

/// Run's work on `values` (computed from the spec, or left by the steps before it in a Start
/// task).
pub(super) async fn run_with(
    cx: &TaskContext<'_>,
    pkg: &berth_package::Package,
    mut values: Values,
) -> Result<(), TaskError> {
    let hooks = cx.package_hooks(pkg).await?;
    // The global package has no chart: its Run is the global hooks bound to beforeAll. Its
    // afterAll hooks run in their own task (AfterAll, [`after_all`]) that lifecycle enqueues
    // once the packages waiting for the global package converged.
    let global = pkg.definition.package_type == berth_package::PackageType::Global;
    let hooks_result = async {
        if global {
            let before = LifecycleBinding::BeforeAll;
            run_lifecycle(cx, pkg, &hooks, before, before.as_str(), &mut values).await?;
            return Ok(None);
        }
        let (before, after) = (LifecycleBinding::BeforeHelm, LifecycleBinding::AfterHelm);
        run_lifecycle(cx, pkg, &hooks, before, before.as_str(), &mut values).await?;
        // afterHelm hooks run right after the apply, before readiness (as in addon-operator):
        // only without them does the install itself wait for readiness.
        let has_after = !berth_hooks::ordered(&hooks, after).is_empty();
        let mut readiness = None;
        if pkg.is_helm {
            readiness = install(cx, pkg, &values, !has_after).await?;
        }
        let changed = run_lifecycle(cx, pkg, &hooks, after, after.as_str(), &mut values).await?;
        // afterHelm hooks that change the values get one more upgrade, as addon-operator does.
        if changed && pkg.is_helm {
            readiness = install(cx, pkg, &values, true).await?;
        }
        Ok::<_, TaskError>(readiness)
    }
    .await;
    let readiness = hooks_processed(cx, &values, hooks_result).await?;
    if pkg.is_helm {
        wait_ready(cx, readiness).await?;
    }
    // Operators start once what they act on is in place, as the package turns Running.
    if !pkg.operators.is_empty() {
        crate::bindings::start_operators(cx).await?;
    }
    cx.report(Report::RunSucceeded(RunSucceeded {})).await?;
    Ok(())
}

/// Reports the values a Run's (or AfterAll's) hooks left and `HooksProcessed`, or the hook
/// failure that stopped them; passes on what the hooks' part of the task returned.
async fn hooks_processed<T>(
    cx: &TaskContext<'_>,
    values: &Values,
    result: Result<T, TaskError>,
) -> Result<T, TaskError> {
    let done = match result {
        Ok(done) => done,
        Err(e) => {
            return Err(cx
                .condition_failed(ConditionType::HooksProcessed, "HookFailed", e)
                .await);
        }
    };
    report_values(cx, values, true).await?;
    cx.set_condition(
        ConditionType::HooksProcessed,
        ConditionStatus::True,
        "Processed",
        "",
    )
    .await?;
    Ok(done)
}

/// AfterAll: the global package's hooks bound to afterAll, run once the packages that wait for
/// it converged after its Run (lifecycle decides when, and enqueues this task on the global
/// package's queue). Their values patches change the global values as a Run's hooks do (the
/// packages reading them run again; the global package itself does not).
pub async fn after_all(cx: &TaskContext<'_>) -> Result<(), TaskError> {
    let pkg = ensure(cx).await?;
    if pkg.definition.package_type != berth_package::PackageType::Global {
        // Lifecycle enqueues AfterAll for the module `global` only, which Load checks is
        // the Global package; a package's own afterAll hooks are refused at Load.
        return Err(TaskError::permanent(
            "an AfterAll task for a package that is not the Global package",
        ));
    }
    let hooks = cx.package_hooks(&pkg).await?;
    let mut values = Values::compute(&pkg, cx)?;
    let after = LifecycleBinding::AfterAll;
    let result = run_lifecycle(cx, &pkg, &hooks, after, after.as_str(), &mut values)
        .await
        .map(|_| ());
    hooks_processed(cx, &values, result).await
}

/// Longest one waiting Status call is asked to hold on; the loop calls again until the ready
/// timeout, so a restarted release service costs one call, not the whole wait.
const STATUS_WAIT: Duration = Duration::from_secs(30);
/// How long the first Status call waits before the package shows `Ready=False
/// WaitingForObjects` with the objects not ready yet.
const FIRST_STATUS_WAIT: Duration = Duration::from_secs(2);

/// How long the first wait for readiness (a Status call, or the Install itself) holds on.
fn first_wait(cx: &TaskContext<'_>) -> Duration {
    FIRST_STATUS_WAIT.min(cx.config.ready_timeout)
}

/// `wait` as a request's `wait_ms`.
fn millis(wait: Duration) -> i32 {
    i32::try_from(wait.as_millis()).unwrap_or(i32::MAX)
}

/// Waits until the release service reports every object ready, or the configured timeout. The
/// release service follows readiness through watches (`StatusRequest.wait_ms`), so the answer
/// comes on the event that makes the last object ready, not at the next poll. `installed` is
/// what the Install that waited saw: the first wait, already over.
async fn wait_ready(
    cx: &TaskContext<'_>,
    mut installed: Option<Readiness>,
) -> Result<(), TaskError> {
    let (name, namespace) = cx.release();
    let deadline = Instant::now() + cx.config.ready_timeout;
    // The first call waits briefly too: release answers it from its shared watches, where a
    // call that does not wait reads every object from the API server.
    let mut wait = first_wait(cx);
    let mut reported = false;
    loop {
        let status = match installed.take() {
            Some(seen) => berth_proto::release::StatusResponse {
                ready: seen.ready,
                not_ready: seen.not_ready,
                ..Default::default()
            },
            None => status(cx, &name, &namespace, wait).await?,
        };
        if status.ready {
            return Ok(());
        }
        let waiting = status.not_ready.join(", ");
        if !reported {
            cx.set_condition(
                ConditionType::Ready,
                ConditionStatus::False,
                "WaitingForObjects",
                &waiting,
            )
            .await?;
            reported = true;
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(TaskError::retry(format!(
                "not ready after {:?}: {waiting}",
                cx.config.ready_timeout
            )));
        }
        wait = (deadline - now).min(STATUS_WAIT);
    }
}

/// One Status call that waits up to `wait` for readiness.
async fn status(
    cx: &TaskContext<'_>,
    name: &str,
    namespace: &str,
    wait: Duration,
) -> Result<berth_proto::release::StatusResponse, TaskError> {
    let request = StatusRequest {
        name: name.to_owned(),
        namespace: namespace.to_owned(),
        wait_ms: millis(wait),
    };
    let mut release = cx.services.release.clone();
    tokio::select! {
        answer = release.status(request) => Ok(answer.map_err(|s| CallError::new("release Status", s))?.into_inner()),
        _ = cx.cancel.cancelled() => Err(TaskError::permanent("cancelled")),
    }
}
