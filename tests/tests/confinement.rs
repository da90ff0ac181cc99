//! App confinement (issue 16.4), through real processes: an App's chart may create only
//! namespaced objects in its namespace (hooks included, no `crds/`), its `lookup` sees only its
//! namespace, and release and hookevent confine by what lifecycle says the package is — not by
//! what a caller holding a worker certificate claims.

use std::time::Duration;

use anyhow::{bail, ensure};
use berth_proto::hookevent::hook_events_client::HookEventsClient;
use berth_proto::release::releases_client::ReleasesClient;
use berth_proto::{hookevent, release, v1};
use berth_runtime::Role;
use berth_tests::{SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Api;
use kube::api::PostParams;
use serde_json::json;

/// Longest a package may take to reach the phase a test waits for.
const DEADLINE: Duration = Duration::from_secs(120);

fn fixtures() -> String {
    berth_tests::FIXTURES_REPO.to_owned()
}

fn app(name: &str, ns: &str) -> v1::PackageRef {
    v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: name.into(),
        namespace: ns.into(),
    }
}

fn update(r: &v1::PackageRef, settings: Option<serde_json::Value>) -> v1::UpdateRequest {
    v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: fixtures(),
        package: String::new(),
        version: "1.0.0".into(),
        settings: settings.as_ref().map(berth_proto::json::to_struct),
        force: false,
        settings_version: 0,
        reset_settings: false,
    }
}

/// Follows the package until `generation` is Failed; returns it.
async fn wait_failed(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    generation: i64,
) -> anyhow::Result<v1::Package> {
    journey::follow(client, r, DEADLINE, "the generation to fail", |p| {
        if p.phase == "Running" {
            bail!("the package is Running: it was not refused");
        }
        Ok(p.phase == "Failed" && p.generation == generation)
    })
    .await
}

async fn with_topology<F, Fut>(journey: F) -> anyhow::Result<()>
where
    F: FnOnce(SplitTopology, kube::Client) -> Fut,
    Fut: Future<Output = anyhow::Result<SplitTopology>>,
{
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = journey(topology, cluster.client.clone()).await;
    let result = match result {
        Ok(topology) => {
            topology.stop().await;
            Ok(())
        }
        Err(e) => Err(e),
    };
    cluster.stop().await;
    result
}

/// An App whose chart has a ClusterRoleBinding, a ConfigMap in `kube-system` and a pre-install
/// hook there is refused as a whole: the package fails for good naming each object, and
/// nothing of the chart is on the cluster — not even its own ConfigMap, nor the hook. An App
/// that ships `crds/` is refused the same way, naming them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_chart_reaching_outside_its_namespace_is_refused_whole() -> anyhow::Result<()> {
    with_topology(|topology, kube| async move {
        let ns = TestNamespace::create(&kube, "confine").await?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = app("escape", &ns);
        let accepted = client.update(update(&r, None)).await?.into_inner();
        let failed = wait_failed(&mut client, &r, accepted.generation).await?;
        let error = &failed.last_error;
        for named in [
            format!("ClusterRoleBinding /berth-test-escape-{ns}"),
            format!("ConfigMap kube-system/berth-test-escape-{ns}"),
            format!("ConfigMap kube-system/berth-test-escape-hook-{ns}"),
            format!("namespace {ns}"),
        ] {
            ensure!(error.contains(&named), "{named:?} not in {error:?}");
        }
        ensure!(
            !error.contains("escape-own"),
            "the app's own ConfigMap is not an offence: {error:?}"
        );
        let crbs: Api<ClusterRoleBinding> = Api::all(kube.clone());
        let kube_system: Api<ConfigMap> = Api::namespaced(kube.clone(), "kube-system");
        let own: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        ensure!(
            crbs.get_opt(&format!("berth-test-escape-{ns}"))
                .await?
                .is_none()
        );
        ensure!(
            kube_system
                .get_opt(&format!("berth-test-escape-{ns}"))
                .await?
                .is_none()
        );
        ensure!(
            kube_system
                .get_opt(&format!("berth-test-escape-hook-{ns}"))
                .await?
                .is_none()
        );
        ensure!(
            own.get_opt("escape-own").await?.is_none(),
            "nothing is applied when any object is refused"
        );

        let r = app("owncrd", &ns);
        let accepted = client.update(update(&r, None)).await?.into_inner();
        let failed = wait_failed(&mut client, &r, accepted.generation).await?;
        let error = &failed.last_error;
        ensure!(
            error.contains("crds/")
                && error.contains("CustomResourceDefinition /gadgets.owncrd.berth.test"),
            "the refusal names the chart's CRDs: {error:?}"
        );
        Ok(topology)
    })
    .await
}

