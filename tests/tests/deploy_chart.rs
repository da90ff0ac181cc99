//! berth's own Helm chart (`deploy/chart`, issue 17.3), installed with the real `helm install`
//! into the real control plane of `BERTH_TEST_KUBECONFIG` (CI's second run). The node simulator
//! "runs" every pod, so what this proves is what the API server accepted — every object valid,
//! every Deployment available — and that `berth render` of the chart gives exactly what helm
//! installed. Skipped, saying so, without a real cluster or without `helm` on PATH.

use std::path::{Path, PathBuf};
use std::process::Output;

use anyhow::{Context as _, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::{Discovery, Scope};
use serde::Deserialize;

fn helm() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("helm"))
            .find(|p| p.is_file())
    })
}

async fn run(program: &Path, args: &[&str]) -> anyhow::Result<Output> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
        .with_context(|| format!("starting {}", program.display()))?;
    ensure!(
        out.status.success(),
        "{} {}: {}",
        program.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

/// The Secrets the chart's values say to create first: every role's certificate, the gateway's
/// tokens and the database URLs.
async fn prerequisites(kube: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let gateway_host = format!("berth-gateway.{ns}.svc");
    berth_runtime::tls::generate(dir.path(), &["berth-gateway".to_owned(), gateway_host])?;
    let mut certs = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir.path())? {
        let path = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .context("a certificate file name")?
            .to_owned();
        certs.insert(name, std::fs::read_to_string(&path)?);
    }
    let secret = |name: &str, data: std::collections::BTreeMap<String, String>| -> Secret {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "stringData": data,
        }))
        .expect("a Secret")
    };
    let secrets: Api<Secret> = Api::namespaced(kube.clone(), ns);
    let pp = PostParams::default();
    secrets.create(&pp, &secret("berth-certs", certs)).await?;
    let tokens = [("tokens".to_owned(), "a-test-token\n".to_owned())].into();
    secrets
        .create(&pp, &secret("berth-gateway-tokens", tokens))
        .await?;
    let urls = ["queue", "lifecycle", "hookevent"]
        .map(|db| {
            (
                db.to_owned(),
                format!("postgres://berth@postgres:5432/berth_{db}"),
            )
        })
        .into();
    secrets.create(&pp, &secret("berth-database", urls)).await?;
    Ok(())
}

