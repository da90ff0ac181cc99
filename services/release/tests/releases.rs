//! Install, upgrade, status and uninstall through the gRPC service against a Kubernetes API.

mod support;

use base64::Engine as _;
use berth_proto::release::{InstallRequest, StatusRequest, UninstallRequest};
use berth_release::manager::ReleaseId;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::Api;
use kube::api::ListParams;
use std::io::Read as _;
use support::{chart, config_map, start};

fn install(
    h: &support::Harness,
    name: &str,
    files: Vec<berth_proto::release::ChartFile>,
    values: &str,
) -> InstallRequest {
    InstallRequest {
        name: name.into(),
        namespace: h.namespace.clone(),
        files,
        values: (!values.is_empty()).then(|| {
            berth_proto::json::to_struct(
                &serde_json::from_str(values).expect("test values are JSON"),
            )
        }),
        package: String::new(),
        wait_ms: 0,
    }
}

/// Decodes a Helm release Secret the way Helm's storage driver does.
fn decode_release(secret: &Secret) -> anyhow::Result<serde_json::Value> {
    let data = secret
        .data
        .as_ref()
        .and_then(|d| d.get("release"))
        .ok_or_else(|| anyhow::anyhow!("no data.release"))?;
    let gz = base64::engine::general_purpose::STANDARD.decode(&data.0)?;
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice()).read_to_end(&mut json)?;
    Ok(serde_json::from_slice(&json)?)
}

#[tokio::test]
async fn install_creates_objects_and_a_helm_release_secret() -> anyhow::Result<()> {
    let mut h = start().await?;
    let svc = "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports:\n  - port: {{ .Values.port }}\n";
    let files = chart(&[
        ("values.yaml", "port: 80\n"),
        ("templates/configmap.yaml", &config_map("settings", false)),
        ("templates/service.yaml", svc),
    ]);
    let resp = h
        .grpc
        .install(install(
            &h,
            "web",
            files,
            r#"{"greeting": "hi", "port": 8080}"#,
        ))
        .await?
        .into_inner();
    assert_eq!(resp.revision, 1);
    let kinds: Vec<&str> = resp.objects.iter().map(|o| o.kind.as_str()).collect();
    assert_eq!(kinds, vec!["ConfigMap", "Service"]);
    assert!(resp.objects.iter().all(|o| o.namespace == h.namespace));

    let cm = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace)
        .get("settings")
        .await?;
    let data = cm.data.clone().unwrap_or_default();
    assert_eq!(data.get("greeting").map(String::as_str), Some("hi"));
    assert_eq!(data.get("release").map(String::as_str), Some("web"));
    let labels = cm.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("Helm")
    );
    let annotations = cm.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations
            .get("meta.helm.sh/release-name")
            .map(String::as_str),
        Some("web")
    );
    assert_eq!(
        annotations.get("meta.helm.sh/release-namespace"),
        Some(&h.namespace)
    );
    let svc = Api::<Service>::namespaced(h.kube.clone(), &h.namespace)
        .get("web")
        .await?;
    let port = svc
        .spec
        .and_then(|s| s.ports)
        .and_then(|p| p.first().map(|p| p.port));
    assert_eq!(port, Some(8080));

    let secret = Api::<Secret>::namespaced(h.kube.clone(), &h.namespace)
        .get("sh.helm.release.v1.web.v1")
        .await?;
    assert_eq!(secret.type_.as_deref(), Some("helm.sh/release.v1"));
    let labels = secret.metadata.labels.clone().unwrap_or_default();
    for (k, v) in [
        ("owner", "helm"),
        ("name", "web"),
        ("status", "deployed"),
        ("version", "1"),
    ] {
        assert_eq!(labels.get(k).map(String::as_str), Some(v), "label {k}");
    }
    let record = decode_release(&secret)?;
    assert_eq!(record["name"], "web");
    assert_eq!(record["namespace"], h.namespace.as_str());
    assert_eq!(record["version"], 1);
    assert_eq!(record["info"]["status"], "deployed");
    assert_eq!(record["chart"]["metadata"]["name"], "hello");
    assert_eq!(
        record["config"],
        serde_json::json!({"greeting": "hi", "port": 8080})
    );
    let manifest = record["manifest"].as_str().unwrap_or_default();
    assert!(
        manifest.starts_with(
            "---\n# Source: hello/templates/configmap.yaml\napiVersion: v1\nkind: ConfigMap"
        ),
        "{manifest}"
    );
    assert!(
        manifest.contains("---\n# Source: hello/templates/service.yaml\n"),
        "{manifest}"
    );
    Ok(())
}

