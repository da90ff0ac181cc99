//! Writes through the unit of work on real databases (SQLite and PostgreSQL): what the engine
//! decided is what is stored and queued, it survives a restart, replicas decide on what both
//! wrote, and a batch's writes fail alone.

use berth_lifecycle_core::condition::{self, ConditionStatus, ConditionType};
use berth_lifecycle_core::conversion::{AtLoad, Converted};
use berth_lifecycle_core::engine::{Change, Refused};
use berth_lifecycle_core::report::Report;
use berth_lifecycle_core::scheduler::LoadedSpec;
use berth_lifecycle_core::update::UpdateRefused;
use berth_lifecycle_core::{Engine, Generation, Outcome, PackageKey, Phase, VersionRequest};
use berth_package::{Conversions, Step};
use serde_json::json;

use super::{Op, WriteError, Written};
use crate::store::Store;
use crate::test_db::{
    TestDb, app, engine, install, install_module, load, loaded, on_both_backends, queued, report,
    spec, update, write,
};

on_both_backends!(
    the_scheduler_enables_packages_as_their_requirements_come_to_hold,
    after_all_waits_for_the_packages_ordered_after_the_global_package,
    a_change_of_the_global_values_reruns_their_readers,
    concurrent_updates_of_one_package_from_two_stores_get_distinct_generations,
    settings_versions_and_conversions_are_stored_with_the_settings,
    a_batch_of_reports_answers_each_as_it_would_alone,
    removes_are_refused_while_dependents_need_them_and_cleanups_delete,
    principal_numbers_are_kept_while_a_key_exists_and_the_smallest_free_one_is_reused,
    concurrent_creations_from_two_stores_never_share_a_principal,
);

async fn requirements_met(store: &Store, key: &PackageKey) -> (ConditionStatus, String, String) {
    let row = store.get(key).await.unwrap().unwrap();
    let c = condition::find(&row.conditions, ConditionType::RequirementsMet).unwrap();
    (c.status, c.reason.clone(), c.message.clone())
}

/// Loaded packages wait for their requirements, the cluster's version and a dependency
/// reaching Running each enable what waited on them (tasks in the same transaction), and
/// what the scheduler decided survives a restart.
async fn the_scheduler_enables_packages_as_their_requirements_come_to_hold(db: TestDb) {
    let url = db.url();
    let store = Store::open(&url).await.unwrap();
    let mut e = engine(&store).await;

    let web = install(&store, &mut e, "web").await;
    assert_eq!(queued(&store).await, ["default.web Load"]);
    load(
        &store,
        &mut e,
        &app("web"),
        web,
        loaded(&["db"], Some(">=1.30")),
    )
    .await;
    assert!(queued(&store).await.is_empty());
    let (status, reason, message) = requirements_met(&store, &app("web")).await;
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "KubernetesVersion")
    );
    assert!(message.contains("not known yet"), "{message}");

    let version = Op::Change(Change::ClusterVersion(semver::Version::new(1, 31, 0)));
    write(&store, &mut e, version).await.unwrap();
    let (_, reason, message) = requirements_met(&store, &app("web")).await;
    assert_eq!(reason, "Dependency");
    assert_eq!(message, "requires db, which is not installed");

    // A restart rebuilds the same decisions from the store: nothing to write again.
    drop(store);
    let store = Store::open(&url).await.unwrap();
    let mut e = engine(&store).await;
    let version = Op::Change(Change::ClusterVersion(semver::Version::new(1, 31, 0)));
    write(&store, &mut e, version).await.unwrap();
    assert!(queued(&store).await.is_empty());

    let db = install(&store, &mut e, "db").await;
    load(&store, &mut e, &app("db"), db, loaded(&[], None)).await;
    assert_eq!(
        queued(&store).await,
        ["default.db Load", "default.db Start"]
    );
    assert_eq!(
        requirements_met(&store, &app("web")).await.2,
        "requires db, which is not Running yet (default.db)"
    );
    report(&store, &mut e, &app("db"), db, |r| {
        r.phase = Some(Phase::Running)
    })
    .await;
    assert_eq!(queued(&store).await, ["default.web Start"]);
    assert_eq!(
        requirements_met(&store, &app("web")).await.0,
        ConditionStatus::True
    );
    assert_eq!(e.scheduler().dependents(&app("db")), [app("web")]);

    // A new version starts over: only Load, and the scheduler decides again
    // once it is loaded.
    let mut newer = spec("web");
    newer.version = VersionRequest::parse("2.0.0");
    update(&store, &mut e, newer).await;
    assert_eq!(
        queued(&store).await,
        ["default.web Disable", "default.web Load"]
    );
    let (status, reason, _) = requirements_met(&store, &app("web")).await;
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::Unknown, "NotLoaded")
    );
    let row = store.get(&app("web")).await.unwrap().unwrap();
    assert!(!row.enabled && row.loaded.is_none());
}

