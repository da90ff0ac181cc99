//! Packages' declarative operators in the cluster (issue 35), through `berth up` on the dev
//! cluster or the real one named by `BERTH_TEST_KUBECONFIG`: Δ-controller's three examples,
//! their specs read unchanged from `../shared/upstream/dcontroller`, each shipped in an App
//! (`operators/`), doing what their READMEs show: configmap-deployment-controller rolls a
//! Deployment when its ConfigMap changes, service-health-monitor annotates a Service with its
//! pods' readiness through a view, and endpointslice-controller's declarative spec keeps one
//! EndpointView per (service port, ready address), read through `berth operator views` and
//! with kubectl through the view API.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, ensure};
use berth_proto::v1;
use berth_tests::{AllInOne, TestNamespace, journey};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::io::AsyncBufReadExt as _;

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
        let out = berth_tests::cli()
            .args(["--server", &up.proc.endpoint()])
            .args(["operator", "views", "configdep", "-n", &ns])
            .output()
            .await?;
        let said = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success() && said.contains("no operators running"),
            "views after the removal: {said}"
        );
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

/// An App `name` in a fresh namespace whose package ships `operator` as
/// `operators/<file>` and `chart` as its one template; installed and Running.
async fn install_app(
    up: &AllInOne,
    kube: &kube::Client,
    name: &str,
    file: &str,
    operator: &str,
    chart: &str,
) -> anyhow::Result<(TestNamespace, v1::PackageRef, tempfile::TempDir)> {
    let ns = TestNamespace::create(kube, name).await?;
    let (repo_dir, repo) = berth_tests::temp_repo();
    let mut files = vec![(format!("operators/{file}"), operator.to_owned())];
    if !chart.is_empty() {
        files.push(("templates/objects.yaml".to_owned(), chart.to_owned()));
    }
    let files: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    berth_tests::write_app(repo_dir.path(), name, &files)?;
    let mut client = journey::connect(&up.proc.endpoint()).await?;
    let r = v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: name.into(),
        namespace: ns.to_string(),
    };
    let g = client
        .update(v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: repo,
            version: "1.0.0".into(),
            ..Default::default()
        })
        .await?
        .into_inner()
        .generation;
    journey::wait_running(&mut client, &r, g).await?;
    Ok((ns, r, repo_dir))
}

/// The Service of service-health-monitor's README, in the chart.
const WEB_SERVICE: &str = r#"apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
    - port: 80
"#;

/// A Pod of the `web` app that opted into health monitoring.
fn web_pod(name: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "web",
            "dcontroller.io/health-monitor": "enabled"}},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }))?)
}

