//! One owner per object (issue 31.2), through the release service's gRPC API on the dev
//! cluster or the real one (`BERTH_TEST_KUBECONFIG`): an object another release owns, or that
//! exists and no release owns, is refused naming the object and its owner, changing nothing;
//! `berth.io/adopt` hands an unowned object over; an upgrade's prune and an uninstall leave an
//! object alone once another release owns it.

mod support;

use berth_proto::release::{ChartFile, InstallRequest, UninstallRequest};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use support::{chart, config_map, start};

fn request(h: &support::Harness, name: &str, files: Vec<ChartFile>) -> InstallRequest {
    InstallRequest {
        name: name.into(),
        namespace: h.namespace.clone(),
        files,
        values: Some(berth_proto::json::to_struct(
            &serde_json::json!({"greeting": "hi"}),
        )),
        package: String::new(),
        wait_ms: 0,
    }
}

fn refused_as_taken(s: &tonic::Status) -> bool {
    s.code() == tonic::Code::FailedPrecondition
        && berth_proto::failure::reason(s).as_deref() == Some(berth_proto::failure::OBJECT_TAKEN)
}

#[tokio::test]
async fn a_second_release_of_the_same_object_is_refused_naming_its_owner() -> anyhow::Result<()> {
    let h = start().await?;
    let ns = h.namespace.clone();
    let shared = || chart(&[("templates/a.yaml", &config_map("shared", false))]);
    h.grpc
        .clone()
        .install(request(&h, "first", shared()))
        .await?;
    let cms: Api<ConfigMap> = Api::namespaced(h.kube.clone(), &ns);
    let before = cms.get("shared").await?.metadata.resource_version;

    let refused = h
        .grpc
        .clone()
        .install(request(&h, "second", shared()))
        .await
        .expect_err("the object is first's");
    assert!(refused_as_taken(&refused), "{refused:?}");
    let says = refused.message();
    assert!(
        says.contains(&format!("ConfigMap {ns}/shared"))
            && says.contains(&format!("belongs to release {ns}/first")),
        "{says}"
    );
    let after = cms.get("shared").await?;
    assert_eq!(
        after.metadata.resource_version, before,
        "nothing was written"
    );
    assert_eq!(
        after
            .data
            .unwrap_or_default()
            .get("release")
            .map(String::as_str),
        Some("first")
    );
    Ok(())
}

#[tokio::test]
async fn an_unowned_object_is_taken_over_only_when_annotated_to_be() -> anyhow::Result<()> {
    let h = start().await?;
    let ns = h.namespace.clone();
    let cms: Api<ConfigMap> = Api::namespaced(h.kube.clone(), &ns);
    let mut made = ConfigMap::default();
    made.metadata.name = Some("made".into());
    cms.create(&PostParams::default(), &made).await?;
    let files = || chart(&[("templates/a.yaml", &config_map("made", false))]);

    let refused = h
        .grpc
        .clone()
        .install(request(&h, "taker", files()))
        .await
        .expect_err("nobody handed it over");
    assert!(refused_as_taken(&refused), "{refused:?}");
    assert!(
        refused.message().contains("belongs to no release")
            && refused
                .message()
                .contains(&format!("berth.io/adopt: \"{ns}/taker\"")),
        "{}",
        refused.message()
    );
    assert!(cms.get("made").await?.data.is_none(), "unchanged");

    let adopt =
        serde_json::json!({"metadata": {"annotations": {"berth.io/adopt": format!("{ns}/taker")}}});
    cms.patch("made", &PatchParams::default(), &Patch::Merge(&adopt))
        .await?;
    h.grpc
        .clone()
        .install(request(&h, "taker", files()))
        .await?;
    let now = cms.get("made").await?;
    assert_eq!(
        now.data
            .unwrap_or_default()
            .get("release")
            .map(String::as_str),
        Some("taker")
    );
    assert_eq!(
        now.metadata
            .annotations
            .unwrap_or_default()
            .get("meta.helm.sh/release-name")
            .map(String::as_str),
        Some("taker"),
        "adopted: berth's annotations from now on"
    );
    Ok(())
}

/// An object handed to another release (its annotations moved there) survives the first
/// release's prune and uninstall.
#[tokio::test]
async fn prune_and_uninstall_leave_another_releases_object_alone() -> anyhow::Result<()> {
    let h = start().await?;
    let ns = h.namespace.clone();
    let cms: Api<ConfigMap> = Api::namespaced(h.kube.clone(), &ns);
    let both = chart(&[
        ("templates/a.yaml", &config_map("moved", false)),
        ("templates/b.yaml", &config_map("stays", false)),
    ]);
    h.grpc.clone().install(request(&h, "old", both)).await?;
    let hand_over = serde_json::json!({"metadata": {"annotations": {
        "meta.helm.sh/release-name": "new", "meta.helm.sh/release-namespace": ns}}});
    cms.patch("moved", &PatchParams::default(), &Patch::Merge(&hand_over))
        .await?;

    // An upgrade that no longer renders `moved` does not prune it: it is new's now.
    let one = chart(&[("templates/b.yaml", &config_map("stays", false))]);
    h.grpc.clone().install(request(&h, "old", one)).await?;
    assert!(
        cms.get_opt("moved").await?.is_some(),
        "pruned another release's object"
    );

    // Nor does the uninstall of a release still recording it.
    let again = chart(&[
        ("templates/a.yaml", &config_map("moved2", false)),
        ("templates/b.yaml", &config_map("stays", false)),
    ]);
    h.grpc.clone().install(request(&h, "old", again)).await?;
    cms.patch("moved2", &PatchParams::default(), &Patch::Merge(&hand_over))
        .await?;
    h.grpc
        .clone()
        .uninstall(UninstallRequest {
            name: "old".into(),
            namespace: ns.clone(),
            package: String::new(),
        })
        .await?;
    assert!(
        cms.get_opt("stays").await?.is_none(),
        "old's own object is gone"
    );
    assert!(cms.get_opt("moved2").await?.is_some(), "new's object stays");
    assert!(cms.get_opt("moved").await?.is_some());
    Ok(())
}
