//! The engine on an in-memory store: scheduling passes, the global afterAll and the global
//! values' readers, decided without SQL. After every write the index is checked against one
//! rebuilt from the stored rows: the engine keeps it a mirror.

use std::collections::{BTreeMap, HashMap};

use serde_json::json;

use super::*;
use crate::model::condition::{ConditionStatus, ConditionType, find};
use crate::model::id::{Kind, PackageId};
use crate::model::version::VersionRequest;
use crate::scheduler::{Dependency, LoadedSpec, Requirements};
use crate::task::Work;

fn t() -> Timestamp {
    Timestamp::from_unix(1_700_000_000)
}

/// A store in memory, written as the service's unit of work writes the real one.
struct Db {
    rows: BTreeMap<PackageKey, Package>,
    generations: HashMap<PackageKey, i64>,
    outbox: Vec<Work>,
    kubernetes: Option<Version>,
    engine: Engine,
}

impl Db {
    fn new() -> Db {
        Db {
            rows: BTreeMap::new(),
            generations: HashMap::new(),
            outbox: vec![],
            kubernetes: None,
            engine: Engine::new(Version::new(0, 1, 0)),
        }
    }

    /// `key`'s principal number: its row's, or the smallest free one (as the store gives).
    fn principal(&self, key: &PackageKey) -> u32 {
        match self.rows.get(key) {
            Some(row) => row.principal,
            None => (1..)
                .find(|n| self.rows.values().all(|r| r.principal != *n))
                .unwrap_or_default(),
        }
    }

    fn next_generation(&mut self, key: &PackageKey) -> Generation {
        let g = self.generations.entry(key.clone()).or_default();
        *g += 1;
        Generation::new(*g)
    }

    /// One write: load → apply → load what the pass needs → settle → save and queue.
    fn write(&mut self, change: Change) -> Result<Outcome, Refused> {
        let mut rows: Rows = change
            .key()
            .and_then(|k| self.rows.get(&k))
            .map(|r| (r.key.clone(), r.clone()))
            .into_iter()
            .collect();
        let mut fx = self.engine.apply(&mut rows, change, t())?;
        let needed = fx
            .rows_needed()
            .iter()
            .filter_map(|k| self.rows.get(k).cloned())
            .collect();
        fx.settle(needed, t()).expect("the index is in step");
        for write in fx.writes {
            match write {
                Write::Insert(row) => {
                    assert!(self.rows.insert(row.key.clone(), row).is_none(), "new");
                }
                Write::Save(row) => {
                    assert!(self.rows.insert(row.key.clone(), row).is_some(), "stored");
                }
                Write::Delete { key, .. } => {
                    self.rows.remove(&key);
                }
                Write::ClusterVersion(v) => self.kubernetes = Some(v),
            }
        }
        self.outbox.extend(fx.work);
        self.check_mirror();
        Ok(fx.outcome)
    }

    /// The engine's index equals one rebuilt from the stored rows.
    fn check_mirror(&self) {
        let mut fresh = Engine::new(Version::new(0, 1, 0));
        for (key, row) in &self.rows {
            fresh.refresh(key, Some(row));
        }
        let nodes = |e: &Engine| -> BTreeMap<PackageKey, crate::scheduler::Node> {
            e.scheduler()
                .nodes()
                .map(|(k, n)| (k.clone(), n.clone()))
                .collect()
        };
        assert_eq!(nodes(&self.engine), nodes(&fresh), "index and store differ");
    }

    fn install(&mut self, kind: Kind, name: &str) -> (PackageKey, Generation) {
        let id = PackageId::new(kind, name, "").unwrap();
        let key = id.key();
        let generation = self.next_generation(&key);
        let spec = UpdateSpec {
            id,
            repository: "/repo".into(),
            package: name.into(),
            version: VersionRequest::parse("1.0.0"),
            settings: json!({}),
            settings_version: 0,
            keep_settings: false,
            converted: None,
            force: false,
        };
        assert_eq!(
            self.write(Change::Update {
                spec: Box::new(spec),
                generation,
                principal: self.principal(&key),
                owner: Owner::Api,
            }),
            Ok(Outcome::Applied)
        );
        (key, generation)
    }

