//! Task flows: which queued tasks each state change implies (DESIGN.md section 4). Each returned
//! value is an outbox body the relay delivers to the broker in order.

use berth_proto::tasks::{self, TaskKind};

use crate::model::{
    ConditionSet, ConditionStatus, ConditionType, Generation, PackageKey, Phase, set_condition,
};
use crate::outbox::{Op, QueuedTask, Row};
use crate::scheduler::Verdict;
use crate::store::PackageRow;

/// Drop the package's queued tasks older than `generation` and cancel its running ones.
pub fn supersede(key: &PackageKey, generation: Generation) -> Row {
    Row::new(Op::Supersede {
        package: key.to_string(),
        generation: generation.get(),
    })
}

/// One task of `kind` (without a payload) on the package's main queue.
pub fn task(key: &PackageKey, generation: Generation, kind: TaskKind) -> Row {
    enqueue(key, generation, tasks::bare(kind))
}

/// `task` (its kind and payload, from `berth_proto::tasks`) on the package's main queue.
fn enqueue(key: &PackageKey, generation: Generation, task: berth_proto::queue::Task) -> Row {
    Row::new(Op::Enqueue {
        task: QueuedTask {
            id: uuid::Uuid::new_v4().to_string(),
            queue: key.to_string(),
            package: key.to_string(),
            generation: generation.get(),
            kind: task.kind,
            payload: task.payload,
            traceparent: berth_runtime::current_traceparent(),
        },
    })
}

/// `kinds` on the package's main queue, after a Supersede of what older generations left.
///
/// The first generation of a key supersedes nothing, so it writes no Supersede: every task
/// carries a generation of at least 1 (generations survive a Remove, so a re-created package
/// starts above its old tasks), and a Supersede drops only older ones. That spares the broker
/// a call and a transaction per new package, the bulk of a cluster's first install.
fn tasks(key: &PackageKey, generation: Generation, kinds: &[TaskKind]) -> Vec<Row> {
    (generation.get() > 1)
        .then(|| supersede(key, generation))
        .into_iter()
        .chain(kinds.iter().map(|k| task(key, generation, *k)))
        .collect()
}

/// The tasks of an Update, given the previous state (None for a new package).
///
/// - new package: Load, which downloads the package first (the Downloading phase and the
///   `Downloaded` condition are its reports); the scheduler enqueues the rest (Start:
///   ApplySettings → Startup → Run in one task) once the package's requirements hold (see
///   [`schedule`]);
/// - version, package or repository change, or a package still being removed: Disable (the
///   release is kept, so workloads keep running) → the same chain;
/// - settings change only: ApplySettings → Run when the package is enabled; nothing when it
///   still waits for its requirements (its settings are read when it is enabled).
///
/// Returns the tasks and whether the package starts over (its phase goes back to Pending).
pub fn update(
    previous: Option<&PackageRow>,
    key: &PackageKey,
    generation: Generation,
    new: &NewSpec<'_>,
) -> (bool, Vec<Row>) {
    use TaskKind::*;
    match previous {
        None => (true, tasks(key, generation, &[Load])),
        Some(prev)
            if prev.removing
                || prev.version != new.version
                || prev.package != new.package
                || prev.repository != new.repository
                // Never loaded (e.g. the first download failed), or the generation failed
                // permanently: start over.
                || prev.settings_schema.is_none()
                || prev.phase == Phase::Failed
                // A version constraint is resolved again at every Update.
                || is_constraint(new.version) =>
        {
            (true, tasks(key, generation, &[Disable, Load]))
        }
        Some(prev) if prev.enabled => (false, tasks(key, generation, &[ApplySettings, Run])),
        Some(_) => (false, tasks(key, generation, &[])),
    }
}

