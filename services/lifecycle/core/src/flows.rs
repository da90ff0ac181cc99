//! Task flows: which queued work each state change implies (DESIGN.md section 4), in the order
//! the relay delivers it.

use crate::model::condition::{ConditionSet, ConditionStatus, ConditionType, set_condition};
use crate::model::id::{Generation, PackageKey};
use crate::model::package::{Package, Phase};
use crate::model::time::Timestamp;
use crate::model::version::VersionRequest;
use crate::scheduler::Verdict;
use crate::task::{Task, TaskKind, Work};

/// Why a Run follows a hook that changed the values outside a Run.
pub const VALUES_CHANGED: &str = "values changed by a hook";
/// Why a package reading the global values runs again.
pub const GLOBAL_VALUES_CHANGED: &str = "the global values changed";

/// `kinds` on the package's main queue, after a Supersede of what older generations left.
///
/// The first generation of a key supersedes nothing, so it writes no Supersede: every task
/// carries a generation of at least 1 (generations survive a Remove, so a re-created package
/// starts above its old tasks), and a Supersede drops only older ones. That spares the broker
/// a call and a transaction per new package, the bulk of a cluster's first install.
fn tasks(key: &PackageKey, generation: Generation, kinds: &[TaskKind]) -> Vec<Work> {
    (generation.get() > 1)
        .then(|| Work::Supersede {
            key: key.clone(),
            generation,
        })
        .into_iter()
        .chain(kinds.iter().map(|k| Work::task(key, generation, *k)))
        .collect()
}

/// What an Update asks for, as far as its tasks care.
pub struct NewSpec<'a> {
    pub repository: &'a str,
    pub package: &'a str,
    pub version: &'a VersionRequest,
    /// A forced Update: the package starts over (its requirements are checked again).
    pub force: bool,
}

/// The tasks of an Update, given the previous state (None for a new package).
///
/// - new package: Load, which downloads the package first (the Downloading phase and the
///   `Downloaded` condition are its reports); the scheduler enqueues the rest (Start:
///   ApplySettings → Startup → Run in one task) once the package's requirements hold (see
///   [`schedule`]);
/// - version, package or repository change, or a package still being removed: Disable (the
///   release is kept, so workloads keep running) → the same chain;
/// - a forced Update: the same, so everything after Load (requirements, onStartup) is done
///   again;
/// - settings change only: ApplySettings → Run when the package is enabled and its Startup
///   succeeded; Start again (ApplySettings → Startup → Run) when it is enabled but its
///   onStartup hooks have not succeeded yet, so no generation skips them; nothing when it
///   still waits for its requirements (its settings are read when it is enabled).
///
/// Returns the tasks and whether the package starts over (its phase goes back to Pending).
pub fn update(
    previous: Option<&Package>,
    key: &PackageKey,
    generation: Generation,
    new: &NewSpec<'_>,
) -> (bool, Vec<Work>) {
    use TaskKind::*;
    match previous {
        None => (true, tasks(key, generation, &[Load])),
        Some(prev)
            if prev.removing
                || prev.version != *new.version
                || prev.package != new.package
                || prev.repository != new.repository
                // Never loaded (e.g. the first download failed), or the generation failed
                // permanently: start over.
                || prev.settings_schema.is_none()
                || prev.phase == Phase::Failed
                // A version constraint is resolved again at every Update.
                || new.version.is_constraint()
                || new.force =>
        {
            (true, tasks(key, generation, &[Disable, Load]))
        }
        Some(prev) if prev.enabled && prev.started => {
            (false, tasks(key, generation, &[ApplySettings, Run]))
        }
        Some(prev) if prev.enabled => (false, tasks(key, generation, &[Start])),
        Some(_) => (false, tasks(key, generation, &[])),
    }
}

/// What a scheduler verdict changes on the package: enabled, it gets `RequirementsMet=True`
/// and the task after Load for its generation, Start (ApplySettings → Startup → Run in one
/// task, resuming after the steps done when retried); waiting, it goes (back) to Pending with
/// `RequirementsMet=False` naming the unmet requirement.
pub fn schedule(row: &mut Package, verdict: &Verdict, now: Timestamp) -> Vec<Work> {
    match verdict {
        Verdict::Enable => {
            row.enabled = true;
            row.started = false;
            let met =
                ConditionSet::new(ConditionType::RequirementsMet, ConditionStatus::True, "Met")
                    .with_message("every requirement holds");
            set_condition(&mut row.conditions, &met, row.generation, now);
            vec![Work::task(&row.key, row.generation, TaskKind::Start)]
        }
        Verdict::Wait(blocked) => {
            row.phase = Phase::Pending;
            let unmet = ConditionSet::new(
                ConditionType::RequirementsMet,
                ConditionStatus::False,
                blocked.reason.as_str(),
            )
            .with_message(blocked.message.clone());
            set_condition(&mut row.conditions, &unmet, row.generation, now);
            vec![]
        }
    }
}