    fn report(&mut self, key: &PackageKey, g: Generation, fill: impl FnOnce(&mut Report)) {
        let mut report = Report::new(g);
        fill(&mut report);
        let outcome = self.write(Change::Report {
            key: key.clone(),
            generation: g,
            reports: vec![report],
        });
        assert_eq!(outcome, Ok(Outcome::Applied));
    }

    /// Reports `key` loaded with `requirements`.
    fn loaded(&mut self, key: &PackageKey, g: Generation, requirements: Requirements) {
        self.report(key, g, |r| {
            r.phase = Some(Phase::Loaded);
            r.settings_schema = Some(None);
            r.loaded = Some(LoadedSpec {
                version: Version::new(1, 0, 0),
                weight: 0,
                requirements,
                reads_global: false,
            });
        });
    }

    /// The work queued since the last call, as `key kind` (Supersedes left out).
    fn queued(&mut self) -> Vec<String> {
        std::mem::take(&mut self.outbox)
            .iter()
            .filter(|w| matches!(w, Work::Enqueue(_)))
            .map(Work::describe)
            .collect()
    }

    fn requirements_met(&self, key: &PackageKey) -> (ConditionStatus, String, String) {
        let c = find(&self.rows[key].conditions, ConditionType::RequirementsMet).unwrap();
        (c.status, c.reason.clone(), c.message.clone())
    }
}

fn needs(names: &[&str]) -> Requirements {
    Requirements {
        mandatory: names
            .iter()
            .map(|n| Dependency {
                name: (*n).into(),
                constraint: None,
            })
            .collect(),
        ..Default::default()
    }
}

fn conditional(names: &[&str]) -> Requirements {
    Requirements {
        conditional: needs(names).mandatory,
        ..Default::default()
    }
}

fn run_succeeded(r: &mut Report) {
    r.phase = Some(Phase::Running);
    r.run_succeeded = true;
}

/// A dependency reaching Running enables what waited on it in the same write, although that
/// package's row was not loaded for it (the pass named it; the write read it after); the
/// cluster's version gates too.
#[test]
fn a_pass_enables_packages_as_their_requirements_come_to_hold() {
    let mut db = Db::new();
    let (web, w) = db.install(Kind::App, "web");
    assert_eq!(db.queued(), ["default.web Load"]);
    let mut requirements = needs(&["db"]);
    requirements.kubernetes = Some(crate::scheduler::Constraint(
        berth_package::VersionConstraint::parse(">=1.30").unwrap(),
    ));
    db.loaded(&web, w, requirements);
    assert!(db.queued().is_empty());
    let (status, reason, message) = db.requirements_met(&web);
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::False, "KubernetesVersion")
    );
    assert!(message.contains("not known yet"), "{message}");
    assert_eq!(db.rows[&web].phase, Phase::Pending);

    let version = Version::new(1, 31, 0);
    assert_eq!(
        db.write(Change::ClusterVersion(version.clone())),
        Ok(Outcome::Applied)
    );
    assert_eq!(db.kubernetes, Some(version.clone()));
    assert_eq!(
        db.write(Change::ClusterVersion(version)),
        Ok(Outcome::Stale)
    );
    assert_eq!(
        db.requirements_met(&web).2,
        "requires db, which is not installed"
    );

    let (dbk, d) = db.install(Kind::App, "db");
    db.loaded(&dbk, d, Requirements::default());
    assert_eq!(db.queued(), ["default.db Load", "default.db Start"]);
    assert_eq!(
        db.requirements_met(&web).2,
        "requires db, which is not Running yet (default.db)"
    );
    db.report(&dbk, d, |r| r.phase = Some(Phase::Running));
    assert_eq!(db.queued(), ["default.web Start"]);
    assert_eq!(db.requirements_met(&web).0, ConditionStatus::True);
    assert!(db.rows[&web].enabled);

    // A new version starts over: Disable and Load, and the scheduler forgets the last load.
    let generation = db.next_generation(&web);
    let mut spec = UpdateSpec {
        id: db.rows[&web].id.clone(),
        repository: "/repo".into(),
        package: "web".into(),
        version: VersionRequest::parse("2.0.0"),
        settings: json!({}),
        settings_version: 0,
        keep_settings: false,
        converted: None,
        force: false,
    };
    assert_eq!(
        db.write(Change::Update {
            spec: Box::new(spec.clone()),
            generation,
            principal: db.principal(&web),
            owner: Owner::Api,
        }),
        Ok(Outcome::Applied)
    );
    assert_eq!(db.queued(), ["default.web Disable", "default.web Load"]);
    let (status, reason, _) = db.requirements_met(&web);
    assert_eq!(
        (status, reason.as_str()),
        (ConditionStatus::Unknown, "NotLoaded")
    );
    assert!(!db.rows[&web].enabled && db.rows[&web].loaded.is_none());
    // The same Update again changes nothing and answers the current generation.
    spec.version = VersionRequest::parse("2.0.0");
    let again = db.next_generation(&web);
    let unchanged = db.write(Change::Update {
        spec: Box::new(spec),
        generation: again,
        principal: db.principal(&web),
        owner: Owner::Api,
    });
    assert_eq!(unchanged, Ok(Outcome::Unchanged(generation)));
    assert_eq!(
        (db.rows[&web].principal, db.rows[&dbk].principal),
        (1, 2),
        "a key keeps its principal number"
    );
}

