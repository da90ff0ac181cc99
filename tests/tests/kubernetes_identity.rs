//! Every package instance acts on Kubernetes as its own ServiceAccount
//! (docs/decisions/package-identity.md), through real processes: its hooks' `kubectl` works
//! unchanged and may do exactly what the package may — an App its namespace, a Module what its
//! `rbac:` declares — its chart is applied as it, so the API server refuses what it may not,
//! and its principal goes with the package.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use berth_proto::v1;
use berth_tests::{SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, RoleBinding};
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;

/// Longest a package may take to reach the phase a test waits for.
const DEADLINE: Duration = Duration::from_secs(120);

/// A name no other run on the same cluster uses (modules' objects are cluster-scoped).
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!(
        "{prefix}-{:08x}",
        nanos ^ std::process::id().rotate_left(16)
    )
}

async fn with_topology<F, Fut>(journey: F) -> anyhow::Result<()>
where
    F: FnOnce(SplitTopology, kube::Client, std::path::PathBuf) -> Fut,
    Fut: Future<Output = anyhow::Result<SplitTopology>>,
{
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start(&cluster.kubeconfig, dir.path()).await?;
    let result = journey(topology, cluster.client.clone(), cluster.kubeconfig.clone()).await;
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

fn update(r: &v1::PackageRef, repository: &str) -> v1::UpdateRequest {
    v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: repository.to_owned(),
        package: String::new(),
        version: "1.0.0".into(),
        settings: None,
        force: false,
        settings_version: 0,
        reset_settings: false,
    }
}

/// Writes the package `name` 1.0.0 into `root`: `definition` is its package.yaml; files under
/// `hooks/` are made executable.
fn write_package(
    root: &Path,
    name: &str,
    definition: &str,
    files: &[(&str, String)],
) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = root.join(name).join("1.0.0");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("package.yaml"), definition)?;
    std::fs::write(
        dir.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {name}\nversion: 1.0.0\n"),
    )?;
    for (path, content) in files {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().context("a directory")?)?;
        std::fs::write(&file, content)?;
        if path.starts_with("hooks/") {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}