#[tokio::test]
async fn upgrade_prunes_removed_objects_but_keeps_annotated_ones() -> anyhow::Result<()> {
    let mut h = start().await?;
    let v1 = chart(&[
        ("templates/a.yaml", &config_map("a", false)),
        ("templates/b.yaml", &config_map("b", true)),
        ("templates/c.yaml", &config_map("c", false)),
    ]);
    assert_eq!(
        h.grpc
            .install(install(&h, "app", v1, ""))
            .await?
            .into_inner()
            .revision,
        1
    );
    let v2 = chart(&[("templates/a.yaml", &config_map("a", false))]);
    let resp = h
        .grpc
        .install(install(&h, "app", v2, r#"{"greeting": "v2"}"#))
        .await?
        .into_inner();
    assert_eq!(resp.revision, 2);

    let cms = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace);
    assert!(
        cms.get_opt("c").await?.is_none(),
        "c was removed from the chart and must be pruned"
    );
    assert!(
        cms.get_opt("b").await?.is_some(),
        "b is annotated keep and must survive"
    );
    let a = cms.get("a").await?;
    assert_eq!(
        a.data
            .unwrap_or_default()
            .get("greeting")
            .map(String::as_str),
        Some("v2")
    );

    let secrets = Api::<Secret>::namespaced(h.kube.clone(), &h.namespace);
    let v1_record = decode_release(&secrets.get("sh.helm.release.v1.app.v1").await?)?;
    assert_eq!(v1_record["info"]["status"], "superseded");
    let v1_secret = secrets.get("sh.helm.release.v1.app.v1").await?;
    assert_eq!(
        v1_secret
            .metadata
            .labels
            .unwrap_or_default()
            .get("status")
            .map(String::as_str),
        Some("superseded")
    );
    let v2_record = decode_release(&secrets.get("sh.helm.release.v1.app.v2").await?)?;
    assert_eq!(v2_record["info"]["status"], "deployed");
    assert_eq!(v2_record["version"], 2);
    Ok(())
}

#[tokio::test]
async fn uninstall_removes_objects_and_records_and_twice_is_fine() -> anyhow::Result<()> {
    let mut h = start().await?;
    let files = chart(&[
        ("templates/a.yaml", &config_map("a", false)),
        ("templates/k.yaml", &config_map("k", true)),
    ]);
    h.grpc
        .install(install(&h, "gone", files.clone(), ""))
        .await?;
    h.grpc.install(install(&h, "gone", files, "")).await?;

    let req = UninstallRequest {
        name: "gone".into(),
        namespace: h.namespace.clone(),
        package: String::new(),
    };
    let resp = h.grpc.uninstall(req.clone()).await?.into_inner();
    assert!(resp.found);
    let deleted: Vec<&str> = resp.deleted.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(deleted, vec!["a"]);

    let cms = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace);
    assert!(cms.get_opt("a").await?.is_none());
    assert!(
        cms.get_opt("k").await?.is_some(),
        "keep-annotated objects survive uninstall"
    );
    let secrets = Api::<Secret>::namespaced(h.kube.clone(), &h.namespace);
    let left = secrets
        .list(&ListParams::default().labels("owner=helm,name=gone"))
        .await?;
    assert!(
        left.items.is_empty(),
        "release secrets remain: {:?}",
        left.items
            .iter()
            .map(|s| s.metadata.name.clone())
            .collect::<Vec<_>>()
    );

    let again = h.grpc.uninstall(req).await?.into_inner();
    assert!(!again.found);
    assert!(again.deleted.is_empty());
    Ok(())
}