/// An App's `lookup` finds a Secret of its own namespace, but one of another namespace, a
/// list across namespaces and a cluster-scoped Namespace come back as nothing found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_lookup_sees_only_its_namespace() -> anyhow::Result<()> {
    with_topology(|topology, kube| async move {
        let ns = TestNamespace::create(&kube, "confine").await?;
        let other = TestNamespace::create(&kube, "confine-other").await?;
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "peek"}, "stringData": {"password": "hunter2"},
        }))?;
        for namespace in [&*ns, &*other] {
            Api::<Secret>::namespaced(kube.clone(), namespace)
                .create(&PostParams::default(), &secret)
                .await?;
        }
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = app("peeker", &ns);
        let accepted = client
            .update(update(&r, Some(json!({"other": *other}))))
            .await?
            .into_inner();
        journey::wait_running(&mut client, &r, accepted.generation).await?;
        let seen = Api::<ConfigMap>::namespaced(kube.clone(), &ns)
            .get("peeker-seen")
            .await?
            .data
            .unwrap_or_default();
        let expected = [
            ("own", "found"),
            ("other", "missing"),
            ("allNamespaces", "0"),
            ("namespace", "missing"),
        ];
        for (key, value) in expected {
            ensure!(
                seen.get(key).map(String::as_str) == Some(value),
                "{key}: expected {value}, the app saw {seen:?}"
            );
        }
        Ok(topology)
    })
    .await
}

/// A channel to `server` presenting the worker's certificate.
fn as_worker(
    topology: &SplitTopology,
    endpoint: &str,
    server: Role,
) -> anyhow::Result<tonic::transport::Channel> {
    let tls = berth_runtime::Tls::from_dir(&topology.certs, Role::Worker)?;
    Ok(berth_runtime::endpoint(endpoint, Some(&tls), server)?.connect_lazy())
}

fn refused<T: std::fmt::Debug>(
    result: Result<T, tonic::Status>,
    code: tonic::Code,
    words: &[&str],
) -> anyhow::Result<()> {
    let status = match result {
        Ok(answer) => bail!("the call must be refused; it answered {answer:?}"),
        Err(status) => status,
    };
    ensure!(status.code() == code, "{status:?}");
    for word in words {
        ensure!(
            status.message().contains(word),
            "{word:?} not in {:?}",
            status.message()
        );
    }
    Ok(())
}

fn chart(template: &str) -> Vec<release::ChartFile> {
    vec![
        release::ChartFile {
            path: "Chart.yaml".into(),
            content: b"apiVersion: v2\nname: forged\nversion: 1.0.0\n".to_vec(),
        },
        release::ChartFile {
            path: "templates/t.yaml".into(),
            content: template.as_bytes().to_vec(),
        },
    ]
}

