//! addon-operator's values layout and global hooks, end to end (issue 14, points 3 and 4):
//! a Global package (global hooks and values) and nested modules, through the public API,
//! on the dev cluster or the real one of `BERTH_TEST_KUBECONFIG`.

use std::time::Duration;

use anyhow::{Context, bail};
use berth_proto::v1;
use berth_tests::{SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};

/// Longest a reaction (a hook run, a re-render) may take to become visible.
const REACT_DEADLINE: Duration = Duration::from_secs(90);

fn module(name: &str) -> v1::PackageRef {
    v1::PackageRef {
        kind: v1::PackageKind::Module as i32,
        name: name.into(),
        namespace: String::new(),
    }
}

async fn install(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    settings: Value,
) -> anyhow::Result<v1::Package> {
    let generation = update(client, r, settings).await?;
    journey::wait_running(client, r, generation).await
}

/// Sends the Update and returns its generation, without waiting.
async fn update(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    settings: Value,
) -> anyhow::Result<i64> {
    let accepted = client
        .update(v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: berth_tests::FIXTURES_REPO.to_owned(),
            package: String::new(),
            version: "1.0.0".into(),
            settings: Some(berth_proto::json::to_struct(&settings)),
            force: false,
            settings_version: 0,
            reset_settings: false,
        })
        .await?
        .into_inner();
    Ok(accepted.generation)
}

async fn remove(client: &mut journey::Client, r: &v1::PackageRef) -> anyhow::Result<()> {
    client
        .remove(v1::RemoveRequest {
            r#ref: Some(r.clone()),
            ..Default::default()
        })
        .await?;
    journey::wait_gone(client, r).await
}

fn json_of(s: Option<&prost_types::Struct>) -> Value {
    s.map(berth_proto::json::from_struct).unwrap_or(Value::Null)
}

async fn get(client: &mut journey::Client, r: &v1::PackageRef) -> anyhow::Result<v1::Package> {
    Ok(client
        .get(v1::GetRequest {
            r#ref: Some(r.clone()),
        })
        .await?
        .into_inner())
}

/// Follows the package until `done` holds (bounded); returns what it saw last on failure.
async fn wait_package(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    what: &str,
    done: impl Fn(&v1::Package) -> bool,
) -> anyhow::Result<v1::Package> {
    journey::follow(client, r, REACT_DEADLINE, what, |p| Ok(done(p))).await
}