/// A Remove of a mandatory dependency is refused naming its dependents, unless forced; a
/// Cleanup deletes only the generation being removed, and the dependent then waits again.
#[test]
fn removes_guard_dependents_and_cleanups_delete_only_their_generation() {
    let mut db = Db::new();
    db.write(Change::ClusterVersion(Version::new(1, 31, 0)))
        .unwrap();
    let (dbk, d) = db.install(Kind::Module, "db");
    db.loaded(&dbk, d, Requirements::default());
    db.report(&dbk, d, |r| r.phase = Some(Phase::Running));
    let (web, w) = db.install(Kind::App, "web");
    db.loaded(&web, w, needs(&["db"]));
    db.queued();

    let g = db.next_generation(&dbk);
    let refused = db.write(Change::Remove {
        key: dbk.clone(),
        generation: g,
        force: false,
        owner: Owner::Api,
    });
    assert_eq!(
        refused.unwrap_err().to_string(),
        "db is a mandatory dependency of default.web; remove them first, or remove with force"
    );
    assert_eq!(db.rows[&dbk].generation, d, "nothing written");
    let g = db.next_generation(&dbk);
    let removed = db.write(Change::Remove {
        key: dbk.clone(),
        generation: g,
        force: true,
        owner: Owner::Api,
    });
    assert_eq!(removed, Ok(Outcome::Applied));
    assert_eq!(
        db.queued(),
        ["db Disable", "db Uninstall", "db Cleanup"],
        "web stays enabled for its generation"
    );
    assert_eq!(db.rows[&dbk].phase, Phase::Removing);

    let stale = Change::Delete {
        key: dbk.clone(),
        generation: d,
    };
    assert_eq!(db.write(stale), Ok(Outcome::Stale));
    let missing = Change::Remove {
        key: PackageKey::from_issued("nothing".into()),
        generation: Generation::new(1),
        force: false,
        owner: Owner::Api,
    };
    assert_eq!(db.write(missing), Ok(Outcome::Stale));
    let cleanup = Change::Delete {
        key: dbk.clone(),
        generation: g,
    };
    assert_eq!(db.write(cleanup), Ok(Outcome::Applied));
    assert!(!db.rows.contains_key(&dbk));
    // A report of the removed package's old generation is stale.
    let late = Change::Report {
        key: dbk,
        generation: g,
        reports: vec![Report::new(g)],
    };
    assert_eq!(db.write(late), Ok(Outcome::Stale));
}

