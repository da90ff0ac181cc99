//! Release records berth acts on are berth's (issue 30, attacks 1 and 8), through real
//! processes on the dev cluster or the real control plane of `BERTH_TEST_KUBECONFIG`:
//! - a chart, or a hook's object operations, that would write a release record is refused,
//!   naming it, and nothing of it is applied;
//! - a forged record placed in an App's namespace (as the App's own ServiceAccount could) is
//!   acted on by none of drift repair, an upgrade's prune or Remove, and the namespace's
//!   ServiceAccount never becomes cluster-admin;
//! - `berth-system` belongs to modules: an App there is refused, and the module it is named
//!   after keeps its release, its objects and its records.

use std::time::Duration;

use anyhow::{bail, ensure};
use base64::Engine as _;
use berth_proto::v1;
use berth_tests::{SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;

/// Longest a package may take to reach the phase a test waits for.
const DEADLINE: Duration = Duration::from_secs(120);

fn app(name: &str, ns: &str) -> v1::PackageRef {
    v1::PackageRef {
        kind: v1::PackageKind::App as i32,
        name: name.into(),
        namespace: ns.into(),
    }
}

fn module(name: &str) -> v1::PackageRef {
    v1::PackageRef {
        kind: v1::PackageKind::Module as i32,
        name: name.into(),
        namespace: String::new(),
    }
}

fn update(r: &v1::PackageRef, package: &str, settings: serde_json::Value) -> v1::UpdateRequest {
    v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: berth_tests::FIXTURES_REPO.to_owned(),
        package: package.into(),
        version: "1.0.0".into(),
        settings: Some(berth_proto::json::to_struct(&settings)),
        force: false,
        settings_version: 0,
        reset_settings: false,
    }
}

async fn with_topology<F, Fut>(journey: F) -> anyhow::Result<()>
where
    F: FnOnce(SplitTopology, kube::Client) -> Fut,
    Fut: Future<Output = anyhow::Result<SplitTopology>>,
{
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = journey(topology, cluster.client.clone()).await;
    let result = match result {
        Ok(topology) => {
            topology.stop().await;
            Ok(())
        }
        Err(e) => Err(e),
    };
    cluster.stop().await;
    result
}

/// Follows the package until `generation` is Failed; returns it.
async fn wait_failed(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    generation: i64,
) -> anyhow::Result<v1::Package> {
    journey::follow(client, r, DEADLINE, "the generation to fail", |p| {
        if p.phase == "Running" {
            bail!("the package is Running: it was not refused");
        }
        Ok(p.phase == "Failed" && p.generation == generation)
    })
    .await
}

/// Waits, on a watch, until `cms`' `name` exists (drift repair brought it back).
async fn wait_present(cms: &Api<ConfigMap>, name: &str) -> anyhow::Result<()> {
    let present =
        kube::runtime::wait::await_condition(cms.clone(), name, |c: Option<&ConfigMap>| {
            c.is_some()
        });
    tokio::time::timeout(DEADLINE, present).await??;
    Ok(())
}

/// A chart shipping a record of its own release (revision 99, deployed, a cluster-admin
/// binding) is refused before anything is applied, naming the Secret; a hook creating one
/// through its object operations fails its package, naming it, and creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charts_and_hooks_may_not_write_release_records() -> anyhow::Result<()> {
    with_topology(|topology, kube| async move {
        let ns = TestNamespace::create(&kube, "records").await?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;

        let r = app("forger", &ns);
        let accepted = client
            .update(update(&r, "forger", json!({})))
            .await?
            .into_inner();
        let failed = wait_failed(&mut client, &r, accepted.generation).await?;
        let error = &failed.last_error;
        let named = format!("Secret {ns}/sh.helm.release.v1.forger.v99 (type helm.sh/release.v1)");
        ensure!(error.contains(&named), "{named:?} not in {error:?}");
        let secrets: Api<Secret> = Api::namespaced(kube.clone(), &ns);
        ensure!(
            secrets
                .get_opt("sh.helm.release.v1.forger.v99")
                .await?
                .is_none(),
            "the forged record was not written"
        );
        let own: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
        ensure!(
            own.get_opt("forger-own").await?.is_none(),
            "nothing of a refused chart is applied"
        );
        let crbs: Api<ClusterRoleBinding> = Api::all(kube.clone());
        ensure!(
            crbs.get_opt(&format!("berth-test-forged-{ns}"))
                .await?
                .is_none()
        );

        let r = app("forger-hook", &ns);
        let accepted = client
            .update(update(&r, "forger-hook", json!({})))
            .await?
            .into_inner();
        let failed = wait_failed(&mut client, &r, accepted.generation).await?;
        let error = &failed.last_error;
        ensure!(
            error.contains("Secret")
                && error.contains("forged-by-hook")
                && error.contains("owner: helm"),
            "the refusal names the object: {error:?}"
        );
        ensure!(secrets.get_opt("forged-by-hook").await?.is_none());
        Ok(topology)
    })
    .await
}