/// An onStartup hook that runs each `kubectl` command line of `probes` (name, arguments) as
/// the package and records its exit code and output in the values, at `/kubectl/<name>`.
fn probe_hook(probes: &[(&str, &str)]) -> String {
    let mut script = String::from(
        r#"#!/usr/bin/env bash
if [[ "$1" == "--config" ]]; then echo '{"configVersion":"v1","onStartup":1}'; exit 0; fi
record() {
  local name=$1; shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  jq -n --arg name "$name" --arg out "$out" --argjson rc "$rc" '{($name): {rc: $rc, out: $out}}'
}
{
"#,
    );
    for (name, args) in probes {
        script.push_str(&format!("record {name} kubectl {args}\n"));
    }
    script.push_str(
        r#"} | jq -s --arg host "$KUBERNETES_SERVICE_HOST" --arg config "$KUBECONFIG" \
  '[{op: "add", path: "/kubectl", value: (add + {host: $host, kubeconfig: $config})}]' \
  > "$VALUES_JSON_PATCH_PATH"
"#,
    );
    script
}

/// What the probe hook recorded, from the package's values.
fn probed(p: &v1::Package) -> Value {
    let values = p
        .values
        .as_ref()
        .map(berth_proto::json::from_struct)
        .unwrap_or(Value::Null);
    values["kubectl"].clone()
}

/// `name`'s probe succeeded, printing `needle`.
fn allowed(probes: &Value, name: &str, needle: &str) -> anyhow::Result<()> {
    let p = &probes[name];
    ensure!(
        p["rc"] == 0 && p["out"].as_str().unwrap_or_default().contains(needle),
        "{name}: expected allowed with {needle:?}, got {p}"
    );
    Ok(())
}

/// `name`'s probe was refused by the API server.
fn forbidden(probes: &Value, name: &str) -> anyhow::Result<()> {
    let p = &probes[name];
    let out = p["out"].as_str().unwrap_or_default();
    ensure!(
        p["rc"] != 0
            && out.to_lowercase().contains("forbidden")
            && out.contains("system:serviceaccount:"),
        "{name}: expected Forbidden for the package's ServiceAccount, got {p}"
    );
    Ok(())
}

/// `name`'s probe was refused by the API server, naming `user` and the namespace `ns`.
fn forbidden_as(probes: &Value, name: &str, user: &str, ns: &str) -> anyhow::Result<()> {
    forbidden(probes, name)?;
    let out = probes[name]["out"].as_str().unwrap_or_default();
    ensure!(
        out.contains(&format!("\"{user}\"")) && out.contains(&format!("namespace \"{ns}\"")),
        "{name}: the refusal names neither {user} nor namespace {ns}: {out}"
    );
    Ok(())
}

/// `kubectl auth can-i` as `user`, with the test's (cluster-admin) kubeconfig: the API
/// server's own answer about the principal.
async fn can_i(kubeconfig: &Path, user: &str, args: &[&str]) -> anyhow::Result<bool> {
    let out = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["auth", "can-i", "--as", user])
        .args(args)
        .output()
        .await
        .context("running kubectl")?;
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    match answer.as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        other => bail!(
            "kubectl auth can-i {}: {other:?} {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

async fn wait_phase(
    client: &mut journey::Client,
    r: &v1::PackageRef,
    generation: i64,
    phase: &str,
) -> anyhow::Result<v1::Package> {
    journey::follow(client, r, DEADLINE, phase, |p| {
        if phase != "Failed" && p.phase == "Failed" {
            bail!("the package failed: {}", p.last_error);
        }
        Ok(p.phase == phase && p.generation == generation)
    })
    .await
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

/// An App's hooks run `kubectl` as its ServiceAccount: they list and create ConfigMaps in their
/// namespace, and the API server refuses them (403, naming the account) another namespace's,
/// reads and writes alike, and cluster-scoped kinds. `kubectl auth can-i` as the account
/// answers as designed (everything in its namespace, nothing anywhere else). After Remove, the
/// account and its binding are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_hooks_act_as_its_service_account() -> anyhow::Result<()> {
    with_topology(|topology, kube, kubeconfig| async move {
        let ns = TestNamespace::create(&kube, "ident").await?;
        let other = TestNamespace::create(&kube, "ident-other").await?;
        let visible: ConfigMap = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "visible"}, "data": {"k": "v"}}),
        )?;
        Api::<ConfigMap>::namespaced(kube.clone(), &ns)
            .create(&PostParams::default(), &visible)
            .await?;
        let (repo, repository) = berth_tests::temp_repo();
        write_package(
            repo.path(),
            "probe",
            "type: Application\nname: probe\nversion: 1.0.0\n",
            &[(
                "hooks/probe",
                probe_hook(&[
                    ("own", "get configmaps -o name"),
                    ("write_own", "create configmap written --from-literal=k=v"),
                    ("other", &format!("get configmaps -o name -n {other}")),
                    (
                        "write_other",
                        &format!("create configmap escaped --from-literal=k=v -n {other}"),
                    ),
                    ("namespaces", "get namespaces -o name"),
                    ("clusterroles", "get clusterroles -o name"),
                ]),
            )],
        )?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "probe".into(),
            namespace: ns.to_string(),
        };
        let accepted = client.update(update(&r, &repository)).await?.into_inner();
        let running = journey::wait_running(&mut client, &r, accepted.generation).await?;
        let probes = probed(&running);
        let user = format!("system:serviceaccount:{ns}:berth-app-probe");
        allowed(&probes, "own", "configmap/visible")?;
        allowed(&probes, "write_own", "configmap/written created")?;
        forbidden_as(&probes, "other", &user, &other)?;
        forbidden_as(&probes, "write_other", &user, &other)?;
        forbidden(&probes, "namespaces")?;
        forbidden(&probes, "clusterroles")?;
        ensure!(
            probes["host"].as_str().is_some_and(|h| !h.is_empty()),
            "KUBERNETES_SERVICE_HOST: {probes}"
        );
        ensure!(
            Api::<ConfigMap>::namespaced(kube.clone(), &ns)
                .get_opt("written")
                .await?
                .is_some(),
            "the hook's write in its namespace is not there"
        );
        ensure!(
            Api::<ConfigMap>::namespaced(kube.clone(), &other)
                .get_opt("escaped")
                .await?
                .is_none(),
            "the hook wrote into another namespace"
        );

        // The API server's own answers about the account (SubjectAccessReviews through
        // `kubectl auth can-i --as`), on the dev cluster and the real control plane alike.
        let ns_flag = format!("--namespace={ns}");
        let other_flag = format!("--namespace={other}");
        for (args, expected) in [
            (vec!["create", "deployments.apps", ns_flag.as_str()], true),
            (vec!["*", "*", ns_flag.as_str()], true),
            (vec!["delete", "secrets", ns_flag.as_str()], true),
            (vec!["*", "*", "--all-namespaces"], false),
            (vec!["*", "*", "--namespace=default"], false),
            (vec!["get", "configmaps", other_flag.as_str()], false),
            (vec!["list", "namespaces"], false),
            (vec!["create", "clusterrolebindings"], false),
            (vec!["get", "secrets", "--namespace=kube-system"], false),
            (vec!["create", "namespaces"], false),
        ] {
            let answer = can_i(&kubeconfig, &user, &args).await?;
            ensure!(
                answer == expected,
                "can-i {} as {user}: {answer}, expected {expected}",
                args.join(" ")
            );
        }

        remove(&mut client, &r).await?;
        ensure!(
            Api::<ServiceAccount>::namespaced(kube.clone(), &ns)
                .get_opt("berth-app-probe")
                .await?
                .is_none(),
            "the ServiceAccount outlived the package"
        );
        ensure!(
            Api::<RoleBinding>::namespaced(kube.clone(), &ns)
                .get_opt("berth-app-probe")
                .await?
                .is_none(),
            "the RoleBinding outlived the package"
        );
        Ok(topology)
    })
    .await
}