/// Sets the Pod's Ready condition (no kubelet here sets it).
async fn set_ready(pods: &Api<Pod>, name: &str, ready: bool) -> anyhow::Result<()> {
    let status = if ready { "True" } else { "False" };
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"conditions": [
            {"type": "Ready", "status": status, "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ]}})),
    )
    .await?;
    Ok(())
}

/// service-health-monitor: the pods' readiness goes through the HealthView into the
/// Service's `dcontroller.io/pod-ready` annotation (ready pods over pods, following them as
/// one goes), and the HealthView is there to read with `berth operator views`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_health_example_annotates_the_service() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let result = async {
        let operator = read_upstream("service-health-monitor/svc-health-operator.yaml")?;
        let (ns, r, _repo) = install_app(
            &up,
            &kube,
            "svchealth",
            "svc-health-operator.yaml",
            &operator,
            WEB_SERVICE,
        )
        .await?;
        let pods: Api<Pod> = Api::namespaced(kube.clone(), &ns);
        let services: Api<Service> = Api::namespaced(kube.clone(), &ns);
        for name in ["web-1", "web-2"] {
            pods.create(&PostParams::default(), &web_pod(name)?).await?;
        }
        set_ready(&pods, "web-1", true).await?;
        set_ready(&pods, "web-2", false).await?;
        // Where the cluster runs pods (the real control plane's node marks them Ready), its
        // word counts: the annotation is the live pods' ready count over their number.
        let follows = |total: usize| {
            let (services, pods) = (services.clone(), pods.clone());
            async move {
                berth_tests::until(
                    &format!("pod-ready of {total} pods"),
                    DEADLINE,
                    POLL,
                    || {
                        let (services, pods) = (services.clone(), pods.clone());
                        async move {
                            let live = pods.list(&Default::default()).await?.items;
                            let ready = live
                                .iter()
                                .filter(|p| {
                                    p.status
                                        .as_ref()
                                        .and_then(|s| s.conditions.as_ref())
                                        .is_some_and(|c| {
                                            c.iter()
                                                .any(|c| c.type_ == "Ready" && c.status == "True")
                                        })
                                })
                                .count();
                            let want = format!("{ready}/{}", live.len());
                            let seen = services
                                .get("web")
                                .await?
                                .metadata
                                .annotations
                                .and_then(|a| a.get("dcontroller.io/pod-ready").cloned());
                            Ok(
                                (live.len() == total && seen.as_deref() == Some(want.as_str()))
                                    .then_some(want),
                            )
                        }
                    },
                )
                .await
            }
        };
        let two = follows(2).await?;
        pods.delete("web-2", &DeleteParams::default().grace_period(0))
            .await?;
        let one = follows(1).await?;
        ensure!(
            two.ends_with("/2") && one.ends_with("/1"),
            "{two} then {one}"
        );

        let out = berth_tests::cli()
            .args(["--server", &up.proc.endpoint()])
            .args(["operator", "views", &r.name, "-n", &ns, "-o", "json"])
            .output()
            .await?;
        ensure!(
            out.status.success(),
            "berth operator views: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let views: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
        ensure!(views.len() == 1, "one HealthView: {views:?}");
        let view = &views[0];
        ensure!(
            view["apiVersion"] == "svc-health-operator.view.dcontroller.io/v1alpha1"
                && view["kind"] == "HealthView"
                && view["metadata"]["name"] == "web"
                && view["pods"] == json!([{"podName": "web-1", "ready": "True"}]),
            "{view}"
        );
        Ok::<_, anyhow::Error>(())
    }
    .await;
    up.proc.stop().await;
    result
}

/// kubectl pointed at a package's view API (`--server`, the harness's token, berth's CA, no
/// kubeconfig).
fn kubectl_views_command(
    views: &str,
    key: &str,
    scratch: &Path,
    args: &[&str],
) -> anyhow::Result<tokio::process::Command> {
    let ca = scratch.join("data/tls/ca.pem");
    let kubeconfig = scratch.join("empty-kubeconfig");
    std::fs::write(&kubeconfig, "")?;
    let mut command = tokio::process::Command::new("kubectl");
    command
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--cache-dir")
        .arg(scratch.join("kubectl-cache"))
        .arg(format!("--server=https://{views}/packages/{key}"))
        .arg(format!("--certificate-authority={}", ca.display()))
        .arg(format!("--token={}", berth_tests::api_token().token))
        .args(args);
    Ok(command)
}