#[tokio::test]
async fn status_reports_objects_and_missing_ones() -> anyhow::Result<()> {
    // Drift repair would bring the deleted object back before Status could see it missing.
    let mut h = support::start_without_drift_repair().await?;
    let req = StatusRequest {
        name: "st".into(),
        namespace: h.namespace.clone(),
        ..Default::default()
    };
    assert!(!h.grpc.status(req.clone()).await?.into_inner().found);

    h.grpc
        .install(install(
            &h,
            "st",
            chart(&[("templates/a.yaml", &config_map("a", false))]),
            "",
        ))
        .await?;
    let status = h.grpc.status(req.clone()).await?.into_inner();
    assert!(status.found && status.ready, "{status:?}");
    assert_eq!(status.revision, 1);
    assert_eq!(status.objects.len(), 1);

    Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace)
        .delete("a", &Default::default())
        .await?;
    let status = h.grpc.status(req).await?.into_inner();
    assert!(!status.ready);
    assert_eq!(status.not_ready.len(), 1);
    assert!(
        status.not_ready[0].contains("not found"),
        "{:?}",
        status.not_ready
    );
    Ok(())
}

#[tokio::test]
async fn render_errors_are_invalid_argument_naming_the_template() -> anyhow::Result<()> {
    let mut h = start().await?;
    let bad = chart(&[(
        "templates/bad.yaml",
        "kind: ConfigMap\nx: {{ required \"x is required\" .Values.x }}\n",
    )]);
    let err = match h.grpc.install(install(&h, "bad", bad, "")).await {
        Ok(r) => anyhow::bail!("expected an error, got {:?}", r.into_inner()),
        Err(e) => e,
    };
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().contains("hello/templates/bad.yaml")
            && err.message().contains("x is required"),
        "{}",
        err.message()
    );

    let err = h
        .grpc
        .install(install(&h, "Bad_Name", chart(&[]), ""))
        .await
        .err();
    assert_eq!(err.map(|e| e.code()), Some(tonic::Code::InvalidArgument));
    Ok(())
}

#[tokio::test]
async fn crds_are_applied_first_and_their_kinds_are_in_capabilities() -> anyhow::Result<()> {
    let mut h = start().await?;
    let suffix = &h.namespace[9..];
    let group = format!("t{suffix}.example.com");
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names:\n    plural: widgets\n    singular: widget\n    kind: Widget\n    listKind: WidgetList\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
    );
    let widget = format!(
        "{{{{- if .Capabilities.APIVersions.Has \"{group}/v1/Widget\" }}}}\napiVersion: {group}/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n{{{{- end }}}}\n"
    );
    let files = chart(&[
        ("crds/widget.yaml", &crd),
        ("templates/widget.yaml", &widget),
    ]);
    let resp = h
        .grpc
        .install(install(&h, "wid", files, ""))
        .await?
        .into_inner();
    let kinds: Vec<&str> = resp.objects.iter().map(|o| o.kind.as_str()).collect();
    assert_eq!(
        kinds,
        vec!["Widget"],
        "the template saw the CRD's kind in .Capabilities"
    );

    let ar = kube::discovery::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        &group, "v1", "Widget",
    ));
    let widgets: Api<kube::api::DynamicObject> =
        Api::namespaced_with(h.kube.clone(), &h.namespace, &ar);
    let w = widgets.get("w1").await?;
    assert_eq!(w.data.pointer("/spec/size"), Some(&serde_json::json!(3)));

    h.grpc
        .uninstall(UninstallRequest {
            name: "wid".into(),
            namespace: h.namespace.clone(),
            package: String::new(),
        })
        .await?;
    assert!(widgets.get_opt("w1").await?.is_none());
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(h.kube.clone());
    let name = format!("widgets.{group}");
    assert!(
        crds.get_opt(&name).await?.is_some(),
        "Helm never deletes crds/ objects"
    );
    crds.delete(&name, &Default::default()).await?;
    Ok(())
}