fn run_succeeded(r: &mut Report) {
    r.phase = Some(Phase::Running);
    r.run_succeeded = true;
}

async fn after_all_due(store: &Store) -> bool {
    store.global().await.unwrap().unwrap().after_all_due
}

/// The global package's afterAll is due once its Run succeeded, stays due (across a reopen
/// of the store) while a package waiting for it has not converged, and is enqueued once,
/// in the report that makes the last one Running, which clears it; with everything
/// converged already, the Run's own report enqueues it.
async fn after_all_waits_for_the_packages_ordered_after_the_global_package(db: TestDb) {
    let url = db.url();
    let store = Store::open(&url).await.unwrap();
    let mut e = engine(&store).await;
    let (global, g) = install_module(&store, &mut e, "global").await;
    load(&store, &mut e, &global, g, loaded(&[], None)).await;
    let (nested, n) = install_module(&store, &mut e, "nested").await;
    let mut nested_spec = loaded(&[], None);
    nested_spec.requirements.conditional = loaded(&["global"], None).requirements.mandatory;
    load(&store, &mut e, &nested, n, nested_spec).await;
    let (plain, p) = install_module(&store, &mut e, "plain").await;
    load(&store, &mut e, &plain, p, loaded(&[], None)).await;
    queued(&store).await;
    assert!(!after_all_due(&store).await);

    report(&store, &mut e, &global, g, run_succeeded).await;
    assert_eq!(
        queued(&store).await,
        ["nested Start"],
        "the nested package starts; the afterAll waits for it"
    );
    assert!(after_all_due(&store).await);
    // A package that does not wait for the global package does not hold it back.
    report(&store, &mut e, &plain, p, run_succeeded).await;
    assert!(queued(&store).await.is_empty());

    drop(store);
    let store = Store::open(&url).await.unwrap();
    let mut e = engine(&store).await;
    assert!(after_all_due(&store).await, "kept across a reopen");
    report(&store, &mut e, &nested, n, |r| {
        r.values = Some(json!({"nested": {}}));
    })
    .await;
    assert!(queued(&store).await.is_empty(), "not Running yet");

    report(&store, &mut e, &nested, n, run_succeeded).await;
    assert_eq!(queued(&store).await, ["global AfterAll"]);
    assert!(!after_all_due(&store).await, "cleared with the enqueue");
    report(&store, &mut e, &nested, n, run_succeeded).await;
    assert!(queued(&store).await.is_empty(), "once per convergence");

    // The next Run of the global package: everything has converged, so the afterAll
    // follows at once.
    report(&store, &mut e, &global, g, run_succeeded).await;
    assert_eq!(queued(&store).await, ["global AfterAll"]);
    assert!(!after_all_due(&store).await);
}

/// A change of the global package's values re-runs the Running packages whose charts
/// read them (in the report's transaction), not the others; which packages read them
/// survives a restart; a report that leaves the global values as they are re-runs nothing.
async fn a_change_of_the_global_values_reruns_their_readers(db: TestDb) {
    let url = db.url();
    let store = Store::open(&url).await.unwrap();
    let mut e = engine(&store).await;
    for (name, reads) in [("reader", true), ("plain", false)] {
        let g = install(&store, &mut e, name).await;
        let spec = LoadedSpec {
            reads_global: reads,
            ..loaded(&[], None)
        };
        load(&store, &mut e, &app(name), g, spec).await;
        report(&store, &mut e, &app(name), g, |r| {
            r.phase = Some(Phase::Running)
        })
        .await;
    }
    let (global, g) = install_module(&store, &mut e, "global").await;
    load(&store, &mut e, &global, g, loaded(&[], None)).await;
    queued(&store).await;
    let set = |domain: &str| {
        let values = json!({"global": {"domain": domain}});
        move |r: &mut Report| {
            r.values = Some(values);
            r.patch_inside_run = true;
        }
    };
    report(&store, &mut e, &global, g, set("a")).await;
    assert_eq!(queued(&store).await, ["default.reader Run"]);

    drop(store);
    let store = Store::open(&url).await.unwrap();
    let mut e = engine(&store).await;
    report(&store, &mut e, &global, g, set("a")).await;
    assert!(queued(&store).await.is_empty(), "unchanged");
    report(&store, &mut e, &global, g, set("b")).await;
    assert_eq!(queued(&store).await, ["default.reader Run"]);
    assert_eq!(
        store.global().await.unwrap().map(|r| r.values),
        Some(json!({"global": {"domain": "b"}}))
    );
}

