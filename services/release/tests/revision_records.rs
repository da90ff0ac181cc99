//! A revision's record through its operation, as Helm keeps it: `pending-*` while its objects
//! are applied, then `deployed` or `failed`; one deployed revision at a time; a revision left
//! pending by a process that died is marked failed by the next operation.

mod support;

use anyhow::Context as _;
use berth_proto::release::{ChartFile, InstallRequest, RollbackRequest, StatusRequest};
use berth_release::record::{Status, StoreError};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::runtime::watcher;
use std::time::Duration;
use support::{chart, config_map, start};

/// Longest an install or the status change it causes may take to show up.
const DEADLINE: Duration = Duration::from_secs(60);

fn request(h: &support::Harness, name: &str, files: Vec<ChartFile>) -> InstallRequest {
    InstallRequest {
        name: name.into(),
        namespace: h.namespace.clone(),
        files,
        values: Some(berth_proto::json::to_struct(
            &serde_json::json!({"greeting": "hi"}),
        )),
        package: String::new(),
        wait_ms: 0,
    }
}

/// (revision, status) of every stored revision of `name`, oldest first.
async fn statuses(h: &support::Harness, name: &str) -> anyhow::Result<Vec<(i32, String)>> {
    // A consistent LIST, as `kubectl get secrets` reads: a store of the test's own would read
    // the watch cache, which checks only the newest record against etcd, so an older
    // revision's status written just before (superseded after the newest was settled) could
    // still read as it was.
    let secrets: Api<Secret> = Api::namespaced(h.kube.clone(), &h.namespace);
    let listed = secrets
        .list(&kube::api::ListParams::default().labels(&format!("owner=helm,name={name}")))
        .await?;
    let mut seen = Vec::new();
    for secret in listed.items {
        let labels = secret.metadata.labels.unwrap_or_default();
        let version: i32 = labels.get("version").context("a version label")?.parse()?;
        let status = labels.get("status").context("a status label")?.clone();
        seen.push((version, status));
    }
    seen.sort();
    Ok(seen)
}

/// Every status the Secret of revision `version` of `name` goes through, in order, until it is
/// `until`; the watch starts before `operation` runs.
async fn statuses_of_revision_during(
    h: &support::Harness,
    name: &str,
    version: i32,
    until: &str,
    operation: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<Vec<String>> {
    let secrets: Api<Secret> = Api::namespaced(h.kube.clone(), &h.namespace);
    let config =
        watcher::Config::default().labels(&format!("owner=helm,name={name},version={version}"));
    let mut events = Box::pin(watcher(secrets, config));
    // The watch is established once its initial (empty) listing is complete.
    loop {
        match tokio::time::timeout(DEADLINE, events.next()).await? {
            Some(Ok(watcher::Event::InitDone)) => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into()),
            None => anyhow::bail!("watch ended"),
        }
    }
    let seen = async {
        let mut seen: Vec<String> = Vec::new();
        while let Some(event) = events.next().await {
            if let watcher::Event::Apply(secret) | watcher::Event::InitApply(secret) = event? {
                let status = secret
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("status"))
                    .cloned()
                    .unwrap_or_default();
                if seen.last() != Some(&status) {
                    seen.push(status.clone());
                }
                if status == until {
                    return Ok::<_, anyhow::Error>(seen);
                }
            }
        }
        anyhow::bail!("watch ended after {seen:?}")
    };
    let (seen, done) =
        tokio::time::timeout(DEADLINE, async { tokio::join!(seen, operation) }).await?;
    done?;
    seen
}