/// A Module that declares `rbac:` for reading ConfigMaps gets that and no more: its hook lists
/// every namespace's ConfigMaps but is refused Secrets, and its chart's own ConfigMap, which
/// it may not create, fails its install with the API server's refusal (the package fails for
/// good, naming the object and the account). Its ServiceAccount, ClusterRole and binding go
/// with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_declaring_narrow_rules_can_do_no_more() -> anyhow::Result<()> {
    with_topology(|topology, kube, kubeconfig| async move {
        let name = unique("narrow");
        let (repo, repository) = berth_tests::temp_repo();
        write_package(
            repo.path(),
            &name,
            &format!(
                "type: Module\nname: {name}\nversion: 1.0.0\nrbac:\n  rules:\n  - apiGroups: ['']\n    resources: [configmaps]\n    verbs: [get, list]\n"
            ),
            &[
                (
                    "hooks/probe",
                    probe_hook(&[
                        ("configmaps", "get configmaps --all-namespaces -o name"),
                        ("secrets", "get secrets --all-namespaces -o name"),
                    ]),
                ),
                (
                    "templates/own.yaml",
                    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n"),
                ),
            ],
        )?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::Module as i32,
            name: name.clone(),
            namespace: String::new(),
        };
        let account = format!("berth-module-{name}");
        let result = async {
            let accepted = client.update(update(&r, &repository)).await?.into_inner();
            let failed = wait_phase(&mut client, &r, accepted.generation, "Failed").await?;
            let probes = probed(&failed);
            allowed(&probes, "configmaps", "configmap/")?;
            forbidden(&probes, "secrets")?;
            let error = &failed.last_error;
            for needle in [
                format!("ConfigMap berth-system/{name}"),
                format!("system:serviceaccount:berth-system:{account}"),
                "refused by the API server".to_owned(),
            ] {
                ensure!(error.contains(&needle), "{needle:?} not in {error:?}");
            }
            ensure!(
                Api::<ConfigMap>::namespaced(kube.clone(), "berth-system")
                    .get_opt(&name)
                    .await?
                    .is_none(),
                "the chart's ConfigMap was created"
            );
            let user = format!("system:serviceaccount:berth-system:{account}");
            for (args, expected) in [
                (vec!["list", "configmaps", "--all-namespaces"], true),
                (vec!["get", "configmaps", "--namespace=kube-system"], true),
                (vec!["create", "configmaps", "--namespace=berth-system"], false),
                (vec!["get", "secrets", "--namespace=default"], false),
                (vec!["list", "namespaces"], false),
                (vec!["*", "*", "--all-namespaces"], false),
            ] {
                let answer = can_i(&kubeconfig, &user, &args).await?;
                ensure!(
                    answer == expected,
                    "can-i {} as {user}: {answer}, expected {expected}",
                    args.join(" ")
                );
            }
            Ok(())
        }
        .await;
        remove(&mut client, &r).await?;
        result?;
        ensure!(
            Api::<ServiceAccount>::namespaced(kube.clone(), "berth-system")
                .get_opt(&account)
                .await?
                .is_none(),
            "the ServiceAccount outlived the module"
        );
        ensure!(
            Api::<ClusterRole>::all(kube.clone())
                .get_opt(&account)
                .await?
                .is_none(),
            "the ClusterRole outlived the module"
        );
        ensure!(
            Api::<ClusterRoleBinding>::all(kube.clone())
                .get_opt(&account)
                .await?
                .is_none(),
            "the ClusterRoleBinding outlived the module"
        );
        Ok(topology)
    })
    .await
}