/// A package starting over (a new version to download and load): the scheduler forgets the
/// last load, and its `RequirementsMet` is Unknown until the new one is loaded. The old
/// version's settings schema goes too: until the new version loads there is no schema to check
/// settings against, and an Update arriving meanwhile must load the new version again rather
/// than be taken for a settings change of a loaded package.
pub fn unload(row: &mut Package, now: Timestamp) {
    row.enabled = false;
    row.started = false;
    row.loaded = None;
    row.hook_configs = None;
    row.rbac = None;
    row.settings_schema = None;
    row.schema_version = None;
    row.conversions = None;
    let unknown = ConditionSet::new(
        ConditionType::RequirementsMet,
        ConditionStatus::Unknown,
        "NotLoaded",
    )
    .with_message("requirements are checked once the package is loaded");
    set_condition(&mut row.conditions, &unknown, row.generation, now);
}

/// A package being removed is not ready, whatever it was: `Ready=False Removing` (a removal
/// that objects' finalizers hold says so in its place, `RemoveBlocked`, from the worker).
pub fn removing(row: &mut Package, now: Timestamp) {
    let removing = ConditionSet::new(ConditionType::Ready, ConditionStatus::False, "Removing")
        .with_message("the package is being removed");
    set_condition(&mut row.conditions, &removing, row.generation, now);
}

/// The tasks of a Remove: Disable → Uninstall → Cleanup.
pub fn remove(key: &PackageKey, generation: Generation) -> Vec<Work> {
    tasks(
        key,
        generation,
        &[TaskKind::Disable, TaskKind::Uninstall, TaskKind::Cleanup],
    )
}

/// The global package's afterAll hooks, on its queue.
pub fn after_all(key: &PackageKey, generation: Generation) -> Work {
    Work::task(key, generation, TaskKind::AfterAll)
}