/// Runs kubectl against a package's view API; fails naming what it printed unless it
/// succeeded.
async fn kubectl_views(
    views: &str,
    key: &str,
    scratch: &Path,
    args: &[&str],
) -> anyhow::Result<String> {
    let out = tokio::time::timeout(
        DEADLINE,
        kubectl_views_command(views, key, scratch, args)?.output(),
    )
    .await
    .context("kubectl did not finish")??;
    ensure!(
        out.status.success(),
        "kubectl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The (port, address) pairs of the EndpointViews kubectl lists through the view API.
async fn endpoint_views(
    views: &str,
    key: &str,
    ns: &str,
    scratch: &Path,
) -> anyhow::Result<Vec<(i64, String)>> {
    let group = "endpointslice-controller-spec.view.dcontroller.io";
    let text = kubectl_views(
        views,
        key,
        scratch,
        &[
            "get",
            &format!("endpointviews.{group}"),
            "-n",
            ns,
            "-o",
            "json",
        ],
    )
    .await?;
    let list: serde_json::Value = serde_json::from_str(&text)?;
    let mut pairs: Vec<(i64, String)> = list["items"]
        .as_array()
        .context("a list")?
        .iter()
        .map(|o| {
            (
                o["spec"]["port"].as_i64().unwrap_or_default(),
                o["spec"]["address"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    pairs.sort();
    Ok(pairs)
}

fn slice(addresses: &[(&str, bool)]) -> anyhow::Result<EndpointSlice> {
    let endpoints: Vec<serde_json::Value> = addresses
        .iter()
        .map(|(a, ready)| json!({"addresses": [a], "conditions": {"ready": ready}}))
        .collect();
    Ok(serde_json::from_value(json!({
        "metadata": {"name": "testsvc-1", "labels": {"kubernetes.io/service-name": "testsvc"}},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
    }))?)
}

/// The README's annotated Service `testsvc` (ports 80 and 8843, no selector: the test makes its
/// EndpointSlice, as upstream's tests do) and its slice: 10.0.0.1 and .2 ready, .3 not.
async fn endpoints_of_testsvc(
    services: &Api<Service>,
    slices: &Api<EndpointSlice>,
) -> anyhow::Result<()> {
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "testsvc", "annotations": {
            "dcontroller.io/endpointslice-controller-enabled": "true"}},
        "spec": {"ports": [
            {"name": "http", "protocol": "TCP", "port": 80},
            {"name": "https", "protocol": "TCP", "port": 8843},
        ]},
    }))?;
    services.create(&PostParams::default(), &svc).await?;
    slices
        .create(
            &PostParams::default(),
            &slice(&[("10.0.0.1", true), ("10.0.0.2", true), ("10.0.0.3", false)])?,
        )
        .await?;
    Ok(())
}

/// 10.0.0.3 turns ready (the README's scale-up).
async fn third_address_ready(slices: &Api<EndpointSlice>) -> anyhow::Result<()> {
    slices
        .replace(
            "testsvc-1",
            &PostParams::default(),
            &EndpointSlice {
                metadata: slices.get("testsvc-1").await?.metadata,
                ..slice(&[("10.0.0.1", true), ("10.0.0.2", true), ("10.0.0.3", true)])?
            },
        )
        .await?;
    Ok(())
}

/// endpointslice-controller's declarative spec: one EndpointView per (service port, ready
/// address), as its README lists them: 2 ports × 2 ready addresses, then a third address
/// turns ready (6), then the Service goes (none). Read with kubectl through the view API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpointslice_example_keeps_its_views() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let result = async {
        let spec = read_upstream("endpointslice-controller/endpointslice-controller-spec.yaml")?;
        let (ns, r, _repo) = install_app(
            &up,
            &kube,
            "endpoints",
            "endpointslice-controller-spec.yaml",
            &spec,
            "",
        )
        .await?;
        let key = format!("{}.{}", r.namespace, r.name);
        let views = up.proc.views.clone().context("berth up's view API")?;
        let services: Api<Service> = Api::namespaced(kube.clone(), &ns);
        let slices: Api<EndpointSlice> = Api::namespaced(kube.clone(), &ns);
        endpoints_of_testsvc(&services, &slices).await?;
        let want = |addresses: &[&str]| {
            let mut pairs: Vec<(i64, String)> = addresses
                .iter()
                .flat_map(|a| [(80, (*a).to_owned()), (8843, (*a).to_owned())])
                .collect();
            pairs.sort();
            pairs
        };
        let wait = |expected: Vec<(i64, String)>, what: &'static str| {
            let (views, key, ns) = (views.clone(), key.clone(), ns.to_string());
            let scratch = dir.path().to_owned();
            async move {
                berth_tests::until(what, DEADLINE, POLL, || {
                    let (views, key, ns, scratch) =
                        (views.clone(), key.clone(), ns.clone(), scratch.clone());
                    let expected = expected.clone();
                    async move {
                        let seen = endpoint_views(&views, &key, &ns, &scratch).await?;
                        Ok((seen == expected).then_some(()))
                    }
                })
                .await
            }
        };
        wait(want(&["10.0.0.1", "10.0.0.2"]), "4 EndpointViews").await?;
        // `kubectl get -w` through the view API: after the list, the changes come as events.
        let mut watching = kubectl_views_command(
            &views,
            &key,
            dir.path(),
            &[
                "get",
                "endpointviews.endpointslice-controller-spec.view.dcontroller.io",
                "-n",
                &ns,
                "--watch-only",
                "--output-watch-events",
                "-v=6",
                "-o",
                "jsonpath={.type} {.object.spec.address} {.object.spec.port}{\"\\n\"}",
            ],
        )?
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("watch.err"))?)
        .kill_on_drop(true)
        .spawn()?;
        let mut lines =
            tokio::io::BufReader::new(watching.stdout.take().context("stdout")?).lines();
        // Changes made before its watch is open are part of its list, not events: wait until
        // kubectl says (at -v=6) the watch request was answered.
        let err = dir.path().join("watch.err");
        berth_tests::until("kubectl's watch open", DEADLINE, POLL, || async {
            let said = std::fs::read_to_string(&err).unwrap_or_default();
            Ok(said.contains("watch=true").then_some(()))
        })
        .await?;
        third_address_ready(&slices).await?;
        wait(
            want(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
            "6 EndpointViews",
        )
        .await?;
        let mut events = Vec::new();
        let watched = tokio::time::timeout(DEADLINE, async {
            while let Some(line) = lines.next_line().await? {
                events.push(line.trim().to_owned());
                let mut seen: Vec<&String> =
                    events.iter().filter(|e| e.contains("10.0.0.3")).collect();
                seen.sort();
                if seen.len() == 2 {
                    let seen: Vec<String> = seen.iter().map(|s| s.to_string()).collect();
                    return Ok::<_, anyhow::Error>(seen);
                }
            }
            anyhow::bail!("the watch ended: {events:?}")
        })
        .await
        .with_context(|| {
            format!(
                "kubectl get -w showed the new address; it said: {}",
                std::fs::read_to_string(dir.path().join("watch.err")).unwrap_or_default()
            )
        })??;
        ensure!(
            watched
                == vec![
                    "ADDED 10.0.0.3 80".to_owned(),
                    "ADDED 10.0.0.3 8843".to_owned()
                ],
            "{watched:?}"
        );
        let _ = watching.kill().await;
        // One object by name through the view API, as `kubectl get` shows it.
        let names = kubectl_views(
            &views,
            &key,
            dir.path(),
            &[
                "get",
                "endpointviews.endpointslice-controller-spec.view.dcontroller.io",
                "-n",
                &ns,
                "-o",
                "name",
            ],
        )
        .await?;
        let first = names.lines().next().context("a name")?;
        let one = kubectl_views(
            &views,
            &key,
            dir.path(),
            &["get", first, "-n", &ns, "-o", "json"],
        )
        .await?;
        let one: serde_json::Value = serde_json::from_str(&one)?;
        ensure!(
            one["spec"]["serviceName"] == "testsvc" && one["spec"]["type"] == "ClusterIP",
            "{one}"
        );
        services.delete("testsvc", &DeleteParams::default()).await?;
        wait(Vec::new(), "no EndpointViews").await?;
        Ok::<_, anyhow::Error>(())
    }
    .await;
    up.proc.stop().await;
    result
}