/// An App whose chart would make its own ServiceAccount cluster-admin (a ClusterRoleBinding)
/// and write into another namespace is refused whole: the package fails naming both objects,
/// and nothing of its chart is on the cluster, its own ConfigMap included. Its ServiceAccount
/// (made before the install) may do everything in its namespace and nothing beyond: the API
/// server answers no to `kubectl auth can-i '*' '*'` across namespaces and to binding roles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_granting_itself_cluster_admin_is_refused_and_gets_nothing() -> anyhow::Result<()> {
    with_topology(|topology, kube, kubeconfig| async move {
        let ns = TestNamespace::create(&kube, "ident-admin").await?;
        let other = TestNamespace::create(&kube, "ident-admin-other").await?;
        let binding = format!("berth-test-grab-{ns}");
        let (repo, repository) = berth_tests::temp_repo();
        write_package(
            repo.path(),
            "grab",
            "type: Application\nname: grab\nversion: 1.0.0\n",
            &[
                (
                    "templates/admin.yaml",
                    format!(
                        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {binding}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: berth-app-grab\n  namespace: {ns}\n"
                    ),
                ),
                (
                    "templates/elsewhere.yaml",
                    format!(
                        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: grabbed\n  namespace: {other}\ndata:\n  k: v\n"
                    ),
                ),
                (
                    "templates/own.yaml",
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: grab-own\ndata:\n  k: v\n"
                        .to_owned(),
                ),
            ],
        )?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "grab".into(),
            namespace: ns.to_string(),
        };
        let accepted = client.update(update(&r, &repository)).await?.into_inner();
        let failed = wait_phase(&mut client, &r, accepted.generation, "Failed").await?;
        let error = &failed.last_error;
        for named in [
            format!("ClusterRoleBinding /{binding}"),
            format!("ConfigMap {other}/grabbed"),
        ] {
            ensure!(error.contains(&named), "{named:?} not in {error:?}");
        }
        ensure!(
            Api::<ClusterRoleBinding>::all(kube.clone())
                .get_opt(&binding)
                .await?
                .is_none(),
            "the cluster-admin binding was created"
        );
        ensure!(
            Api::<ConfigMap>::namespaced(kube.clone(), &other)
                .get_opt("grabbed")
                .await?
                .is_none(),
            "the ConfigMap in another namespace was created"
        );
        ensure!(
            Api::<ConfigMap>::namespaced(kube.clone(), &ns)
                .get_opt("grab-own")
                .await?
                .is_none(),
            "nothing of a refused chart is applied"
        );
        let user = format!("system:serviceaccount:{ns}:berth-app-grab");
        ensure!(
            Api::<ServiceAccount>::namespaced(kube.clone(), &ns)
                .get_opt("berth-app-grab")
                .await?
                .is_some(),
            "the App's ServiceAccount is made before its install"
        );
        let ns_flag = format!("--namespace={ns}");
        for (args, expected) in [
            (vec!["*", "*", ns_flag.as_str()], true),
            (vec!["*", "*", "--all-namespaces"], false),
            (vec!["*", "*", "--namespace=kube-system"], false),
            (vec!["create", "clusterrolebindings"], false),
            (vec!["bind", "clusterroles"], false),
            (vec!["escalate", "clusterroles"], false),
            (vec!["impersonate", "serviceaccounts", "--all-namespaces"], false),
        ] {
            let answer = can_i(&kubeconfig, &user, &args).await?;
            ensure!(
                answer == expected,
                "can-i {} as {user}: {answer}, expected {expected}",
                args.join(" ")
            );
        }
        remove(&mut client, &r).await?;
        Ok(topology)
    })
    .await
}

