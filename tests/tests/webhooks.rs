//! Admission and conversion webhooks served to hooks, end to end: a package's
//! `kubernetesValidating`/`kubernetesMutating`/`kubernetesCustomResourceConversion` hooks
//! answer the requests of the API server (the dev cluster, or the real control plane named by
//! `BERTH_TEST_KUBECONFIG`), through real berth processes: hookevent's webhook server, the
//! broker and a worker running the hook.

use std::time::Duration;

use anyhow::{Context, bail, ensure};
use berth_proto::v1;
use berth_tests::{SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

const DEADLINE: Duration = Duration::from_secs(60);

fn configmap(name: &str, labels: Value) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"v": "1"}}),
    )?)
}

/// Polls until `check` holds (bounded).
async fn wait_for<F, Fut>(what: &str, check: F) -> anyhow::Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !check().await? {
        if tokio::time::Instant::now() >= deadline {
            bail!("{what}: not within {DEADLINE:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

async fn with_topology<F, Fut>(journey: F) -> anyhow::Result<()>
where
    F: FnOnce(String, kube::Client) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = journey(topology.gateway.endpoint(), cluster.client.clone()).await;
    topology.stop().await;
    cluster.stop().await;
    result
}

async fn install(client: &mut journey::Client, r: &v1::PackageRef) -> anyhow::Result<()> {
    let accepted = client
        .update(v1::UpdateRequest {
            r#ref: Some(r.clone()),
            repository: berth_tests::FIXTURES_REPO.to_owned(),
            version: "1.0.0".into(),
            ..Default::default()
        })
        .await?
        .into_inner();
    journey::wait_running(client, r, accepted.generation).await?;
    Ok(())
}

async fn remove(client: &mut journey::Client, r: &v1::PackageRef) -> anyhow::Result<()> {
    client
        .remove(v1::RemoveRequest {
            r#ref: Some(r.clone()),
            ..Default::default()
        })
        .await?;
    journey::wait_gone(client, r).await
}

/// The API server's refusal of a create, as kube-rs reports it.
fn refusal(result: Result<ConfigMap, kube::Error>) -> anyhow::Result<kube::core::Status> {
    match result {
        Err(kube::Error::Api(status)) => Ok(*status),
        Err(e) => bail!("expected the API server to refuse, got {e}"),
        Ok(cm) => bail!(
            "expected a refusal, the ConfigMap was created: {:?}",
            cm.metadata.name
        ),
    }
}

/// A package whose hooks are admission webhooks: the validating hook refuses labelled
/// ConfigMaps with its own message (403, in kube-apiserver's words) and allows the others; the
/// mutating hook's patch lands in the stored object; a hook that fails gets the webhook's
/// failurePolicy (Fail: the request is refused as a failed webhook call), and so does one that
/// does not answer within the webhook's timeout (Ignore: the object is let in). Removing the package
/// removes its webhook configurations, and the labelled ConfigMap is then accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_webhooks_are_answered_by_hooks() -> anyhow::Result<()> {
    with_topology(|endpoint, kube| async move {
        let ns = TestNamespace::create(&kube, "webhooks").await?;
        let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        let validating: Api<ValidatingWebhookConfiguration> = Api::all(kube.clone());
        let mutating: Api<MutatingWebhookConfiguration> = Api::all(kube.clone());
        let config_name = format!("berth-{}.gatekeeper", &*ns);
        let mut client = journey::connect(&endpoint).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "gatekeeper".into(),
            namespace: ns.to_string(),
        };
        install(&mut client, &r).await?;

        // Registered, with a CA bundle, confined to the app's namespace.
        let v = validating
            .get(&config_name)
            .await
            .context("the ValidatingWebhookConfiguration")?;
        let hooks = v.webhooks.as_ref().context("webhooks")?;
        let mut names: Vec<&str> = hooks.iter().map(|h| h.name.as_str()).collect();
        names.sort();
        assert_eq!(
            names,
            ["deny-labelled.gatekeeper.berth.test", "slow.gatekeeper.berth.test"]
        );
        let hook = &hooks[0];
        assert!(hook.client_config.ca_bundle.is_some(), "caBundle");
        let selector = serde_json::to_value(&hook.namespace_selector)?;
        assert!(
            selector.to_string().contains(&format!("\"{}\"", &*ns)),
            "confined to the app's namespace: {selector}"
        );
        mutating
            .get(&config_name)
            .await
            .context("the MutatingWebhookConfiguration")?;

        let pp = PostParams::default();
        // Allowed by the hook. The time a create takes through the hook is printed (a figure,
        // not a check): API server → hookevent → broker → worker → hook process → back.
        let started = std::time::Instant::now();
        cms.create(&pp, &configmap("plain", json!({}))?)
            .await
            .context("an unlabelled ConfigMap is allowed")?;
        let through_hook = started.elapsed();
        let started = std::time::Instant::now();
        cms.create(&pp, &configmap("plain-2", json!({}))?).await?;
        eprintln!(
            "admission through a hook: first create {through_hook:?}, second {:?}",
            started.elapsed()
        );
        // Refused by the hook, with its message.
        let status = refusal(
            cms.create(
                &pp,
                &configmap("refused", json!({"gatekeeper.berth.test/deny": "true"}))?,
            )
            .await,
        )?;
        assert_eq!(status.code, 403, "{status:?}");
        assert_eq!(
            status.message,
            "admission webhook \"deny-labelled.gatekeeper.berth.test\" denied the request: configmap refused is refused by the gatekeeper hook"
        );
        ensure!(
            cms.get_opt("refused").await?.is_none(),
            "the refused ConfigMap must not exist"
        );
        // Patched by the mutating hook.
        let stamped = cms
            .create(
                &pp,
                &configmap("stamped", json!({"gatekeeper.berth.test/stamp": "true"}))?,
            )
            .await?;
        let data = stamped.data.unwrap_or_default();
        assert_eq!(data.get("stamped").map(String::as_str), Some("by-hook"));
        assert_eq!(
            cms.get("stamped").await?.data.unwrap_or_default().get("stamped").map(String::as_str),
            Some("by-hook"),
            "the stored object carries the patch"
        );
        // A hook that fails: failurePolicy Fail refuses the request as a failed call.
        let status = refusal(
            cms.create(
                &pp,
                &configmap("crashing", json!({"gatekeeper.berth.test/crash": "true"}))?,
            )
            .await,
        )?;
        assert_eq!(status.code, 500, "{status:?}");
        assert!(
            status.message.contains("failed calling webhook \"deny-labelled.gatekeeper.berth.test\""),
            "{}",
            status.message
        );
        assert!(status.message.contains("exit code 1"), "{}", status.message);
        // A hook that does not answer within its webhook's timeout: failurePolicy Ignore lets
        // the object in (and the request does not hang).
        cms.create(
            &pp,
            &configmap("slow", json!({"gatekeeper.berth.test/slow": "true"}))?,
        )
        .await
        .context("a webhook whose hook is too slow, with failurePolicy Ignore, lets the object in")?;

        // Removal deregisters: the labelled ConfigMap is accepted afterwards.
        remove(&mut client, &r).await?;
        ensure!(
            validating.get_opt(&config_name).await?.is_none()
                && mutating.get_opt(&config_name).await?.is_none(),
            "the webhook configurations must be gone with the package"
        );
        cms.create(
            &pp,
            &configmap("after", json!({"gatekeeper.berth.test/deny": "true"}))?,
        )
        .await
        .context("no webhook is left after removal")?;
        Ok(())
    })
    .await
}