/// An App's operators act as the App: they see its namespace only (a labelled ConfigMap in
/// another namespace is never mirrored, the App's own is), and a write into another
/// namespace is refused by the API server (the App's ServiceAccount may not write there):
/// nothing is made there, and the package says so in `OperatorsReady=Unknown` naming the
/// object and the refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_operators_stay_in_its_namespace() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let result = async {
        let other = TestNamespace::create(&kube, "elsewhere").await?;
        let others: Api<ConfigMap> = Api::namespaced(kube.clone(), &other);
        let labelled = |name: &str| -> anyhow::Result<ConfigMap> {
            Ok(serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"mirror": "yes"}},
                "data": {"secret": "s3cret"},
            }))?)
        };
        others
            .create(&PostParams::default(), &labelled("seed-other")?)
            .await?;
        let operator = format!(
            r#"apiVersion: dcontroller.io/v1alpha1
kind: Operator
metadata:
  name: escape
spec:
  controllers:
    - name: mirror
      sources:
        - apiGroup: ""
          kind: ConfigMap
          labelSelector:
            matchLabels: {{mirror: "yes"}}
      pipeline:
        - "@project":
            metadata:
              name: {{"@concat": ["copy-", "$.metadata.name"]}}
              namespace: $.metadata.namespace
            data: $.data
      target:
        apiGroup: ""
        kind: ConfigMap
    - name: copy-out
      sources:
        - apiGroup: ""
          kind: ConfigMap
          labelSelector:
            matchLabels: {{mirror: "yes"}}
      pipeline:
        - "@project":
            metadata:
              name: stolen
              namespace: {other}
            data: $.data
      target:
        apiGroup: ""
        kind: ConfigMap
"#,
            other = &*other
        );
        let chart = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: seed\n  labels:\n    \
                     mirror: \"yes\"\ndata:\n  secret: mine\n";
        let (ns, r, _repo) =
            install_app(&up, &kube, "escape", "escape.yaml", &operator, chart).await?;
        let own: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        berth_tests::until(
            "copy-seed in the App's namespace",
            DEADLINE,
            POLL,
            || async { Ok(own.get_opt("copy-seed").await?.map(|_| ())) },
        )
        .await?;
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        let p = journey::follow(&mut client, &r, DEADLINE, "OperatorsReady=Unknown", |p| {
            Ok(journey::condition(p, "OperatorsReady").is_some_and(|c| c.0 == "Unknown"))
        })
        .await?;
        let (_, reason, message) = journey::condition(&p, "OperatorsReady").context("condition")?;
        ensure!(
            reason == "ReconciliationFailed"
                && message.contains("escape/copy-out")
                && message.contains(&format!("ConfigMap {}/stolen", &*other))
                && message.contains("forbidden"),
            "{reason}: {message}"
        );
        ensure!(
            others.get_opt("stolen").await?.is_none(),
            "an App's operator wrote into another namespace"
        );
        ensure!(
            own.get_opt("copy-seed-other").await?.is_none()
                && others.get_opt("copy-seed-other").await?.is_none(),
            "an App's operator saw another namespace's ConfigMap"
        );
        Ok::<_, anyhow::Error>(())
    }
    .await;
    up.proc.stop().await;
    result
}

