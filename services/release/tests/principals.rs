//! Packages' principals against a Kubernetes API (the dev cluster, or the real one of
//! `BERTH_TEST_KUBECONFIG`): the objects release makes and removes, the tokens it mints, and
//! what the API server refuses a release written as its package's principal even where
//! berth's own confinement (`confine.rs`) is not asked.
//!
//! The refusals are the API server's (the real control plane's, or the dev cluster's, which
//! enforces RBAC as kube-apiserver does).

use anyhow::{Context as _, ensure};
use berth_clients::scope::PackageScope;
use berth_devcluster::test_namespace::{TestNamespace, real_cluster};
use berth_release::apply::{Applier, ApplyError};
use berth_release::manager::{Owner, ReleaseError, ReleaseId, ReleaseManager};
use berth_release::principal::{HookEndpoint, PodSecurity, Principals, Rights};
use berth_release::record::RecordKey;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

struct Cluster {
    kube: kube::Client,
    config: kube::Config,
    _dev: Option<berth_devcluster::DevCluster>,
}

async fn cluster() -> anyhow::Result<Cluster> {
    let (kc, dev) = match real_cluster() {
        Some(path) => (Kubeconfig::read_from(&path)?, None),
        None => {
            let dev =
                berth_devcluster::DevCluster::start(berth_devcluster::DevClusterConfig::default())
                    .await?;
            (Kubeconfig::from_yaml(&dev.kubeconfig_yaml())?, Some(dev))
        }
    };
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    Ok(Cluster {
        kube: kube::Client::try_from(config.clone())?,
        config,
        _dev: dev,
    })
}

fn principals(c: &Cluster) -> anyhow::Result<Principals> {
    let endpoint = HookEndpoint::of_config(&c.config, None)?;
    Ok(Principals::new(
        Applier::new(c.kube.clone()),
        endpoint,
        PodSecurity::Baseline,
    ))
}

/// A name no other test run on the same cluster uses (modules' objects are cluster-scoped).
fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand_u32())
}

fn rand_u32() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    nanos ^ std::process::id().rotate_left(16)
}

fn kinds(written: &[berth_release::apply::ObjectKey]) -> Vec<String> {
    let mut k: Vec<String> = written.iter().map(|o| o.kind.clone()).collect();
    k.sort();
    k
}

#[tokio::test]
async fn an_apps_principal_is_made_once_labelled_and_removed() -> anyhow::Result<()> {
    let c = cluster().await?;
    let ns = TestNamespace::create(&c.kube, "principal").await?;
    let p = principals(&c)?;
    let app = PackageScope::App {
        name: "web".into(),
        namespace: ns.to_string(),
    };
    let written = p.ensure(&app, &Rights::Namespace).await?;
    ensure!(
        kinds(&written) == ["RoleBinding", "ServiceAccount"],
        "{written:?}"
    );
    // Idempotent: what is live is what is wanted, nothing is written.
    let again = p.ensure(&app, &Rights::Namespace).await?;
    ensure!(again.is_empty(), "written again: {again:?}");

    let sa = Api::<ServiceAccount>::namespaced(c.kube.clone(), &ns)
        .get("berth-app-web")
        .await?;
    let labels = sa.metadata.labels.unwrap_or_default();
    ensure!(
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str)
            == Some("berth")
    );
    ensure!(sa.automount_service_account_token == Some(false));
    let binding = Api::<RoleBinding>::namespaced(c.kube.clone(), &ns)
        .get("berth-app-web")
        .await?;
    ensure!(binding.role_ref.kind == "ClusterRole" && binding.role_ref.name == "berth-app");
    let subject = &binding.subjects.unwrap_or_default()[0];
    ensure!(subject.kind == "ServiceAccount" && subject.name == "berth-app-web");
    let role = Api::<ClusterRole>::all(c.kube.clone())
        .get("berth-app")
        .await?;
    let rules = serde_json::to_value(role.rules.unwrap_or_default())?;
    ensure!(
        rules == json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
        "{rules}"
    );

    // A binding someone deleted is made again.
    Api::<RoleBinding>::namespaced(c.kube.clone(), &ns)
        .delete("berth-app-web", &Default::default())
        .await?;
    let healed = p.ensure(&app, &Rights::Namespace).await?;
    ensure!(kinds(&healed) == ["RoleBinding"], "{healed:?}");

    let removed = p.remove(&app).await?;
    ensure!(
        kinds(&removed) == ["RoleBinding", "ServiceAccount"],
        "{removed:?}"
    );
    ensure!(
        Api::<ServiceAccount>::namespaced(c.kube.clone(), &ns)
            .get_opt("berth-app-web")
            .await?
            .is_none()
    );
    ensure!(
        p.remove(&app).await?.is_empty(),
        "removing twice is a no-op"
    );
    Ok(())
}

