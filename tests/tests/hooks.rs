//! Hooks bound to Kubernetes objects, end to end: real hook scripts in a fixture package, real
//! berth processes, and the dev cluster (or the real cluster named by `BERTH_TEST_KUBECONFIG`).

use std::time::Duration;

use anyhow::{Context, bail};
use berth_proto::v1;
use berth_tests::{SplitTopology, TestCluster, TestNamespace, journey};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// Longest a hook reaction may take to become visible.
const REACT_DEADLINE: Duration = Duration::from_secs(60);

/// The fixtures' repository, as an Update names it (relative to the harness's repository root).
fn fixtures() -> String {
    berth_tests::FIXTURES_REPO.to_owned()
}

/// A fresh labelled namespace, deleted from a real cluster when dropped (whatever the outcome).
async fn namespace(kube: &kube::Client) -> anyhow::Result<TestNamespace> {
    Ok(TestNamespace::create(kube, "hooks").await?)
}

fn configmap(name: &str, labels: Value, data: Value) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": data}),
    )?)
}

/// Follows the package until `done(seen)` holds; fails on a hook error.
async fn wait_seen(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> anyhow::Result<Vec<String>> {
    let p = wait_package(client, r, what, |p| done(&journey::seen(p))).await?;
    Ok(journey::seen(&p))
}

/// The package's values as JSON.
fn values(p: &v1::Package) -> Value {
    p.values
        .as_ref()
        .map(berth_proto::json::from_struct)
        .unwrap_or(Value::Null)
}

/// Follows the package until `done(package)` holds; fails on a hook error.
async fn wait_package(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    what: &str,
    done: impl Fn(&v1::Package) -> bool,
) -> anyhow::Result<v1::Package> {
    journey::follow(client, r, REACT_DEADLINE, what, |p| {
        if let Some(h) = p.hooks.iter().find(|h| !h.last_error.is_empty()) {
            bail!("hook {} failed: {}", h.name, h.last_error);
        }
        Ok(done(p))
    })
    .await
}

/// Follows the package until it reports an error, and returns it (bounded).
async fn wait_error(client: &mut journey::Client, r: &v1::PackageRef) -> anyhow::Result<String> {
    let p = journey::follow(client, r, REACT_DEADLINE, "an error", |p| {
        Ok(!p.last_error.is_empty())
    })
    .await?;
    Ok(p.last_error)
}

/// Polls the cluster until `check` holds (bounded).
async fn wait_cluster<F, Fut>(what: &str, check: F) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + REACT_DEADLINE;
    while !check().await? {
        if tokio::time::Instant::now() >= deadline {
            bail!("{what}: not within {REACT_DEADLINE:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// A kubernetes binding sees Synchronization (before onStartup) with the existing objects, then
/// Added/Modified/Deleted events with the jqFilter's result; changes that leave the filter result
/// unchanged fire nothing; the hook's object operations mirror the ConfigMaps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubernetes_binding_synchronization_events_and_object_operations() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result =
        kubernetes_binding_journey(&topology.gateway.endpoint(), cluster.client.clone()).await;
    topology.stop().await;
    cluster.stop().await;
    result
}

async fn kubernetes_binding_journey(endpoint: &str, kube: kube::Client) -> anyhow::Result<()> {
    let ns = namespace(&kube).await?;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let pp = PostParams::default();
    cms.create(
        &pp,
        &configmap("pre", json!({"app": "watched"}), json!({"v": "1"}))?,
    )
    .await?;
    cms.create(
        &pp,
        &configmap("ignored", json!({"app": "other"}), json!({"v": "x"}))?,
    )
    .await?;

    let mut client = journey::connect(endpoint).await?;
    let r = v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: "watcher".into(),
        namespace: ns.to_string(),
    };
    let accepted = client
        .update(v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: fixtures(),
            version: "1.0.0".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    journey::wait_running(&mut client, &r, accepted.generation).await?;

    // Synchronization saw the existing watched ConfigMap (not the other one), before onStartup.
    let s = wait_seen(&mut client, &r, "Synchronization and onStartup", |s| {
        s.len() >= 2
    })
    .await?;
    assert_eq!(
        s[..2],
        [
            "Synchronization:cms:pre=1".to_owned(),
            "onStartup".to_owned()
        ],
        "{s:?}"
    );
    let mirror = |name: &'static str, v: &'static str| {
        let cms = cms.clone();
        move || {
            let cms = cms.clone();
            async move {
                let cm = cms.get_opt(&format!("{name}-mirror")).await?;
                Ok(cm
                    .and_then(|c| c.data)
                    .and_then(|d| d.get("v").cloned())
                    .as_deref()
                    == Some(v))
            }
        }
    };
    wait_cluster(
        "pre-mirror created by the Synchronization run",
        mirror("pre", "1"),
    )
    .await?;

    // Added.
    cms.create(
        &pp,
        &configmap("a", json!({"app": "watched"}), json!({"v": "a"}))?,
    )
    .await?;
    wait_seen(&mut client, &r, "Added", |s| {
        s.contains(&"Event:Added:a:a".to_owned())
    })
    .await?;
    wait_cluster("a-mirror created by the Added run", mirror("a", "a")).await?;

    // A change outside the filter result fires nothing; a change inside fires Modified.
    let merge = |data: Value| Patch::Merge(json!({"data": data}));
    cms.patch(
        "a",
        &PatchParams::default(),
        &merge(json!({"other": "ignored"})),
    )
    .await?;
    cms.patch("a", &PatchParams::default(), &merge(json!({"v": "b"})))
        .await?;
    let s = wait_seen(&mut client, &r, "Modified", |s| {
        s.contains(&"Event:Modified:a:b".to_owned())
    })
    .await?;
    let after_added: Vec<&String> = s
        .iter()
        .skip_while(|x| *x != "Event:Added:a:a")
        .skip(1)
        .collect();
    assert_eq!(
        after_added,
        ["Event:Modified:a:b"],
        "the unrelated change was dropped: {s:?}"
    );
    wait_cluster("a-mirror updated", mirror("a", "b")).await?;

    // Deleted.
    cms.delete("a", &DeleteParams::default()).await?;
    wait_seen(&mut client, &r, "Deleted", |s| {
        s.contains(&"Event:Deleted:a:b".to_owned())
    })
    .await?;
    wait_cluster("a-mirror deleted by the Deleted run", || {
        let cms = cms.clone();
        async move { Ok(cms.get_opt("a-mirror").await?.is_none()) }
    })
    .await?;
    // Converging again (a forced Update of the same spec) keeps the bindings, and their
    // events still reach the hook.
    let again = client
        .update(v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: fixtures(),
            version: "1.0.0".into(),
            force: true,
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(again.generation > accepted.generation);
    journey::wait_running(&mut client, &r, again.generation).await?;
    cms.create(
        &pp,
        &configmap("b", json!({"app": "watched"}), json!({"v": "b"}))?,
    )
    .await?;
    wait_seen(&mut client, &r, "Added after a forced Update", |s| {
        s.contains(&"Event:Added:b:b".to_owned())
    })
    .await?;

    // Objects outside the label selector never reached the hook.
    let s = wait_seen(&mut client, &r, "final values", |_| true).await?;
    assert!(!s.iter().any(|x| x.contains("ignored")), "{s:?}");

    client
        .remove(v1::RemoveRequest {
            r#ref: Some(r.clone()),
            ..Default::default()
        })
        .await?;
    journey::wait_gone(&mut client, &r).await?;
    Ok(())
}

/// A hook whose object-operations file has an unknown key fails with an error naming the key,
/// and none of its operations (not even the valid one before it) is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_object_operations_apply_nothing() -> anyhow::Result<()> {
    refused_operations("badops", &["bad.sh", "colour"]).await
}

/// An object operation whose name would change the request's URL (`..`, `/`, `?`) is refused
/// with the name in the error, and nothing of its batch is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_names_that_would_change_the_url_are_refused() -> anyhow::Result<()> {
    refused_operations(
        "urlops",
        &["escape.sh", "may not contain '/'", "../../kube-system"],
    )
    .await
}

/// Installs the fixture `package`, whose onStartup hook writes a CreateOrUpdate of
/// `must-not-exist` followed by a bad operation: the run fails with an error containing every
/// one of `needles`, nothing of the batch is applied, and the package can still be removed.
async fn refused_operations(package: &str, needles: &[&str]) -> anyhow::Result<()> {
    with_topology(&[], |endpoint, kube| async move {
        let ns = namespace(&kube).await?;
        let mut client = journey::connect(&endpoint).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: package.into(),
            namespace: ns.to_string(),
        };
        client
            .update(v1::UpdateRequest {
                r#ref: Some(r.clone()),
                repository: fixtures(),
                version: "1.0.0".into(),
                ..Default::default()
            })
            .await?;
        let error = wait_error(&mut client, &r).await?;
        assert!(
            needles.iter().all(|n| error.contains(n)),
            "the error names the hook and what is wrong ({needles:?}): {error}"
        );
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        assert!(
            cms.get_opt("must-not-exist").await?.is_none(),
            "nothing of the batch was applied"
        );
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                ..Default::default()
            })
            .await?;
        journey::wait_gone(&mut client, &r).await
    })
    .await
}