/// The global package's afterAll is due once its Run succeeded, stays due while a package
/// ordered after it has not converged, and is enqueued once, in the write that makes the last
/// one Running (whose row is the one in hand, not the global package's), clearing the flag;
/// with everything converged already, the Run's own report enqueues it.
#[test]
fn after_all_waits_for_the_packages_ordered_after_the_global_package() {
    let mut db = Db::new();
    let (global, g) = db.install(Kind::Module, "global");
    db.loaded(&global, g, Requirements::default());
    let (nested, n) = db.install(Kind::Module, "nested");
    db.loaded(&nested, n, conditional(&["global"]));
    let (plain, p) = db.install(Kind::Module, "plain");
    db.loaded(&plain, p, Requirements::default());
    db.queued();
    assert!(!db.rows[&global].after_all_due);

    db.report(&global, g, run_succeeded);
    assert_eq!(
        db.queued(),
        ["nested Start"],
        "the afterAll waits for nested"
    );
    assert!(db.rows[&global].after_all_due);
    db.report(&plain, p, run_succeeded);
    assert!(
        db.queued().is_empty(),
        "plain does not wait for the global package"
    );
    db.report(&nested, n, |r| r.values = Some(json!({"nested": {}})));
    assert!(db.queued().is_empty(), "not Running yet");

    db.report(&nested, n, run_succeeded);
    assert_eq!(db.queued(), ["global AfterAll"]);
    assert!(!db.rows[&global].after_all_due, "cleared with the enqueue");
    db.report(&nested, n, run_succeeded);
    assert!(db.queued().is_empty(), "once per convergence");

    db.report(&global, g, run_succeeded);
    assert_eq!(
        db.queued(),
        ["global AfterAll"],
        "everything converged: at once"
    );
    assert!(!db.rows[&global].after_all_due);
}

/// A change of the global package's values runs the Running packages that read them, not the
/// others; values that stay as they were run nothing; deleting the global package runs them too.
#[test]
fn a_change_of_the_global_values_reruns_their_readers() {
    let mut db = Db::new();
    for (name, reads) in [("reader", true), ("plain", false)] {
        let (key, g) = db.install(Kind::App, name);
        db.report(&key, g, |r| {
            r.phase = Some(Phase::Loaded);
            r.settings_schema = Some(None);
            r.loaded = Some(LoadedSpec {
                version: Version::new(1, 0, 0),
                weight: 0,
                requirements: Requirements::default(),
                reads_global: reads,
            });
        });
        db.report(&key, g, |r| r.phase = Some(Phase::Running));
    }
    let (global, g) = db.install(Kind::Module, "global");
    db.loaded(&global, g, Requirements::default());
    db.queued();
    let set = |domain: &str| {
        let values = json!({"global": {"domain": domain}});
        move |r: &mut Report| {
            r.values = Some(values);
            r.patch_inside_run = true;
        }
    };
    db.report(&global, g, set("a"));
    assert_eq!(db.queued(), ["default.reader Run"]);
    db.report(&global, g, set("a"));
    assert!(db.queued().is_empty(), "unchanged");
    db.report(&global, g, set("b"));
    assert_eq!(db.queued(), ["default.reader Run"]);

    let r = db.next_generation(&global);
    let remove = Change::Remove {
        key: global.clone(),
        generation: r,
        force: false,
        owner: Owner::Api,
    };
    db.write(remove).unwrap();
    db.queued();
    db.write(Change::Delete {
        key: global,
        generation: r,
    })
    .unwrap();
    assert_eq!(db.queued(), ["default.reader Run"]);
}