/// The EndpointView addresses `berth operator views` prints for the package.
async fn cli_views(endpoint: &str, r: &v1::PackageRef) -> anyhow::Result<Vec<String>> {
    let out = berth_tests::cli()
        .args(["--server", endpoint])
        .args([
            "operator",
            "views",
            &r.name,
            "-n",
            &r.namespace,
            "-o",
            "json",
        ])
        .output()
        .await?;
    if !out.status.success() {
        // Not running yet (after a restart, until hookevent restored it).
        return Ok(Vec::new());
    }
    let views: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
    let mut seen: Vec<String> = views
        .iter()
        .filter(|v| v["kind"] == "EndpointView")
        .map(|v| format!("{} {}", v["spec"]["address"], v["spec"]["port"]))
        .collect();
    seen.sort();
    Ok(seen)
}

/// Views live in memory: after berth restarts, hookevent starts the package's operators again
/// and they rebuild their views from the cluster (the same four EndpointViews), and go on
/// following it (a third ready address adds two).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_rebuild_their_views_after_a_restart() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("data");
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(PathBuf::from);
    let up = AllInOne::start(&data, real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let spec = read_upstream("endpointslice-controller/endpointslice-controller-spec.yaml")?;
    let installed = install_app(
        &up,
        &kube,
        "restarted",
        "endpointslice-controller-spec.yaml",
        &spec,
        "",
    )
    .await;
    let (ns, r, _repo) = match installed {
        Ok(i) => i,
        Err(e) => {
            up.proc.stop().await;
            return Err(e);
        }
    };
    let services: Api<Service> = Api::namespaced(kube.clone(), &ns);
    let slices: Api<EndpointSlice> = Api::namespaced(kube.clone(), &ns);
    let four = vec![
        "\"10.0.0.1\" 80".to_owned(),
        "\"10.0.0.1\" 8843".to_owned(),
        "\"10.0.0.2\" 80".to_owned(),
        "\"10.0.0.2\" 8843".to_owned(),
    ];
    let wait = |endpoint: String, want: Vec<String>, what: &'static str| {
        let r = r.clone();
        async move {
            berth_tests::until(what, DEADLINE, POLL, || async {
                let seen = cli_views(&endpoint, &r).await?;
                Ok((seen == want).then_some(()))
            })
            .await
        }
    };
    let before = async {
        endpoints_of_testsvc(&services, &slices).await?;
        wait(up.proc.endpoint(), four.clone(), "4 EndpointViews").await
    }
    .await;
    up.proc.stop().await;
    before?;

    let up = AllInOne::start(&data, real.as_deref()).await?;
    let after = async {
        // The dev cluster came back on a port of its own.
        let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
        let slices: Api<EndpointSlice> = Api::namespaced(kube, &ns);
        wait(
            up.proc.endpoint(),
            four.clone(),
            "the 4 EndpointViews again",
        )
        .await?;
        third_address_ready(&slices).await?;
        let mut six = four.clone();
        six.extend(["\"10.0.0.3\" 80".to_owned(), "\"10.0.0.3\" 8843".to_owned()]);
        six.sort();
        wait(up.proc.endpoint(), six, "6 EndpointViews after the restart").await
    }
    .await;
    up.proc.stop().await;
    after
}