/// Polls the ConfigMap `name` in `ns` until `check` holds on its data (bounded).
async fn wait_configmap(
    cms: &Api<ConfigMap>,
    name: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + REACT_DEADLINE;
    let mut last = Value::Null;
    loop {
        if let Some(cm) = cms.get_opt(name).await? {
            last = serde_json::to_value(cm.data.unwrap_or_default())?;
            if check(&last) {
                return Ok(last);
            }
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{what}: not within {REACT_DEADLINE:?}; last data: {last}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn hook_runs(p: &v1::Package, hook: &str) -> i64 {
    p.hooks
        .iter()
        .find(|h| h.name == hook)
        .map_or(0, |h| h.runs)
}

/// A Global package and nested modules:
/// - the global hooks run onStartup, then beforeAll, patching `/global/...`, and `berth get
///   global` shows the global values, settings and hooks; a nested module updated together
///   with it waits for it, so its first run already sees the global values;
/// - the global afterAll hooks run after that nested module's first run (as addon-operator
///   runs afterAll once all modules converged): its first run saw beforeAll's change and not
///   afterAll's, and afterAll's change of the global values runs it again;
/// - a module whose values.yaml keeps its values under its camelCase name is nested: its
///   templates read `.Values.nestedReader.*` and `.Values.global.*` (global values and global
///   settings), its hook patches `/nestedReader/...`, sees the global values in `VALUES_PATH`,
///   and its config values patch becomes its settings;
/// - a global hook bound to ConfigMaps changes a global value: the module whose chart reads
///   the global values renders again with it; the nested module whose chart does not is not
///   run again;
/// - a module's hook that patches `/global/...` fails with an error that says whose they are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_hooks_and_nested_values() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = journey(&topology.gateway.endpoint(), cluster.client.clone()).await;
    topology.stop().await;
    cluster.stop().await;
    result
}

async fn journey(endpoint: &str, kube: kube::Client) -> anyhow::Result<()> {
    let ns = TestNamespace::create(&kube, "global").await?;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let mut client = journey::connect(endpoint).await?;
    let (global, reader, plain, intruder) = (
        module("global"),
        module("nested-reader"),
        module("nested-plain"),
        module("nested-intruder"),
    );

    // The global package: its hooks ran in order, its values are the global section. The
    // nested module updated right after it waits until it is Running (beforeAll is slow, so
    // the module is loaded and waiting by then); the afterAll hook runs after the module's
    // first run.
    let global_generation = update(&mut client, &global, json!({"clusterName": "test"})).await?;
    let reader_generation =
        update(&mut client, &reader, json!({"namespace": ns.to_string()})).await?;
    journey::wait_running(&mut client, &global, global_generation).await?;
    let g = wait_package(&mut client, &global, "the global hooks' runs", |p| {
        json_of(p.values.as_ref())["global"]["ran"]
            .as_array()
            .is_some_and(|r| r.len() >= 3)
    })
    .await?;
    let values = json_of(g.values.as_ref());
    assert_eq!(
        values["global"]["ran"].as_array().expect("ran")[..3],
        [json!("onStartup"), json!("beforeAll"), json!("afterAll")],
        "{values}"
    );
    assert_eq!(
        values["global"]["clusterDomain"], "cluster.local",
        "{values}"
    );
    assert_eq!(values["global"]["clusterName"], "test", "{values}");
    assert_eq!(
        values.as_object().map(|o| o.len()),
        Some(1),
        "only the global section: {values}"
    );
    let names: Vec<&str> = g.hooks.iter().map(|h| h.name.as_str()).collect();
    assert!(
        names.iter().any(|n| n.contains("order.sh"))
            && names.iter().any(|n| n.contains("domain.sh")),
        "{names:?}"
    );

    // A nested module reading its own section and the global one. Its first run saw the global
    // values after beforeAll and before afterAll; afterAll's patch of the global values ran it
    // again (its chart reads them).
    let p = journey::wait_running(&mut client, &reader, reader_generation).await?;
    let data = wait_configmap(
        &cms,
        "nested-reader",
        "the nested module's ConfigMap",
        |d| d["replicas"] == "2",
    )
    .await?;
    assert_eq!(
        data,
        json!({"greeting": "hello", "token": "from-hook", "replicas": "2",
               "domain": "cluster.local", "clusterName": "test"})
    );
    let p = wait_package(
        &mut client,
        &reader,
        "the config patch in the settings and the run after afterAll",
        |p| {
            json_of(p.settings.as_ref())["replicas"] == 2
                && json_of(p.values.as_ref())["nestedReader"]["internal"]["seen"]
                    .as_array()
                    .is_some_and(|s| s.len() >= 2)
        },
    )
    .await
    .with_context(|| format!("first seen: {p:?}"))?;
    let values = json_of(p.values.as_ref());
    assert_eq!(
        values["nestedReader"]["internal"],
        json!({"token": "from-hook", "sawGlobal": "cluster.local",
               "seen": ["cluster.local|onStartup,beforeAll",
                        "cluster.local|onStartup,beforeAll,afterAll"]}),
        "its first run came after beforeAll and before afterAll, its second after afterAll: {values}"
    );
    assert_eq!(
        values["global"]["clusterDomain"], "cluster.local",
        "{values}"
    );
    assert!(
        values.get("greeting").is_none(),
        "nested, not flat: {values}"
    );

    // An addon-operator module as addon-operator lays it out: no package.yaml, its Chart.yaml
    // names it, and its values are nested.
    let ao = module("ao-module");
    install(&mut client, &ao, json!({"namespace": ns.to_string()})).await?;
    let data = wait_configmap(
        &cms,
        "ao-module",
        "the addon-operator module's ConfigMap",
        |d| d["fromHook"] == "yes",
    )
    .await?;
    assert_eq!(
        data,
        json!({"message": "from-values", "fromHook": "yes", "domain": "cluster.local"})
    );

    // A nested module that does not read the global values.
    install(&mut client, &plain, json!({"namespace": ns.to_string()})).await?;
    let plain_runs = {
        let p = wait_package(&mut client, &plain, "nested-plain's first run", |p| {
            json_of(p.values.as_ref())["nestedPlain"]["runs"] == 1
        })
        .await?;
        hook_runs(&p, "count.sh")
    };
    assert!(plain_runs >= 1);

    // A global hook changes a global value: the reader renders again with it.
    let reader_runs = hook_runs(&get(&mut client, &reader).await?, "setup.sh");
    let input: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "global-input", "labels": {"berth.test/global-input": "true"}},
        "data": {"domain": "example.org"},
    }))?;
    cms.create(&PostParams::default(), &input).await?;
    wait_configmap(
        &cms,
        "nested-reader",
        "the re-render with the new global value",
        |d| d["domain"] == "example.org",
    )
    .await?;
    wait_configmap(
        &cms,
        "ao-module",
        "the addon-operator module's re-render",
        |d| d["domain"] == "example.org",
    )
    .await?;
    let g = get(&mut client, &global).await?;
    assert_eq!(
        json_of(g.values.as_ref())["global"]["clusterDomain"],
        "example.org"
    );
    let p = wait_package(&mut client, &reader, "the reader's hook saw it", |p| {
        json_of(p.values.as_ref())["nestedReader"]["internal"]["sawGlobal"] == "example.org"
    })
    .await?;
    assert!(hook_runs(&p, "setup.sh") > reader_runs);
    // Let the reader settle (its Run is done once Running again), then the plain module has
    // not run since: its chart does not read the global values.
    journey::wait_running(&mut client, &reader, p.generation).await?;
    let now = get(&mut client, &plain).await?;
    assert_eq!(
        hook_runs(&now, "count.sh"),
        plain_runs,
        "nested-plain ran again: {now:?}"
    );
    assert_eq!(json_of(now.values.as_ref())["nestedPlain"]["runs"], 1);

    // A module's hook may not write the global values.
    client
        .update(v1::UpdateRequest {
            r#ref: Some(intruder.clone()),
            repository: berth_tests::FIXTURES_REPO.to_owned(),
            version: "1.0.0".into(),
            ..Default::default()
        })
        .await?;
    let p = wait_package(&mut client, &intruder, "the intruder's error", |p| {
        !p.last_error.is_empty()
    })
    .await?;
    assert!(
        p.last_error.contains("/global/clusterDomain") && p.last_error.contains("/nestedIntruder/"),
        "{}",
        p.last_error
    );
    let g = get(&mut client, &global).await?;
    assert_eq!(
        json_of(g.values.as_ref())["global"]["clusterDomain"],
        "example.org",
        "unchanged"
    );

    for r in [&intruder, &plain, &ao, &reader, &global] {
        remove(&mut client, r).await?;
    }
    Ok(())
}

/// A package's hook bound to beforeAll (a global hooks' binding) is refused when the package
/// loads, naming the hook and the binding, instead of silently never running; the hook never
/// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_package_hook_bound_to_before_all_is_refused_at_load() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = async {
        let ns = TestNamespace::create(&cluster.client, "misbound").await?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "misbound".into(),
            namespace: ns.to_string(),
        };
        let generation = update(&mut client, &r, json!({})).await?;
        let failed = wait_package(&mut client, &r, "Failed at Load", |p| {
            p.phase == "Failed" && p.generation == generation
        })
        .await?;
        anyhow::ensure!(
            failed.last_error.contains("before-all.sh (beforeAll)")
                && failed.last_error.contains("global hooks' bindings"),
            "{failed:?}"
        );
        anyhow::ensure!(
            json_of(failed.values.as_ref()).get("ran").is_none(),
            "the hook never ran: {:?}",
            failed.values
        );
        remove(&mut client, &r).await
    }
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}