/// `manifest` with the generated release record key's value replaced by a placeholder.
fn without_record_key(manifest: &str) -> String {
    manifest
        .split("\n---")
        .map(|doc| {
            if !doc.contains("# Source: berth/templates/record-key.yaml") {
                return doc.to_owned();
            }
            doc.lines()
                .map(|l| match l.strip_prefix("  key: ") {
                    Some(_) => "  key: (generated)",
                    None => l,
                })
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect::<Vec<_>>()
        .join("\n---")
}

/// The release record key the chart generated is a real key (at least 32 bytes), mounted
/// into the release pods, and survives `helm upgrade`: records made with another key would
/// not be berth's.
async fn record_key_is_kept(
    kube: &kube::Client,
    helm: &Path,
    kc: &str,
    ns: &str,
    chart: &str,
    release: &str,
) -> anyhow::Result<()> {
    let secrets: Api<Secret> = Api::namespaced(kube.clone(), ns);
    let name = format!("{release}-record-key");
    let key = |s: Secret| {
        s.data
            .and_then(|d| d.get("key").map(|k| k.0.clone()))
            .unwrap_or_default()
    };
    let before = key(secrets.get(&name).await?);
    ensure!(before.len() >= 32, "a {}-byte record key", before.len());
    run(
        helm,
        &[
            "upgrade",
            release,
            chart,
            "--namespace",
            ns,
            "--kubeconfig",
            kc,
        ],
    )
    .await?;
    let after = key(secrets.get(&name).await?);
    ensure!(
        before == after,
        "helm upgrade replaced the release record key"
    );
    let deployments: Api<Deployment> = Api::namespaced(kube.clone(), ns);
    let pod = deployments
        .get(&format!("{release}-release"))
        .await?
        .spec
        .template
        .spec
        .context("the release pods' spec")?;
    let mounted = pod.volumes.unwrap_or_default().iter().any(|v| {
        v.secret
            .as_ref()
            .is_some_and(|s| s.secret_name.as_deref() == Some(name.as_str()))
    });
    ensure!(mounted, "the release pods do not mount {name}");
    Ok(())
}

#[derive(Deserialize)]
struct Meta {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Doc {
    api_version: String,
    kind: String,
    metadata: Meta,
}

/// `(apiVersion, kind, name)` of every document of a manifest.
fn objects(manifest: &str) -> anyhow::Result<Vec<Doc>> {
    let mut docs = Vec::new();
    for text in manifest.split("\n---") {
        let text = text.trim();
        if text
            .lines()
            .all(|l| l.trim().is_empty() || l.starts_with('#'))
        {
            continue;
        }
        docs.push(serde_saphyr::from_str(text).with_context(|| format!("a document:\n{text}"))?);
    }
    Ok(docs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deploy_chart_installs_with_helm_into_a_real_cluster() -> anyhow::Result<()> {
    let Some(kubeconfig) = std::env::var_os("BERTH_TEST_KUBECONFIG").map(PathBuf::from) else {
        println!("skipped: needs a real control plane (BERTH_TEST_KUBECONFIG)");
        return Ok(());
    };
    let Some(helm) = helm() else {
        println!("skipped: no helm on PATH");
        return Ok(());
    };
    let kube = berth_tests::cluster::client_for(&kubeconfig).await?;
    let ns = berth_tests::TestNamespace::create(&kube, "deploy").await?;
    prerequisites(&kube, &ns).await?;
    let chart = berth_tests::workspace_root().join("deploy/chart");
    let chart = chart.to_str().context("a UTF-8 path")?;
    let kc = kubeconfig.to_str().context("a UTF-8 path")?;
    let release = "berth";
    let installed = run(
        &helm,
        &[
            "install",
            release,
            chart,
            "--namespace",
            &ns,
            "--kubeconfig",
            kc,
            "--wait",
            "--timeout",
            "180s",
        ],
    )
    .await;
    let result = async {
        installed?;
        check(&kube, &helm, kc, &ns, chart, release).await
    }
    .await;
    // The ClusterRoles and their bindings are cluster-wide: uninstall whatever happened.
    let uninstalled = run(
        &helm,
        &[
            "uninstall",
            release,
            "--namespace",
            &ns,
            "--kubeconfig",
            kc,
            "--wait",
        ],
    )
    .await;
    result?;
    uninstalled.map(|_| ())
}

async fn check(
    kube: &kube::Client,
    helm: &Path,
    kc: &str,
    ns: &str,
    chart: &str,
    release: &str,
) -> anyhow::Result<()> {
    // What helm installed is what berth renders, byte for byte.
    let manifest = run(
        helm,
        &[
            "get",
            "manifest",
            release,
            "--namespace",
            ns,
            "--kubeconfig",
            kc,
        ],
    )
    .await?;
    let manifest = String::from_utf8(manifest.stdout)?;
    let rendered = run(
        &berth_tests::binary("berth"),
        &["render", release, chart, "--namespace", ns],
    )
    .await?;
    let rendered = String::from_utf8(rendered.stdout)?;
    // The release record key is random (generated at install; `berth render` has no cluster
    // for `lookup` to find it in): everything else is compared as it is.
    let (manifest, rendered) = (without_record_key(&manifest), without_record_key(&rendered));
    ensure!(
        rendered.trim() == manifest.trim(),
        "berth render differs from what helm installed:\n--- helm\n{manifest}\n--- berth\n{rendered}"
    );
    record_key_is_kept(kube, helm, kc, ns, chart, release).await?;

    // Every object is on the cluster, as the API server accepted it.
    let discovery = Discovery::new(kube.clone()).run().await?;
    let docs = objects(&manifest)?;
    let kinds: std::collections::BTreeSet<&str> = docs.iter().map(|d| d.kind.as_str()).collect();
    for kind in [
        "Deployment",
        "Service",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
        "ConfigMap",
    ] {
        ensure!(kinds.contains(kind), "the chart has no {kind}: {kinds:?}");
    }
    for doc in &docs {
        let (group, version) = match doc.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", doc.api_version.as_str()),
        };
        let gvk = kube::api::GroupVersionKind::gvk(group, version, &doc.kind);
        let Some((resource, caps)) = discovery.resolve_gvk(&gvk) else {
            bail!(
                "the cluster does not serve {} {}",
                doc.api_version,
                doc.kind
            );
        };
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => Api::namespaced_with(
                kube.clone(),
                doc.metadata.namespace.as_deref().unwrap_or(ns),
                &resource,
            ),
            Scope::Cluster => Api::all_with(kube.clone(), &resource),
        };
        api.get(&doc.metadata.name)
            .await
            .with_context(|| format!("{} {} on the cluster", doc.kind, doc.metadata.name))?;
    }

    // Every service's Deployment is available with the replicas the values ask for.
    let deployments: Api<Deployment> = Api::namespaced(kube.clone(), ns);
    for (component, replicas) in [
        ("queue", 2),
        ("lifecycle", 2),
        ("hookevent", 1),
        ("release", 2),
        ("worker", 2),
        ("gateway", 2),
        ("controller", 2),
    ] {
        let d = deployments.get(&format!("{release}-{component}")).await?;
        let status = d.status.unwrap_or_default();
        ensure!(
            status.available_replicas == Some(replicas),
            "{component}: {replicas} available replicas expected, status {status:?}"
        );
        let pod = d.spec.template.spec.context("a pod spec")?;
        // Only release, hookevent and the controller hold a token for the cluster.
        let token = pod.automount_service_account_token != Some(false);
        ensure!(
            token == matches!(component, "release" | "hookevent" | "controller"),
            "{component}: automountServiceAccountToken {:?}",
            pod.automount_service_account_token
        );
    }
    rights(kube, ns, release).await
}

/// What the API server lets release's and hookevent's own identities do
/// (docs/decisions/package-identity.md): everything they write for a package goes through
/// the package's principal (impersonation), so they may read every kind but write only their
/// own objects; release makes the principals and mints their tokens. Workers hold nothing.
async fn rights(kube: &kube::Client, ns: &str, release: &str) -> anyhow::Result<()> {
    let sa = |component: &str| format!("system:serviceaccount:{ns}:{release}-{component}");
    let (release_sa, hookevent_sa) = (sa("release"), sa("hookevent"));
    let worker = format!("system:serviceaccount:{ns}:default");
    let cases: &[(&str, &str, &str, &str, &str, bool)] = &[
        // (user, verb, group, resource, namespace, allowed)
        (
            &release_sa,
            "impersonate",
            "",
            "serviceaccounts",
            "team",
            true,
        ),
        (
            &release_sa,
            "create",
            "",
            "serviceaccounts/token",
            "team",
            true,
        ),
        (&release_sa, "create", "", "serviceaccounts", "team", true),
        (
            &release_sa,
            "bind",
            "rbac.authorization.k8s.io",
            "clusterroles",
            "",
            true,
        ),
        (
            &release_sa,
            "escalate",
            "rbac.authorization.k8s.io",
            "clusterroles",
            "",
            true,
        ),
        (&release_sa, "create", "", "secrets", "team", true),
        (&release_sa, "watch", "apps", "deployments", "", true),
        (
            &release_sa,
            "create",
            "authorization.k8s.io",
            "subjectaccessreviews",
            "",
            true,
        ),
        // A package's objects are its principal's to write.
        (&release_sa, "create", "apps", "deployments", "team", false),
        (&release_sa, "delete", "", "configmaps", "team", false),
        (
            &hookevent_sa,
            "impersonate",
            "",
            "serviceaccounts",
            "team",
            true,
        ),
        (&hookevent_sa, "watch", "", "secrets", "", true),
        (&hookevent_sa, "create", "", "configmaps", "team", false),
        (
            &hookevent_sa,
            "create",
            "",
            "serviceaccounts/token",
            "team",
            false,
        ),
        (
            &worker,
            "create",
            "",
            "serviceaccounts/token",
            "team",
            false,
        ),
        (&worker, "get", "", "secrets", ns, false),
    ];
    let reviews: Api<DynamicObject> = Api::all_with(
        kube.clone(),
        &kube::discovery::ApiResource {
            group: "authorization.k8s.io".into(),
            version: "v1".into(),
            api_version: "authorization.k8s.io/v1".into(),
            kind: "SubjectAccessReview".into(),
            plural: "subjectaccessreviews".into(),
        },
    );
    for (user, verb, group, resource, namespace, allowed) in cases {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        let review: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"), "system:authenticated"],
                "resourceAttributes": {
                    "verb": verb, "group": group, "resource": resource,
                    "subresource": subresource, "namespace": namespace,
                },
            },
        }))?;
        let answer = reviews.create(&PostParams::default(), &review).await?;
        let got = answer.data.pointer("/status/allowed") == Some(&serde_json::Value::Bool(true));
        ensure!(
            got == *allowed,
            "{user} {verb} {group}/{resource}/{subresource} in {namespace:?}: allowed {got}, expected {allowed}"
        );
    }
    Ok(())
}