/// A Remove of a package another needs mandatorily is refused, nothing written; forced, it
/// is written; the Cleanup of an older generation deletes nothing, its own does.
async fn removes_are_refused_while_dependents_need_them_and_cleanups_delete(db: TestDb) {
    let store = Store::open(&db.url()).await.unwrap();
    let mut e = engine(&store).await;
    let d = install(&store, &mut e, "db").await;
    load(&store, &mut e, &app("db"), d, loaded(&[], None)).await;
    let w = install(&store, &mut e, "web").await;
    load(&store, &mut e, &app("web"), w, loaded(&["db"], None)).await;
    let remove = |force| Op::Remove {
        key: app("db"),
        force,
        owner: berth_lifecycle_core::Owner::Api,
    };
    let refused = write(&store, &mut e, remove(false)).await;
    assert!(
        matches!(&refused, Err(WriteError::Refused(Refused::MandatoryDependency { dependents, .. })) if dependents == &[app("web")]),
        "{refused:?}"
    );
    assert_eq!(store.get(&app("db")).await.unwrap().unwrap().generation, d);
    let removed = write(&store, &mut e, remove(true)).await.unwrap();
    assert_eq!(removed.outcome, Outcome::Applied);
    assert_eq!(
        removed.generation.get(),
        d.get() + 1,
        "the refused Remove's generation was given back with its transaction"
    );
    let row = store.get(&app("db")).await.unwrap().unwrap();
    assert_eq!((row.phase, row.removing), (Phase::Removing, true));

    let cleanup = |g| {
        Op::Change(Change::Delete {
            key: app("db"),
            generation: g,
        })
    };
    let stale = write(&store, &mut e, cleanup(d)).await.unwrap();
    assert_eq!(stale.outcome, Outcome::Stale);
    assert!(store.get(&app("db")).await.unwrap().is_some());
    let done = write(&store, &mut e, cleanup(removed.generation))
        .await
        .unwrap();
    assert_eq!(done.outcome, Outcome::Applied);
    assert!(store.get(&app("db")).await.unwrap().is_none());
    let missing = write(&store, &mut e, remove(false)).await.unwrap();
    assert_eq!(missing.outcome, Outcome::Stale, "nothing to remove");
}

/// Two engines on one fresh PostgreSQL database, as two lifecycle replicas have (the
/// database lives as long as the first value).
async fn two_replicas() -> (TestDb, Store, Store) {
    let db = TestDb::postgres().await;
    let a = Store::open(&db.url()).await.unwrap();
    let b = Store::open(&db.url()).await.unwrap();
    (db, a, b)
}