/// A Run of the package for `reason`.
pub fn rerun_for(key: &PackageKey, generation: Generation, reason: &'static str) -> Work {
    Work::Enqueue(Task {
        key: key.clone(),
        generation,
        kind: TaskKind::Run,
        reason: Some(reason),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::id::{Kind, PackageId};
    use crate::scheduler::{Blocked, Reason};

    fn key() -> PackageKey {
        PackageKey::from_issued("default.hello".into())
    }

    fn g(n: i64) -> Generation {
        Generation::new(n)
    }

    fn t() -> Timestamp {
        Timestamp::from_unix(0)
    }

    fn row(version: &str, loaded: bool, removing: bool) -> Package {
        let id = PackageId::new(Kind::App, "hello", "").unwrap();
        let mut p = Package::new(id, VersionRequest::parse(version), g(1), 1);
        p.repository = "/repo".into();
        p.package = "hello".into();
        p.observed_generation = g(1);
        p.phase = Phase::Running;
        p.settings_schema = loaded.then_some(None);
        p.removing = removing;
        p.enabled = loaded;
        p.started = loaded;
        p
    }

    fn kinds(out: &[Work]) -> Vec<String> {
        out.iter()
            .map(|w| match w {
                Work::Supersede { .. } => "Supersede".to_owned(),
                Work::Enqueue(task) => task.kind.as_str().to_owned(),
            })
            .collect()
    }

    fn new(version: &VersionRequest) -> NewSpec<'_> {
        NewSpec {
            repository: "/repo",
            package: "hello",
            version,
            force: false,
        }
    }

    fn one() -> VersionRequest {
        VersionRequest::parse("1.0.0")
    }

    #[test]
    fn a_new_package_installs_from_scratch() {
        let v = one();
        let (restart, out) = update(None, &key(), g(1), &new(&v));
        assert!(restart);
        // Nothing can be older than the first generation.
        assert_eq!(kinds(&out), ["Load"]);
        // A package removed and created again may still have its old incarnation's tasks.
        let (restart, out) = update(None, &key(), g(4), &new(&v));
        assert!(restart);
        assert_eq!(kinds(&out), ["Supersede", "Load"]);
    }

    #[test]
    fn a_settings_change_only_reapplies_and_runs() {
        let v = one();
        let (restart, out) = update(Some(&row("1.0.0", true, false)), &key(), g(2), &new(&v));
        assert!(!restart);
        assert_eq!(kinds(&out), ["Supersede", "ApplySettings", "Run"]);
        assert!(
            out[1..]
                .iter()
                .all(|w| matches!(w, Work::Enqueue(task) if task.generation == g(2)))
        );
    }

    /// Issue #31.3: while the onStartup hooks of this enable have not succeeded (Start is
    /// retrying them), a settings Update queues Start again, never Run alone; once they
    /// succeeded (the worker's StartupDone), it is ApplySettings and Run. Enabling again
    /// (the scheduler) or starting over forgets it.
    #[test]
    fn a_settings_change_before_onstartup_succeeded_starts_again() {
        let v = one();
        let mut r = row("1.0.0", true, false);
        r.started = false;
        let (restart, out) = update(Some(&r), &key(), g(2), &new(&v));
        assert!(!restart);
        assert_eq!(kinds(&out), ["Supersede", "Start"]);
        let mut done = crate::report::Report::new(g(2));
        done.startup_done = true;
        done.apply(&mut r, t());
        assert!(r.started);
        let (_, out) = update(Some(&r), &key(), g(3), &new(&v));
        assert_eq!(kinds(&out), ["Supersede", "ApplySettings", "Run"]);
        schedule(&mut r, &Verdict::Enable, t());
        assert!(!r.started, "a new enable runs onStartup again");
        r.started = true;
        unload(&mut r, t());
        assert!(!r.started);
        // A package not enabled does not become started by a late report.
        let mut late = crate::report::Report::new(g(3));
        late.startup_done = true;
        late.apply(&mut r, t());
        assert!(!r.started);
    }

    /// Issue #31.10: a forced Update of the same spec starts over, so its requirements and
    /// onStartup are checked and run again.
    #[test]
    fn a_forced_update_starts_over() {
        let v = one();
        let forced = NewSpec {
            force: true,
            ..new(&v)
        };
        let (restart, out) = update(Some(&row("1.0.0", true, false)), &key(), g(2), &forced);
        assert!(restart);
        assert_eq!(kinds(&out), ["Supersede", "Disable", "Load"]);
    }

    #[test]
    fn a_version_change_disables_first() {
        let v = one();
        let (_, out) = update(Some(&row("0.9.0", true, false)), &key(), g(2), &new(&v));
        assert_eq!(kinds(&out), ["Supersede", "Disable", "Load"]);
    }

    #[test]
    fn a_settings_change_of_a_waiting_package_enqueues_nothing() {
        let v = one();
        let mut waiting = row("1.0.0", true, false);
        waiting.enabled = false;
        let (restart, out) = update(Some(&waiting), &key(), g(2), &new(&v));
        assert!(!restart);
        assert_eq!(kinds(&out), ["Supersede"]);
    }

    #[test]
    fn enabling_enqueues_the_rest_of_the_chain_and_waiting_names_why() {
        let mut r = row("1.0.0", true, false);
        r.enabled = false;
        r.phase = Phase::Loaded;
        let blocked = Blocked {
            reason: Reason::Dependency,
            message: "requires db, which is not installed".into(),
        };
        assert!(schedule(&mut r, &Verdict::Wait(blocked), t()).is_empty());
        assert_eq!(r.phase, Phase::Pending);
        let c = &r.conditions[0];
        assert_eq!(
            (c.type_, c.status, c.reason.as_str()),
            (
                ConditionType::RequirementsMet,
                ConditionStatus::False,
                "Dependency"
            )
        );
        assert_eq!(c.message, "requires db, which is not installed");
        let out = schedule(&mut r, &Verdict::Enable, t());
        assert!(r.enabled);
        assert_eq!(kinds(&out), ["Start"]);
        assert_eq!(r.conditions[0].status, ConditionStatus::True);
    }

    #[test]
    fn an_update_during_removal_or_before_load_starts_over() {
        let v = one();
        let (restart, _) = update(Some(&row("1.0.0", true, true)), &key(), g(3), &new(&v));
        assert!(restart);
        let (restart, _) = update(Some(&row("1.0.0", false, false)), &key(), g(3), &new(&v));
        assert!(restart);
    }

    #[test]
    fn an_update_before_an_upgrade_loads_loads_the_new_version_again() {
        // 1.0.0 was loaded; an upgrade to 2.0.0 starts over ...
        let mut r = row("1.0.0", true, false);
        r.settings_schema = Some(Some(serde_json::json!({"type": "object"})));
        r.schema_version = Some("1.0.0".into());
        let two = VersionRequest::parse("2.0.0");
        let (restart, _) = update(Some(&r), &key(), g(2), &new(&two));
        assert!(restart);
        r.version = two.clone();
        unload(&mut r, t());
        assert_eq!((&r.settings_schema, &r.schema_version), (&None, &None));
        // ... and a settings change before 2.0.0 loaded downloads and loads it again, instead
        // of superseding its Load with nothing.
        let (restart, out) = update(Some(&r), &key(), g(3), &new(&two));
        assert!(restart);
        assert_eq!(kinds(&out), ["Supersede", "Disable", "Load"]);
    }

    #[test]
    fn an_update_naming_a_constraint_resolves_it_again() {
        let tilde = VersionRequest::parse("~1.2");
        let mut r = row("~1.2", true, false);
        r.settings_schema = Some(None);
        let (restart, out) = update(Some(&r), &key(), g(2), &new(&tilde));
        assert!(restart);
        assert_eq!(kinds(&out), ["Supersede", "Disable", "Load"]);
    }

    #[test]
    fn remove_disables_uninstalls_and_cleans_up() {
        assert_eq!(
            kinds(&remove(&key(), g(4))),
            ["Supersede", "Disable", "Uninstall", "Cleanup"]
        );
    }
}