/// A caller holding a worker's certificate cannot widen an App: release looks the package up
/// itself (another namespace, a cluster-scoped object, a missing package key: refused), and
/// hookevent confines an App's bindings and object operations with no `app_namespace` given.
/// Nothing the refused calls named is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_certificate_cannot_widen_an_app() -> anyhow::Result<()> {
    with_topology(|topology, kube| async move {
        let ns = TestNamespace::create(&kube, "confine").await?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = app("peeker", &ns);
        let accepted = client.update(update(&r, None)).await?.into_inner();
        journey::wait_running(&mut client, &r, accepted.generation).await?;
        let key = format!("{ns}.peeker");
        let forged = format!("berth-test-forged-{ns}");
        let configmap = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {forged}\ndata:\n  a: b\n"
        );
        let kube_system: Api<ConfigMap> = Api::namespaced(kube.clone(), "kube-system");

        let mut releases = ReleasesClient::new(as_worker(
            &topology,
            &topology.release().endpoint(),
            Role::Release,
        )?);
        let install = |namespace: &str, package: &str, template: &str| release::InstallRequest {
            name: "peeker".into(),
            namespace: namespace.into(),
            files: chart(template),
            values: None,
            package: package.into(),
            wait_ms: 0,
        };
        // The App's release, moved to kube-system.
        refused(
            releases
                .install(install("kube-system", &key, &configmap))
                .await,
            tonic::Code::PermissionDenied,
            &["kube-system/peeker", &format!("{ns}/peeker")],
        )?;
        // In its namespace, but a cluster-scoped object.
        let binding = format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {forged}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects: []\n"
        );
        refused(
            releases.install(install(&ns, &key, &binding)).await,
            tonic::Code::PermissionDenied,
            &[&format!("ClusterRoleBinding /{forged}")],
        )?;
        // No package: no confinement to claim.
        refused(
            releases.install(install("kube-system", "", &configmap)).await,
            tonic::Code::InvalidArgument,
            &["package"],
        )?;
        // A package lifecycle does not know.
        refused(
            releases
                .install(install("kube-system", "kube-system.peeker", &configmap))
                .await,
            tonic::Code::FailedPrecondition,
            &["kube-system.peeker", "unknown"],
        )?;
        // Another release cannot be uninstalled in the App's name, nor any without a package.
        let uninstall = |name: &str, namespace: &str, package: &str| release::UninstallRequest {
            name: name.into(),
            namespace: namespace.into(),
            package: package.into(),
        };
        refused(
            releases
                .uninstall(uninstall("coredns", "kube-system", &key))
                .await,
            tonic::Code::PermissionDenied,
            &["kube-system/coredns", &format!("{ns}/peeker")],
        )?;
        refused(
            releases
                .uninstall(uninstall("peeker", &ns, ""))
                .await,
            tonic::Code::InvalidArgument,
            &["package"],
        )?;
        // Render (whose lookup a package key would confine) is not a worker's to call.
        refused(
            releases
                .render(release::RenderRequest {
                    name: "peeker".into(),
                    namespace: "kube-system".into(),
                    files: chart(&configmap),
                    ..Default::default()
                })
                .await,
            tonic::Code::PermissionDenied,
            &["worker"],
        )?;

        let mut hookevents = HookEventsClient::new(as_worker(
            &topology,
            &topology.hookevent().endpoint(),
            Role::Hookevent,
        )?);
        refused(
            hookevents
                .set_bindings(hookevent::SetBindingsRequest {
                    package: key.clone(),
                    generation: accepted.generation,
                    kubernetes: vec![hookevent::KubernetesBinding {
                        hook: "spy.sh".into(),
                        binding: "namespaces".into(),
                        api_version: "v1".into(),
                        kind: "Namespace".into(),
                        ..Default::default()
                    }],
                    app_namespace: String::new(),
                    ..Default::default()
                })
                .await,
            tonic::Code::InvalidArgument,
            &["cluster-scoped", &format!("namespace {ns}")],
        )?;
        // Operators are checked at this edge as at Load, and an app's may not watch another
        // namespace.
        let operator = |source: serde_json::Value, pipeline: serde_json::Value| {
            berth_proto::json::to_struct(&json!({
                "apiVersion": "dcontroller.io/v1alpha1", "kind": "Operator",
                "metadata": {"name": "spy"},
                "spec": {"controllers": [{"name": "secrets", "sources": [source],
                    "pipeline": pipeline, "target": {"kind": "Loot"}}]}}))
        };
        for (op, words) in [
            (
                operator(
                    json!({"apiGroup": "", "kind": "Secret", "namespace": "kube-system"}),
                    json!({"@project": {"metadata": "$.metadata"}}),
                ),
                vec![
                    "operators[0] (spy)".to_owned(),
                    "sources[0] watches namespace kube-system".to_owned(),
                    format!("namespace {ns}"),
                ],
            ),
            (
                operator(
                    json!({"apiGroup": "", "kind": "Secret"}),
                    json!({"@project": {"x": {"@steal": 1}}}),
                ),
                vec!["operators[0]".to_owned(), "unknown operator @steal".to_owned()],
            ),
        ] {
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            refused(
                hookevents
                    .set_bindings(hookevent::SetBindingsRequest {
                        package: key.clone(),
                        generation: accepted.generation,
                        operators: vec![op],
                        ..Default::default()
                    })
                    .await,
                tonic::Code::InvalidArgument,
                &words,
            )?;
        }
        refused(
            hookevents
                .apply_object_operations(hookevent::ApplyObjectOperationsRequest {
                    package: key.clone(),
                    hook: "spy.sh".into(),
                    operations: vec![hookevent::ObjectOperation {
                        operation: "Create".into(),
                        api_version: "v1".into(),
                        kind: "ConfigMap".into(),
                        namespace: "kube-system".into(),
                        name: forged.clone(),
                        body: Some(berth_proto::json::to_value(&json!({
                            "apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": forged, "namespace": "kube-system"},
                        }))),
                        ..Default::default()
                    }],
                })
                .await,
            tonic::Code::InvalidArgument,
            &["namespace kube-system", &format!("namespace {ns}")],
        )?;

        ensure!(kube_system.get_opt(&forged).await?.is_none());
        let crbs: Api<ClusterRoleBinding> = Api::all(kube.clone());
        ensure!(crbs.get_opt(&forged).await?.is_none());
        Ok(topology)
    })
    .await
}