/// Starts a cluster and the split topology (the worker with `worker_args`), runs `journey` with
/// the gateway endpoint and a kube client, and stops everything whatever the outcome.
async fn with_topology<F, Fut>(worker_args: &[&str], journey: F) -> anyhow::Result<()>
where
    F: FnOnce(String, kube::Client) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start_with(&cluster.kubeconfig, dir.path(), worker_args).await?;
    let result = journey(topology.gateway.endpoint(), cluster.client.clone()).await;
    topology.stop().await;
    cluster.stop().await;
    result
}

fn app(name: &str, ns: &str) -> v1::PackageRef {
    v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: name.into(),
        namespace: ns.into(),
    }
}

/// An Update of the fixture package `package` as the instance `r`.
fn update(
    r: &v1::PackageRef,
    repository: &str,
    package: &str,
    settings: Option<Value>,
) -> v1::UpdateRequest {
    v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: repository.to_owned(),
        package: package.to_owned(),
        version: "1.0.0".into(),
        settings: settings.as_ref().map(berth_proto::json::to_struct),
        force: false,
        settings_version: 0,
        reset_settings: false,
    }
}

/// Removes the package and waits until it is gone (its namespace's guard deletes the namespace).
async fn remove(client: &mut journey::Client, r: &v1::PackageRef) -> anyhow::Result<()> {
    client
        .remove(v1::RemoveRequest {
            r#ref: Some(r.clone()),
            ..Default::default()
        })
        .await?;
    journey::wait_gone(client, r).await
}