/// A record of `release` in `ns`, revision `version`, status deployed, as Helm's secrets
/// driver reads one (plain JSON, base64): its manifest binds the namespace's default
/// ServiceAccount to cluster-admin, holds a ConfigMap of another namespace and a ClusterRole
/// (berth never made either), and it has a pre-delete hook. Labelled as berth labels its
/// records (the checksum label too): anyone may write labels.
fn forged_record(release: &str, ns: &str, other: &str, version: i32) -> anyhow::Result<Secret> {
    let manifest = format!(
        "---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: berth-test-forged-{ns}\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\n\
         subjects:\n- kind: ServiceAccount\n  name: default\n  namespace: {ns}\n\
         ---\n\
         apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: victim\n  namespace: {other}\n\
         ---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: berth-test-victim-{ns}\n"
    );
    let hook = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: forged-pre-delete\n  annotations:\n    helm.sh/hook: pre-delete\ndata:\n  ran: \"yes\"\n";
    let record = json!({
        "name": release, "namespace": ns, "version": version,
        "info": {"status": "deployed", "first_deployed": "2026-01-01T00:00:00Z",
                 "last_deployed": "2026-01-01T00:00:00Z", "description": "Install complete"},
        "chart": {"metadata": {"name": release, "version": "1.0.0"}},
        "manifest": manifest,
        "hooks": [{"name": "forged-pre-delete", "kind": "ConfigMap", "path": "hook.yaml",
                   "manifest": hook, "events": ["pre-delete"]}],
    });
    let encoded = base64::engine::general_purpose::STANDARD.encode(record.to_string());
    Ok(serde_json::from_value(json!({
        "metadata": {
            "name": format!("sh.helm.release.v1.{release}.v{version}"),
            "labels": {"owner": "helm", "name": release, "status": "deployed",
                       "version": version.to_string(), "packageChecksum": "forged"},
        },
        "type": "helm.sh/release.v1",
        "stringData": {"release": encoded},
    }))?)
}

/// On the real control plane: whether `user` may do everything everywhere (what `kubectl auth
/// can-i '*' '*' --as=<user>` asks).
async fn may_do_everything(kube: &kube::Client, user: &str, ns: &str) -> anyhow::Result<bool> {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{ns}"),
                       "system:authenticated"],
            "resourceAttributes": {"verb": "*", "group": "*", "resource": "*"},
        }
    }))?;
    let answer = Api::<SubjectAccessReview>::all(kube.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Attack 1: a forged record in an App's namespace, newer than berth's and deployed, naming a
/// cluster-admin binding, objects berth never made and a pre-delete hook. Drift repair keeps
/// repairing berth's own revision and applies nothing of it; an upgrade numbers its revision
/// after it but prunes nothing of it; Remove runs none of its hooks and deletes none of its
/// objects, and deletes it with berth's own records. The App's ServiceAccount stays what it
/// was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_record_in_an_apps_namespace_is_never_acted_on() -> anyhow::Result<()> {
    with_topology(|topology, kube| async move {
        let ns = TestNamespace::create(&kube, "records").await?;
        let other = TestNamespace::create(&kube, "records-other").await?;
        // What the forged record would have berth prune: objects berth never made.
        let victim: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "victim"}}))?;
        let victims: Api<ConfigMap> = Api::namespaced(kube.clone(), &other);
        victims.create(&PostParams::default(), &victim).await?;
        let role_name = format!("berth-test-victim-{ns}");
        let role: ClusterRole = serde_json::from_value(json!({"metadata": {"name": role_name}}))?;
        let roles: Api<ClusterRole> = Api::all(kube.clone());
        roles.create(&PostParams::default(), &role).await?;
        let binding = format!("berth-test-forged-{ns}");
        let crbs: Api<ClusterRoleBinding> = Api::all(kube.clone());
        let result = async {
            let mut client = journey::connect(&topology.gateway.endpoint()).await?;
            let r = app("recorded", &ns);
            let accepted = client
                .update(update(&r, "recorded", json!({"greeting": "one"})))
                .await?
                .into_inner();
            journey::wait_running(&mut client, &r, accepted.generation).await?;

            // Placed out of band in the App's namespace.
            let secrets: Api<Secret> = Api::namespaced(kube.clone(), &ns);
            secrets
                .create(
                    &PostParams::default(),
                    &forged_record("recorded", &ns, &other, 9)?,
                )
                .await?;
            // Drift repair: the App's own object, deleted, comes back from berth's record.
            let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
            cms.delete("recorded-cm", &DeleteParams::default()).await?;
            wait_present(&cms, "recorded-cm").await?;
            ensure!(
                crbs.get_opt(&binding).await?.is_none(),
                "drift repair applied the forged record's ClusterRoleBinding"
            );
            if TestCluster::is_real() {
                let user = format!("system:serviceaccount:{ns}:default");
                ensure!(
                    !may_do_everything(&kube, &user, &ns).await?,
                    "{user} may do everything"
                );
            }

            // Upgrade: a new revision after the forged one; nothing of it pruned.
            let accepted = client
                .update(update(&r, "recorded", json!({"greeting": "two"})))
                .await?
                .into_inner();
            journey::wait_running(&mut client, &r, accepted.generation).await?;
            let greeting = cms.get("recorded-cm").await?.data.unwrap_or_default();
            ensure!(greeting.get("greeting").map(String::as_str) == Some("two"));
            ensure!(
                secrets
                    .get_opt("sh.helm.release.v1.recorded.v10")
                    .await?
                    .is_some(),
                "the upgrade's revision follows the forged one"
            );
            ensure!(
                victims.get_opt("victim").await?.is_some(),
                "pruned another namespace's ConfigMap"
            );
            ensure!(
                roles.get_opt(&role_name).await?.is_some(),
                "pruned a ClusterRole berth never made"
            );
            ensure!(crbs.get_opt(&binding).await?.is_none());

            // Remove, with a forged record newer than berth's again: none of its hooks run,
            // none of its objects go; berth's own object and records do.
            secrets
                .create(
                    &PostParams::default(),
                    &forged_record("recorded", &ns, &other, 20)?,
                )
                .await?;
            client
                .remove(v1::RemoveRequest {
                    r#ref: Some(r.clone()),
                    ..Default::default()
                })
                .await?;
            journey::wait_gone(&mut client, &r).await?;
            ensure!(
                cms.get_opt("forged-pre-delete").await?.is_none(),
                "Remove ran the forged record's pre-delete hook"
            );
            ensure!(
                cms.get_opt("recorded-cm").await?.is_none(),
                "the App's own object stayed"
            );
            ensure!(
                victims.get_opt("victim").await?.is_some(),
                "Remove deleted another namespace's ConfigMap"
            );
            ensure!(
                roles.get_opt(&role_name).await?.is_some(),
                "Remove deleted a ClusterRole berth never made"
            );
            // The release's whole history goes (the forged records too, as records of its
            // revisions: `helm list` shows no release whose objects are gone).
            for revision in [1, 9, 10, 20] {
                let name = format!("sh.helm.release.v1.recorded.v{revision}");
                ensure!(secrets.get_opt(&name).await?.is_none(), "{name} stayed");
            }
            Ok(())
        }
        .await;
        // Cluster-scoped: cleaned up whatever happened.
        let _ = roles.delete(&role_name, &DeleteParams::default()).await;
        let _ = crbs.delete(&binding, &DeleteParams::default()).await;
        result.map(|()| topology)
    })
    .await
}

