//! The objects that make the API server call hookevent: a ValidatingWebhookConfiguration and a
//! MutatingWebhookConfiguration per package (`berth-<package key>`, labelled
//! `berth.io/managed-by=berth-hookevent`), and a CRD's `spec.conversion`.

use berth_hooks::{AdmissionBinding, AdmissionKind};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

const FIELD_MANAGER: &str = "berth-hookevent";
/// The label on every configuration hookevent registers:
/// `kubectl delete validatingwebhookconfigurations,mutatingwebhookconfigurations -l berth.io/managed-by=berth-hookevent`
/// removes them all.
pub const MANAGED_BY: (&str, &str) = ("berth.io/managed-by", "berth-hookevent");
/// Namespaces no webhook of berth's ever sees: the cluster's own, so that a webhook whose
/// server is down cannot keep the control plane from healing itself.
const EXCLUDED_NAMESPACES: [&str; 1] = ["kube-system"];

pub fn config_name(package: &str) -> String {
    format!("berth-{package}")
}

/// One entry of a configuration's `webhooks`.
pub fn webhook_entry(
    b: &AdmissionBinding,
    url: &str,
    ca_bundle: &str,
    app_namespace: &str,
) -> Value {
    let mut namespace_selector = b.namespace_selector.clone().unwrap_or_else(|| json!({}));
    let mut exprs = namespace_selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    exprs.push(json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": EXCLUDED_NAMESPACES}));
    if !app_namespace.is_empty() {
        exprs.push(json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": [app_namespace]}));
    }
    namespace_selector["matchExpressions"] = Value::from(exprs);
    let rules: Vec<Value> = b
        .rules
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if !app_namespace.is_empty() {
                r["scope"] = json!("Namespaced");
            }
            r
        })
        .collect();
    let mut entry = json!({
        "name": b.name,
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": rules,
        "failurePolicy": b.failure_policy.as_str(),
        "sideEffects": b.side_effects,
        "timeoutSeconds": b.timeout_seconds,
        "admissionReviewVersions": ["v1"],
        "matchPolicy": "Equivalent",
        "namespaceSelector": namespace_selector,
    });
    if let Some(sel) = &b.object_selector {
        entry["objectSelector"] = sel.clone();
    }
    if !b.match_conditions.is_empty() {
        entry["matchConditions"] = Value::from(b.match_conditions.clone());
    }
    if b.kind == AdmissionKind::Mutating {
        entry["reinvocationPolicy"] = json!("Never");
    }
    entry
}

/// Applies the package's configuration of `kind` with `webhooks`; none deletes it.
pub async fn apply_admission(
    client: &kube::Client,
    package: &str,
    kind: AdmissionKind,
    webhooks: Vec<Value>,
) -> Result<(), kube::Error> {
    let name = config_name(package);
    if webhooks.is_empty() {
        return delete_one(client, &name, kind).await;
    }
    let (api_kind, params) = (
        match kind {
            AdmissionKind::Validating => "ValidatingWebhookConfiguration",
            AdmissionKind::Mutating => "MutatingWebhookConfiguration",
        },
        PatchParams::apply(FIELD_MANAGER).force(),
    );
    let object = json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": api_kind,
        "metadata": {
            "name": name,
            "labels": {MANAGED_BY.0: MANAGED_BY.1},
            "annotations": {"berth.io/package": package},
        },
        "webhooks": webhooks,
    });
    match kind {
        AdmissionKind::Validating => {
            Api::<ValidatingWebhookConfiguration>::all(client.clone())
                .patch(&name, &params, &Patch::Apply(&object))
                .await?;
        }
        AdmissionKind::Mutating => {
            Api::<MutatingWebhookConfiguration>::all(client.clone())
                .patch(&name, &params, &Patch::Apply(&object))
                .await?;
        }
    }
    Ok(())
}

/// Deletes both of the package's configurations (absent ones are fine).
pub async fn delete_admission(client: &kube::Client, package: &str) -> Result<(), kube::Error> {
    let name = config_name(package);
    delete_one(client, &name, AdmissionKind::Validating).await?;
    delete_one(client, &name, AdmissionKind::Mutating).await
}

async fn delete_one(
    client: &kube::Client,
    name: &str,
    kind: AdmissionKind,
) -> Result<(), kube::Error> {
    let dp = DeleteParams::default();
    let result = match kind {
        AdmissionKind::Validating => Api::<ValidatingWebhookConfiguration>::all(client.clone())
            .delete(name, &dp)
            .await
            .map(|_| ()),
        AdmissionKind::Mutating => Api::<MutatingWebhookConfiguration>::all(client.clone())
            .delete(name, &dp)
            .await
            .map(|_| ()),
    };
    match result {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other,
    }
}

/// Points the CRD's conversion at `url`.
pub async fn set_conversion(
    client: &kube::Client,
    crd: &str,
    url: &str,
    ca_bundle: &str,
) -> Result<(), kube::Error> {
    let patch = json!({"spec": {"conversion": {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"url": url, "caBundle": ca_bundle},
            "conversionReviewVersions": ["v1"],
        },
    }}});
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(crd, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Puts the CRD's conversion back to `None` (a CRD already gone is fine).
pub async fn reset_conversion(client: &kube::Client, crd: &str) -> Result<(), kube::Error> {
    let patch = json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}});
    match Api::<CustomResourceDefinition>::all(client.clone())
        .patch(crd, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}