/// Whether any live (not zombie) process is in process group `pgid`, from `/proc`.
fn group_alive(pgid: i32) -> anyhow::Result<bool> {
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        if !entry
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit())
        {
            continue;
        }
        // A process may exit between read_dir and read: that is "not alive".
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp …`; comm may contain spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if let [state, _ppid, pgrp, ..] = fields[..]
            && pgrp == pgid.to_string()
            && state != "Z"
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Polls until process group `pgid` is gone; returns how long that took from `since`.
async fn wait_group_gone(
    pgid: i32,
    since: tokio::time::Instant,
    limit: Duration,
) -> anyhow::Result<Duration> {
    while group_alive(pgid)? {
        if since.elapsed() > limit {
            bail!(
                "process group {pgid} still alive {:?} after it should have been killed",
                since.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(since.elapsed())
}

/// The pids the sleeper hook recorded, one per run.
fn recorded_pids(path: &std::path::Path) -> anyhow::Result<Vec<i32>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(e.into()),
    };
    text.lines()
        .map(|l| {
            l.trim()
                .parse::<i32>()
                .with_context(|| format!("pid line {l:?}"))
        })
        .collect()
}

/// Waits until the sleeper hook has recorded at least `n` runs.
async fn wait_pids(path: &std::path::Path, n: usize) -> anyhow::Result<Vec<i32>> {
    let deadline = tokio::time::Instant::now() + REACT_DEADLINE;
    loop {
        let pids = recorded_pids(path)?;
        if pids.len() >= n {
            return Ok(pids);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "the hook recorded {} runs, expected {n}, within {REACT_DEADLINE:?}",
                pids.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A hook that never exits is killed at the worker's `--hook-timeout`: the package reports the
/// timeout naming the hook, and the hook's whole process group (the hook and its child) is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_hook_is_killed_at_its_timeout() -> anyhow::Result<()> {
    with_topology(&["--hook-timeout", "2"], |endpoint, kube| async move {
        let ns = namespace(&kube).await?;
        let pids = berth_tests::hook_writable_dir()?;
        let pid_file = pids.path().join("pids");
        let mut client = journey::connect(&endpoint).await?;
        let r = app("sleeper", &ns);
        let settings = json!({"pidFile": pid_file.display().to_string(), "mode": "hang"});
        client
            .update(update(&r, &fixtures(), "", Some(settings)))
            .await?;
        let started = wait_pids(&pid_file, 1).await?;
        let error = wait_error(&mut client, &r).await?;
        assert!(
            error.contains("hang.sh") && error.contains("timed out after 2s"),
            "the error names the hook and the timeout: {error}"
        );
        // The group was killed before the failure was reported; allow the kernel a moment to reap.
        wait_group_gone(
            started[0],
            tokio::time::Instant::now(),
            Duration::from_secs(1),
        )
        .await?;
        remove(&mut client, &r).await
    })
    .await
}

/// An Update while a hook of the previous generation is running cancels it: the hook's process
/// group is gone within one second of the Update returning, and the new generation converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_cancels_a_running_hook_within_one_second() -> anyhow::Result<()> {
    with_topology(&[], |endpoint, kube| async move {
        let ns = namespace(&kube).await?;
        let pids = berth_tests::hook_writable_dir()?;
        let pid_file = pids.path().join("pids");
        let mut client = journey::connect(&endpoint).await?;
        let r = app("sleeper", &ns);
        let settings =
            |mode: &str| json!({"pidFile": pid_file.display().to_string(), "mode": mode});
        let first = client
            .update(update(&r, &fixtures(), "", Some(settings("hang"))))
            .await?
            .into_inner();
        let hung = wait_pids(&pid_file, 1).await?[0];
        assert!(group_alive(hung)?, "the hung hook is running");

        let second = client
            .update(update(&r, &fixtures(), "", Some(settings("pass"))))
            .await?
            .into_inner();
        let returned = tokio::time::Instant::now();
        assert!(second.generation > first.generation);
        let took = wait_group_gone(hung, returned, Duration::from_secs(5)).await?;
        eprintln!("the running hook's process group was gone {took:?} after the Update returned");
        assert!(
            took <= Duration::from_secs(1),
            "the running hook was cancelled {took:?} after the Update (limit 1s)"
        );

        let running = journey::wait_running(&mut client, &r, second.generation).await?;
        assert_eq!(
            values(&running)["passed"],
            json!(true),
            "the new generation's hook ran: {:?}",
            values(&running)
        );
        let all = recorded_pids(&pid_file)?;
        assert_eq!(
            all.len(),
            2,
            "one cancelled run and one passing run: {all:?}"
        );
        remove(&mut client, &r).await
    })
    .await
}

/// A schedule with `includeSnapshotsFrom` sees the current snapshot of a kubernetes binding that
/// never runs the hook itself; a group of two kubernetes bindings is synchronized in one run,
/// and gives Group contexts carrying the snapshots of both, whichever binding fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_with_snapshots_and_group_bindings() -> anyhow::Result<()> {
    with_topology(&[], |endpoint, kube| async move {
        let ns = namespace(&kube).await?;
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        let pp = PostParams::default();
        cms.create(&pp, &configmap("snap-a", json!({"app": "snap"}), json!({}))?).await?;
        cms.create(&pp, &configmap("other", json!({"app": "other"}), json!({}))?).await?;
        let mut client = journey::connect(&endpoint).await?;
        let r = app("snapshots", &ns);
        let accepted = client.update(update(&r, &fixtures(), "", None)).await?.into_inner();
        journey::wait_running(&mut client, &r, accepted.generation).await?;

        let at = |key: &'static str, want: &'static str| move |p: &v1::Package| values(p)[key] == json!(want);
        wait_package(&mut client, &r, "a schedule run with the snapshot", at("schedule", "tick:snap-a")).await?;
        let p = wait_package(&mut client, &r, "the group's Synchronization", at("group", "g:cms=snap-a;secrets=")).await?;
        anyhow::ensure!(
            values(&p)["groupRuns"] == json!(1),
            "the group's two bindings were synchronized in separate runs: {}",
            values(&p)
        );

        // A new ConfigMap reaches the schedule only through the snapshot, and fires the group.
        cms.create(&pp, &configmap("snap-b", json!({"app": "snap"}), json!({}))?).await?;
        wait_package(&mut client, &r, "a schedule run with the new snapshot", at("schedule", "tick:snap-a,snap-b")).await?;
        wait_package(&mut client, &r, "a Group run after the ConfigMap event", at("group", "g:cms=snap-a,snap-b;secrets=")).await?;

        // An event of the other binding of the group carries both snapshots.
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(json!({"metadata": {"name": "snap-s", "labels": {"app": "snap"}}, "stringData": {"k": "v"}}))?;
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(kube.clone(), &ns).create(&pp, &secret).await?;
        wait_package(&mut client, &r, "a Group run after the Secret event", at("group", "g:cms=snap-a,snap-b;secrets=snap-s")).await?;
        remove(&mut client, &r).await
    })
    .await
}

/// afterHelm, beforeDeleteHelm and afterDeleteHelm each run the hook bound to them: each run's
/// object operation leaves its marker ConfigMap, and afterHelm's values patch reaches the values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_helm_and_delete_bindings_run() -> anyhow::Result<()> {
    with_topology(&[], |endpoint, kube| async move {
        let ns = namespace(&kube).await?;
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        let mut client = journey::connect(&endpoint).await?;
        let r = app("lifecycle", &ns);
        let accepted = client
            .update(update(&r, &fixtures(), "", None))
            .await?
            .into_inner();
        let running = journey::wait_running(&mut client, &r, accepted.generation).await?;
        assert_eq!(
            values(&running)["ran"],
            json!("afterHelm"),
            "{:?}",
            values(&running)
        );
        let marker = |name: &str| {
            let cms = cms.clone();
            let name = name.to_owned();
            move || {
                let (cms, name) = (cms.clone(), name.clone());
                async move { Ok(cms.get_opt(&name).await?.is_some()) }
            }
        };
        wait_cluster("afterhelm-marker", marker("afterhelm-marker")).await?;
        assert!(
            cms.get_opt("beforedeletehelm-marker").await?.is_none(),
            "no delete hook ran before the Remove"
        );

        client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                ..Default::default()
            })
            .await?;
        journey::wait_gone(&mut client, &r).await?;
        for name in ["beforedeletehelm-marker", "afterdeletehelm-marker"] {
            let cm = cms.get_opt(name).await?.with_context(|| {
                format!("{name}: the delete hook's object operation was applied")
            })?;
            let binding = cm
                .data
                .unwrap_or_default()
                .remove("binding")
                .unwrap_or_default();
            assert_eq!(
                binding.to_lowercase() + "-marker",
                name,
                "the hook saw its own binding"
            );
        }
        Ok(())
    })
    .await
}

/// Remove always finishes: a beforeDeleteHelm hook whose values patch cannot apply and an
/// afterDeleteHelm hook that exits non-zero are skipped with a warning condition naming them,
/// the release is uninstalled (its objects deleted) and the package is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_finishes_when_delete_hooks_fail() -> anyhow::Result<()> {
    with_topology(&[], |endpoint, kube| async move {
        let ns = namespace(&kube).await?;
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        let mut client = journey::connect(&endpoint).await?;
        let r = app("brokendelete", &ns);
        let accepted = client
            .update(update(&r, &fixtures(), "", None))
            .await?
            .into_inner();
        journey::wait_running(&mut client, &r, accepted.generation).await?;
        anyhow::ensure!(
            cms.get_opt("brokendelete-chart").await?.is_some(),
            "the chart's ConfigMap was installed"
        );
        let mut stream = client
            .watch(v1::WatchRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                ..Default::default()
            })
            .await?;
        let mut warnings = Vec::new();
        tokio::time::timeout(Duration::from_secs(120), async {
            while let Some(item) = stream.next().await {
                match item {
                    Ok(p) => warnings.extend(
                        p.conditions
                            .into_iter()
                            .filter(|c| c.reason == "DeleteHooksSkipped")
                            .map(|c| c.message),
                    ),
                    Err(s) if s.code() == tonic::Code::NotFound => return Ok(()),
                    Err(s) => anyhow::bail!("watch failed: {s}"),
                }
            }
            anyhow::bail!("watch ended while the package still existed")
        })
        .await
        .context("Remove did not finish")??;
        let seen = warnings.join("\n");
        anyhow::ensure!(
            seen.contains("beforeDeleteHelm") && seen.contains("/no/such/path"),
            "a warning names the skipped beforeDeleteHelm hook and why: {seen:?}"
        );
        anyhow::ensure!(
            seen.contains("afterDeleteHelm") && seen.contains("after.sh"),
            "a warning names the failed afterDeleteHelm hook: {seen:?}"
        );
        anyhow::ensure!(
            cms.get_opt("brokendelete-chart").await?.is_none(),
            "the release was uninstalled"
        );
        Ok(())
    })
    .await
}

/// CRDs first: a package whose chart ships a CRD in `crds/` and whose hook watches that kind
/// loads (the CRD is applied and Established before the bindings are registered), and the
/// hook sees the chart's object of that kind and one created later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_may_watch_the_kinds_their_package_brings() -> anyhow::Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};

    with_topology(&[], |endpoint, kube| async move {
        let ns = namespace(&kube).await?;
        let mut client = journey::connect(&endpoint).await?;
        // A module: an app may not ship crds/ (see `confinement.rs`).
        let r = v1::PackageRef {
            kind: v1::PackageKind::Module as i32,
            name: "owncrd".into(),
            namespace: String::new(),
        };
        let result = async {
            let accepted = client
                .update(update(&r, &fixtures(), "", None))
                .await?
                .into_inner();
            journey::wait_running(&mut client, &r, accepted.generation).await?;
            wait_package(&mut client, &r, "the chart's Gadget", |p| {
                values(p)["gadgets"] == json!(["from-chart"])
            })
            .await?;
            let gvk = GroupVersionKind::gvk("owncrd.berth.test", "v1", "Gadget");
            let gadgets: Api<DynamicObject> =
                Api::namespaced_with(kube.clone(), &ns, &ApiResource::from_gvk(&gvk));
            let gadget: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "owncrd.berth.test/v1", "kind": "Gadget",
                "metadata": {"name": "from-test"}, "spec": {"size": 2},
            }))?;
            gadgets.create(&PostParams::default(), &gadget).await?;
            wait_package(&mut client, &r, "the new Gadget", |p| {
                values(p)["gadgets"] == json!(["from-chart", "from-test"])
            })
            .await?;
            remove(&mut client, &r).await
        }
        .await;
        // CRDs outlive releases (as in Helm): this test removes its own.
        let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
        let _ = crds
            .delete("gadgets.owncrd.berth.test", &DeleteParams::default())
            .await;
        result
    })
    .await
}

/// Snapshots are filled when a hook runs, not when its event was queued (shell-operator's
/// rule): a run held back by the hook's throttle (one run per 10 s) while the object changed
/// twice sees the object as it is when it runs (`v=3`), not as it was when its event was
/// queued (`v=2`). And the throttle comes before compaction, as in shell-operator: both
/// events that arrived while the run was held back are delivered in that one run, not the
/// second an interval later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_are_filled_when_the_hook_runs() -> anyhow::Result<()> {
    with_topology(&[], |endpoint, kube| async move {
        let ns = namespace(&kube).await?;
        let mut client = journey::connect(&endpoint).await?;
        let r = app("fresh", &ns);
        let accepted = client
            .update(update(&r, &fixtures(), "", None))
            .await?
            .into_inner();
        journey::wait_running(&mut client, &r, accepted.generation).await?;
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        let cm = |v: &str| -> anyhow::Result<ConfigMap> {
            Ok(serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "watched", "labels": {"app": "fresh"}},
                "data": {"v": v},
            }))?)
        };
        cms.create(&PostParams::default(), &cm("1")?).await?;
        wait_package(&mut client, &r, "the first run", |p| {
            values(p)["seen"] == json!("1")
        })
        .await?;
        // The next run waits for the throttle; both changes land while it waits: the second
        // once the first one's run is at the head of the package's queue, held back.
        let set = |v: &'static str| {
            let cms = cms.clone();
            async move {
                cms.patch(
                    "watched",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"v": v}})),
                )
                .await
            }
        };
        let before = queue_head(&mut client, &format!("{ns}.fresh")).await?;
        set("2").await?;
        wait_cluster("the second run to be queued", || {
            let mut client = client.clone();
            let (queue, before) = (format!("{ns}.fresh"), before.clone());
            async move {
                let head = queue_head(&mut client, &queue).await?;
                Ok(head.is_some() && head != before)
            }
        })
        .await?;
        set("3").await?;
        let p = wait_package(&mut client, &r, "the throttled run", |p| {
            values(p)["seen"] != json!("1")
        })
        .await?;
        anyhow::ensure!(
            values(&p)["seen"] == json!("3"),
            "the run saw the snapshot of when its event was queued: {}",
            values(&p)
        );
        anyhow::ensure!(
            values(&p)["events"] == json!(2),
            "the throttled run did not get both events that arrived while it waited: {}",
            values(&p)
        );
        remove(&mut client, &r).await
    })
    .await
}

/// The id of the task at the head of `queue`, as the public Dump shows the broker's queues.
async fn queue_head(client: &mut journey::Client, queue: &str) -> anyhow::Result<Option<String>> {
    let dump = client
        .dump(v1::DumpRequest::default())
        .await?
        .into_inner()
        .yaml;
    let mut lines = dump
        .lines()
        .skip_while(|l| l.trim() != format!("- name: {queue}"));
    let Some(first) = lines.next() else {
        return Ok(None);
    };
    let indent = first.len() - first.trim_start().len();
    Ok(lines
        .take_while(|l| l.len() - l.trim_start().len() > indent)
        .find_map(|l| l.trim().strip_prefix("head: ").map(str::to_owned)))
}

/// Follows the package until its generation `generation` has failed permanently (phase Failed)
/// and returns it.
async fn wait_failed(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    generation: i64,
) -> anyhow::Result<v1::Package> {
    wait_package(client, r, "the generation to fail", |p| {
        p.phase == "Failed" && p.generation == generation
    })
    .await
}

/// Errors retrying cannot fix fail the generation instead of being retried forever: settings
/// the package's schema refuses and a hook config that cannot parse each end in phase Failed
/// with a Ready=False condition and an error naming the cause; the next Update starts over
/// and, with valid settings, reaches Running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permanent_errors_fail_the_generation_until_the_next_update() -> anyhow::Result<()> {
    with_topology(&[], |endpoint, kube| async move {
        let ns = namespace(&kube).await?;
        let mut client = journey::connect(&endpoint).await?;

        let r = app("strict", &ns);
        let bad = client
            .update(update(&r, &fixtures(), "", Some(json!({"size": "big"}))))
            .await?
            .into_inner();
        let failed = wait_failed(&mut client, &r, bad.generation).await?;
        anyhow::ensure!(
            failed.last_error.contains("ApplySettings") && failed.last_error.contains("size"),
            "the error names the task and the setting: {}",
            failed.last_error
        );
        let ready = failed
            .conditions
            .iter()
            .find(|c| c.r#type == "Ready")
            .context("a Ready condition")?;
        anyhow::ensure!(
            ready.status == "False" && ready.reason == "Failed",
            "{ready:?}"
        );
        // The seeds' reason for settings the schema refuses.
        let valid = failed
            .conditions
            .iter()
            .find(|c| c.r#type == "SettingsValid")
            .context("a SettingsValid condition")?;
        anyhow::ensure!(
            valid.status == "False"
                && valid.reason == "ValidationFailed"
                && valid.message.contains("size"),
            "{valid:?}"
        );
        let good = client
            .update(update(&r, &fixtures(), "", Some(json!({"size": 3}))))
            .await?
            .into_inner();
        journey::wait_running(&mut client, &r, good.generation).await?;
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        let cm = cms.get("strict").await?;
        anyhow::ensure!(
            cm.data.unwrap_or_default().get("size").map(String::as_str) == Some("3"),
            "the release was installed with the fixed settings"
        );
        remove(&mut client, &r).await?;

        let r = app("badconfig", &ns);
        let accepted = client
            .update(update(&r, &fixtures(), "", None))
            .await?
            .into_inner();
        let failed = wait_failed(&mut client, &r, accepted.generation).await?;
        anyhow::ensure!(
            failed.last_error.contains("Load")
                && failed.last_error.contains("broken.sh")
                && failed.last_error.contains("invalid config"),
            "the error names the hook and its config: {}",
            failed.last_error
        );
        remove(&mut client, &r).await
    })
    .await
}

/// A hook whose values patch removes a missing path, and a hook that exits non-zero after
/// writing valid outputs, each fail the package with an error naming the hook and the cause;
/// neither applies anything (values, object operations).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_values_patch_and_non_zero_exit_apply_nothing() -> anyhow::Result<()> {
    with_topology(&[], |endpoint, kube| async move {
        let mut client = journey::connect(&endpoint).await?;
        for (fail, cause) in [("patch", "/no/such/path"), ("exit", "exit code 3")] {
            let ns = namespace(&kube).await?;
            let r = app("badout", &ns);
            client
                .update(update(&r, &fixtures(), "", Some(json!({"fail": fail}))))
                .await?;
            let error = wait_error(&mut client, &r).await?;
            assert!(
                error.contains("bad.py") && error.contains(cause),
                "fail={fail}: the error names the hook and {cause:?}: {error}"
            );
            let p = client
                .get(v1::GetRequest {
                    r#ref: Some(r.clone()),
                })
                .await?
                .into_inner();
            assert!(
                values(&p).get("applied").is_none(),
                "fail={fail}: the values patch was not applied: {}",
                values(&p)
            );
            let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
            assert!(
                cms.get_opt("must-not-exist").await?.is_none(),
                "fail={fail}: the object operation was not applied"
            );
            remove(&mut client, &r).await?;
        }
        Ok(())
    })
    .await
}

/// A module-sdk style batch binary (`hook list` / `hook config` / `hook run N`) is discovered
/// as two hooks: its onStartup hook runs, and its kubernetes hook gets Group contexts (group
/// `main`) with its snapshot, on Synchronization and on events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_hook_binary_serves_its_hooks() -> anyhow::Result<()> {
    // The repository: the fixture's package.yaml plus the freshly built binary as its only hook.
    let (repo, repository) = berth_tests::temp_repo();
    let pkg = repo.path().join("batch/1.0.0");
    std::fs::create_dir_all(pkg.join("hooks"))?;
    std::fs::copy(
        berth_tests::workspace_root()
            .join(berth_tests::FIXTURES_REPO)
            .join("batch/1.0.0/package.yaml"),
        pkg.join("package.yaml"),
    )?;
    std::fs::copy(
        env!("CARGO_BIN_EXE_batch-hook"),
        pkg.join("hooks/batch-hook"),
    )
    .context("copying the batch-hook binary")?;
    with_topology(&[], |endpoint, kube| async move {
        let ns = namespace(&kube).await?;
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        let pp = PostParams::default();
        cms.create(
            &pp,
            &configmap("batch-a", json!({"app": "batch"}), json!({}))?,
        )
        .await?;
        let mut client = journey::connect(&endpoint).await?;
        let r = app("batch", &ns);
        let accepted = client
            .update(update(&r, &repository, "", None))
            .await?
            .into_inner();
        let running = journey::wait_running(&mut client, &r, accepted.generation).await?;
        assert_eq!(
            values(&running)["batchStartup"],
            json!(true),
            "{:?}",
            values(&running)
        );
        assert_eq!(
            values(&running)["batchCms"],
            json!("batch-a"),
            "Synchronization saw the snapshot: {:?}",
            values(&running)
        );
        let names: Vec<String> = running.hooks.iter().map(|h| h.name.clone()).collect();
        assert_eq!(names.len(), 2, "one binary, two hooks: {names:?}");

        cms.create(
            &pp,
            &configmap("batch-b", json!({"app": "batch"}), json!({}))?,
        )
        .await?;
        wait_package(&mut client, &r, "the batch hook's event run", |p| {
            values(p)["batchCms"] == json!("batch-a,batch-b")
        })
        .await?;
        remove(&mut client, &r).await
    })
    .await
}

/// `resynchronizationPeriod` re-runs a binding's Synchronization periodically, with no events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resynchronization_period_reruns_synchronization() -> anyhow::Result<()> {
    with_topology(&[], |endpoint, kube| async move {
        let ns = namespace(&kube).await?;
        let mut client = journey::connect(&endpoint).await?;
        let r = app("resync", &ns);
        let accepted = client
            .update(update(&r, &fixtures(), "resync", None))
            .await?
            .into_inner();
        journey::wait_running(&mut client, &r, accepted.generation).await?;
        let runs = |p: &v1::Package| {
            p.hooks
                .iter()
                .find(|h| h.name == "resync.sh")
                .map_or(0, |h| h.runs)
        };
        // The first Synchronization runs at Startup; two more can only come from the period.
        let p = wait_package(&mut client, &r, "three Synchronization runs", |p| {
            runs(p) >= 3
        })
        .await?;
        assert!(runs(&p) >= 3);
        remove(&mut client, &r).await
    })
    .await
}

/// Metrics a hook writes to `METRICS_PATH` are served on the worker's metrics port with the
/// hook's name as a label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hook_metrics_are_served_with_a_hook_label() -> anyhow::Result<()> {
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let hook_tmp = dir.path().join("hook-tmp");
    let hook_tmp_arg = hook_tmp.display().to_string();
    let topology = SplitTopology::start_with(
        &cluster.kubeconfig,
        dir.path(),
        &["--hook-tmp-dir", &hook_tmp_arg],
    )
    .await?;
    let metrics = topology
        .worker()
        .metrics
        .clone()
        .context("the worker announced its metrics port")?;
    let kube = cluster.client.clone();
    let result = async {
        let ns = namespace(&kube).await?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = app("lifecycle", &ns);
        let accepted = client
            .update(update(&r, &fixtures(), "", None))
            .await?
            .into_inner();
        journey::wait_running(&mut client, &r, accepted.generation).await?;
        let text = berth_tests::scrape_metrics(&metrics).await?;
        let series = text
            .lines()
            .find(|l| {
                l.starts_with("lifecycle_marker_runs_total{")
                    && l.contains(r#"binding="afterHelm""#)
            })
            .with_context(|| format!("no afterHelm series in:\n{text}"))?;
        assert!(series.contains(r#"hook="marker.sh""#), "{series}");
        assert!(
            series.contains(&format!(r#"package="{ns}.lifecycle""#)),
            "{series}"
        );
        assert!(series.ends_with(" 1"), "one afterHelm run: {series}");
        // The run's files were made under --hook-tmp-dir, and removed once it finished.
        let marker = Api::<ConfigMap>::namespaced(kube.clone(), &ns)
            .get("afterhelm-marker")
            .await?;
        let run_dir = marker
            .data
            .unwrap_or_default()
            .remove("runDir")
            .unwrap_or_default();
        // A hook with a uid of its own runs in the worker's runs directory there (root's,
        // 0711, so the hook cannot move its own directory away).
        let parent = std::path::Path::new(&run_dir);
        let in_runs_dir = parent.parent() == Some(hook_tmp.as_path())
            && parent
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("berth-runs-"));
        assert!(
            parent == hook_tmp.as_path() || in_runs_dir,
            "the hook ran in {run_dir}"
        );
        let left: Vec<_> = std::fs::read_dir(parent)?.collect();
        assert!(left.is_empty(), "temporary files left behind: {left:?}");
        remove(&mut client, &r).await
    }
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}

/// A binding with a namespace label selector follows namespaces as they come and go, as in
/// shell-operator: a namespace labelled after the package loaded is watched (its objects reach
/// the hook), and one whose label is removed is no longer (its objects leave the snapshot).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_label_selectors_follow_namespaces_as_they_change() -> anyhow::Result<()> {
    with_topology(&[], |endpoint, kube| async move {
        let mut client = journey::connect(&endpoint).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::Module as i32,
            name: "follower".into(),
            namespace: String::new(),
        };
        let accepted = client
            .update(update(&r, &fixtures(), "", None))
            .await?
            .into_inner();
        journey::wait_running(&mut client, &r, accepted.generation).await?;
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(kube.clone());
        let follow = |ns: String, on: bool| {
            let namespaces = namespaces.clone();
            async move {
                let label = if on { json!("yes") } else { Value::Null };
                namespaces
                    .patch(
                        &ns,
                        &PatchParams::default(),
                        &Patch::Merge(
                            json!({"metadata": {"labels": {"berth.test/follow": label}}}),
                        ),
                    )
                    .await
            }
        };
        let add_cm = |ns: String, name: &'static str| {
            let kube = kube.clone();
            async move {
                Api::<ConfigMap>::namespaced(kube, &ns)
                    .create(
                        &PostParams::default(),
                        &configmap(name, json!({"app": "follow"}), json!({}))?,
                    )
                    .await?;
                anyhow::Ok(())
            }
        };
        let seen = |p: &v1::Package, item: &str| {
            values(p)["seen"]
                .as_array()
                .is_some_and(|a| a.iter().any(|v| v == item))
        };
        // Both namespaces come into being after the package loaded.
        let (a, b) = (namespace(&kube).await?, namespace(&kube).await?);
        follow(a.to_string(), true).await?;
        add_cm(a.to_string(), "one").await?;
        let one = format!("{a}/one");
        wait_package(&mut client, &r, "the object in the first namespace", |p| {
            seen(p, &one)
        })
        .await?;
        follow(b.to_string(), true).await?;
        add_cm(b.to_string(), "two").await?;
        let two = format!("{b}/two");
        wait_package(&mut client, &r, "the object in the second namespace", |p| {
            seen(p, &two) && seen(p, &one)
        })
        .await?;
        // The first namespace stops matching: its object leaves the snapshot.
        follow(a.to_string(), false).await?;
        add_cm(b.to_string(), "three").await?;
        let three = format!("{b}/three");
        let p = wait_package(&mut client, &r, "the third object", |p| seen(p, &three)).await?;
        anyhow::ensure!(
            !seen(&p, &one) && seen(&p, &two),
            "after the first namespace lost its label the snapshot was {}",
            values(&p)
        );
        remove(&mut client, &r).await
    })
    .await
}

/// A package's hooks are asked for their config once per load, not once per worker: the Load
/// records what they answered (lifecycle keeps it with the loaded version), and the workers
/// that run the package's later tasks build its hooks from that record. With three workers and
/// four tasks per package that need the hooks, every package's tasks spread over workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_answer_their_config_query_once_per_load_across_workers() -> anyhow::Result<()> {
    const PACKAGES: usize = 6;
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let mut topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = async {
        topology.add_worker().await?;
        topology.add_worker().await?;
        let ns = namespace(&cluster.client).await?;
        let side = berth_tests::hook_writable_dir()?;
        let (repo_dir, repo) = berth_tests::temp_repo();
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let mut refs = vec![];
        for i in 0..PACKAGES {
            let name = format!("asked{i}");
            let log = side.path().join(&name);
            let hook = format!(
                "#!/bin/sh\n\
                 if [ \"$1\" = \"--config\" ]; then\n  echo config >> '{log}'\n  printf 'configVersion: v1\\nonStartup: 1\\nbeforeHelm: 1\\n'\n  exit 0\nfi\n\
                 echo run >> '{log}'\n",
                log = log.display()
            );
            berth_tests::write_app(
                repo_dir.path(),
                &name,
                &[
                    (
                        "templates/configmap.yaml",
                        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  a: b\n",
                    ),
                    ("hooks/asked.sh", &hook),
                ],
            )?;
            let r = app(&name, &ns);
            let accepted = client
                .update(update(&r, &repo, "", None))
                .await?
                .into_inner();
            refs.push((r, accepted.generation, log));
        }
        for (r, generation, log) in &refs {
            journey::wait_running(&mut client, r, *generation).await?;
            let lines = std::fs::read_to_string(log)?;
            let count = |what: &str| lines.lines().filter(|l| *l == what).count();
            anyhow::ensure!(
                (count("config"), count("run")) == (1, 2),
                "{}: the hook was asked for its config once and ran for onStartup and beforeHelm, but it logged {lines:?}",
                r.name
            );
        }
        Ok(())
    }
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}

/// An enabled package starts in one task (ApplySettings → Startup → Run): the values its
/// onStartup hook sets reach the release of the same task, and a failure after onStartup
/// resumes after it. One package's beforeHelm hook fails on its first run; its retry runs
/// beforeHelm again but not onStartup, and both packages' ConfigMaps show onStartup's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_fails_after_on_startup_resumes_without_running_it_again() -> anyhow::Result<()>
{
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = async {
        let ns = namespace(&cluster.client).await?;
        let side = berth_tests::hook_writable_dir()?;
        let (repo_dir, repo) = berth_tests::temp_repo();
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let mut refs = vec![];
        for (name, fail_once) in [("steady", false), ("flaky", true)] {
            let log = side.path().join(name);
            let startup = format!(
                "#!/bin/sh\n\
                 if [ \"$1\" = \"--config\" ]; then printf 'configVersion: v1\\nonStartup: 1\\n'; exit 0; fi\n\
                 echo startup >> '{log}'\n\
                 printf '[{{\"op\":\"add\",\"path\":\"/started\",\"value\":\"yes\"}}]' > \"$VALUES_JSON_PATCH_PATH\"\n",
                log = log.display()
            );
            // The first run leaves a mark and fails; later runs succeed.
            let before = format!(
                "#!/bin/sh\n\
                 if [ \"$1\" = \"--config\" ]; then printf 'configVersion: v1\\nbeforeHelm: 1\\n'; exit 0; fi\n\
                 echo before >> '{log}'\n\
                 if [ {fail_once} = true ] && [ ! -e '{log}.failed' ]; then : > '{log}.failed'; echo 'first run fails' >&2; exit 1; fi\n",
                log = log.display()
            );
            berth_tests::write_app(
                repo_dir.path(),
                name,
                &[
                    ("values.yaml", "started: \"no\"\n"),
                    (
                        "templates/configmap.yaml",
                        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  started: {{ .Values.started | quote }}\n",
                    ),
                    ("hooks/startup.sh", &startup),
                    ("hooks/before.sh", &before),
                ],
            )?;
            let r = app(name, &ns);
            let accepted = client
                .update(update(&r, &repo, "", None))
                .await?
                .into_inner();
            refs.push((r, accepted.generation, log, fail_once));
        }
        let cms: Api<ConfigMap> = Api::namespaced(cluster.client.clone(), &ns);
        for (r, generation, log, fail_once) in &refs {
            let mut failed_in_run = false;
            journey::follow(&mut client, r, REACT_DEADLINE, "Running", |p| {
                failed_in_run |= p.last_error.starts_with("Start: Run: ");
                Ok(p.phase == "Running" && p.observed_generation >= *generation)
            })
            .await?;
            let lines = std::fs::read_to_string(log)?;
            let count = |what: &str| lines.lines().filter(|l| *l == what).count();
            let runs = if *fail_once { 2 } else { 1 };
            anyhow::ensure!(
                (count("startup"), count("before")) == (1, runs),
                "{}: onStartup once and beforeHelm {runs} time(s), but the hooks logged {lines:?}",
                r.name
            );
            anyhow::ensure!(
                failed_in_run == *fail_once,
                "{}: the package showed a failure of Start's Run step: {failed_in_run}",
                r.name
            );
            let cm = cms.get(&r.name).await?;
            let started = cm.data.as_ref().and_then(|d| d.get("started")).cloned();
            anyhow::ensure!(
                started.as_deref() == Some("yes"),
                "{}: the release shows onStartup's value, not {started:?}",
                r.name
            );
        }
        Ok(())
    }
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}

/// A version whose hooks bind no events leaves nothing registered with hookevent, whatever
/// the version before it bound: workers do not call hookevent for such a package (Load
/// registers nothing, ApplySettings adopts nothing), which holds because the start-over to the
/// new version disables the old bindings first. Version 1.0.0 has a schedule hook; 2.0.0 only
/// a beforeHelm hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_whose_hooks_bind_no_events_leaves_none_registered() -> anyhow::Result<()> {
    use sqlx::Connection as _;
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = async {
        let ns = namespace(&cluster.client).await?;
        let (repo_dir, repo) = berth_tests::temp_repo();
        let chart = (
            "templates/configmap.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  a: b\n",
        );
        let ticking = "#!/bin/sh\nif [ \"$1\" = \"--config\" ]; then printf 'configVersion: v1\\nschedule:\\n- name: hourly\\n  crontab: \"0 * * * *\"\\n'; exit 0; fi\n";
        let before = "#!/bin/sh\nif [ \"$1\" = \"--config\" ]; then printf 'configVersion: v1\\nbeforeHelm: 1\\n'; exit 0; fi\n";
        berth_tests::write_app_version(
            repo_dir.path(),
            "moving",
            "1.0.0",
            &[chart, ("hooks/tick.sh", ticking)],
        )?;
        berth_tests::write_app_version(
            repo_dir.path(),
            "moving",
            "2.0.0",
            &[chart, ("hooks/before.sh", before)],
        )?;
        let r = app("moving", &ns);
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let key = format!("{ns}.moving");
        let registered = || async {
            let url = berth_tests::Databases::sqlite(dir.path()).hookevent;
            let mut conn = sqlx::SqliteConnection::connect(&url).await?;
            let n: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM schedule_bindings WHERE package = $1")
                    .bind(&key)
                    .fetch_one(&mut conn)
                    .await?;
            let _ = conn.close().await;
            anyhow::Ok(n)
        };
        for (version, bindings) in [("1.0.0", 1), ("2.0.0", 0)] {
            let accepted = client
                .update(v1::UpdateRequest {
                    version: version.into(),
                    ..update(&r, &repo, "", None)
                })
                .await?
                .into_inner();
            journey::wait_running(&mut client, &r, accepted.generation).await?;
            let n = registered().await?;
            anyhow::ensure!(
                n == bindings,
                "version {version}: {n} schedule bindings registered, {bindings} expected"
            );
        }
        Ok(())
    }
    .await;
    topology.stop().await;
    cluster.stop().await;
    result
}