/// Attack 8: an App named like a Module, in `berth-system`, is refused at the Update naming
/// the namespace, and changes nothing: the Module stays Running with its cluster-scoped
/// object, and its release record still names the Module as its owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn berth_system_belongs_to_modules() -> anyhow::Result<()> {
    with_topology(|topology, kube| async move {
        // A name of this test's own (modules are cluster-wide): the test namespace's.
        let ns = TestNamespace::create(&kube, "records").await?;
        let name: String = ns
            .chars()
            .rev()
            .take(20)
            .collect::<String>()
            .chars()
            .rev()
            .collect();
        let name = format!("cw-{}", name.trim_start_matches('-'));
        let role_name = format!("berth-test-clusterwide-{name}");
        let roles: Api<ClusterRole> = Api::all(kube.clone());
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let m = module(&name);
        let result = async {
            let accepted = client
                .update(update(&m, "clusterwide", json!({"suffix": name})))
                .await?
                .into_inner();
            journey::wait_running(&mut client, &m, accepted.generation).await?;
            ensure!(roles.get_opt(&role_name).await?.is_some());

            let intruder = app(&name, "berth-system");
            let refused = client
                .update(update(&intruder, "recorded", json!({})))
                .await
                .err()
                .map(|s| (s.code(), s.message().to_owned()));
            match &refused {
                Some((tonic::Code::InvalidArgument, message))
                    if message.contains("berth-system") => {}
                other => bail!("an App in berth-system must be refused naming it: {other:?}"),
            }
            let seen = client
                .get(v1::GetRequest {
                    r#ref: Some(m.clone()),
                })
                .await?
                .into_inner();
            ensure!(
                seen.phase == "Running",
                "the module stays Running: {}",
                seen.phase
            );
            ensure!(
                roles.get_opt(&role_name).await?.is_some(),
                "the module's ClusterRole stays"
            );
            let record = Api::<Secret>::namespaced(kube.clone(), "berth-system")
                .get(&format!("sh.helm.release.v1.{name}.v1"))
                .await?;
            let owner = record
                .metadata
                .annotations
                .unwrap_or_default()
                .get("berth.io/package")
                .cloned();
            ensure!(
                owner.as_deref() == Some(name.as_str()),
                "the record's owner: {owner:?}"
            );
            client
                .remove(v1::RemoveRequest {
                    r#ref: Some(m.clone()),
                    ..Default::default()
                })
                .await?;
            journey::wait_gone(&mut client, &m).await?;
            ensure!(
                roles.get_opt(&role_name).await?.is_none(),
                "removed with its module"
            );
            Ok(())
        }
        .await;
        let _ = roles.delete(&role_name, &DeleteParams::default()).await;
        result.map(|()| topology)
    })
    .await
}
