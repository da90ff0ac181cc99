//! The databases the store and writer tests run on: each test runs twice, on a SQLite file and
//! on a fresh PostgreSQL server (`berth-testpg`), as `sqlite::<name>` and `postgres::<name>`;
//! and the writes those tests make, through the unit of work as the service makes them.

use berth_lifecycle_core::engine::Change;
use berth_lifecycle_core::report::Report;
use berth_lifecycle_core::scheduler::{Constraint, Dependency, LoadedSpec, Requirements};
use berth_lifecycle_core::update::UpdateSpec;
use berth_lifecycle_core::{Engine, Generation, Kind, PackageId, PackageKey, Timestamp};
use berth_lifecycle_core::{Outcome, VersionRequest};

use crate::outbox::{self, Op};
use crate::store::Store;
use crate::writer::{self, WriteError, Written};

/// A test's database, deleted (or its server stopped) on drop.
pub enum TestDb {
    Sqlite(tempfile::TempDir),
    Postgres(berth_testpg::PgServer),
}

impl TestDb {
    pub fn sqlite() -> TestDb {
        TestDb::Sqlite(tempfile::tempdir().expect("temp dir"))
    }

    pub async fn postgres() -> TestDb {
        TestDb::Postgres(berth_testpg::PgServer::start().await)
    }

    /// The URL a store opens; the same database every time it is asked.
    pub fn url(&self) -> String {
        match self {
            TestDb::Sqlite(dir) => {
                format!("sqlite://{}", dir.path().join("lifecycle.db").display())
            }
            TestDb::Postgres(server) => server.url(),
        }
    }
}

/// Runs each `async fn(TestDb)` of the enclosing module on both engines.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test]
            async fn $name() {
                super::$name($crate::test_db::TestDb::sqlite()).await
            })*
        }
        mod postgres {
            $(#[tokio::test]
            async fn $name() {
                super::$name($crate::test_db::TestDb::postgres().await).await
            })*
        }
    };
}
pub(crate) use on_both_backends;

/// The time tests write at.
pub fn now() -> Timestamp {
    Timestamp::from_unix(1_700_000_000)
}

/// A replica's engine, built from what `store` holds now (berth 0.1.0).
pub async fn engine(store: &Store) -> Engine {
    store.engine(semver::Version::new(0, 1, 0)).await.unwrap()
}

/// One write alone, as the writer makes it.
pub async fn write(
    store: &Store,
    engine: &mut Engine,
    op: writer::Op,
) -> Result<Written, WriteError> {
    let ops = [(op, tracing::Span::none())];
    writer::write_batch(store, engine, &ops, now())
        .await
        .0
        .remove(0)
}

/// The Update of app `name` at version 1.0.0 from `/repo`.
pub fn spec(name: &str) -> UpdateSpec {
    UpdateSpec {
        id: PackageId::new(Kind::App, name, "").unwrap(),
        repository: "/repo".into(),
        package: name.into(),
        version: VersionRequest::parse("1.0.0"),
        settings: serde_json::json!({}),
        settings_version: 0,
        keep_settings: false,
        converted: None,
        force: false,
    }
}

/// Writes `spec`, which must change something: its generation.
pub async fn update(store: &Store, engine: &mut Engine, spec: UpdateSpec) -> Generation {
    let written = write(
        store,
        engine,
        writer::Op::Update(Box::new(spec), berth_lifecycle_core::Owner::Api),
    )
    .await
    .unwrap();
    assert_eq!(written.outcome, Outcome::Applied);
    written.generation
}

/// Installs app `name`: its generation.
pub async fn install(store: &Store, engine: &mut Engine, name: &str) -> Generation {
    update(store, engine, spec(name)).await
}

/// Installs module `name`: its key and generation.
pub async fn install_module(
    store: &Store,
    engine: &mut Engine,
    name: &str,
) -> (PackageKey, Generation) {
    let module = UpdateSpec {
        id: PackageId::new(Kind::Module, name, "").unwrap(),
        ..spec(name)
    };
    let key = module.id.key();
    (key, update(store, engine, module).await)
}

/// Writes one report of `key` at `g`, which must be applied.
pub async fn report(
    store: &Store,
    engine: &mut Engine,
    key: &PackageKey,
    g: Generation,
    fill: impl FnOnce(&mut Report),
) {
    let mut r = Report::new(g);
    fill(&mut r);
    let change = Change::Report {
        key: key.clone(),
        generation: g,
        reports: vec![r],
    };
    let written = write(store, engine, writer::Op::Change(change))
        .await
        .unwrap();
    assert_eq!(written.outcome, Outcome::Applied);
}

/// The key of app `name` in the default namespace.
pub fn app(name: &str) -> PackageKey {
    PackageKey::from_issued(format!("default.{name}"))
}

/// What a Load reports to the scheduler: version 1.0.0, `mandatory` dependencies, and a
/// Kubernetes constraint.
pub fn loaded(mandatory: &[&str], kubernetes: Option<&str>) -> LoadedSpec {
    LoadedSpec {
        version: semver::Version::new(1, 0, 0),
        weight: 0,
        requirements: Requirements {
            kubernetes: kubernetes
                .map(|c| Constraint(berth_package::VersionConstraint::parse(c).unwrap())),
            mandatory: mandatory
                .iter()
                .map(|n| Dependency {
                    name: (*n).into(),
                    constraint: None,
                })
                .collect(),
            ..Default::default()
        },
        reads_global: false,
    }
}

/// Reports `key` Loaded with `spec`.
pub async fn load(
    store: &Store,
    engine: &mut Engine,
    key: &PackageKey,
    g: Generation,
    spec: LoadedSpec,
) {
    report(store, engine, key, g, |r| {
        r.phase = Some(berth_lifecycle_core::Phase::Loaded);
        r.settings_schema = Some(None);
        r.loaded = Some(spec);
    })
    .await;
}

/// The tasks queued in the outbox as `package kind`, in order, and empties the outbox.
pub async fn queued(store: &Store) -> Vec<String> {
    let claim = store.outbox_claim(1000).await.unwrap();
    let rows = claim.rows.clone();
    let ids: Vec<i64> = rows.iter().map(|(id, _)| *id).collect();
    store.outbox_settle(claim, &ids).await.unwrap();
    rows.iter()
        .filter_map(|(_, body)| match outbox::Row::decode(0, body).unwrap().op {
            Op::Enqueue { task } => Some(format!("{} {}", task.package, task.kind)),
            Op::Supersede { .. } => None,
        })
        .collect()
}