#[tokio::test]
async fn a_modules_rights_follow_its_rules_and_the_default() -> anyhow::Result<()> {
    let c = cluster().await?;
    let p = principals(&c)?;
    let name = unique("mod");
    let module = PackageScope::Module { name: name.clone() };
    let account = format!("berth-module-{name}");
    let rules = Rights::Rules(vec![
        json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}),
    ]);
    let result = async {
        let written = p.ensure(&module, &rules).await?;
        ensure!(
            kinds(&written) == ["ClusterRole", "ClusterRoleBinding", "ServiceAccount"],
            "{written:?}"
        );
        let sa = Api::<ServiceAccount>::namespaced(c.kube.clone(), "berth-system")
            .get(&account)
            .await?;
        ensure!(sa.metadata.name.as_deref() == Some(account.as_str()));
        let role = Api::<ClusterRole>::all(c.kube.clone()).get(&account).await?;
        let role_rules = serde_json::to_value(role.rules.unwrap_or_default())?;
        ensure!(
            role_rules
                == json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]),
            "{role_rules}"
        );
        let crbs = Api::<ClusterRoleBinding>::all(c.kube.clone());
        ensure!(crbs.get(&account).await?.role_ref.name == account);
        // Lifecycle not knowing the rules (not loaded): the bindings stay as they are.
        ensure!(p.ensure(&module, &Rights::Unknown).await?.is_empty());
        ensure!(crbs.get(&account).await?.role_ref.name == account);
        // No `rbac:` any more: cluster-admin, and the module's own role goes.
        let written = p.ensure(&module, &Rights::ClusterAdmin).await?;
        ensure!(kinds(&written) == ["ClusterRoleBinding"], "{written:?}");
        ensure!(crbs.get(&account).await?.role_ref.name == "cluster-admin");
        ensure!(
            Api::<ClusterRole>::all(c.kube.clone())
                .get_opt(&account)
                .await?
                .is_none()
        );
        Ok(())
    }
    .await;
    let removed = p.remove(&module).await?;
    result?;
    ensure!(
        kinds(&removed) == ["ClusterRoleBinding", "ServiceAccount"],
        "{removed:?}"
    );
    Ok(())
}

/// App namespaces berth makes carry the Pod Security labels; an existing namespace without an
/// `enforce` label gets them; one with it keeps its level.
#[tokio::test]
async fn app_namespaces_are_labelled_for_pod_security() -> anyhow::Result<()> {
    let c = cluster().await?;
    let namespaces = Api::<Namespace>::all(c.kube.clone());
    let labels = |n: Namespace| n.metadata.labels.unwrap_or_default();
    // Existing, unlabelled (the test namespace guard made it).
    let plain = TestNamespace::create(&c.kube, "psa-plain").await?;
    // Existing, with a level of its own.
    let decided = TestNamespace::create(&c.kube, "psa-decided").await?;
    namespaces
        .patch(
            &decided,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}),
            ),
        )
        .await?;
    let p = principals(&c)?;
    for ns in [&plain, &decided] {
        let app = PackageScope::App {
            name: "web".into(),
            namespace: ns.to_string(),
        };
        p.ensure(&app, &Rights::Namespace).await?;
        p.remove(&app).await?;
    }
    let plain_labels = labels(namespaces.get(&plain).await?);
    ensure!(
        plain_labels
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str)
            == Some("baseline")
            && plain_labels
                .get("pod-security.kubernetes.io/warn")
                .map(String::as_str)
                == Some("baseline"),
        "{plain_labels:?}"
    );
    let decided_labels = labels(namespaces.get(&decided).await?);
    ensure!(
        decided_labels
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str)
            == Some("privileged")
            && !decided_labels.contains_key("pod-security.kubernetes.io/warn"),
        "{decided_labels:?}"
    );
    Ok(())
}