/// An App installed where an interrupted removal left its RoleBinding, bound to another role
/// and without its ServiceAccount, gets its own rights all the same: the binding's `roleRef`,
/// which the API server refuses to change (422, on both clusters alike), is replaced, and the
/// App's hook writes in its namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_app_over_a_stale_binding_gets_its_own_rights() -> anyhow::Result<()> {
    with_topology(|topology, kube, _kubeconfig| async move {
        let ns = TestNamespace::create(&kube, "ident-stale").await?;
        let bindings = Api::<RoleBinding>::namespaced(kube.clone(), &ns);
        let stale = |role: &str| -> anyhow::Result<RoleBinding> {
            Ok(serde_json::from_value(serde_json::json!({
                "metadata": {"name": "berth-app-stale"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": "berth-app-stale",
                    "namespace": ns.to_string()}],
            }))?)
        };
        bindings
            .create(&PostParams::default(), &stale("view")?)
            .await?;
        let mut changed = bindings.get("berth-app-stale").await?;
        changed.role_ref.name = "edit".into();
        match bindings
            .replace("berth-app-stale", &PostParams::default(), &changed)
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("roleRef") => {}
            other => bail!("changing a binding's roleRef: {other:?}, expected 422 naming roleRef"),
        }
        let (repo, repository) = berth_tests::temp_repo();
        write_package(
            repo.path(),
            "stale",
            "type: Application\nname: stale\nversion: 1.0.0\n",
            &[(
                "hooks/probe",
                probe_hook(&[("write_own", "create configmap written --from-literal=k=v")]),
            )],
        )?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "stale".into(),
            namespace: ns.to_string(),
        };
        let accepted = client.update(update(&r, &repository)).await?.into_inner();
        let running = journey::wait_running(&mut client, &r, accepted.generation).await?;
        allowed(&probed(&running), "write_own", "configmap/written created")?;
        let binding = bindings.get("berth-app-stale").await?;
        ensure!(
            binding.role_ref.name == "berth-app",
            "the stale binding still refers to {:?}",
            binding.role_ref.name
        );
        remove(&mut client, &r).await?;
        Ok(topology)
    })
    .await
}

/// Where shell-operator's examples are: `../shared/upstream/shell-operator` beside the
/// repository, or `$BERTH_SHARED_DIR/upstream/shell-operator`.
fn shell_operator_examples() -> std::path::PathBuf {
    let shared = std::env::var_os("BERTH_SHARED_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"));
    shared.join("upstream/shell-operator")
}

