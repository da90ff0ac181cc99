//! Server-side apply: create, update, pruning a manager's own fields, conflicts, force.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::common::{code, namespace, target};

fn config(ns: &str, data: serde_json::Value, labels: serde_json::Value) -> serde_json::Value {
    json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "cfg", "namespace": ns, "labels": labels }, "data": data })
}

#[tokio::test]
async fn apply_creates_updates_and_prunes_own_fields() {
    let t = target().await;
    let ns = namespace(&t.client, "ssa").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let pp = PatchParams::apply("berth-test");

    let created = api
        .patch(
            "cfg",
            &pp,
            &Patch::Apply(config(
                &ns,
                json!({ "a": "1", "b": "2" }),
                json!({ "x": "1" }),
            )),
        )
        .await
        .expect("apply creates");
    let managers: Vec<String> = created
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, vec!["berth-test"]);
    assert_eq!(
        created
            .metadata
            .managed_fields
            .as_ref()
            .and_then(|m| m[0].operation.clone())
            .as_deref(),
        Some("Apply")
    );

    // Another writer adds a key with an ordinary merge patch; it now owns that key.
    api.patch(
        "cfg",
        &PatchParams {
            field_manager: Some("editor".into()),
            ..Default::default()
        },
        &Patch::Merge(json!({ "data": { "c": "3" } })),
    )
    .await
    .expect("merge patch");

    let smaller = api
        .patch(
            "cfg",
            &pp,
            &Patch::Apply(config(&ns, json!({ "a": "1" }), json!({}))),
        )
        .await
        .expect("re-apply smaller");
    let data = smaller.data.expect("data");
    assert_eq!(data.get("a").map(String::as_str), Some("1"));
    assert!(
        !data.contains_key("b"),
        "a field the applier stopped setting is removed"
    );
    assert_eq!(
        data.get("c").map(String::as_str),
        Some("3"),
        "another manager's field stays"
    );
    assert!(smaller.metadata.labels.unwrap_or_default().is_empty());

    let again = api
        .patch(
            "cfg",
            &pp,
            &Patch::Apply(config(&ns, json!({ "a": "1" }), json!({}))),
        )
        .await
        .expect("idempotent");
    assert_eq!(
        again.metadata.resource_version, smaller.metadata.resource_version,
        "a no-op apply does not write"
    );
}

#[tokio::test]
async fn conflicting_apply_needs_force() {
    let t = target().await;
    let ns = namespace(&t.client, "ssac").await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let owned = api
        .patch(
            "cfg",
            &PatchParams::apply("owner"),
            &Patch::Apply(config(&ns, json!({ "a": "1" }), json!({}))),
        )
        .await
        .expect("owner applies");
    // The owner now owns `.metadata.labels` (an empty map), but an empty map is not stored.
    assert_eq!(owned.metadata.labels, None, "empty labels are not stored");
    let fields = owned
        .metadata
        .managed_fields
        .as_ref()
        .expect("managedFields")[0]
        .fields_v1
        .as_ref()
        .expect("fieldsV1");
    assert_eq!(fields.0.pointer("/f:metadata/f:labels"), Some(&json!({})));

    // So another manager applying the very same configuration changes `.metadata.labels`
    // (from absent to empty) and conflicts with the owner there.
    let err = api
        .patch(
            "cfg",
            &PatchParams::apply("sharer"),
            &Patch::Apply(config(&ns, json!({ "a": "1" }), json!({}))),
        )
        .await
        .expect_err("an empty labels map owned by another manager conflicts");
    assert_eq!(code(&err), 409);
    if let kube::Error::Api(s) = &err {
        assert_eq!(
            s.message,
            "Apply failed with 1 conflict: conflict with \"owner\": .metadata.labels"
        );
    }

    // Without the labels, setting `.data.a` to the value it has shares ownership of it.
    let same = api
        .patch(
            "cfg",
            &PatchParams::apply("sharer"),
            &Patch::Apply(json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "cfg" }, "data": { "a": "1" } })),
        )
        .await
        .expect("same value is shared");
    assert_eq!(same.metadata.managed_fields.map(|m| m.len()), Some(2));

    let rival = json!({ "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "cfg" }, "data": { "a": "2" } });
    let err = api
        .patch(
            "cfg",
            &PatchParams::apply("rival"),
            &Patch::Apply(rival.clone()),
        )
        .await
        .expect_err("conflict");
    assert_eq!(code(&err), 409);
    if let kube::Error::Api(s) = &err {
        assert_eq!(
            s.message,
            "Apply failed with 2 conflicts: conflicts with \"owner\":\n- .data.a\nconflicts with \"sharer\":\n- .data.a"
        );
        let details = s.details.as_ref().expect("details");
        let mut causes: Vec<(String, String, String)> = details
            .causes
            .iter()
            .map(|c| (c.reason.clone(), c.message.clone(), c.field.clone()))
            .collect();
        causes.sort();
        let cause = |m: &str| {
            (
                "FieldManagerConflict".to_string(),
                format!("conflict with \"{m}\""),
                ".data.a".to_string(),
            )
        };
        assert_eq!(causes, vec![cause("owner"), cause("sharer")]);
    }
    let forced = api
        .patch(
            "cfg",
            &PatchParams::apply("rival").force(),
            &Patch::Apply(rival),
        )
        .await
        .expect("force");
    assert_eq!(
        forced.data.and_then(|d| d.get("a").cloned()).as_deref(),
        Some("2")
    );
    let owners: Vec<String> = forced
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:data/f:a").is_some())
        })
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(owners, vec!["rival"], "force moves ownership");
}
