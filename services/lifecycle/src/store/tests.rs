//! The store on both engines: rows written and read back whole, the outbox's claims, key order.

use berth_lifecycle_core::condition::{
    ConditionSet, ConditionStatus, ConditionType, set_condition,
};
use berth_lifecycle_core::{Engine, Generation, HookState, Package, Write};
use berth_package::{Conversions, Step};
use berth_sql::Dialect;
use serde_json::json;

use super::write::BEGIN_LOCKED;
use super::*;
use crate::test_db::{TestDb, app, engine, install, loaded, now, on_both_backends, queued, spec};

#[test]
fn the_write_lock_key_spells_berthlc1() {
    let key = i64::from_be_bytes(*b"berthlc1");
    assert!(BEGIN_LOCKED.ends_with(&format!("pg_advisory_xact_lock({key})")));
}

on_both_backends!(
    a_package_is_read_back_as_it_was_written,
    settling_deletes_only_the_delivered_rows,
    a_second_relay_takes_nothing_while_the_first_holds_the_oldest_rows,
    packages_are_listed_in_byte_order_of_their_keys,
    repositories_past_the_bound_are_refused_and_change_nothing,
);

fn defined(name: &str, location: &str) -> berth_proto::lifecycle::RepositoryDefinition {
    berth_proto::lifecycle::RepositoryDefinition {
        name: name.into(),
        source: Some(berth_proto::lifecycle::repository_definition::Source::Oci(
            location.into(),
        )),
        plain_http: false,
        credentials: Some(berth_proto::lifecycle::RegistryCredentials {
            username: "u".into(),
            password: "p".repeat(16 * 1024),
        }),
    }
}

/// Resources define at most [`MAX_DEFINED`] repositories: one more is refused and not
/// stored; the defined ones may still change, and a deleted one frees its place.
async fn repositories_past_the_bound_are_refused_and_change_nothing(db: TestDb) {
    let store = Store::open(&db.url()).await.unwrap();
    for i in 0..MAX_DEFINED {
        let def = defined(&format!("r{i}"), &format!("oci://registry/r{i}"));
        assert!(store.put_repository(&def).await.unwrap(), "r{i} refused");
    }
    let extra = defined("extra", "oci://registry/extra");
    assert!(
        !store.put_repository(&extra).await.unwrap(),
        "one past the bound stored"
    );
    assert_eq!(store.repository("extra").await.unwrap(), None);
    let changed = defined("r0", "oci://registry/moved");
    assert!(
        store.put_repository(&changed).await.unwrap(),
        "a defined one may change"
    );
    assert_eq!(
        store.repository("r0").await.unwrap(),
        Some(changed),
        "read back whole, the largest credentials included"
    );
    assert!(store.delete_repository("r1").await.unwrap());
    assert!(
        store.put_repository(&extra).await.unwrap(),
        "a freed place is taken"
    );
}