/// A CRD with two versions whose conversion a hook serves: an object created as v1 reads as v2
/// converted by the hook (on the real control plane; the dev cluster does not convert between
/// a CRD's versions, see its crate docs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversion_webhook_is_answered_by_a_hook() -> anyhow::Result<()> {
    if !TestCluster::is_real() {
        eprintln!(
            "skipped: the dev cluster does not call conversion webhooks (set BERTH_TEST_KUBECONFIG)"
        );
        return Ok(());
    }
    with_topology(|endpoint, kube| async move {
        let ns = TestNamespace::create(&kube, "webhooks").await?;
        let mut client = journey::connect(&endpoint).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::Module as i32,
            name: "converter".into(),
            namespace: String::new(),
        };
        let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
        let result = async {
            install(&mut client, &r).await?;
            let crd = crds.get("widgets.conv.berth.test").await?;
            let conversion = serde_json::to_value(&crd.spec.conversion)?;
            assert_eq!(conversion["strategy"], "Webhook", "{conversion}");
            let api = |version: &str| -> Api<DynamicObject> {
                let gvk = GroupVersionKind::gvk("conv.berth.test", version, "Widget");
                Api::namespaced_with(kube.clone(), &ns, &ApiResource::from_gvk(&gvk))
            };
            let widget: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "conv.berth.test/v1", "kind": "Widget",
                "metadata": {"name": "w"}, "spec": {"color": "blue"},
            }))?;
            api("v1").create(&PostParams::default(), &widget).await?;
            let v2 = api("v2");
            wait_for("the Widget read as v2", || {
                let v2 = v2.clone();
                async move { Ok(v2.get_opt("w").await?.is_some()) }
            })
            .await?;
            let as_v2 = v2.get("w").await?;
            assert_eq!(
                as_v2.data["spec"],
                json!({"colour": "blue"}),
                "{:?}",
                as_v2.data
            );
            let as_v1 = api("v1").get("w").await?;
            assert_eq!(as_v1.data["spec"], json!({"color": "blue"}));
            remove(&mut client, &r).await?;
            let crd = crds.get("widgets.conv.berth.test").await?;
            let conversion = serde_json::to_value(&crd.spec.conversion)?;
            assert_eq!(
                conversion["strategy"], "None",
                "reset on removal: {conversion}"
            );
            Ok(())
        }
        .await;
        // CRDs outlive releases (as in Helm): this test removes its own.
        let _ = crds
            .delete("widgets.conv.berth.test", &DeleteParams::default())
            .await;
        result
    })
    .await
}