#[tokio::test]
async fn an_unchanged_render_heals_objects_without_a_new_revision() -> anyhow::Result<()> {
    let mut h = start().await?;
    let files = chart(&[("templates/a.yaml", &config_map("a", false))]);
    assert_eq!(
        h.grpc
            .install(install(&h, "same", files.clone(), ""))
            .await?
            .into_inner()
            .revision,
        1
    );
    let cms = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace);
    cms.delete("a", &Default::default()).await?;

    let again = h
        .grpc
        .install(install(&h, "same", files.clone(), ""))
        .await?
        .into_inner();
    assert_eq!(
        again.revision, 1,
        "identical render must not write a revision"
    );
    assert!(
        cms.get_opt("a").await?.is_some(),
        "the deleted object was re-applied"
    );
    let secrets = Api::<Secret>::namespaced(h.kube.clone(), &h.namespace);
    assert!(
        secrets
            .get_opt("sh.helm.release.v1.same.v2")
            .await?
            .is_none()
    );

    let changed = h
        .grpc
        .install(install(&h, "same", files, r#"{"greeting": "new"}"#))
        .await?
        .into_inner();
    assert_eq!(changed.revision, 2);
    Ok(())
}

#[tokio::test]
async fn lookup_reads_the_cluster_so_generated_secrets_survive_upgrades() -> anyhow::Result<()> {
    let mut h = start().await?;
    // The common chart idiom: keep an existing generated password instead of rolling a new one.
    let secret = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\ndata:\n  {{- $old := lookup \"v1\" \"Secret\" .Release.Namespace \"creds\" }}\n  {{- if $old }}\n  password: {{ index $old.data \"password\" }}\n  {{- else }}\n  password: {{ randAlphaNum 16 | b64enc }}\n  {{- end }}\nstringData:\n  rev: \"{{ .Release.Revision }}\"\n";
    let files = chart(&[("templates/secret.yaml", secret)]);
    h.grpc.install(install(&h, "pw", files.clone(), "")).await?;
    let secrets = Api::<Secret>::namespaced(h.kube.clone(), &h.namespace);
    let first = secrets
        .get("creds")
        .await?
        .data
        .unwrap_or_default()
        .get("password")
        .cloned();
    assert!(first.as_ref().is_some_and(|p| p.0.len() == 16), "{first:?}");

    let second = h
        .grpc
        .install(install(&h, "pw", files, ""))
        .await?
        .into_inner();
    assert_eq!(second.revision, 2, "the revision number changes the render");
    let after = secrets
        .get("creds")
        .await?
        .data
        .unwrap_or_default()
        .get("password")
        .cloned();
    assert_eq!(after, first, "lookup found the existing password");
    Ok(())
}

#[tokio::test]
async fn lookup_of_a_list_gives_each_item_its_api_version_and_kind() -> anyhow::Result<()> {
    // A real API server sends list items without apiVersion and kind; helm's client fills them
    // in from the list, and charts read them (`range (lookup ...).items` then `.kind`).
    let mut h = start().await?;
    let seed = chart(&[("templates/cm.yaml", &config_map("seed", false))]);
    h.grpc.install(install(&h, "seed", seed, "")).await?;
    let reader = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kinds\ndata:\n  seen: \"{{ range (lookup \"v1\" \"ConfigMap\" .Release.Namespace \"\").items }}{{ if eq .metadata.name \"seed\" }}{{ .apiVersion }}/{{ .kind }}{{ end }}{{ end }}\"\n";
    let files = chart(&[("templates/kinds.yaml", reader)]);
    h.grpc.install(install(&h, "reader", files, "")).await?;
    let cm = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace)
        .get("kinds")
        .await?;
    let seen = cm.data.unwrap_or_default().get("seen").cloned();
    assert_eq!(seen.as_deref(), Some("v1/ConfigMap"));
    Ok(())
}

#[tokio::test]
async fn a_release_too_large_to_record_is_refused_before_anything_is_applied() -> anyhow::Result<()>
{
    let mut h = start().await?;
    // 2 MB of random letters: the record (gzip, then base64) cannot fit the 1 MiB of a Secret.
    let big = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  noise: \"{{ range until 500 }}{{ randAlphaNum 4096 }}{{ end }}\"\n";
    let files = chart(&[
        ("templates/a.yaml", &config_map("small", false)),
        ("templates/big.yaml", big),
    ]);
    let err = h
        .grpc
        .install(install(&h, "big", files, ""))
        .await
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err}");
    assert!(
        err.message().contains("a Secret can hold"),
        "{}",
        err.message()
    );
    let cms = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace);
    assert!(cms.get_opt("small").await?.is_none(), "nothing applied");
    let secrets = Api::<Secret>::namespaced(h.kube.clone(), &h.namespace);
    let records = secrets
        .list(&ListParams::default().labels("owner=helm,name=big"))
        .await?;
    assert!(records.items.is_empty(), "no record written");
    Ok(())
}