/// Two lifecycle replicas on one PostgreSQL database, each with its own engine built before
/// the other wrote anything: each pass decides on what both committed. The replica that makes
/// the dependency Running enables the dependent it never saw written, the other learns of it
/// and enqueues nothing twice, the cluster version one recorded is the other's, and a Remove
/// on either sees dependents written through the other.
#[tokio::test]
async fn replicas_schedule_on_the_graph_both_wrote() {
    let (_db, a, b) = two_replicas().await;
    let (mut ea, mut eb) = (engine(&a).await, engine(&b).await);

    let web = install(&a, &mut ea, "web").await;
    load(
        &a,
        &mut ea,
        &app("web"),
        web,
        loaded(&["db"], Some(">=1.30")),
    )
    .await;
    queued(&a).await;
    // The version reported to B holds web back on the dependency now, on both.
    let version = Op::Change(Change::ClusterVersion(semver::Version::new(1, 31, 0)));
    write(&b, &mut eb, version).await.unwrap();
    assert_eq!(
        requirements_met(&a, &app("web")).await.2,
        "requires db, which is not installed"
    );

    let db_g = install(&b, &mut eb, "db").await;
    assert_eq!(
        bring_up_db(&b, &mut eb, db_g).await,
        ["default.web Start"],
        "B enabled web, which only A wrote"
    );

    // A writes next: it catches up, and enables nothing again.
    install(&a, &mut ea, "other").await;
    assert_eq!(queued(&a).await, ["default.other Load"]);
    assert_eq!(
        ea.scheduler().kubernetes(),
        Some(&semver::Version::new(1, 31, 0))
    );
    // A Remove of db through A is refused: web depends on it (B wrote db's state).
    let remove = Op::Remove {
        key: app("db"),
        force: false,
        owner: berth_lifecycle_core::Owner::Api,
    };
    let refused = write(&a, &mut ea, remove).await;
    assert!(
        matches!(&refused, Err(WriteError::Refused(Refused::MandatoryDependency { dependents, .. })) if dependents == &[app("web")]),
        "{refused:?}"
    );
}

/// A replica whose index is older than the pruned part of the change log rebuilds it whole
/// before writing, and still decides on what the other replica wrote.
#[tokio::test]
async fn a_replica_behind_the_pruned_log_rebuilds_its_index() {
    let (db, a, b) = two_replicas().await;
    let (mut ea, mut eb) = (engine(&a).await, engine(&b).await);
    let web = install(&b, &mut eb, "web").await;
    load(&b, &mut eb, &app("web"), web, loaded(&["db"], None)).await;
    // As if the log had been pruned past everything A saw.
    let last = crate::store::prune_all_changes(&db.url()).await;
    assert!(ea.changes_seen() < last);
    queued(&a).await;
    let db_g = install(&a, &mut ea, "db").await;
    assert!(ea.changes_seen() >= last, "A rebuilt and moved on");
    assert_eq!(
        ea.scheduler().dependents(&app("db")),
        [app("web")],
        "A's rebuilt index knows web, which only B wrote"
    );
    assert_eq!(bring_up_db(&a, &mut ea, db_g).await, ["default.web Start"]);
}

/// Reports the installed `db` loaded (no requirements) and then Running through `store`;
/// the tasks that queued for `web` meanwhile (the outbox is emptied).
async fn bring_up_db(store: &Store, e: &mut Engine, g: Generation) -> Vec<String> {
    load(store, e, &app("db"), g, loaded(&[], None)).await;
    report(store, e, &app("db"), g, |r| r.phase = Some(Phase::Running)).await;
    queued(store)
        .await
        .into_iter()
        .filter(|t| t.starts_with("default.web"))
        .collect()
}

/// Two stores (two lifecycles) updating one package at once: each Update gets its own
/// generation, and the stored row is the one of the newest.
async fn concurrent_updates_of_one_package_from_two_stores_get_distinct_generations(db: TestDb) {
    let one = Store::open(&db.url()).await.unwrap();
    let two = Store::open(&db.url()).await.unwrap();
    let (mut e1, mut e2) = (engine(&one).await, engine(&two).await);
    let mut generations = Vec::new();
    for round in 0..5 {
        let (a, b) = tokio::join!(
            set(&one, &mut e1, json!({"store": 1, "round": round})),
            set(&two, &mut e2, json!({"store": 2, "round": round}))
        );
        generations.extend([a, b]);
    }
    let mut sorted: Vec<i64> = generations.iter().map(|(g, _)| *g).collect();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, (1..=10).collect::<Vec<i64>>(), "{generations:?}");
    let row = one.get(&app("web")).await.unwrap().unwrap();
    assert_eq!(row.generation.get(), 10);
    let newest = generations.iter().find(|(g, _)| *g == 10).unwrap();
    assert_eq!(
        row.settings, newest.1,
        "the newest Update's settings are stored"
    );
}

/// Updates package `web` to `settings`: its generation and the settings.
async fn set(
    store: &Store,
    e: &mut Engine,
    settings: serde_json::Value,
) -> (i64, serde_json::Value) {
    let mut spec = spec("web");
    spec.settings = settings.clone();
    (update(store, e, spec).await.get(), settings)
}

