//! The scheduler's passes, order and verdicts, in memory.

use std::collections::BTreeMap;

use berth_package::VersionConstraint;
use semver::Version;

use super::*;

fn dep(name: &str, constraint: Option<&str>) -> Dependency {
    Dependency {
        name: name.into(),
        constraint: constraint.map(|c| Constraint(VersionConstraint::parse(c).unwrap())),
    }
}

fn module(name: &str, weight: i64, mandatory: Vec<Dependency>, phase: Phase) -> Node {
    let phase = if phase == Phase::Loaded {
        Phase::Pending
    } else {
        phase
    };
    Node {
        id: PackageId::new(Kind::Module, name, "").unwrap(),
        generation: Generation::new(1),
        phase,
        removing: false,
        enabled: phase == Phase::Running,
        loaded: Some(LoadedSpec {
            version: Version::new(1, 2, 0),
            weight,
            requirements: Requirements {
                mandatory,
                ..Default::default()
            },
            reads_global: false,
        }),
        blocked: None,
        observed_generation: Generation::new(if phase == Phase::Running { 1 } else { 0 }),
        after_all_due: false,
    }
}

fn sched(nodes: Vec<Node>) -> Scheduler {
    let mut s = Scheduler::new(Version::new(0, 1, 0));
    s.set_kubernetes(Version::new(1, 31, 0));
    for n in nodes {
        s.upsert(n.id.key(), n);
    }
    s
}

fn key(s: &str) -> PackageKey {
    PackageKey::from_issued(s.into())
}

fn verdicts(s: &mut Scheduler) -> Vec<(String, String)> {
    s.pass()
        .into_iter()
        .map(|(k, v)| {
            let v = match v {
                Verdict::Enable => "Enable".to_owned(),
                Verdict::Wait(b) => format!("{}: {}", b.reason.as_str(), b.message),
            };
            (k.into_string(), v)
        })
        .collect()
}

#[test]
fn dependencies_come_first_then_weight_then_name() {
    let mut s = sched(vec![
        module("b", 10, vec![], Phase::Loaded),
        module("a", 20, vec![], Phase::Loaded),
        module("top", 1, vec![dep("a", None)], Phase::Loaded),
        module("c", 10, vec![], Phase::Loaded),
    ]);
    let order: Vec<String> = s.order().into_iter().map(|k| k.into_string()).collect();
    assert_eq!(order, ["b", "c", "a", "top"]);
    let v = verdicts(&mut s);
    let enabled: Vec<&str> = v
        .iter()
        .filter(|(_, v)| v == "Enable")
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(enabled, ["b", "c", "a"], "by weight, then name");
    assert!(v.contains(&(
        "top".into(),
        "Dependency: requires a, which is not Running yet".into()
    )));
}

#[test]
fn packages_ordered_after_one_follow_its_dependents_transitively() {
    let mut global = module("global", 0, vec![], Phase::Running);
    global.loaded.as_mut().unwrap().requirements.conditional = vec![];
    let mut nested = module("nested", 0, vec![], Phase::Loaded);
    nested.loaded.as_mut().unwrap().requirements.conditional = vec![dep("global", None)];
    let mut gone = module("gone", 0, vec![dep("global", None)], Phase::Loaded);
    gone.removing = true;
    let s = sched(vec![
        global,
        nested,
        gone,
        module("on-nested", 0, vec![dep("nested", None)], Phase::Loaded),
        module("flat", 0, vec![], Phase::Running),
    ]);
    assert_eq!(
        s.ordered_after(&key("global")),
        [key("nested"), key("on-nested")]
    );
    assert!(s.ordered_after(&key("flat")).is_empty());
}

#[test]
fn a_missing_or_old_dependency_waits_and_names_it() {
    let mut s = sched(vec![
        module("web", 0, vec![dep("db", None)], Phase::Loaded),
        module("api", 0, vec![dep("cache", Some(">=2"))], Phase::Loaded),
        module("cache", 0, vec![], Phase::Running),
    ]);
    let v = verdicts(&mut s);
    assert!(v.contains(&(
        "web".into(),
        "Dependency: requires db, which is not installed".into()
    )));
    assert!(v.contains(&(
        "api".into(),
        "Dependency: requires cache >=2, which runs version 1.2.0".into()
    )));
}

#[test]
fn a_cycle_is_spelled_out_for_each_member() {
    let mut s = sched(vec![
        module("a", 0, vec![dep("b", None)], Phase::Loaded),
        module("b", 0, vec![dep("c", None)], Phase::Loaded),
        module("c", 0, vec![dep("a", None)], Phase::Loaded),
        module("d", 0, vec![dep("a", None)], Phase::Loaded),
    ]);
    let v: BTreeMap<String, String> = verdicts(&mut s).into_iter().collect();
    assert_eq!(v["a"], "Cycle: dependency cycle: a → b → c → a");
    assert_eq!(v["b"], "Cycle: dependency cycle: b → c → a → b");
    assert_eq!(v["d"], "Dependency: requires a, which is not Running yet");
}

#[test]
fn version_gates_name_the_version_seen() {
    let mut n = module("k", 0, vec![], Phase::Loaded);
    n.loaded.as_mut().unwrap().requirements.kubernetes =
        Some(Constraint(VersionConstraint::parse(">=99").unwrap()));
    let mut p = module("p", 0, vec![], Phase::Loaded);
    p.loaded.as_mut().unwrap().requirements.platform =
        Some(Constraint(VersionConstraint::parse(">=5").unwrap()));
    let mut s = sched(vec![n.clone(), p]);
    let v: BTreeMap<String, String> = verdicts(&mut s).into_iter().collect();
    assert_eq!(
        v["k"],
        "KubernetesVersion: requires Kubernetes >=99, the cluster runs 1.31.0"
    );
    assert_eq!(
        v["p"],
        "PlatformVersion: requires berth >=5, this is berth 0.1.0"
    );
    s.kubernetes = None;
    assert!(matches!(s.verdict(&n, None), Verdict::Wait(b) if b.message.contains("not known yet")));
}

