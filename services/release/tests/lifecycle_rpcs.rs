//! Render, Plan, History and Rollback through the gRPC service against a Kubernetes API.

mod support;

use berth_proto::release::{
    HistoryRequest, InstallRequest, PlanAction, RenderRequest, RollbackRequest,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use support::{chart, config_map, start};

fn request(
    h: &support::Harness,
    files: Vec<berth_proto::release::ChartFile>,
    values: &str,
) -> InstallRequest {
    InstallRequest {
        name: "app".into(),
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

async fn greeting(h: &support::Harness, name: &str) -> anyhow::Result<Option<String>> {
    let cm = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace)
        .get_opt(name)
        .await?;
    Ok(cm.and_then(|c| c.data.unwrap_or_default().get("greeting").cloned()))
}

#[tokio::test]
async fn render_prints_helm_template_output_without_touching_the_cluster() -> anyhow::Result<()> {
    let mut h = start().await?;
    let files = chart(&[("templates/a.yaml", &config_map("a", false))]);
    let out = h
        .grpc
        .render(RenderRequest {
            name: "app".into(),
            namespace: h.namespace.clone(),
            files,
            values: Some(berth_proto::json::to_struct(
                &serde_json::json!({"greeting": "hey"}),
            )),
            include_crds: false,
            package: String::new(),
        })
        .await?
        .into_inner();
    assert!(
        out.manifest
            .starts_with("---\n# Source: hello/templates/a.yaml\napiVersion: v1\nkind: ConfigMap"),
        "{}",
        out.manifest
    );
    assert!(out.manifest.contains("greeting: \"hey\""));
    assert_eq!(greeting(&h, "a").await?, None, "render must not apply");
    Ok(())
}

#[tokio::test]
async fn plan_reports_create_update_delete_and_unchanged_without_applying() -> anyhow::Result<()> {
    let mut h = start().await?;
    let v1 = chart(&[
        ("templates/a.yaml", &config_map("a", false)),
        ("templates/b.yaml", &config_map("b", false)),
        ("templates/gone.yaml", &config_map("gone", false)),
    ]);
    h.grpc
        .install(request(&h, v1, r#"{"greeting": "one"}"#))
        .await?;

    // a: same content; b: different greeting via a separate template value; gone: dropped;
    // new: added.
    let b_changed = config_map("b", false).replace(
        "{{ .Values.greeting | default \"hello\" | quote }}",
        "\"changed\"",
    );
    let v2 = chart(&[
        ("templates/a.yaml", &config_map("a", false)),
        ("templates/b.yaml", &b_changed),
        ("templates/new.yaml", &config_map("new", false)),
    ]);
    let plan = h
        .grpc
        .plan(request(&h, v2, r#"{"greeting": "one"}"#))
        .await?
        .into_inner();
    let mut seen: Vec<(String, PlanAction, Vec<String>)> = plan
        .changes
        .iter()
        .map(|c| {
            (
                c.object
                    .as_ref()
                    .map(|o| o.name.clone())
                    .unwrap_or_default(),
                c.action(),
                c.changed.clone(),
            )
        })
        .collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        vec![
            ("a".to_string(), PlanAction::Unchanged, vec![]),
            (
                "b".to_string(),
                PlanAction::Update,
                vec!["data".to_string()]
            ),
            ("gone".to_string(), PlanAction::Delete, vec![]),
            ("new".to_string(), PlanAction::Create, vec![]),
        ]
    );
    // Nothing happened: `new` does not exist, `b` still has the old greeting, `gone` is there.
    assert_eq!(greeting(&h, "new").await?, None);
    assert_eq!(greeting(&h, "b").await?.as_deref(), Some("one"));
    assert_eq!(greeting(&h, "gone").await?.as_deref(), Some("one"));
    Ok(())
}

#[tokio::test]
async fn history_lists_revisions_and_rollback_restores_an_old_one() -> anyhow::Result<()> {
    let mut h = start().await?;
    let v1 = chart(&[
        ("templates/a.yaml", &config_map("a", false)),
        ("templates/only1.yaml", &config_map("only1", false)),
    ]);
    let v2 = chart(&[("templates/a.yaml", &config_map("a", false))]);
    h.grpc
        .install(request(&h, v1, r#"{"greeting": "first"}"#))
        .await?;
    h.grpc
        .install(request(&h, v2, r#"{"greeting": "second"}"#))
        .await?;
    assert_eq!(greeting(&h, "only1").await?, None, "upgrade pruned only1");

    let rolled = h
        .grpc
        .rollback(RollbackRequest {
            name: "app".into(),
            namespace: h.namespace.clone(),
            revision: 0,
        })
        .await?
        .into_inner();
    assert_eq!(rolled.revision, 3);
    assert_eq!(greeting(&h, "a").await?.as_deref(), Some("first"));
    assert_eq!(greeting(&h, "only1").await?.as_deref(), Some("first"));

    let history = h
        .grpc
        .history(HistoryRequest {
            name: "app".into(),
            namespace: h.namespace.clone(),
        })
        .await?
        .into_inner();
    let rows: Vec<(i32, &str, &str)> = history
        .revisions
        .iter()
        .map(|r| (r.revision, r.status.as_str(), r.description.as_str()))
        .collect();
    assert_eq!(
        rows,
        vec![
            (1, "superseded", "Install complete"),
            (2, "superseded", "Upgrade complete"),
            (3, "deployed", "Rollback to 1"),
        ]
    );
    assert!(history.revisions.iter().all(|r| r.chart == "hello-0.1.0"));

    let current = h
        .grpc
        .rollback(RollbackRequest {
            name: "app".into(),
            namespace: h.namespace.clone(),
            revision: 3,
        })
        .await;
    assert_eq!(
        current.err().map(|s| s.code()),
        Some(tonic::Code::InvalidArgument)
    );
    let missing = h
        .grpc
        .rollback(RollbackRequest {
            name: "nope".into(),
            namespace: h.namespace.clone(),
            revision: 0,
        })
        .await;
    assert_eq!(
        missing.err().map(|s| s.code()),
        Some(tonic::Code::FailedPrecondition)
    );
    Ok(())
}

/// A hook ConfigMap for `event` recording the revision and greeting it was rendered with.
fn hook_config_map(name: &str, event: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  annotations:\n    helm.sh/hook: {event}\ndata:\n  rev: \"{{{{ .Release.Revision }}}}\"\n  greeting: {{{{ .Values.greeting | quote }}}}\n"
    )
}

#[tokio::test]
async fn rollback_runs_the_target_revisions_rollback_hooks() -> anyhow::Result<()> {
    let mut h = start().await?;
    let files = chart(&[
        ("templates/a.yaml", &config_map("a", false)),
        (
            "templates/pre.yaml",
            &hook_config_map("pre-rb", "pre-rollback"),
        ),
        (
            "templates/post.yaml",
            &hook_config_map("post-rb", "post-rollback"),
        ),
    ]);
    h.grpc
        .install(request(&h, files.clone(), r#"{"greeting": "first"}"#))
        .await?;
    h.grpc
        .install(request(&h, files, r#"{"greeting": "second"}"#))
        .await?;
    assert_eq!(
        greeting(&h, "pre-rb").await?,
        None,
        "rollback hooks do not run on install or upgrade"
    );
    assert_eq!(greeting(&h, "post-rb").await?, None);

    h.grpc
        .rollback(RollbackRequest {
            name: "app".into(),
            namespace: h.namespace.clone(),
            revision: 1,
        })
        .await?;
    // Both hooks ran, as the target revision (1) recorded them.
    let cms = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace);
    for hook in ["pre-rb", "post-rb"] {
        let data = cms.get(hook).await?.data.unwrap_or_default();
        assert_eq!(data.get("rev").map(String::as_str), Some("1"), "{hook}");
        assert_eq!(
            data.get("greeting").map(String::as_str),
            Some("first"),
            "{hook}"
        );
    }
    assert_eq!(greeting(&h, "a").await?.as_deref(), Some("first"));
    Ok(())
}

#[tokio::test]
async fn a_failing_pre_rollback_hook_stops_the_rollback_before_applying() -> anyhow::Result<()> {
    let mut h = start().await?;
    // The hook's kind does not exist, so creating it fails, as a failing hook Job would.
    let broken = "apiVersion: nowhere.example.org/v1\nkind: Missing\nmetadata:\n  name: broken\n  annotations:\n    helm.sh/hook: pre-rollback\n";
    let files = chart(&[
        ("templates/a.yaml", &config_map("a", false)),
        ("templates/broken.yaml", broken),
    ]);
    h.grpc
        .install(request(&h, files.clone(), r#"{"greeting": "first"}"#))
        .await?;
    h.grpc
        .install(request(&h, files, r#"{"greeting": "second"}"#))
        .await?;
    let rolled = h
        .grpc
        .rollback(RollbackRequest {
            name: "app".into(),
            namespace: h.namespace.clone(),
            revision: 1,
        })
        .await;
    let err = rolled.err().map(|s| s.message().to_string());
    assert!(
        err.as_deref().is_some_and(|m| m.contains("Missing")),
        "{err:?}"
    );
    assert_eq!(
        greeting(&h, "a").await?.as_deref(),
        Some("second"),
        "nothing was applied"
    );
    let history = h
        .grpc
        .history(HistoryRequest {
            name: "app".into(),
            namespace: h.namespace.clone(),
        })
        .await?
        .into_inner();
    let last = history
        .revisions
        .last()
        .map(|r| (r.revision, r.status.clone()));
    assert_eq!(last, Some((3, "failed".to_string())));
    Ok(())
}