/// The settings' version is stored with them: an install's 0 is resolved when its version
/// loads (with the conversions, which survive a reopen); a Load that converts stores the
/// converted settings and version; a failed conversion fails the generation and leaves
/// settings, version and the last load alone; an Update of the loaded version stores
/// settings converted before the transaction, refuses a version too new, and re-sending the
/// same settings converted is a no-op.
async fn settings_versions_and_conversions_are_stored_with_the_settings(db: TestDb) {
    let url = db.url();
    let store = Store::open(&url).await.unwrap();
    let mut e = engine(&store).await;
    let key = app("conv");
    let conversions = Conversions::from_steps(
        2,
        [Step {
            version: 2,
            expressions: vec![".replicas = .size | del(.size)".into()],
        }],
    )
    .unwrap();
    let mut spec = spec("conv");
    spec.settings = json!({"size": 3});
    spec.settings_version = 1;
    let g = update(&store, &mut e, spec.clone()).await;
    assert_eq!(store.get(&key).await.unwrap().unwrap().settings_version, 1);
    report(&store, &mut e, &key, g, |r| {
        r.phase = Some(Phase::Loaded);
        r.settings_schema = Some(Some(json!({
            "type": "object",
            "properties": {"replicas": {"type": "integer"}},
        })));
        r.conversions = Some(conversions.clone());
        r.stored_settings = Some(AtLoad::Converted(Converted {
            settings: json!({"replicas": 3}),
            version: 2,
            ran: true,
        }));
        r.converted_from = Some((json!({"size": 3}), 1));
        r.loaded = Some(loaded(&[], None));
    })
    .await;
    let store = Store::open(&url).await.unwrap();
    let row = store.get(&key).await.unwrap().unwrap();
    assert_eq!(row.settings, json!({"replicas": 3}));
    assert_eq!(row.settings_version, 2);
    assert_eq!(row.conversions.as_ref(), Some(&conversions));

    // The same version again with version-1 settings, converted before the transaction.
    spec.settings = json!({"size": 4});
    spec.converted = Some((
        Converted {
            settings: json!({"replicas": 4}),
            version: 2,
            ran: true,
        },
        conversions.clone(),
    ));
    let g = update(&store, &mut e, spec.clone()).await;
    let row = store.get(&key).await.unwrap().unwrap();
    assert_eq!(
        (row.settings.clone(), row.settings_version, row.generation),
        (json!({"replicas": 4}), 2, g)
    );
    let again = write(
        &store,
        &mut e,
        Op::Update(Box::new(spec.clone()), berth_lifecycle_core::Owner::Api),
    )
    .await
    .unwrap();
    assert_eq!(
        again.outcome,
        Outcome::Unchanged(g),
        "the same settings converted again change nothing"
    );
    spec.settings_version = 3;
    spec.converted = None;
    let refused = write(
        &store,
        &mut e,
        Op::Update(Box::new(spec), berth_lifecycle_core::Owner::Api),
    )
    .await;
    assert!(
        matches!(
            refused,
            Err(WriteError::Refused(Refused::Update(
                UpdateRefused::Conversion(_)
            )))
        ),
        "{refused:?}"
    );

    // A failed conversion at Load: the generation fails, nothing else changes.
    report(&store, &mut e, &key, g, |r| {
        *r = Report::failed(g, "v2.yaml: boom".into());
    })
    .await;
    let after = store.get(&key).await.unwrap().unwrap();
    assert_eq!(after.phase, Phase::Failed);
    assert!(
        after.last_error.contains("v2.yaml: boom"),
        "{}",
        after.last_error
    );
    assert_eq!(
        (after.settings, after.settings_version, after.conversions),
        (row.settings, row.settings_version, row.conversions)
    );
}