#[test]
fn any_of_and_none_of_gate_without_edges() {
    let mut n = module("x", 0, vec![], Phase::Loaded);
    let r = &mut n.loaded.as_mut().unwrap().requirements;
    r.any_of = vec![Group {
        name: "storage".into(),
        members: vec![dep("s3", None), dep("disk", None)],
    }];
    let mut s = sched(vec![n.clone()]);
    assert!(verdicts(&mut s)[0].1.contains("requires one of s3, disk"));
    let mut s = sched(vec![n.clone(), module("disk", 0, vec![], Phase::Running)]);
    assert_eq!(verdicts(&mut s), [("x".into(), "Enable".into())]);
    n.loaded.as_mut().unwrap().requirements.none_of = vec![Group {
        name: "legacy".into(),
        members: vec![dep("old", None)],
    }];
    let mut s = sched(vec![
        n,
        module("disk", 0, vec![], Phase::Running),
        module("old", 0, vec![], Phase::Loaded),
    ]);
    let v: BTreeMap<String, String> = verdicts(&mut s).into_iter().collect();
    assert_eq!(
        v["x"],
        "Conflict: conflicts with old 1.2.0 (noneOf \"legacy\")"
    );
}

#[test]
fn apps_resolve_modules_then_apps_in_their_namespace() {
    let mut app = module("web", 0, vec![dep("db", None)], Phase::Loaded);
    app.id = PackageId::new(Kind::App, "web", "shop").unwrap();
    let mut db = module("db", 0, vec![], Phase::Running);
    db.id = PackageId::new(Kind::App, "db", "shop").unwrap();
    let mut other = db.clone();
    other.id = PackageId::new(Kind::App, "db", "elsewhere").unwrap();
    let mut s = sched(vec![app.clone(), other]);
    assert!(verdicts(&mut s)[0].1.contains("not installed"));
    let mut s = sched(vec![app, db]);
    assert_eq!(verdicts(&mut s), [("shop.web".into(), "Enable".into())]);
    assert_eq!(s.dependents(&key("shop.db")), [key("shop.web")]);
}

#[test]
fn an_unchanged_wait_is_not_reported_again() {
    let mut s = sched(vec![module("web", 0, vec![dep("db", None)], Phase::Loaded)]);
    let (k, v) = s.pass().remove(0);
    s.settle(&k, &v);
    assert!(s.pass().is_empty());
}

/// Passes evaluate only what changed, yet see every change: a cycle closed by a later
/// load, broken by a removal, and a dependency reaching Running.
#[test]
fn incremental_passes_follow_every_change() {
    let mut s = sched(vec![module("a", 0, vec![dep("b", None)], Phase::Loaded)]);
    let settle = |s: &mut Scheduler| {
        let out = s.pass();
        for (k, v) in &out {
            s.settle(k, v);
        }
        out.into_iter()
            .map(|(k, v)| match v {
                Verdict::Enable => (k.into_string(), "Enable".to_owned()),
                Verdict::Wait(b) => (
                    k.into_string(),
                    format!("{}: {}", b.reason.as_str(), b.message),
                ),
            })
            .collect::<Vec<_>>()
    };
    let first = s.pass();
    for (k, v) in &first {
        s.settle(k, v);
    }
    assert!(s.pass().is_empty(), "nothing changed");
    let b = module("b", 0, vec![dep("a", None)], Phase::Loaded);
    s.upsert(key("b"), b.clone());
    let mut v = s.pass();
    v.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(v.len(), 2);
    assert!(
        v.iter()
            .all(|(_, v)| matches!(v, Verdict::Wait(b) if b.reason == Reason::Cycle))
    );
    for (k, v) in &v {
        s.settle(k, v);
    }
    s.remove(&key("b"));
    assert_eq!(
        settle(&mut s),
        [(
            "a".into(),
            "Dependency: requires b, which is not installed".into()
        )]
    );
    assert!(s.pass().is_empty(), "settled");
    s.upsert(key("b"), module("b", 0, vec![], Phase::Running));
    assert_eq!(settle(&mut s), [("a".into(), "Enable".into())]);
}

/// What only the global afterAll reads (a package's last Running generation, the due flag)
/// changes no verdict, so recording it marks nothing for the next pass; a scheduling fact does.
#[test]
fn after_all_facts_mark_nothing_for_the_next_pass() {
    let mut s = sched(vec![module("web", 0, vec![dep("db", None)], Phase::Loaded)]);
    let (k, v) = s.pass().remove(0);
    s.settle(&k, &v);
    let mut web = s.node(&key("web")).unwrap().clone();
    web.observed_generation = Generation::new(7);
    web.after_all_due = true;
    s.upsert(key("web"), web.clone());
    assert!(s.dirty.is_empty() && !s.all_dirty);
    assert_eq!(s.node(&key("web")), Some(&web), "recorded all the same");
    web.phase = Phase::Failed;
    s.upsert(key("web"), web);
    assert!(s.dirty.contains(&key("web")));
}

#[test]
fn kubernetes_versions_drop_provider_suffixes() {
    assert_eq!(
        kubernetes_version("v1.31.2+k3s1"),
        Some(Version::new(1, 31, 2))
    );
    assert_eq!(
        kubernetes_version("v1.30.4-gke.1"),
        Some(Version::new(1, 30, 4))
    );
    assert_eq!(kubernetes_version("garbage"), None);
}