/// A Load's reports converted from settings that are no longer the stored ones are refused,
/// all of them: nothing is written.
#[test]
fn reports_converted_from_other_settings_are_refused_whole() {
    let mut db = Db::new();
    let (web, w) = db.install(Kind::App, "web");
    let mut first = Report::new(w);
    first.error = Some("first".into());
    let mut load = Report::new(w);
    load.converted_from = Some((json!({"old": true}), 1));
    let refused = db.write(Change::Report {
        key: web.clone(),
        generation: w,
        reports: vec![first, load],
    });
    assert_eq!(
        refused,
        Err(Refused::SettingsChangedWhileConverted { key: web.clone() })
    );
    assert_eq!(db.rows[&web].last_error, "");
}

/// A package belongs to the front door that made it: the other's Updates, Removes and
/// suspensions are refused naming the owner, and nothing changes. A suspended package refuses
/// new generations (an identical Update is still answered) until it is resumed.
#[test]
fn packages_belong_to_their_front_door_and_suspended_ones_take_no_new_generation() {
    let mut db = Db::new();
    let resource = Owner::resource("Application default/web").unwrap();
    let id = PackageId::new(Kind::App, "web", "").unwrap();
    let web = id.key();
    let spec = |version: &str| UpdateSpec {
        id: id.clone(),
        repository: "/repo".into(),
        package: "web".into(),
        version: VersionRequest::parse(version),
        settings: json!({}),
        settings_version: 0,
        keep_settings: false,
        converted: None,
        force: false,
    };
    let update = |db: &mut Db, version: &str, owner: &Owner| {
        let generation = db.next_generation(&web);
        let principal = db.principal(&web);
        db.write(Change::Update {
            spec: Box::new(spec(version)),
            generation,
            principal,
            owner: owner.clone(),
        })
    };
    assert_eq!(update(&mut db, "1.0.0", &resource), Ok(Outcome::Applied));
    assert_eq!(db.rows[&web].owner, resource);
    let refused = update(&mut db, "2.0.0", &Owner::Api).unwrap_err();
    assert_eq!(
        refused.to_string(),
        "package default.web belongs to the berth.io resource Application default/web: change or remove it there"
    );
    let g = db.next_generation(&web);
    let remove = Change::Remove {
        key: web.clone(),
        generation: g,
        force: false,
        owner: Owner::Api,
    };
    assert!(matches!(db.write(remove), Err(Refused::OtherOwner { .. })));
    let suspend = |suspended, owner: &Owner| Change::Suspend {
        key: web.clone(),
        owner: owner.clone(),
        suspended,
    };
    assert!(matches!(
        db.write(suspend(true, &Owner::Api)),
        Err(Refused::OtherOwner { .. })
    ));
    assert!(!db.rows[&web].suspended && db.rows[&web].version.as_str() == "1.0.0");
    // Its own front door suspends it: new generations are refused, the same spec answered.
    assert_eq!(db.write(suspend(true, &resource)), Ok(Outcome::Applied));
    assert_eq!(
        db.write(suspend(true, &resource)),
        Ok(Outcome::Unchanged(Generation::new(1)))
    );
    assert!(matches!(
        update(&mut db, "2.0.0", &resource),
        Err(Refused::Suspended { .. })
    ));
    assert_eq!(
        update(&mut db, "1.0.0", &resource),
        Ok(Outcome::Unchanged(Generation::new(1)))
    );
    assert_eq!(db.write(suspend(false, &resource)), Ok(Outcome::Applied));
    assert_eq!(update(&mut db, "2.0.0", &resource), Ok(Outcome::Applied));
    // Another package of the API stays the API's.
    let other = PackageId::new(Kind::Module, "db", "").unwrap();
    let g = db.next_generation(&other.key());
    let p = db.principal(&other.key());
    db.write(Change::Update {
        spec: Box::new(UpdateSpec {
            id: other.clone(),
            ..spec("1.0.0")
        }),
        generation: g,
        principal: p,
        owner: Owner::Api,
    })
    .unwrap();
    assert_eq!(db.rows[&other.key()].owner, Owner::Api);
}