#[tokio::test]
async fn an_upgrade_is_recorded_pending_while_it_applies_then_deployed() -> anyhow::Result<()> {
    let mut h = start().await?;
    let v1 = chart(&[
        ("templates/a.yaml", &config_map("a", false)),
        ("templates/b.yaml", &config_map("b", false)),
    ]);
    h.grpc.install(request(&h, "pending", v1)).await?;

    let v2 = chart(&[("templates/a.yaml", &config_map("a", false))]);
    let mut grpc = h.grpc.clone();
    let upgrade = request(&h, "pending", v2);
    let seen = statuses_of_revision_during(&h, "pending", 2, "deployed", async move {
        grpc.install(upgrade).await?;
        Ok(())
    })
    .await?;
    // Written before anything was applied, so no one takes revision 1 for the current one
    // while revision 2's objects go in.
    assert_eq!(seen, ["pending-upgrade", "deployed"]);
    assert_eq!(
        statuses(&h, "pending").await?,
        [(1, "superseded".to_string()), (2, "deployed".to_string())]
    );

    let mut grpc = h.grpc.clone();
    let rollback = RollbackRequest {
        name: "pending".into(),
        namespace: h.namespace.clone(),
        revision: 1,
    };
    let seen = statuses_of_revision_during(&h, "pending", 3, "deployed", async move {
        grpc.rollback(rollback).await?;
        Ok(())
    })
    .await?;
    assert_eq!(seen, ["pending-rollback", "deployed"]);
    Ok(())
}

#[tokio::test]
async fn after_a_failed_upgrade_and_a_good_one_only_the_newest_is_deployed() -> anyhow::Result<()> {
    let mut h = start().await?;
    let good = || chart(&[("templates/a.yaml", &config_map("a", false))]);
    h.grpc.install(request(&h, "mended", good())).await?;
    // An object the API server refuses: its name is not a valid DNS subdomain.
    let bad = chart(&[
        ("templates/a.yaml", &config_map("a", false)),
        ("templates/bad.yaml", &config_map("Not_Valid", false)),
    ]);
    let err = h
        .grpc
        .install(request(&h, "mended", bad))
        .await
        .expect_err("the API server refuses the object");
    assert!(err.message().contains("Not_Valid"), "{}", err.message());
    assert_eq!(
        statuses(&h, "mended").await?,
        [(1, "deployed".to_string()), (2, "failed".to_string())],
        "the last good revision stays deployed after a failed upgrade"
    );

    h.grpc.install(request(&h, "mended", good())).await?;
    assert_eq!(
        statuses(&h, "mended").await?,
        [
            (1, "superseded".to_string()),
            (2, "failed".to_string()),
            (3, "deployed".to_string())
        ],
        "as Helm: the failed revision stays failed, and only the newest is deployed"
    );
    Ok(())
}

#[tokio::test]
async fn a_revision_left_pending_by_a_dead_process_is_marked_failed_by_the_next_upgrade()
-> anyhow::Result<()> {
    let mut h = start().await?;
    let files = || chart(&[("templates/a.yaml", &config_map("a", false))]);
    h.grpc.install(request(&h, "orphan", files())).await?;
    // What a process that died in the middle of upgrading leaves behind.
    let store = h.store();
    let first = store.latest("orphan").await?.expect("revision 1");
    store
        .set_status(
            &first,
            Some("c"),
            &Default::default(),
            Status::PendingUpgrade,
        )
        .await?;

    h.grpc.install(request(&h, "orphan", files())).await?;
    let history = store.history("orphan").await?;
    let seen: Vec<(i32, &str)> = history
        .iter()
        .map(|r| (r.version, r.info.status.as_str()))
        .collect();
    assert_eq!(seen, [(1, "failed"), (2, "deployed")]);
    assert!(
        history[0].info.description.contains("interrupted"),
        "{}",
        history[0].info.description
    );
    Ok(())
}

/// `berth_release_record_reads_total{read}` as the service's metrics page shows it.
fn record_reads(h: &support::Harness, read: &str) -> u64 {
    let series = format!("berth_release_record_reads_total{{read=\"{read}\"}}");
    h.metrics
        .render()
        .lines()
        .find_map(|l| {
            let (s, value) = l.rsplit_once(' ')?;
            (s == series).then(|| value.parse().ok())?
        })
        .unwrap_or(0)
}

