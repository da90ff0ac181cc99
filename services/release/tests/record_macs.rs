//! Release records are berth's only with a MAC that checks out under the service's key: a
//! record whose payload was changed, whose MAC is missing, or that was made with another key is
//! not berth's, and berth acts on none of it. Through the release service on the dev cluster
//! or the real one of `BERTH_TEST_KUBECONFIG`.

mod support;

use berth_proto::release::{InstallRequest, StatusRequest, UninstallRequest};
use berth_release::manager::{Owner, ReleaseError, ReleaseId, ReleaseManager};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use support::{chart, config_map, random_key, start_without_drift_repair};

fn install(h: &support::Harness, name: &str, cms: &[&str]) -> InstallRequest {
    let templates: Vec<(String, String)> = cms
        .iter()
        .map(|cm| (format!("templates/{cm}.yaml"), config_map(cm, false)))
        .collect();
    let files: Vec<(&str, &str)> = templates
        .iter()
        .map(|(p, t)| (p.as_str(), t.as_str()))
        .collect();
    InstallRequest {
        name: name.into(),
        namespace: h.namespace.clone(),
        files: chart(&files),
        values: None,
        package: String::new(),
        wait_ms: 0,
    }
}

async fn status(h: &mut support::Harness, name: &str) -> anyhow::Result<(bool, i32)> {
    let s = h
        .grpc
        .status(StatusRequest {
            name: name.into(),
            namespace: h.namespace.clone(),
            wait_ms: 0,
        })
        .await?
        .into_inner();
    Ok((s.found, s.revision))
}

fn secret_name(release: &str, version: i32) -> String {
    format!("sh.helm.release.v1.{release}.v{version}")
}

