//! Drift repair: objects of an installed release that are deleted or edited come back as
//! berth applied them, and Status reports what happened.

mod support;

use berth_proto::release::{InstallRequest, StatusRequest, UninstallRequest};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::wait::await_condition;
use std::time::Duration;
use support::{chart, config_map, start};

/// Longest a repair may take to show up.
const REPAIR_DEADLINE: Duration = Duration::from_secs(30);

fn greeting_is(want: &'static str) -> impl Fn(Option<&ConfigMap>) -> bool {
    move |cm| {
        cm.and_then(|c| c.data.as_ref())
            .and_then(|d| d.get("greeting"))
            .is_some_and(|g| g == want)
    }
}

/// Installs release `name` of two ConfigMaps, `a` and `b`, with greeting "hi".
async fn install_two(h: &mut support::Harness, name: &str) -> anyhow::Result<()> {
    let files = chart(&[
        ("templates/a.yaml", &config_map("a", false)),
        ("templates/b.yaml", &config_map("b", false)),
    ]);
    install_hi(h, name, files).await
}

/// Installs release `name` of chart `files` with greeting "hi".
async fn install_hi(
    h: &mut support::Harness,
    name: &str,
    files: Vec<berth_proto::release::ChartFile>,
) -> anyhow::Result<()> {
    h.grpc
        .install(InstallRequest {
            name: name.into(),
            namespace: h.namespace.clone(),
            files,
            values: Some(berth_proto::json::to_struct(
                &serde_json::json!({"greeting": "hi"}),
            )),
            package: String::new(),
            wait_ms: 0,
        })
        .await?;
    Ok(())
}

/// Someone deletes `a`, then edits a field berth owns on `b`: each is put back.
async fn delete_a_and_tamper_with_b(cms: &Api<ConfigMap>) -> anyhow::Result<()> {
    cms.delete("a", &DeleteParams::default()).await?;
    tokio::time::timeout(
        REPAIR_DEADLINE,
        await_condition(cms.clone(), "a", greeting_is("hi")),
    )
    .await??;
    cms.patch(
        "b",
        &PatchParams::apply("someone-else").force(),
        &Patch::Apply(&serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "b"},
            "data": {"greeting": "tampered"},
        })),
    )
    .await?;
    tokio::time::timeout(
        REPAIR_DEADLINE,
        await_condition(cms.clone(), "b", greeting_is("hi")),
    )
    .await??;
    Ok(())
}

/// The release's Status, and its drift as (object name, kind, repaired); asserts that both
/// repairs of [`delete_a_and_tamper_with_b`] are reported.
async fn drift_reported(
    h: &mut support::Harness,
    name: &str,
) -> anyhow::Result<berth_proto::release::StatusResponse> {
    let status = h
        .grpc
        .status(StatusRequest {
            name: name.into(),
            namespace: h.namespace.clone(),
            ..Default::default()
        })
        .await?
        .into_inner();
    let seen: Vec<(String, String, bool)> = status
        .drift
        .iter()
        .map(|d| {
            let object = d
                .object
                .as_ref()
                .map(|o| o.name.clone())
                .unwrap_or_default();
            (object, d.kind.clone(), d.repaired)
        })
        .collect();
    assert!(
        seen.contains(&("a".into(), "deleted".into(), true)),
        "{seen:?}"
    );
    assert!(
        seen.contains(&("b".into(), "modified".into(), true)),
        "{seen:?}"
    );
    Ok(status)
}

#[tokio::test]
async fn deleted_and_edited_objects_are_restored_and_reported() -> anyhow::Result<()> {
    let mut h = start().await?;
    install_two(&mut h, "drifty").await?;
    let cms = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace);
    delete_a_and_tamper_with_b(&cms).await?;
    let status = drift_reported(&mut h, "drifty").await?;
    let b_fields: Vec<&Vec<String>> = status
        .drift
        .iter()
        .filter(|d| d.object.as_ref().is_some_and(|o| o.name == "b"))
        .map(|d| &d.fields)
        .collect();
    assert!(
        b_fields.iter().all(|f| f.contains(&"data".to_string())),
        "{b_fields:?}"
    );

    // Uninstall stops the repairs: the objects stay gone.
    h.grpc
        .uninstall(UninstallRequest {
            name: "drifty".into(),
            namespace: h.namespace.clone(),
            package: String::new(),
        })
        .await?;
    tokio::time::timeout(
        REPAIR_DEADLINE,
        await_condition(cms.clone(), "a", |cm: Option<&ConfigMap>| cm.is_none()),
    )
    .await??;
    assert!(cms.get_opt("b").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn drift_repair_resumes_after_the_service_restarts() -> anyhow::Result<()> {
    let mut h = start().await?;
    install_two(&mut h, "survivor").await?;
    // A new instance knows the release only from its record in the cluster.
    h.restart_service().await?;
    let cms = Api::<ConfigMap>::namespaced(h.kube.clone(), &h.namespace);
    delete_a_and_tamper_with_b(&cms).await?;
    // The new instance did the repairs, and reports them.
    drift_reported(&mut h, "survivor").await?;
    Ok(())
}

/// The value of the unlabelled sample `name` on the service's metrics page.
fn gauge(h: &support::Harness, name: &str) -> Option<f64> {
    h.metrics.render().lines().find_map(|l| {
        let (series, value) = l.rsplit_once(' ')?;
        (series == name).then(|| value.parse().ok())?
    })
}

/// Waits until the gauge `name` shows `want`; the repairers subscribe and unsubscribe in
/// their own tasks. Errors with the last value after [`REPAIR_DEADLINE`].
async fn gauge_becomes(h: &support::Harness, name: &str, want: f64) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + REPAIR_DEADLINE;
    loop {
        let now = gauge(h, name);
        if now == Some(want) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("{name} is {now:?}, not {want}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Releases in one namespace share the watch of their kind there: three releases of a
/// ConfigMap each hold one watch (one connection to the API server), each release's drift is
/// still repaired, and the watch ends with the last release.
#[tokio::test]
async fn releases_of_one_kind_in_a_namespace_share_one_watch() -> anyhow::Result<()> {
    let mut h = start().await?;
    let cms: Api<ConfigMap> = Api::namespaced(h.kube.clone(), &h.namespace);
    let names = ["one", "two", "three"];
    for name in names {
        let files = chart(&[(
            "templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\ndata:\n  greeting: {{ .Values.greeting | quote }}\n",
        )]);
        install_hi(&mut h, name, files).await?;
    }
    gauge_becomes(&h, "berth_release_watches", 1.0).await?;
    for name in names {
        cms.delete(&format!("{name}-cm"), &DeleteParams::default())
            .await?;
    }
    for name in names {
        tokio::time::timeout(
            REPAIR_DEADLINE,
            await_condition(cms.clone(), &format!("{name}-cm"), greeting_is("hi")),
        )
        .await
        .map_err(|_| anyhow::anyhow!("{name}-cm was not put back"))??;
    }
    assert_eq!(gauge(&h, "berth_release_watches"), Some(1.0));
    for name in names {
        h.grpc
            .uninstall(UninstallRequest {
                name: name.into(),
                namespace: h.namespace.clone(),
                ..Default::default()
            })
            .await?;
    }
    gauge_becomes(&h, "berth_release_watches", 0.0).await?;
    Ok(())
}
