//! Differential conformance: the same sequence of requests goes to an in-process dev cluster
//! and to the real control plane named by `BERTH_TEST_KUBECONFIG`, and every answer (status
//! code, body, `Warning` headers, watch events) is compared field by field.
//!
//! What must differ between two clusters is normalized away before comparing (uids,
//! resourceVersions, timestamps, continue tokens, generated names, the test namespace's and
//! other per-run names, the cluster CA); see [`normalize`]. Every other difference fails the
//! test, unless the allow-list in `known.rs` names it, and that list is the "Known
//! differences from a real API server" section of the dev cluster's crate docs (a test keeps
//! the two equal).
//!
//! The scenario itself is in `scenario.rs`: one request per line, each with the request kind
//! it covers.

mod authz;
mod engine;
mod known;
mod podsecurity;
mod scenario;

use berth_devcluster::{DevCluster, DevClusterConfig};

use crate::common::{client_for, real_cluster};
use engine::{Harness, Side};

#[tokio::test]
async fn dev_cluster_answers_like_kube_apiserver() {
    let Some(path) = real_cluster() else {
        eprintln!(
            "differential conformance skipped: it needs a real cluster (set BERTH_TEST_KUBECONFIG)"
        );
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = DevCluster::start(DevClusterConfig {
        data_dir: Some(dir.path().join("data")),
        ..Default::default()
    })
    .await
    .expect("dev cluster starts");
    let dev_client = client_for(&dev.kubeconfig_yaml()).await;
    let kc = kube::config::Kubeconfig::read_from(&path).expect("BERTH_TEST_KUBECONFIG is readable");
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kubeconfig is usable");
    let real_client = kube::Client::try_from(config).expect("client builds");

    let suffix = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let mut h = Harness::new(
        Side::new("dev", dev_client, &suffix).await,
        Side::new("real", real_client, &suffix).await,
    );
    scenario::run(&mut h).await;
    let report = h.finish();
    eprintln!("{}", report.summary);
    assert!(
        report.kinds >= 60,
        "the scenario covers only {} request kinds",
        report.kinds
    );
    assert!(report.failures.is_empty(), "{}", report.failures.join("\n"));
}

/// The authorization scenario (`authz.rs`): identities, RBAC, impersonation, TokenRequest and
/// access reviews, asked the same way of the dev cluster and kube-apiserver.
#[tokio::test]
async fn dev_cluster_authorizes_like_kube_apiserver() {
    let Some(path) = real_cluster() else {
        eprintln!(
            "differential authorization skipped: it needs a real cluster (set BERTH_TEST_KUBECONFIG)"
        );
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = DevCluster::start(DevClusterConfig {
        data_dir: Some(dir.path().join("data")),
        ..Default::default()
    })
    .await
    .expect("dev cluster starts");
    let dev_kubeconfig = dev.kubeconfig_path().expect("kubeconfig written");
    let dev_client = client_for(&dev.kubeconfig_yaml()).await;
    let real_client = crate::common::client_as_admin(&path).await;
    let suffix = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let mut h = Harness::with_known(
        Side::new("dev", dev_client, &suffix).await,
        Side::new("real", real_client, &suffix).await,
        known::AUTHZ_KNOWN,
    );
    authz::run(&mut h, &dev_kubeconfig, &path, dir.path()).await;
    let report = h.finish();
    eprintln!("{}", report.summary);
    assert!(report.failures.is_empty(), "{}", report.failures.join("\n"));
}

/// The Pod Security scenario (`podsecurity.rs`): namespace labels, the baseline and restricted
/// checks on pods, warnings for workloads and for a raised level, compared word for word.
#[tokio::test]
async fn dev_cluster_admits_pods_like_kube_apiserver() {
    let Some(path) = real_cluster() else {
        eprintln!(
            "differential Pod Security skipped: it needs a real cluster (set BERTH_TEST_KUBECONFIG)"
        );
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let dev = DevCluster::start(DevClusterConfig {
        data_dir: Some(dir.path().join("data")),
        ..Default::default()
    })
    .await
    .expect("dev cluster starts");
    let dev_client = client_for(&dev.kubeconfig_yaml()).await;
    let real_client = crate::common::client_as_admin(&path).await;
    let suffix = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let mut h = Harness::with_known(
        Side::new("dev", dev_client, &suffix).await,
        Side::new("real", real_client, &suffix).await,
        known::PODSECURITY_KNOWN,
    );
    podsecurity::run(&mut h).await;
    let report = h.finish();
    eprintln!("{}", report.summary);
    assert!(report.failures.is_empty(), "{}", report.failures.join("\n"));
}

/// The allow-list and the crate docs' "Known differences" section name the same
/// differences.
#[test]
fn allow_list_matches_the_crate_docs() {
    let docs = include_str!("../../../src/lib.rs");
    let documented = known::documented_ids(docs);
    let listed: std::collections::BTreeSet<String> = known::KNOWN
        .iter()
        .chain(known::AUTHZ_KNOWN)
        .chain(known::PODSECURITY_KNOWN)
        .map(|k| k.id.to_string())
        .collect();
    assert!(
        !documented.is_empty(),
        "src/lib.rs has no \"Known differences from a real API server\" section"
    );
    assert_eq!(
        documented, listed,
        "the ids in src/lib.rs (left) and in tests/conformance/differential/known.rs (right) differ"
    );
}