/// One transaction of reports: each write is applied, found stale or refused as it would be
/// alone, in order (a later write of the batch sees an earlier one's change), and a stale
/// or refused one changes nothing.
async fn a_batch_of_reports_answers_each_as_it_would_alone(db: TestDb) {
    let store = Store::open(&db.url()).await.unwrap();
    let mut e = engine(&store).await;
    let a = install(&store, &mut e, "a").await;
    let b = install(&store, &mut e, "b").await;
    let op = |name: &str, g: Generation, fill: fn(&mut Report)| {
        let mut r = Report::new(g);
        fill(&mut r);
        let change = Change::Report {
            key: app(name),
            generation: g,
            reports: vec![r],
        };
        (Op::Change(change), tracing::Span::none())
    };
    let mut converted_from_other = Report::new(b);
    converted_from_other.converted_from = Some((json!({"other": true}), 0));
    let never: fn(&mut Report) = |r| r.error = Some("never".into());
    let ops = vec![
        op("a", a, |r| r.hooks = Some(vec![("h.sh".into(), vec![])])),
        // The same package again: it sees the first write (its row is read again).
        op("a", a, |r| {
            r.hook_run = Some(("h.sh".into(), "failed".into()))
        }),
        // An older generation: stale.
        op("b", Generation::new(b.get() - 1), never),
        (
            Op::Change(Change::Report {
                key: app("b"),
                generation: b,
                reports: vec![converted_from_other],
            }),
            tracing::Span::none(),
        ),
        // Not being removed: nothing to delete.
        (
            Op::Change(Change::Delete {
                key: app("b"),
                generation: b,
            }),
            tracing::Span::none(),
        ),
        op("missing", a, never),
    ];
    let (results, _) = super::write_batch(&store, &mut e, &ops, crate::test_db::now()).await;
    let shown: Vec<String> = results
        .iter()
        .map(|r| match r {
            Ok(Written { outcome, .. }) => format!("{outcome:?}"),
            Err(e) => format!("Err({e})"),
        })
        .collect();
    assert_eq!(
        shown,
        [
            "Applied",
            "Applied",
            "Stale",
            "Err(the package's settings changed while they were converted; report again)",
            "Stale",
            "Stale",
        ]
    );
    let row = |n: &str| {
        let store = store.clone();
        let k = app(n);
        async move { store.get(&k).await.unwrap().unwrap() }
    };
    let hooks = row("a").await.hooks;
    assert_eq!((hooks[0].runs, hooks[0].last_error.as_str()), (1, "failed"));
    assert_eq!(
        (row("b").await.last_error.as_str(), row("b").await.phase),
        ("", Phase::Pending)
    );
}

/// A write PostgreSQL refuses (text with a NUL byte; reports are cleaned of those at the
/// edge, see `convert::report`) fails alone: the others of its batch are written, and the
/// engine matches what was committed.
#[tokio::test]
async fn a_write_that_cannot_be_written_does_not_fail_the_rest_of_its_batch() {
    let db = TestDb::postgres().await;
    let store = Store::open(&db.url()).await.unwrap();
    let mut e = engine(&store).await;
    let a = install(&store, &mut e, "a").await;
    let b = install(&store, &mut e, "b").await;
    let op = |name: &str, g: Generation, error: &str| {
        let mut r = Report::new(g);
        r.error = Some(error.to_owned());
        r.phase = Some(Phase::Downloading);
        let change = Change::Report {
            key: app(name),
            generation: g,
            reports: vec![r],
        };
        (Op::Change(change), tracing::Span::none())
    };
    let ops = vec![
        op("a", a, "written"),
        op("a", a, "not\0written"),
        op("b", b, "written too"),
    ];
    let (results, _) = super::write_batch(&store, &mut e, &ops, crate::test_db::now()).await;
    let shown: Vec<String> = results
        .iter()
        .map(|r| match r {
            Ok(w) => format!("{:?}", w.outcome),
            Err(_) => "Err".to_owned(),
        })
        .collect();
    assert_eq!(shown, ["Applied", "Err", "Applied"]);
    for (name, error) in [("a", "written"), ("b", "written too")] {
        let row = store.get(&app(name)).await.unwrap().unwrap();
        assert_eq!(
            (row.last_error.as_str(), row.phase),
            (error, Phase::Downloading)
        );
    }
    // The index matches what was committed: a fresh one agrees with it.
    let fresh = engine(&store).await;
    assert_eq!(fresh.scheduler().order(), e.scheduler().order());
    let nodes = |e: &Engine| {
        let mut n: Vec<_> = e
            .scheduler()
            .nodes()
            .map(|(k, n)| (k.clone(), n.clone()))
            .collect();
        n.sort_by(|x, y| x.0.cmp(&y.0));
        n
    };
    assert_eq!(nodes(&fresh), nodes(&e));
}

