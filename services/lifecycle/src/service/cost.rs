//! What one package costs lifecycle's PostgreSQL database: the statements each step of a
//! package's install runs, through the service as the gateway and a worker call it (Update,
//! GetSpec and the Load task's reports, GetSpec and the Start task's reports), counted by
//! `pg_stat_statements`. The scale bench (`tests/src/bin/scale-bench.rs`) prints the same figure
//! for the whole system; this test keeps lifecycle's share from growing unnoticed. The relay's
//! and the metrics' statements are not counted: they do not run here.

use std::sync::Arc;

use berth_proto::lifecycle as pb;
use berth_proto::lifecycle::lifecycle_server::Lifecycle as _;
use berth_proto::lifecycle::report_request::Report as Rpt;
use berth_proto::v1;
use sqlx::Connection as _;
use tonic::Request;

use super::LifecycleService;
use crate::store::Store;

/// The statements each step of one app's install runs (measured 2026-11-28). An Update of a
/// new key: BEGIN with the writers' lock, the catch-up, the generation, the row read for write,
/// the free principal number, the row's INSERT, the outbox, the log's last entry and COMMIT,
/// with the read of the current row before (12 before the engine wrote the row in one
/// statement). A change that needs more must say why here, and docs/benchmarks.md's figures
/// move with it.
const BUDGET: [(&str, i64); 5] = [
    ("Update", 11),
    ("GetSpec", 1),
    ("Load reports", 9),
    ("GetSpec", 1),
    ("Start reports", 7),
];

/// Statements of `database` since the last reset, and a reset.
async fn counted(server: &berth_testpg::PgServer, database: &str) -> i64 {
    let mut conn = sqlx::PgConnection::connect(&server.url()).await.unwrap();
    let (calls,): (Option<i64>,) = sqlx::query_as(
        "SELECT sum(calls)::bigint FROM pg_stat_statements s
         JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1",
    )
    .bind(database)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    sqlx::query("SELECT pg_stat_statements_reset()")
        .execute(&mut conn)
        .await
        .unwrap();
    calls.unwrap_or(0)
}

fn progress(
    key: &str,
    generation: i64,
    phase: pb::Phase,
    c: pb::ConditionType,
) -> pb::ReportRequest {
    pb::ReportRequest {
        key: key.into(),
        generation,
        report: Some(Rpt::Progress(pb::Progress {
            phase: phase as i32,
            conditions: vec![pb::ConditionUpdate {
                r#type: c as i32,
                status: pb::ConditionStatus::True as i32,
                reason: "Done".into(),
                message: String::new(),
            }],
        })),
    }
}

fn report(key: &str, generation: i64, report: Rpt) -> pb::ReportRequest {
    pb::ReportRequest {
        key: key.into(),
        generation,
        report: Some(report),
    }
}

#[tokio::test]
async fn an_app_install_costs_lifecycle_its_statement_budget() {
    let server =
        berth_testpg::PgServer::start_with(&[("shared_preload_libraries", "pg_stat_statements")])
            .await;
    let mut conn = sqlx::PgConnection::connect(&server.url()).await.unwrap();
    sqlx::query("CREATE EXTENSION pg_stat_statements")
        .execute(&mut conn)
        .await
        .unwrap();
    let url = server.create_database("berth_lifecycle").await;
    let store = Store::open(&url).await.unwrap();
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir(repo.path().join("hello")).unwrap();
    let mut repositories = berth_package::Repositories::default();
    repositories.add_root(repo.path()).unwrap();
    let broker = berth_clients::broker("http://127.0.0.1:9", None).unwrap();
    let engine = store.engine(semver::Version::new(0, 1, 0)).await.unwrap();
    let validations = crate::validation::Validations::new(
        broker.clone(),
        store.clone(),
        std::time::Duration::from_secs(1),
    );
    let changes = crate::writer::Changes::new(Arc::default(), store.dialect());
    let writer = crate::writer::Writer::new(store.clone(), engine, changes);
    let service = LifecycleService::new(
        store,
        writer,
        broker,
        Arc::new(repositories),
        validations,
        berth_jq::Jq::new("/nonexistent".into(), berth_jq::JqLimits::default()),
    );
    counted(&server, "berth_lifecycle").await;

    let mut spent = vec![];
    let update = service
        .update(Request::new(v1::UpdateRequest {
            r#ref: Some(v1::PackageRef {
                kind: v1::PackageKind::App as i32,
                name: "hello".into(),
                namespace: String::new(),
            }),
            repository: "hello".into(),
            version: "1.0.0".into(),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_inner();
    spent.push(("Update", counted(&server, "berth_lifecycle").await));
    let (key, g) = (update.key.as_str(), update.generation);
    let get_spec = || async {
        service
            .get_spec(Request::new(pb::GetSpecRequest { key: key.into() }))
            .await
            .unwrap()
            .into_inner()
    };
    get_spec().await;
    spent.push(("GetSpec", counted(&server, "berth_lifecycle").await));
    let load = vec![
        progress(
            key,
            g,
            pb::Phase::Downloading,
            pb::ConditionType::Downloaded,
        ),
        report(
            key,
            g,
            Rpt::Loaded(pb::Loaded {
                version: "1.0.0".into(),
                hooks: vec![pb::HookInfo {
                    name: "hooks/set.sh".into(),
                    bindings: vec!["beforeHelm".into()],
                }],
                ..Default::default()
            }),
        ),
    ];
    let accepted = service
        .report_batch(Request::new(pb::ReportBatchRequest { reports: load }))
        .await
        .unwrap();
    assert!(accepted.into_inner().accepted);
    spent.push(("Load reports", counted(&server, "berth_lifecycle").await));
    assert!(
        get_spec().await.enabled,
        "the Loaded report enabled the app"
    );
    spent.push(("GetSpec", counted(&server, "berth_lifecycle").await));
    let values = || {
        Some(berth_proto::json::to_struct(
            &serde_json::json!({"hello": {"x": 1}}),
        ))
    };
    let start = vec![
        report(
            key,
            g,
            Rpt::SettingsApplied(pb::SettingsApplied { values: values() }),
        ),
        report(
            key,
            g,
            Rpt::HookRun(pb::HookRunReport {
                name: "hooks/set.sh".into(),
                error: String::new(),
                values: Some(pb::Values {
                    values: values(),
                    patch_inside_run: true,
                    ..Default::default()
                }),
            }),
        ),
        progress(
            key,
            g,
            pb::Phase::Unspecified,
            pb::ConditionType::ManifestsApplied,
        ),
        report(key, g, Rpt::RunSucceeded(pb::RunSucceeded {})),
    ];
    service
        .report_batch(Request::new(pb::ReportBatchRequest { reports: start }))
        .await
        .unwrap();
    spent.push(("Start reports", counted(&server, "berth_lifecycle").await));
    let package = service
        .get(Request::new(v1::GetRequest {
            r#ref: Some(v1::PackageRef {
                kind: v1::PackageKind::App as i32,
                name: "hello".into(),
                namespace: String::new(),
            }),
        }))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(package.phase, "Running");

    let total: i64 = spent.iter().map(|(_, n)| n).sum();
    println!("lifecycle's PostgreSQL statements for one app's install: {total} {spent:?}");
    for ((step, n), (budgeted, budget)) in spent.iter().zip(BUDGET) {
        assert_eq!(*step, budgeted);
        assert!(
            *n <= budget,
            "{step} ran {n} statements, over its budget of {budget} (all steps: {spent:?})"
        );
    }
}