/// Merge-patches a record's Secret, as anyone allowed to write Secrets in the namespace could.
async fn tamper(
    h: &support::Harness,
    secret: &str,
    patch: serde_json::Value,
) -> anyhow::Result<()> {
    Api::<Secret>::namespaced(h.kube.clone(), &h.namespace)
        .patch(secret, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// A record tampered with (its payload changed, its MAC removed) is no longer berth's: the
/// release's history and status go on from berth's records before it; the next revision is
/// numbered after it, and what the tampered record named is not pruned.
#[tokio::test]
async fn tampered_records_are_not_berths() -> anyhow::Result<()> {
    let mut h = start_without_drift_repair().await?;
    h.grpc.install(install(&h, "web", &["a"])).await?;
    h.grpc.install(install(&h, "web", &["a", "b"])).await?;
    assert_eq!(status(&mut h, "web").await?, (true, 2));

    // The newest record's payload, changed: its MAC no longer checks out.
    let record = Api::<Secret>::namespaced(h.kube.clone(), &h.namespace)
        .get(&secret_name("web", 2))
        .await?;
    let mut payload = record.data.unwrap_or_default()["release"].0.clone();
    payload[10] ^= 1;
    tamper(
        &h,
        &secret_name("web", 2),
        json!({"data": {"release": base64(&payload)}}),
    )
    .await?;
    assert_eq!(
        status(&mut h, "web").await?,
        (true, 1),
        "revision 2 is no longer berth's: revision 1 is the newest"
    );
    // An upgrade follows every record, berth's or not, and prunes from berth's own newest
    // (revision 1, which never had b): b stays.
    let up = h
        .grpc
        .install(install(&h, "web", &["a"]))
        .await?
        .into_inner();
    assert_eq!(up.revision, 3);
    let cms: Api<ConfigMap> = Api::namespaced(h.kube.clone(), &h.namespace);
    assert!(
        cms.get_opt("b").await?.is_some(),
        "pruned from a record berth cannot vouch for"
    );

    // A missing MAC annotation: the same.
    tamper(
        &h,
        &secret_name("web", 3),
        json!({"metadata": {"annotations": {"berth.io/record-mac": null}}}),
    )
    .await?;
    assert_eq!(status(&mut h, "web").await?, (true, 1));
    let history = h.store().history("web").await?;
    let versions: Vec<i32> = history.iter().map(|r| r.version).collect();
    assert_eq!(versions, [1], "only berth's records are its history");
    Ok(())
}

/// Records made with another key (another installation, a lost key) are not this service's:
/// it finds no release of its own, and an install numbers its revision after them without
/// pruning anything they name (as for records written before records carried MACs); its
/// uninstall deletes them with its own, and nothing they name.
#[tokio::test]
async fn records_made_with_another_key_are_not_berths() -> anyhow::Result<()> {
    let mut h = start_without_drift_repair().await?;
    h.grpc.install(install(&h, "shop", &["kept"])).await?;
    let manager = ReleaseManager::new(h.kube.clone(), random_key()).with_drift_repair(false);
    let release = ReleaseId::new("shop", &h.namespace)?;
    let seen = manager.status(&release).await?;
    assert!(
        !seen.found,
        "another key's record is not a release of berth's"
    );
    let files = chart(&[("templates/added.yaml", &config_map("added", false))])
        .into_iter()
        .map(|f| (f.path, f.content))
        .collect();
    let installed = manager
        .install(&release, files, json!({}), &Owner::default())
        .await?;
    assert_eq!(installed.revision, 2);
    let cms: Api<ConfigMap> = Api::namespaced(h.kube.clone(), &h.namespace);
    assert!(
        cms.get_opt("kept").await?.is_some(),
        "nothing is pruned from a record not berth's"
    );
    let described = manager.history(&release).await?;
    assert_eq!(described.len(), 1);
    assert!(
        described[0].description.contains("nothing pruned")
            && described[0].description.contains(&secret_name("shop", 1)),
        "{}",
        described[0].description
    );
    // Uninstall by the other key: only what its own record names goes; the release's whole
    // history goes with it (the first key's record too, as a revision of the release).
    let done = manager.uninstall(&release, &Owner::default()).await?;
    assert_eq!(done.deleted.len(), 1);
    assert!(cms.get_opt("kept").await?.is_some());
    assert!(cms.get_opt("added").await?.is_none());
    let left = h.store().stored("shop").await?;
    assert!(left.is_empty(), "records left: {left:?}");
    Ok(())
}

/// A release Helm made (records without berth's MAC or checksum label) is not berth's to
/// take over: an install is refused, naming the record, and changes nothing.
#[tokio::test]
async fn a_release_helm_made_is_refused_naming_its_record() -> anyhow::Result<()> {
    let mut h = start_without_drift_repair().await?;
    h.grpc.install(install(&h, "theirs", &["t"])).await?;
    // What Helm writes: no MAC, no checksum label.
    tamper(
        &h,
        &secret_name("theirs", 1),
        json!({"metadata": {
            "annotations": {"berth.io/record-mac": null},
            "labels": {"packageChecksum": null},
        }}),
    )
    .await?;
    let refused = h
        .grpc
        .install(install(&h, "theirs", &["t", "u"]))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
    assert!(
        refused.message().contains(&secret_name("theirs", 1))
            && refused.message().contains("not made by berth"),
        "{}",
        refused.message()
    );
    let cms: Api<ConfigMap> = Api::namespaced(h.kube.clone(), &h.namespace);
    assert!(cms.get_opt("u").await?.is_none(), "nothing applied");
    // Nor does an uninstall touch it.
    let gone = h
        .grpc
        .uninstall(UninstallRequest {
            name: "theirs".into(),
            namespace: h.namespace.clone(),
            package: String::new(),
        })
        .await?
        .into_inner();
    assert!(!gone.found);
    assert!(cms.get_opt("t").await?.is_some());
    Ok(())
}

/// Attack 8 by construction: a release's records name the package it belongs to. An App
/// named like a Module, in the Module's namespace, can neither install over the Module's
/// release nor uninstall it (answered as not found, Remove finishing without touching it).
#[tokio::test]
async fn a_release_is_its_first_owners_for_good() -> anyhow::Result<()> {
    let h = start_without_drift_repair().await?;
    let manager = ReleaseManager::new(h.kube.clone(), h.key.clone()).with_drift_repair(false);
    let release = ReleaseId::new("dns", &h.namespace)?;
    let module = Owner {
        package: "dns".into(),
        app_namespace: None,
    };
    let app = Owner {
        package: format!("{}.dns", h.namespace),
        app_namespace: Some(h.namespace.clone()),
    };
    let files = || -> Vec<(String, Vec<u8>)> {
        chart(&[("templates/m.yaml", &config_map("module-cm", false))])
            .into_iter()
            .map(|f| (f.path, f.content))
            .collect()
    };
    manager
        .install(&release, files(), json!({}), &module)
        .await?;
    let refused = manager
        .install(&release, files(), json!({"greeting": "mine"}), &app)
        .await
        .unwrap_err();
    assert!(matches!(refused, ReleaseError::NotOwned(_)), "{refused}");
    let text = refused.to_string();
    assert!(
        text.contains("belongs to module dns") && text.contains(&secret_name("dns", 1)),
        "{text}"
    );
    let done = manager.uninstall(&release, &app).await?;
    assert!(!done.found && done.deleted.is_empty());
    let cms: Api<ConfigMap> = Api::namespaced(h.kube.clone(), &h.namespace);
    assert!(
        cms.get_opt("module-cm").await?.is_some(),
        "the module's object stays"
    );
    let records = h.store().stored("dns").await?;
    assert_eq!(records.own.len(), 1);
    assert_eq!(records.own[0].owner, module);
    Ok(())
}

fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