/// An operator of one's own: every ConfigMap labelled `feed: "yes"` becomes the ConfigMap
/// `out-<name>` with `data.v` set to `version`.
fn feeding_operator(version: &str) -> String {
    format!(
        r#"apiVersion: dcontroller.io/v1alpha1
kind: Operator
metadata:
  name: feeder
spec:
  controllers:
    - name: out
      sources:
        - apiGroup: ""
          kind: ConfigMap
          labelSelector:
            matchLabels: {{feed: "yes"}}
      pipeline:
        - "@project":
            metadata:
              name: {{"@concat": ["out-", "$.metadata.name"]}}
              namespace: $.metadata.namespace
            data:
              v: "{version}"
      target:
        apiGroup: ""
        kind: ConfigMap
"#
    )
}

/// A new version whose operator spec changed replaces the running operator when it is
/// Running: the Updater's object shows the new spec's output.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_rebuilds_a_changed_operator() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let result = async {
        let chart = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: in\n  labels:\n    \
                     feed: \"yes\"\n";
        let (ns, r, repo_dir) = install_app(
            &up,
            &kube,
            "feeder",
            "feeder.yaml",
            &feeding_operator("one"),
            chart,
        )
        .await?;
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        let out_is = |want: &'static str| {
            let cms = cms.clone();
            async move {
                berth_tests::until(&format!("out-in v={want}"), DEADLINE, POLL, || async {
                    let v = cms
                        .get_opt("out-in")
                        .await?
                        .and_then(|c| c.data)
                        .and_then(|d| d.get("v").cloned());
                    Ok((v.as_deref() == Some(want)).then_some(()))
                })
                .await
            }
        };
        out_is("one").await?;
        berth_tests::write_app_version(
            repo_dir.path(),
            "feeder",
            "2.0.0",
            &[
                ("operators/feeder.yaml", &feeding_operator("two")),
                ("templates/objects.yaml", chart),
            ],
        )?;
        let repo = repo_dir
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .context("the repository's name")?
            .to_owned();
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        let g = client
            .update(v1::UpdateRequest {
                r#ref: Some(r.clone()),
                repository: repo,
                version: "2.0.0".into(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .generation;
        journey::wait_running(&mut client, &r, g).await?;
        out_is("two").await?;
        Ok::<_, anyhow::Error>(())
    }
    .await;
    up.proc.stop().await;
    result
}

/// An Updater's objects are the package's, as its chart's are: they carry its release, come
/// back when deleted and lose an edit (drift repair); and an object that is not the package's
/// is not written over (ownership): the package says so in `OperatorsReady`, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_updaters_objects_are_the_packages() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let real = std::env::var_os("BERTH_TEST_KUBECONFIG").map(PathBuf::from);
    let up = AllInOne::start(&dir.path().join("data"), real.as_deref()).await?;
    let kube = berth_tests::cluster::client_for(&up.kubeconfig).await?;
    let result = async {
        // Two ConfigMaps feed the operator: `in` (the chart's) and `taken`, whose output name
        // `out-taken` is a ConfigMap someone else made before.
        let chart = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: in\n  labels:\n    \
                     feed: \"yes\"\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: \
                     taken\n  labels:\n    feed: \"yes\"\n";
        let ns = TestNamespace::create(&kube, "owned").await?;
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        let theirs: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "out-taken"}, "data": {"v": "theirs"},
        }))?;
        cms.create(&PostParams::default(), &theirs).await?;
        let (repo_dir, repo) = berth_tests::temp_repo();
        berth_tests::write_app(
            repo_dir.path(),
            "owned",
            &[
                ("operators/feeder.yaml", &feeding_operator("one")),
                ("templates/objects.yaml", chart),
            ],
        )?;
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "owned".into(),
            namespace: ns.to_string(),
        };
        let g = client
            .update(v1::UpdateRequest {
                r#ref: Some(r.clone()),
                repository: repo,
                version: "1.0.0".into(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .generation;
        journey::wait_running(&mut client, &r, g).await?;
        let v_of = |name: &'static str| {
            let cms = cms.clone();
            async move {
                Ok::<_, anyhow::Error>(
                    cms.get_opt(name)
                        .await?
                        .and_then(|c| c.data)
                        .and_then(|d| d.get("v").cloned()),
                )
            }
        };
        let out_is_one = || async {
            berth_tests::until("out-in v=one", DEADLINE, POLL, || async {
                Ok((v_of("out-in").await?.as_deref() == Some("one")).then_some(()))
            })
            .await
        };
        out_is_one().await?;
        let out = cms.get("out-in").await?;
        let annotations = out.metadata.annotations.clone().unwrap_or_default();
        ensure!(
            annotations
                .get("meta.helm.sh/release-name")
                .map(String::as_str)
                == Some("owned")
                && annotations
                    .get("meta.helm.sh/release-namespace")
                    .map(String::as_str)
                    == Some(&*ns),
            "the Updater's object carries the package's release: {annotations:?}"
        );
        // Deleted: it comes back (a new object). Edited: the edit is undone.
        let first_uid = out.metadata.uid.clone();
        cms.delete("out-in", &DeleteParams::default()).await?;
        berth_tests::until("out-in made again", DEADLINE, POLL, || async {
            let again = cms.get_opt("out-in").await?;
            Ok(again.filter(|c| c.metadata.uid != first_uid).map(|_| ()))
        })
        .await?;
        out_is_one().await?;
        cms.patch(
            "out-in",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "edited"}})),
        )
        .await?;
        out_is_one().await?;

        // Someone else's object is left alone, and the package says why.
        let p = journey::follow(&mut client, &r, DEADLINE, "OperatorsReady=Unknown", |p| {
            Ok(journey::condition(p, "OperatorsReady").is_some_and(|c| c.0 == "Unknown"))
        })
        .await?;
        let (_, _, message) = journey::condition(&p, "OperatorsReady").context("condition")?;
        ensure!(
            message.contains("out-taken") && message.contains("belongs to no release"),
            "{message}"
        );
        ensure!(
            v_of("out-taken").await?.as_deref() == Some("theirs"),
            "an operator wrote over an object that is not its package's"
        );
        Ok::<_, anyhow::Error>(())
    }
    .await;
    up.proc.stop().await;
    result
}