/// Copies the tree `from` into `to` as it is (modes included).
fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// The rules of the example's own ClusterRole (its `shell-operator-rbac.yaml`), as a package's
/// `rbac:` section.
fn example_rules(example: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(example.join("shell-operator-rbac.yaml"))?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)?;
    let role = docs
        .into_iter()
        .find(|d| d["kind"] == "ClusterRole")
        .context("the example's ClusterRole")?;
    Ok(serde_json::json!({ "rules": role["rules"] }))
}

/// Waits, on a watch, until `secrets`' `name` satisfies `done`.
async fn wait_secret(
    secrets: &Api<k8s_openapi::api::core::v1::Secret>,
    name: &str,
    what: &str,
    done: impl Fn(Option<&k8s_openapi::api::core::v1::Secret>) -> bool,
) -> anyhow::Result<()> {
    let condition = kube::runtime::wait::await_condition(secrets.clone(), name, done);
    tokio::time::timeout(DEADLINE, condition)
        .await
        .with_context(|| format!("{what}: not within {DEADLINE:?}"))??;
    Ok(())
}

/// Waits until every active namespace but `default` holds the copy `name` with `value`: each
/// change of a labelled Secret anywhere (a watch) has the namespaces and the copies listed
/// again. The example's runs copy to one namespace after another, and one still copying when
/// the Secret in `default` goes fails its next `kubectl get` and is retried for good (as
/// under shell-operator), so a step that deletes waits for the run before it to be done.
async fn copied_everywhere(kube: &kube::Client, name: &str, value: &str) -> anyhow::Result<()> {
    use futures::StreamExt as _;
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    use kube::api::ListParams;
    use kube::runtime::watcher;
    let labelled = ListParams::default().labels("secret-copier=yes");
    let secrets: Api<Secret> = Api::all(kube.clone());
    let namespaces: Api<Namespace> = Api::all(kube.clone());
    let missing = || async {
        let copies: std::collections::BTreeMap<String, Option<String>> = secrets
            .list(&labelled)
            .await?
            .items
            .iter()
            .filter(|s| s.metadata.name.as_deref() == Some(name))
            .filter_map(|s| Some((s.metadata.namespace.clone()?, secret_value(s))))
            .collect();
        let active = namespaces.list(&ListParams::default()).await?.items;
        anyhow::Ok(
            active
                .iter()
                .filter(|n| n.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Active"))
                .filter_map(|n| n.metadata.name.clone())
                .filter(|n| n != "default")
                .filter(|n| copies.get(n).and_then(Option::as_deref) != Some(value))
                .collect::<Vec<_>>(),
        )
    };
    let changes = watcher(
        secrets.clone(),
        watcher::Config::default().labels("secret-copier=yes"),
    );
    let waited = async {
        let mut changes = std::pin::pin!(changes);
        loop {
            if missing().await?.is_empty() {
                return anyhow::Ok(());
            }
            changes
                .next()
                .await
                .context("the watch of labelled Secrets ended")??;
        }
    };
    match tokio::time::timeout(DEADLINE, waited).await {
        Ok(done) => done,
        Err(_) => bail!(
            "the copy {value:?} is not in {:?} within {DEADLINE:?}",
            missing().await?
        ),
    }
}

/// The secret's `k`, decoded.
fn secret_value(s: &k8s_openapi::api::core::v1::Secret) -> Option<String> {
    let data = s.data.as_ref()?.get("k")?;
    Some(String::from_utf8_lossy(&data.0).into_owned())
}

/// shell-operator's secret-copier example (`104-secret-copier`), unchanged, as a Module whose
/// `rbac:` is the example's own ClusterRole: its hooks call `kubectl` with the Module's
/// ServiceAccount (and `source /hooks/common/functions.sh`, which berth shows there). A Secret
/// labelled `secret-copier: yes` in `default` reaches every other active namespace, one made
/// afterwards included; a change follows; the copies go when it is deleted. Skipped only
/// when `kubectl` is not on PATH.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_operators_secret_copier_runs_unchanged_as_a_module() -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Secret;
    if std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_err()
    {
        eprintln!("skipped: kubectl is not on PATH (the example's hooks call it)");
        return Ok(());
    }
    let example = shell_operator_examples().join("104-secret-copier");
    ensure!(
        example.join("hooks").is_dir(),
        "shell-operator's example is not at {} (set BERTH_SHARED_DIR)",
        example.display()
    );
    with_topology(|topology, kube, _kubeconfig| async move {
        let name = unique("copier");
        let (repo, repository) = berth_tests::temp_repo();
        let definition = serde_json::json!({
            "type": "Module",
            "name": name,
            "version": "1.0.0",
            "rbac": example_rules(&example)?,
        });
        write_package(
            repo.path(),
            &name,
            &serde_json::to_string(&definition)?,
            &[],
        )?;
        copy_tree(
            &example.join("hooks"),
            &repo.path().join(&name).join("1.0.0/hooks"),
        )?;
        let before = TestNamespace::create(&kube, "copier-before").await?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::Module as i32,
            name: name.clone(),
            namespace: String::new(),
        };
        let secret_name = format!("berth-test-{name}");
        let defaults: Api<Secret> = Api::namespaced(kube.clone(), "default");
        let result = async {
            let accepted = client.update(update(&r, &repository)).await?.into_inner();
            journey::wait_running(&mut client, &r, accepted.generation).await?;
            let secret: Secret = serde_json::from_value(serde_json::json!({
                "metadata": {"name": secret_name, "labels": {"secret-copier": "yes"}},
                "stringData": {"k": "one"},
            }))?;
            defaults.create(&PostParams::default(), &secret).await?;
            let copies: Api<Secret> = Api::namespaced(kube.clone(), &before);
            wait_secret(&copies, &secret_name, "the copy in a namespace", |s| {
                s.and_then(secret_value).as_deref() == Some("one")
            })
            .await?;
            let system: Api<Secret> = Api::namespaced(kube.clone(), "kube-public");
            wait_secret(&system, &secret_name, "the copy in kube-public", |s| {
                s.is_some()
            })
            .await?;
            // A namespace made afterwards gets it too (the example's namespace hook).
            let after = TestNamespace::create(&kube, "copier-after").await?;
            let later: Api<Secret> = Api::namespaced(kube.clone(), &after);
            wait_secret(&later, &secret_name, "the copy in a new namespace", |s| {
                s.and_then(secret_value).as_deref() == Some("one")
            })
            .await?;
            // A change follows.
            let patch = serde_json::json!({"stringData": {"k": "two"}});
            defaults
                .patch(
                    &secret_name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await?;
            for (api, ns) in [(&copies, before.to_string()), (&later, after.to_string())] {
                wait_secret(api, &secret_name, &format!("the change in {ns}"), |s| {
                    s.and_then(secret_value).as_deref() == Some("two")
                })
                .await?;
            }
            copied_everywhere(&kube, &secret_name, "two").await?;
            // Deleted, the copies go.
            defaults
                .delete(&secret_name, &kube::api::DeleteParams::default())
                .await?;
            for (api, ns) in [
                (&copies, before.to_string()),
                (&later, after.to_string()),
                (&system, "kube-public".to_owned()),
            ] {
                wait_secret(
                    api,
                    &secret_name,
                    &format!("the copy in {ns} deleted"),
                    |s| s.is_none(),
                )
                .await?;
            }
            drop(after);
            Ok::<_, anyhow::Error>(())
        }
        .await;
        // Whatever happened, leave no labelled Secret in `default` (the copier would copy it
        // again on a cluster the next run shares).
        let _ = defaults
            .delete(&secret_name, &kube::api::DeleteParams::default())
            .await;
        remove(&mut client, &r).await?;
        result?;
        Ok(topology)
    })
    .await
}