/// A consistent LIST of a release's Secrets reads every Secret of the namespace from etcd;
/// berth reads them from the API server's watch cache and checks that read with two GETs.
#[tokio::test]
async fn installs_upgrades_and_status_read_release_records_from_the_watch_cache()
-> anyhow::Result<()> {
    let mut h = start().await?;
    let files = |name: &str| chart(&[("templates/a.yaml", &config_map(name, false))]);
    for (name, cm) in [("cached", "a"), ("cached", "b"), ("cached-too", "c")] {
        h.grpc.install(request(&h, name, files(cm))).await?;
        let status = h
            .grpc
            .status(StatusRequest {
                name: name.into(),
                namespace: h.namespace.clone(),
                wait_ms: 0,
            })
            .await?
            .into_inner();
        assert!(status.found, "{name}");
    }
    assert_eq!(
        statuses(&h, "cached").await?,
        [(1, "superseded".to_string()), (2, "deployed".to_string())]
    );
    assert_eq!(record_reads(&h, "quorum"), 0);
    assert!(record_reads(&h, "cache") >= 6, "{}", h.metrics.render());
    Ok(())
}

/// A revision another writer (here: a store of its own, as `helm` or another replica would)
/// added or changed just before is seen by the next install, whatever the cache holds.
#[tokio::test]
async fn records_written_by_another_writer_just_before_an_install_are_seen() -> anyhow::Result<()> {
    let mut h = start().await?;
    let files = || chart(&[("templates/a.yaml", &config_map("a", false))]);
    h.grpc.install(request(&h, "shared", files())).await?;
    // Another writer adds revision 2 (as `helm upgrade` would) ...
    let other = h.store();
    let mut second = other.latest("shared").await?.expect("revision 1");
    second.version = 2;
    other
        .create(&second, "elsewhere", &Default::default())
        .await?;
    other
        .set_status(
            &second,
            Some("elsewhere"),
            &Default::default(),
            Status::PendingUpgrade,
        )
        .await?;
    // ... and dies before settling it: the next install sees it, fails it, and writes 3.
    h.grpc.install(request(&h, "shared", files())).await?;
    let seen: Vec<(i32, String)> = statuses(&h, "shared").await?;
    assert_eq!(
        seen,
        [
            (1, "superseded".to_string()),
            (2, "failed".to_string()),
            (3, "deployed".to_string())
        ]
    );
    Ok(())
}

/// A new release's install takes an empty read from the watch cache without checking it: its
/// first write, revision 1, is the check. A revision 1 another writer created is never
/// overwritten — creating it again is refused as a race, which the caller tries again — and
/// the install that follows upgrades it.
#[tokio::test]
async fn a_first_revision_written_by_another_writer_is_never_overwritten() -> anyhow::Result<()> {
    let mut h = start().await?;
    let files = || chart(&[("templates/a.yaml", &config_map("a", false))]);
    h.grpc.install(request(&h, "model", files())).await?;
    let store = h.store();
    let mut theirs = store.latest("model").await?.expect("revision 1");
    theirs.name = "theirs".into();
    let raced = {
        store
            .create(&theirs, "elsewhere", &Default::default())
            .await?;
        store
            .create(&theirs, "again", &Default::default())
            .await
            .unwrap_err()
    };
    assert!(
        matches!(raced, StoreError::Raced { .. }) && raced.is_unavailable(),
        "{raced}"
    );
    assert!(
        raced.to_string().contains("sh.helm.release.v1.theirs.v1"),
        "{raced}"
    );
    // Whatever the cache held when it read, the install ends with the other writer's revision
    // 1 kept and its own as revision 2 (a race refused is tried again, as a worker does).
    // Its own object: `a` is `model`'s (one owner per object).
    let own = || chart(&[("templates/b.yaml", &config_map("b", false))]);
    let mut answer = h.grpc.install(request(&h, "theirs", own())).await;
    for _ in 0..20 {
        match &answer {
            Err(s) if s.code() == tonic::Code::Unavailable => {
                answer = h.grpc.install(request(&h, "theirs", own())).await;
            }
            _ => break,
        }
    }
    assert_eq!(answer?.into_inner().revision, 2);
    let seen = statuses(&h, "theirs").await?;
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[1], (2, "deployed".to_string()));
    Ok(())
}