/// A package with every field set as far from its default as it goes.
fn everything() -> Package {
    let spec = spec("full");
    let plan = berth_lifecycle_core::update::plan(&spec, None, Generation::new(3), 7, now());
    let mut p = plan.expect("planned").row;
    p.observed_generation = Generation::new(2);
    p.settings = json!({"replicas": 3, "nested": {"a": [1, 2]}});
    p.settings_version = 2;
    p.phase = Phase::Running;
    let ready = ConditionSet::new(ConditionType::Ready, ConditionStatus::False, "Failed")
        .with_message("it broke");
    set_condition(&mut p.conditions, &ready, p.generation, now());
    p.values = json!({"full": {"x": "y"}});
    p.values_patch = vec![json!({"op": "add", "path": "/x", "value": 1})];
    p.settings_schema = Some(Some(json!({"type": "object"})));
    p.schema_version = Some("1.0.0".into());
    p.conversions = Some(
        Conversions::from_steps(
            2,
            [Step {
                version: 2,
                expressions: vec![".a = 1".into()],
            }],
        )
        .unwrap(),
    );
    p.hooks = vec![HookState {
        name: "hooks/a.sh".into(),
        bindings: vec!["beforeHelm".into()],
        runs: 4,
        last_run: Some(now()),
        last_error: "exit 1".into(),
    }];
    p.last_error = "Run: boom".into();
    p.enabled = true;
    let mut spec = loaded(&["db"], Some(">=1.30"));
    spec.weight = 7;
    spec.reads_global = true;
    p.loaded = Some(spec);
    p.hook_configs = Some(r#"[{"path":"a.sh","batch":false,"output":"x"}]"#.into());
    p.after_all_due = true;
    p
}

/// What the engine writes is what the store reads back, every field, inserted and saved.
async fn a_package_is_read_back_as_it_was_written(db: TestDb) {
    let store = Store::open(&db.url()).await.unwrap();
    let mut e = Engine::new(semver::Version::new(0, 1, 0));
    let mut p = everything();
    let mut tx = store.begin_write(&mut e).await.unwrap();
    tx.save(&[Write::Insert(p.clone())]).await.unwrap();
    tx.commit(&mut e).await.unwrap();
    assert_eq!(store.get(&p.key).await.unwrap().as_ref(), Some(&p));

    p.removing = true;
    p.phase = Phase::Removing;
    p.version = berth_lifecycle_core::VersionRequest::parse("~1.2");
    p.loaded = None;
    p.settings_schema = Some(None);
    p.conversions = None;
    p.hook_configs = None;
    let mut tx = store.begin_write(&mut e).await.unwrap();
    tx.save(&[Write::Save(p.clone())]).await.unwrap();
    tx.commit(&mut e).await.unwrap();
    assert_eq!(store.list().await.unwrap(), [p]);
}

/// A relay deletes what it delivered and nothing else: a row written while it delivered
/// stays for the next batch.
async fn settling_deletes_only_the_delivered_rows(db: TestDb) {
    let store = Store::open(&db.url()).await.unwrap();
    let mut e = engine(&store).await;
    install(&store, &mut e, "a").await;
    install(&store, &mut e, "c").await;
    let claim = store.outbox_claim(100).await.unwrap();
    let ids: Vec<i64> = claim.rows.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids.len(),
        2,
        "a Load each (a first generation supersedes nothing)"
    );
    // Neither a SQLite claim (no lock) nor a PostgreSQL one (row locks) stops new rows.
    install(&store, &mut e, "b").await;
    store.outbox_settle(claim, &ids[..1]).await.unwrap();
    assert_eq!(
        queued(&store).await,
        ["default.c Load", "default.b Load"],
        "the undelivered row of the batch and the new rows stay, in order"
    );
}

/// Two lifecycles on one PostgreSQL database never deliver the same outbox rows, nor
/// deliver out of order: while one relay holds the oldest rows the other gets nothing, and
/// once they are settled it gets the rest. (SQLite serves one lifecycle: its claims do not
/// lock, and a second claim sees the same rows.)
async fn a_second_relay_takes_nothing_while_the_first_holds_the_oldest_rows(db: TestDb) {
    let first = Store::open(&db.url()).await.unwrap();
    let second = Store::open(&db.url()).await.unwrap();
    let mut e = engine(&first).await;
    for name in ["a", "b"] {
        install(&first, &mut e, name).await;
    }
    // Each install wrote its Load.
    let held = first.outbox_claim(1).await.unwrap();
    assert_eq!(held.rows.len(), 1);
    let other = second.outbox_claim(100).await.unwrap();
    match first.dialect() {
        Dialect::Postgres => assert!(
            other.rows.is_empty(),
            "the second relay would overtake the first: {:?}",
            other.rows
        ),
        Dialect::Sqlite => assert_eq!(other.rows.len(), 2),
    }
    drop(other);
    let ids: Vec<i64> = held.rows.iter().map(|(id, _)| *id).collect();
    first.outbox_settle(held, &ids).await.unwrap();
    let rest = second.outbox_claim(100).await.unwrap();
    let kinds: Vec<&str> = rest.rows.iter().map(|(_, body)| body.as_str()).collect();
    assert_eq!(kinds.len(), 1, "{kinds:?}");
    assert!(kinds.iter().all(|b| b.contains("default.b")), "{kinds:?}");
}

/// Keys are listed bytewise on both engines, so pages of List mean the same on both.
async fn packages_are_listed_in_byte_order_of_their_keys(db: TestDb) {
    let store = Store::open(&db.url()).await.unwrap();
    let mut e = engine(&store).await;
    for name in ["b-x", "bx", "a", "b"] {
        install(&store, &mut e, name).await;
    }
    let keys = |rows: Vec<Package>| -> Vec<String> {
        rows.into_iter()
            .map(|r| r.key.as_str().to_owned())
            .collect()
    };
    assert_eq!(
        keys(store.list().await.unwrap()),
        ["default.a", "default.b", "default.b-x", "default.bx"]
    );
    assert_eq!(
        keys(store.list_after("default.b", 2).await.unwrap()),
        ["default.b-x", "default.bx"]
    );
    assert_eq!(store.get(&app("a")).await.unwrap().unwrap().key, app("a"));
}