/// What a scheduler verdict changes on the package: enabled, it gets `RequirementsMet=True`
/// and the task after Load for its generation, Start (ApplySettings → Startup → Run in one
/// task, resuming after the steps done when retried); waiting, it goes (back) to Pending with
/// `RequirementsMet=False` naming the unmet requirement.
pub fn schedule(row: &mut PackageRow, verdict: &Verdict, now: &str) -> Vec<Row> {
    use TaskKind::*;
    match verdict {
        Verdict::Enable => {
            row.enabled = true;
            let mut met =
                ConditionSet::new(ConditionType::RequirementsMet, ConditionStatus::True, "Met");
            met.message = "every requirement holds".to_owned();
            set_condition(&mut row.conditions, &met, row.generation, now);
            vec![task(&row.key, row.generation, Start)]
        }
        Verdict::Wait(blocked) => {
            row.phase = Phase::Pending;
            let mut unmet = ConditionSet::new(
                ConditionType::RequirementsMet,
                ConditionStatus::False,
                blocked.reason.as_str(),
            );
            unmet.message = blocked.message.clone();
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
pub fn unload(row: &mut PackageRow, now: &str) {
    row.enabled = false;
    row.loaded = None;
    row.hook_configs = None;
    row.settings_schema = None;
    row.schema_version = None;
    row.conversions = None;
    let mut unknown = ConditionSet::new(
        ConditionType::RequirementsMet,
        ConditionStatus::Unknown,
        "NotLoaded",
    );
    unknown.message = "requirements are checked once the package is loaded".to_owned();
    set_condition(&mut row.conditions, &unknown, row.generation, now);
}

/// Whether `version` is a semver constraint (`~1.2`, `>=1 <2`) rather than one version: an
/// OCI repository resolves it to the newest tag it allows when the package is downloaded.
pub fn is_constraint(version: &str) -> bool {
    berth_package::parse_version(version).is_err()
        && berth_package::VersionConstraint::parse(version).is_ok()
}

/// What an Update asks for, as far as planning cares.
pub struct NewSpec<'a> {
    pub repository: &'a str,
    pub package: &'a str,
    pub version: &'a str,
}

/// The tasks of a Remove: Disable → Uninstall → Cleanup.
pub fn remove(key: &PackageKey, generation: Generation) -> Vec<Row> {
    tasks(
        key,
        generation,
        &[TaskKind::Disable, TaskKind::Uninstall, TaskKind::Cleanup],
    )
}

/// A Run after a hook outside a Run changed the values.
pub fn rerun(key: &PackageKey, generation: Generation) -> Vec<Row> {
    rerun_for(key, generation, "values changed by a hook")
}

/// The global package's afterAll hooks, on its queue.
pub fn after_all(key: &PackageKey, generation: Generation) -> Row {
    task(key, generation, TaskKind::AfterAll)
}

/// A Run of the package for `reason`.
pub fn rerun_for(key: &PackageKey, generation: Generation, reason: &str) -> Vec<Row> {
    let run = tasks::Run {
        reason: reason.to_owned(),
    };
    vec![enqueue(key, generation, tasks::task(&run))]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Kind, PackageId, Phase};

    fn key() -> PackageKey {
        PackageKey::from_issued("default.hello".into())
    }

    fn g(n: i64) -> Generation {
        Generation::new(n)
    }

    fn row(version: &str, loaded: bool, removing: bool) -> PackageRow {
        PackageRow {
            id: PackageId::new(Kind::App, "hello", "").unwrap(),
            key: key(),
            repository: "/repo".into(),
            package: "hello".into(),
            version: version.into(),
            generation: g(1),
            observed_generation: g(1),
            settings: serde_json::json!({}),
            settings_version: 0,
            phase: Phase::Running,
            conditions: vec![],
            values: serde_json::json!({}),
            values_patch: vec![],
            settings_schema: loaded.then_some(None),
            schema_version: None,
            conversions: None,
            hooks: vec![],
            last_error: String::new(),
            removing,
            enabled: loaded,
            loaded: None,
            after_all_due: false,
            hook_configs: None,
            principal: 1,
        }
    }

    fn kinds(out: &[Row]) -> Vec<String> {
        out.iter()
            .map(|row| match &row.op {
                Op::Supersede { .. } => "Supersede".to_owned(),
                Op::Enqueue { task } => task.kind.clone(),
            })
            .collect()
    }

    const NEW: NewSpec<'static> = NewSpec {
        repository: "/repo",
        package: "hello",
        version: "1.0.0",
    };

    #[test]
    fn a_new_package_installs_from_scratch() {
        let (restart, out) = update(None, &key(), g(1), &NEW);
        assert!(restart);
        // Nothing can be older than the first generation.
        assert_eq!(kinds(&out), ["Load"]);
        // A package removed and created again may still have its old incarnation's tasks.
        let (restart, out) = update(None, &key(), g(4), &NEW);
        assert!(restart);
        assert_eq!(kinds(&out), ["Supersede", "Load"]);
    }

    #[test]
    fn a_settings_change_only_reapplies_and_runs() {
        let (restart, out) = update(Some(&row("1.0.0", true, false)), &key(), g(2), &NEW);
        assert!(!restart);
        assert_eq!(kinds(&out), ["Supersede", "ApplySettings", "Run"]);
        assert!(
            out[1..]
                .iter()
                .all(|row| matches!(&row.op, Op::Enqueue { task } if task.generation == 2))
        );
    }

    #[test]
    fn a_version_change_disables_first() {
        let (_, out) = update(Some(&row("0.9.0", true, false)), &key(), g(2), &NEW);
        assert_eq!(kinds(&out), ["Supersede", "Disable", "Load"]);
    }

    #[test]
    fn a_settings_change_of_a_waiting_package_enqueues_nothing() {
        let mut waiting = row("1.0.0", true, false);
        waiting.enabled = false;
        let (restart, out) = update(Some(&waiting), &key(), g(2), &NEW);
        assert!(!restart);
        assert_eq!(kinds(&out), ["Supersede"]);
    }

    #[test]
    fn enabling_enqueues_the_rest_of_the_chain_and_waiting_names_why() {
        let mut r = row("1.0.0", true, false);
        r.enabled = false;
        r.phase = Phase::Loaded;
        let blocked = crate::scheduler::Blocked {
            reason: crate::scheduler::Reason::Dependency,
            message: "requires db, which is not installed".into(),
        };
        assert!(schedule(&mut r, &Verdict::Wait(blocked), "t").is_empty());
        assert_eq!(r.phase, Phase::Pending);
        let c = &r.conditions[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("RequirementsMet", "False", "Dependency")
        );
        assert_eq!(c.message, "requires db, which is not installed");
        let out = schedule(&mut r, &Verdict::Enable, "t");
        assert!(r.enabled);
        assert_eq!(kinds(&out), ["Start"]);
        assert_eq!(r.conditions[0].status, "True");
    }

    #[test]
    fn an_update_during_removal_or_before_load_starts_over() {
        let (restart, _) = update(Some(&row("1.0.0", true, true)), &key(), g(3), &NEW);
        assert!(restart);
        let (restart, _) = update(Some(&row("1.0.0", false, false)), &key(), g(3), &NEW);
        assert!(restart);
    }

    #[test]
    fn an_update_before_an_upgrade_loads_loads_the_new_version_again() {
        // 1.0.0 was loaded; an upgrade to 2.0.0 starts over ...
        let mut r = row("1.0.0", true, false);
        r.settings_schema = Some(Some(serde_json::json!({"type": "object"})));
        r.schema_version = Some("1.0.0".into());
        let two = NewSpec {
            version: "2.0.0",
            ..NEW
        };
        let (restart, _) = update(Some(&r), &key(), g(2), &two);
        assert!(restart);
        r.version = "2.0.0".into();
        unload(&mut r, "t");
        assert_eq!((&r.settings_schema, &r.schema_version), (&None, &None));
        // ... and a settings change before 2.0.0 loaded downloads and loads it again, instead
        // of superseding its Load with nothing.
        let (restart, out) = update(Some(&r), &key(), g(3), &two);
        assert!(restart);
        assert_eq!(kinds(&out), ["Supersede", "Disable", "Load"]);
    }

    #[test]
    fn an_update_naming_a_constraint_resolves_it_again() {
        let tilde = NewSpec {
            version: "~1.2",
            ..NEW
        };
        let mut r = row("~1.2", true, false);
        r.settings_schema = Some(None);
        let (restart, out) = update(Some(&r), &key(), g(2), &tilde);
        assert!(restart);
        assert_eq!(kinds(&out), ["Supersede", "Disable", "Load"]);
        assert!(!is_constraint("1.2.3") && !is_constraint("latest") && is_constraint("^1"));
    }

    #[test]
    fn remove_disables_uninstalls_and_cleans_up() {
        assert_eq!(
            kinds(&remove(&key(), g(4))),
            ["Supersede", "Disable", "Uninstall", "Cleanup"]
        );
    }
}