/// The principal number of `name`'s row.
async fn principal(store: &Store, name: &str) -> Option<u32> {
    store
        .get(&app(name))
        .await
        .unwrap()
        .map(|row| row.principal)
}

/// Removes `name` and lets Cleanup delete its state.
async fn remove_and_clean_up(store: &Store, e: &mut Engine, name: &str) {
    let remove = Op::Remove {
        key: app(name),
        force: false,
        owner: berth_lifecycle_core::Owner::Api,
    };
    let removed = write(store, e, remove).await.unwrap();
    assert_eq!(removed.outcome, Outcome::Applied, "the package exists");
    let cleanup = Op::Change(Change::Delete {
        key: app(name),
        generation: removed.generation,
    });
    assert_eq!(
        write(store, e, cleanup).await.unwrap().outcome,
        Outcome::Applied
    );
}

/// A key gets the smallest free number when first created and keeps it across Updates,
/// failures, a Remove that is overtaken by an Update, and a restart; Cleanup frees it, and
/// the next new key takes it.
async fn principal_numbers_are_kept_while_a_key_exists_and_the_smallest_free_one_is_reused(
    db: TestDb,
) {
    let url = db.url();
    let store = Store::open(&url).await.unwrap();
    let mut e = engine(&store).await;
    for name in ["a", "b", "c"] {
        install(&store, &mut e, name).await;
    }
    assert_eq!(principal(&store, "a").await, Some(1));
    assert_eq!(principal(&store, "b").await, Some(2));
    assert_eq!(principal(&store, "c").await, Some(3));

    // Updates and a failed generation keep it.
    let mut changed = spec("b");
    changed.settings = json!({"x": 1});
    let g = update(&store, &mut e, changed).await;
    report(&store, &mut e, &app("b"), g, |r| {
        *r = Report::failed(g, "broken".into());
    })
    .await;
    assert_eq!(
        store.get(&app("b")).await.unwrap().unwrap().phase,
        Phase::Failed
    );
    assert_eq!(principal(&store, "b").await, Some(2));

    // A Remove overtaken by an Update keeps the key's state, and its number.
    let remove = Op::Remove {
        key: app("b"),
        force: false,
        owner: berth_lifecycle_core::Owner::Api,
    };
    write(&store, &mut e, remove).await.unwrap();
    install(&store, &mut e, "b").await;
    assert_eq!(principal(&store, "b").await, Some(2));

    // Cleanup frees it; the next new key takes the smallest free number.
    remove_and_clean_up(&store, &mut e, "b").await;
    assert_eq!(principal(&store, "b").await, None);
    install(&store, &mut e, "d").await;
    assert_eq!(principal(&store, "d").await, Some(2), "2 was free");
    install(&store, &mut e, "e").await;
    assert_eq!(principal(&store, "e").await, Some(4));
    remove_and_clean_up(&store, &mut e, "a").await;

    // A restart (the store opened again) keeps every number; 1 is the free one now.
    drop(store);
    let store = Store::open(&url).await.unwrap();
    let mut e = engine(&store).await;
    assert_eq!(principal(&store, "c").await, Some(3));
    assert_eq!(principal(&store, "d").await, Some(2));
    install(&store, &mut e, "b").await;
    assert_eq!(
        principal(&store, "b").await,
        Some(1),
        "re-created: a new number"
    );
}

/// Two stores (two lifecycles on one database) creating keys at once: every key gets its
/// own number, and together they are 1..=N.
async fn concurrent_creations_from_two_stores_never_share_a_principal(db: TestDb) {
    let one = Store::open(&db.url()).await.unwrap();
    let two = Store::open(&db.url()).await.unwrap();
    let (mut e1, mut e2) = (engine(&one).await, engine(&two).await);
    for round in 0..8 {
        let (a, b) = (format!("one-{round}"), format!("two-{round}"));
        tokio::join!(install(&one, &mut e1, &a), install(&two, &mut e2, &b));
    }
    let mut numbers: Vec<u32> = one
        .list()
        .await
        .unwrap()
        .iter()
        .map(|r| r.principal)
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=16).collect::<Vec<u32>>());
}