/// A hook Job that completes at once. Its image is on registry.k8s.io (no Docker Hub pull
/// limits behind the install's wait on a real cluster).
fn hook_job(name: &str, event: &str, policy: &str) -> String {
    format!(
        "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\n  annotations:\n    helm.sh/hook: {event}\n    helm.sh/hook-delete-policy: {policy}\nspec:\n  backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: main\n        image: registry.k8s.io/e2e-test-images/busybox:1.36.1-1\n        command: [\"true\"]\n"
    )
}

fn hook_config_map(name: &str, event: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  annotations:\n    helm.sh/hook: {event}\ndata:\n  rev: \"{{{{ .Release.Revision }}}}\"\n"
    )
}

#[tokio::test]
async fn hooks_run_around_install_upgrade_and_uninstall() -> anyhow::Result<()> {
    let mut h = support::start_with(true).await?;
    let files = chart(&[
        ("templates/a.yaml", &config_map("a", false)),
        (
            "templates/migrate.yaml",
            &hook_job("migrate", "pre-install,pre-upgrade", "before-hook-creation"),
        ),
        (
            "templates/cleanup.yaml",
            &hook_job("once", "post-install", "hook-succeeded"),
        ),
        (
            "templates/post.yaml",
            &hook_config_map("post", "post-install,post-upgrade"),
        ),
        ("templates/bye.yaml", &hook_config_map("bye", "pre-delete")),
    ]);
    let resp = h
        .grpc
        .install(install(&h, "hk", files.clone(), ""))
        .await?
        .into_inner();
    let names: Vec<&str> = resp.objects.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, vec!["a"], "hooks are not release objects");

    let jobs = Api::<k8s_openapi::api::batch::v1::Job>::namespaced(h.kube.clone(), &h.namespace);
    let migrate = jobs.get("migrate").await?;
    let complete = migrate
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Complete" && c.status == "True");
    assert!(
        complete,
        "install waited for the pre-install Job to complete"
    );
    assert!(
        jobs.get_opt("once").await?.is_none(),
        "hook-succeeded deletes the hook after it ran"
    );
    let cms = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace);
    assert_eq!(
        cms.get("post")
            .await?
            .data
            .unwrap_or_default()
            .get("rev")
            .map(String::as_str),
        Some("1")
    );
    assert!(
        cms.get_opt("bye").await?.is_none(),
        "pre-delete hooks wait for uninstall"
    );

    let secret = Api::<Secret>::namespaced(h.kube.clone(), &h.namespace)
        .get("sh.helm.release.v1.hk.v1")
        .await?;
    let record = decode_release(&secret)?;
    let hook_names: Vec<&str> = record["hooks"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(hook_names.len(), 4, "{hook_names:?}");
    assert!(
        !record["manifest"]
            .as_str()
            .unwrap_or_default()
            .contains("migrate"),
        "hooks stay out of the manifest"
    );

    let old_uid = jobs.get("migrate").await?.metadata.uid;
    let up = h
        .grpc
        .install(install(&h, "hk", files, r#"{"greeting": "x"}"#))
        .await?
        .into_inner();
    assert_eq!(up.revision, 2);
    assert_ne!(
        jobs.get("migrate").await?.metadata.uid,
        old_uid,
        "before-hook-creation recreated the pre-upgrade Job"
    );
    assert_eq!(
        cms.get("post")
            .await?
            .data
            .unwrap_or_default()
            .get("rev")
            .map(String::as_str),
        Some("2")
    );

    h.grpc
        .uninstall(UninstallRequest {
            name: "hk".into(),
            namespace: h.namespace.clone(),
            package: String::new(),
        })
        .await?;
    assert!(
        cms.get_opt("bye").await?.is_some(),
        "the pre-delete hook ran"
    );
    assert!(cms.get_opt("a").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn a_crd_in_templates_is_established_before_its_resources_are_applied() -> anyhow::Result<()>
{
    let mut h = start().await?;
    let group = format!("t{}.example.org", &h.namespace[9..]);
    let crd = format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: gadgets.{group}\nspec:\n  group: {group}\n  scope: Namespaced\n  names:\n    plural: gadgets\n    singular: gadget\n    kind: Gadget\n    listKind: GadgetList\n  versions:\n  - name: v1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema:\n        type: object\n        x-kubernetes-preserve-unknown-fields: true\n"
    );
    let gadget =
        format!("apiVersion: {group}/v1\nkind: Gadget\nmetadata:\n  name: g1\nspec:\n  n: 1\n");
    let files = chart(&[
        ("templates/crd.yaml", &crd),
        ("templates/gadget.yaml", &gadget),
    ]);
    let resp = h
        .grpc
        .install(install(&h, "gad", files, ""))
        .await?
        .into_inner();
    let kinds: Vec<&str> = resp.objects.iter().map(|o| o.kind.as_str()).collect();
    assert_eq!(kinds, vec!["CustomResourceDefinition", "Gadget"]);
    let resp = h
        .grpc
        .uninstall(UninstallRequest {
            name: "gad".into(),
            namespace: h.namespace.clone(),
            package: String::new(),
        })
        .await?
        .into_inner();
    let deleted: Vec<&str> = resp.deleted.iter().map(|o| o.kind.as_str()).collect();
    assert_eq!(
        deleted,
        vec!["Gadget", "CustomResourceDefinition"],
        "reverse install order"
    );
    Ok(())
}

#[tokio::test]
async fn status_follows_kstatus_for_a_rolled_out_deployment() -> anyhow::Result<()> {
    let mut h = support::start_with(true).await?;
    let deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: registry.k8s.io/pause:3.10\n";
    h.grpc
        .install(install(
            &h,
            "dep",
            chart(&[("templates/d.yaml", deploy)]),
            "",
        ))
        .await?;

    // Wait (bounded) until the Deployment controller reports the rollout done.
    let api =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(h.kube.clone(), &h.namespace);
    let available = |d: Option<&k8s_openapi::api::apps::v1::Deployment>| {
        d.and_then(|d| d.status.as_ref()).is_some_and(|s| {
            s.ready_replicas == Some(2)
                && s.updated_replicas == Some(2)
                && s.conditions.iter().flatten().any(|c| {
                    c.type_.as_deref() == Some("Available") && c.status.as_deref() == Some("True")
                })
        })
    };
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        kube::runtime::wait::await_condition(api, "web", available),
    )
    .await??;

    let status = h
        .grpc
        .status(StatusRequest {
            name: "dep".into(),
            namespace: h.namespace.clone(),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(status.ready, "{:?}", status.not_ready);
    assert!(status.not_ready.is_empty());
    Ok(())
}

#[tokio::test]
async fn wait_ready_follows_watches_until_every_object_is_current() -> anyhow::Result<()> {
    let mut h = support::start_with(true).await?;
    let deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: registry.k8s.io/pause:3.10\n";
    let files = chart(&[
        ("templates/d.yaml", deploy),
        ("templates/a.yaml", &config_map("a", false)),
    ]);
    h.grpc.install(install(&h, "dep", files, "")).await?;
    // Over gRPC: Status with `wait_ms` answers once the rollout made every object Current.
    let waited = h
        .grpc
        .status(StatusRequest {
            name: "dep".into(),
            namespace: h.namespace.clone(),
            wait_ms: 60_000,
        })
        .await?
        .into_inner();
    assert!(waited.ready, "{:?}", waited.not_ready);
    let manager = berth_release::manager::ReleaseManager::new(h.kube.clone(), h.key.clone());
    let seen = manager
        .wait_ready(
            &ReleaseId::new("dep", &h.namespace)?,
            std::time::Duration::from_secs(60),
        )
        .await?;
    assert!(seen.ready, "{:?}", seen.not_ready);
    assert_eq!(seen.revision, 1);
    assert_eq!(seen.objects.len(), 2);
    // Status, a one-off read, agrees.
    let status = h
        .grpc
        .status(StatusRequest {
            name: "dep".into(),
            namespace: h.namespace.clone(),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(status.ready, "{:?}", status.not_ready);

    // A Deployment that never rolls out: the wait ends at its deadline and names what is not
    // ready. Its pods are held back by a scheduling gate, so no scheduler (nor the dev
    // cluster's simulation) ever runs them: the controller reports them all unavailable.
    let mut idle = support::start_with(true).await?;
    let stuck = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      schedulingGates:\n      - name: berth.io/never\n      containers:\n      - name: web\n        image: registry.k8s.io/pause:3.10\n";
    let files = chart(&[("templates/d.yaml", stuck)]);
    idle.grpc.install(install(&idle, "dep", files, "")).await?;
    // Once the controller has observed it (every replica created, none available), the
    // Deployment must still count as not ready: a real API server lists objects without
    // apiVersion and kind, and a wait that lost the kind took any object for Current.
    let deployments = Api::<Deployment>::namespaced(idle.kube.clone(), &idle.namespace);
    let observed =
        kube::runtime::wait::await_condition(deployments, "web", |d: Option<&Deployment>| {
            d.and_then(|d| d.status.as_ref()).is_some_and(|s| {
                s.observed_generation == Some(1) && s.unavailable_replicas == Some(2)
            })
        });
    tokio::time::timeout(std::time::Duration::from_secs(60), observed).await??;
    let idle_manager =
        berth_release::manager::ReleaseManager::new(idle.kube.clone(), idle.key.clone());
    let seen = idle_manager
        .wait_ready(
            &ReleaseId::new("dep", &idle.namespace)?,
            std::time::Duration::from_millis(500),
        )
        .await?;
    assert!(
        !seen.ready,
        "a Deployment with no available replica is not ready"
    );
    assert!(
        seen.not_ready
            .iter()
            .any(|m| m.contains("Deployment") && m.contains("Available: 0/2")),
        "{:?}",
        seen.not_ready
    );
    let missing = manager
        .wait_ready(
            &ReleaseId::new("nope", &h.namespace)?,
            std::time::Duration::from_secs(1),
        )
        .await;
    assert!(matches!(
        missing,
        Err(berth_release::manager::ReleaseError::NotFound(_))
    ));
    // Over gRPC, a wait that runs out answers not ready with the reason; an unknown release
    // answers `found: false` at once.
    let timed_out = idle
        .grpc
        .status(StatusRequest {
            name: "dep".into(),
            namespace: idle.namespace.clone(),
            wait_ms: 300,
        })
        .await?
        .into_inner();
    assert!(timed_out.found && !timed_out.ready);
    assert!(
        timed_out
            .not_ready
            .iter()
            .any(|m| m.contains("Deployment") && m.contains("Available: 0/2")),
        "{:?}",
        timed_out.not_ready
    );
    let unknown = idle
        .grpc
        .status(StatusRequest {
            name: "nope".into(),
            namespace: idle.namespace.clone(),
            wait_ms: 60_000,
        })
        .await?
        .into_inner();
    assert!(!unknown.found);
    Ok(())
}

/// An Install asked to wait (as the worker's Run asks when no afterHelm hook comes between the
/// apply and the wait) answers with the revision's readiness, as a waiting Status would.
#[tokio::test]
async fn an_install_that_waits_answers_with_the_readiness_of_what_it_applied() -> anyhow::Result<()>
{
    let mut h = support::start_with(true).await?;
    let deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: registry.k8s.io/pause:3.10\n";
    let files = chart(&[
        ("templates/d.yaml", deploy),
        ("templates/a.yaml", &config_map("a", false)),
    ]);
    let mut request = install(&h, "dep", files.clone(), "");
    request.wait_ms = 60_000;
    let installed = h.grpc.install(request).await?.into_inner();
    assert_eq!(installed.revision, 1);
    assert!(
        installed.waited && installed.ready,
        "{:?}",
        installed.not_ready
    );
    assert!(installed.not_ready.is_empty());
    // Without `wait_ms` it answers right after the apply, and says it did not wait.
    let unchanged = h
        .grpc
        .install(install(&h, "dep", files, ""))
        .await?
        .into_inner();
    assert!(!unchanged.waited && !unchanged.ready);

    // Pods held back by a scheduling gate never run: the wait ends at `wait_ms`, names the
    // Deployment, and the install itself stands (revision 1 is deployed).
    let stuck = deploy.replace(
        "    spec:\n      containers:",
        "    spec:\n      schedulingGates:\n      - name: berth.io/never\n      containers:",
    );
    let mut idle = support::start_with(true).await?;
    let mut request = install(&idle, "dep", chart(&[("templates/d.yaml", &stuck)]), "");
    request.wait_ms = 300;
    let installed = idle.grpc.install(request).await?.into_inner();
    assert!(installed.waited && !installed.ready);
    assert!(
        installed.not_ready.iter().any(|m| m.contains("Deployment")),
        "{:?}",
        installed.not_ready
    );
    let status = idle
        .grpc
        .status(StatusRequest {
            name: "dep".into(),
            namespace: idle.namespace.clone(),
            ..Default::default()
        })
        .await?
        .into_inner();
    assert!(status.found && !status.ready);
    assert_eq!(status.revision, 1);
    Ok(())
}

#[tokio::test]
async fn history_is_trimmed_to_the_configured_limit() -> anyhow::Result<()> {
    let h = start().await?;
    let manager = berth_release::manager::ReleaseManager::new(h.kube.clone(), h.key.clone())
        .with_history_max(2);
    for greeting in ["one", "two", "three"] {
        let files = chart(&[("templates/c.yaml", &config_map("c", false))])
            .into_iter()
            .map(|f| (f.path, f.content))
            .collect();
        manager
            .install(
                &ReleaseId::new("hist", &h.namespace)?,
                files,
                serde_json::json!({ "greeting": greeting }),
                &Default::default(),
            )
            .await?;
    }
    let revisions: Vec<i32> = manager
        .history(&ReleaseId::new("hist", &h.namespace)?)
        .await?
        .iter()
        .map(|r| r.revision)
        .collect();
    assert_eq!(revisions, [2, 3], "only the newest two records are kept");
    let secrets = Api::<Secret>::namespaced(h.kube.clone(), &h.namespace)
        .list(&ListParams::default().labels("owner=helm,name=hist"))
        .await?;
    let mut names: Vec<String> = secrets
        .items
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["sh.helm.release.v1.hist.v2", "sh.helm.release.v1.hist.v3"]
    );
    Ok(())
}

/// The release service remembers for a while that a namespace exists (no lookup per install),
/// but an install that fails there makes it look again: a namespace deleted behind its back
/// costs one failed install, and the next one creates it again.
#[tokio::test]
async fn a_namespace_deleted_after_an_install_is_created_again_by_the_next_install()
-> anyhow::Result<()> {
    let mut h = start().await?;
    let files = || chart(&[("templates/cm.yaml", &config_map("cm", false))]);
    h.grpc.install(install(&h, "first", files(), "{}")).await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(h.kube.clone());
    namespaces.delete(&h.namespace, &Default::default()).await?;
    // A real cluster finalizes the namespace (deletes what is in it) before it is gone.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while namespaces.get_opt(&h.namespace).await?.is_some() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "namespace {} still there after 60 s",
            h.namespace
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let mut attempts = 0;
    loop {
        attempts += 1;
        match h.grpc.install(install(&h, "second", files(), "{}")).await {
            Ok(_) => break,
            Err(status) if attempts == 1 => {
                assert!(
                    status.message().contains(&h.namespace),
                    "the failure names the namespace: {}",
                    status.message()
                );
            }
            Err(status) => anyhow::bail!("the second install failed too: {status}"),
        }
    }
    assert!(namespaces.get_opt(&h.namespace).await?.is_some());
    let cms: Api<ConfigMap> = Api::namespaced(h.kube.clone(), &h.namespace);
    assert!(cms.get_opt("cm").await?.is_some());
    Ok(())
}