/// A release written as an App's principal, with berth's own confinement not asked (the
/// manager called without the app's namespace): the API server itself refuses what reaches
/// outside the namespace, and a privileged Pod in it (Pod Security). Tokens minted for the
/// principal can do what it may, and no more.
#[tokio::test]
async fn the_api_server_refuses_what_an_apps_principal_may_not_do() -> anyhow::Result<()> {
    let c = cluster().await?;
    let ns = TestNamespace::create(&c.kube, "lastword").await?;
    let other = TestNamespace::create(&c.kube, "lastword-other").await?;
    let p = principals(&c)?;
    let app = PackageScope::App {
        name: "web".into(),
        namespace: ns.to_string(),
    };
    p.ensure(&app, &Rights::Namespace).await?;
    let endpoint = HookEndpoint::of_config(&c.config, None)?;
    let key_dir = tempfile::tempdir()?;
    let key = RecordKey::load_or_generate(&key_dir.path().join("record.key"))?;
    let manager = ReleaseManager::new(c.kube.clone(), key)
        .with_drift_repair(false)
        .with_principals(endpoint, PodSecurity::Baseline);
    let release = ReleaseId::new("web", &ns)?;
    let chart = |template: String| {
        vec![
            (
                "Chart.yaml".to_owned(),
                b"apiVersion: v2\nname: web\nversion: 1.0.0\n".to_vec(),
            ),
            ("templates/x.yaml".to_owned(), template.into_bytes()),
        ]
    };
    let crb = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: berth-test-lastword-{ns}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: default\n  namespace: {ns}\n"
    );
    let elsewhere = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: escaped\n  namespace: {other}\ndata: {{}}\n"
    );
    // hostPID and a hostPath volume of `/`: root on the node, which the baseline profile
    // refuses (`privileged: true` is refused earlier by this API server's own policy).
    let privileged = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: root\nspec:\n  hostPID: true\n  containers:\n  - name: c\n    image: busybox\n    volumeMounts: [{name: host, mountPath: /host}]\n  volumes:\n  - name: host\n    hostPath: {path: /}\n".to_owned();
    for (what, template, needle) in [
        ("a ClusterRoleBinding", crb, "clusterrolebindings"),
        ("a ConfigMap in another namespace", elsewhere, "configmaps"),
        (
            "a Pod with the node's root and PIDs",
            privileged,
            "PodSecurity",
        ),
    ] {
        let refused = manager
            .install(&release, chart(template), json!({}), &Owner::default())
            .await
            .err()
            .with_context(|| format!("{what} was applied"))?;
        let ReleaseError::Apply(ApplyError::Refused {
            message, principal, ..
        }) = &refused
        else {
            anyhow::bail!("{what}: not the API server's refusal: {refused}");
        };
        ensure!(
            principal == &format!("system:serviceaccount:{ns}:berth-app-web"),
            "{principal}"
        );
        ensure!(message.contains(needle), "{what}: {message}");
    }
    ensure!(
        Api::<ConfigMap>::namespaced(c.kube.clone(), &other)
            .get_opt("escaped")
            .await?
            .is_none()
    );

    // A token of the principal: its namespace's ConfigMaps, and nothing outside.
    let minted = p.mint(&app).await?;
    ensure!(minted.expires_unix > 0);
    let mut config = c.config.clone();
    config.auth_info = kube::config::AuthInfo {
        token: Some(minted.token.clone().into()),
        ..Default::default()
    };
    let as_app = kube::Client::try_from(config)?;
    Api::<ConfigMap>::namespaced(as_app.clone(), &ns)
        .list(&Default::default())
        .await
        .context("the app lists its own ConfigMaps")?;
    for (what, denied) in [
        (
            "another namespace's ConfigMaps",
            Api::<ConfigMap>::namespaced(as_app.clone(), &other)
                .list(&Default::default())
                .await
                .err(),
        ),
        (
            "namespaces",
            Api::<Namespace>::all(as_app.clone())
                .list(&Default::default())
                .await
                .err(),
        ),
    ] {
        ensure!(
            matches!(denied, Some(kube::Error::Api(ref s)) if s.code == 403),
            "{what}: {denied:?}"
        );
    }
    p.remove(&app).await?;
    Ok(())
}
