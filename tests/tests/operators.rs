//! Packages' declarative operators in the cluster (issue 35), through `berth up` on the dev
//! cluster or the real one named by `BERTH_TEST_KUBECONFIG`: Δ-controller's
//! configmap-deployment-controller example, its Operator read unchanged from
//! `../shared/upstream/dcontroller`, shipped in an App beside a chart with the ConfigMap, the
//! Deployment and the ConfigDeployment that links them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use berth_proto::v1;
use berth_tests::{AllInOne, TestNamespace, journey};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(200);
const ANNOTATION: &str = "dcontroller.io/configmap-version";

fn upstream(path: &str) -> PathBuf {
    std::env::var_os("BERTH_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"))
        .join("upstream/dcontroller/examples")
        .join(path)
}

fn read_upstream(path: &str) -> anyhow::Result<String> {
    let file = upstream(path);
    std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))
}

/// The chart: the upstream README's Deployment `dep` (no replicas: the real control plane runs
/// no pods) and the ConfigDeployment `dep-config` linking it to the ConfigMap `config`, which
/// the user makes and edits (a chart's ConfigMap would be put back by drift repair).
const CHART: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: dep
spec:
  replicas: 0
  selector:
    matchLabels: {app: dep}
  template:
    metadata:
      labels: {app: dep}
    spec:
      containers:
        - name: main
          image: registry.k8s.io/pause:3.10
---
apiVersion: dcontroller.io/v1alpha1
kind: ConfigDeployment
metadata:
  name: dep-config
spec:
  configMap: config
  deployment: dep
"#;

/// The annotation the operator writes into `dep`'s pod template, if any.
async fn annotation(deps: &Api<Deployment>) -> anyhow::Result<Option<String>> {
    let dep = deps.get("dep").await?;
    Ok(dep
        .spec
        .template
        .metadata
        .and_then(|m| m.annotations)
        .and_then(|a| a.get(ANNOTATION).cloned()))
}

/// Waits until `dep`'s annotation is the ConfigMap's resourceVersion; returns it.
async fn follows_the_configmap(
    deps: &Api<Deployment>,
    cms: &Api<ConfigMap>,
    what: &str,
) -> anyhow::Result<String> {
    berth_tests::until(what, DEADLINE, POLL, || async {
        let version = cms.get("config").await?.metadata.resource_version;
        let seen = annotation(deps).await?;
        Ok((seen.is_some() && seen == version).then_some(seen.unwrap_or_default()))
    })
    .await
}

/// Scrapes `addr` until `shows` holds for the page.
async fn scrape_until(addr: &str, what: &str, shows: impl Fn(&str) -> bool) -> anyhow::Result<()> {
    berth_tests::until(what, DEADLINE, POLL, || async {
        let page = berth_tests::scrape_metrics(addr).await?;
        Ok(shows(&page).then_some(()))
    })
    .await
}

/// The ConfigDeployment CRD from upstream, applied by the test (an App may not bring CRDs) and
/// Established.
async fn ensure_crd(kube: &kube::Client) -> anyhow::Result<()> {
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&read_upstream(
        "configmap-deployment-controller/configdeployment-crd.yaml",
    )?)?;
    let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
    match crds.create(&PostParams::default(), &crd).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    berth_tests::until(
        "the ConfigDeployment CRD Established",
        DEADLINE,
        POLL,
        || {
            let crds = crds.clone();
            async move {
                let crd = crds.get("configdeployments.dcontroller.io").await?;
                let established = crd
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                Ok(established.then_some(()))
            }
        },
    )
    .await
}

/// The upstream example in an App: once the package is Running and the ConfigMap made, the
/// Deployment's pod template carries the ConfigMap's resourceVersion; an edit of the ConfigMap moves it (the rollout the
/// README shows). The package says `OperatorsReady=True`, and the metrics count its running
/// controller; removing the package stops it (the metrics count none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configmap_deployment_example_runs_in_an_app() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let result = async {
        ensure_crd(&kube).await?;
        let ns = TestNamespace::create(&kube, "configdep").await?;
        let (repo_dir, repo) = berth_tests::temp_repo();
        let operator =
            read_upstream("configmap-deployment-controller/configdeployment-operator.yaml")?;
        berth_tests::write_app(
            repo_dir.path(),
            "configdep",
            &[
                ("operators/configdeployment-operator.yaml", &operator),
                ("templates/objects.yaml", CHART),
            ],
        )?;
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "configdep".into(),
            namespace: ns.to_string(),
        };
        let g = client
            .update(v1::UpdateRequest {
                r#ref: Some(r.clone()),
                repository: repo.clone(),
                version: "1.0.0".into(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .generation;
        journey::wait_running(&mut client, &r, g).await?;

        let deps: Api<Deployment> = Api::namespaced(kube.clone(), &ns);
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        ensure!(
            annotation(&deps).await?.is_none(),
            "annotated before its ConfigMap exists"
        );
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "config"}, "data": {"key1": "value1"},
        }))?;
        cms.create(&PostParams::default(), &cm).await?;
        let first = follows_the_configmap(&deps, &cms, "the first annotation").await?;
        cms.patch(
            "config",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"key1": "value2"}})),
        )
        .await?;
        let second = follows_the_configmap(&deps, &cms, "the annotation after an edit").await?;
        ensure!(first != second, "the annotation did not move: {first}");

        // The operator's status: the package's OperatorsReady condition and the metrics.
        let ready = journey::follow(&mut client, &r, DEADLINE, "OperatorsReady", |p| {
            Ok(journey::condition(p, "OperatorsReady").is_some_and(|c| c.0 == "True"))
        })
        .await?;
        let (_, reason, message) =
            journey::condition(&ready, "OperatorsReady").context("OperatorsReady")?;
        ensure!(
            reason == "Ready" && message == "1 controllers ready",
            "{reason}: {message}"
        );
        let metrics = up.proc.metrics.clone().context("berth up's metrics port")?;
        scrape_until(&metrics, "one package's operators running", |page| {
            page.contains("\nberth_operator_packages 1\n")
                && page.contains("berth_operator_controllers{ready=\"True\"} 1\n")
        })
        .await?;

        // Removal stops the operator (and drops its views).
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                ..Default::default()
            })
            .await?;
        journey::wait_gone(&mut client, &r).await?;
        scrape_until(&metrics, "no operators running", |page| {
            page.contains("\nberth_operator_packages 0\n")
                && page.contains("berth_operator_controllers{ready=\"True\"} 0\n")
        })
        .await?;
        Ok::<_, anyhow::Error>(())
    }
    .await;
    up.proc.stop().await;
    if real.is_some() {
        let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
        let _ = crds
            .delete("configdeployments.dcontroller.io", &DeleteParams::default())
            .await;
    }
    result
}
