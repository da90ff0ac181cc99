//! Driving berth with kubectl (issue 34): Applications and Modules (`berth.io/v1alpha1`) applied,
//! waited for, refused at admission, changed, suspended and deleted with kubectl, as a user
//! and a GitOps tool would, against `berth up` (its controller installs the CRDs). Each
//! journey runs on the dev cluster and, with `BERTH_TEST_KUBECONFIG`, on the real one.
//!
//! Every resource carries the label of its `berth up` (`AllInOne::instance`): tests running at
//! once on one real cluster each have their own berth, and leave the others' resources alone.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use berth_proto::v1;
use berth_tests::{AllInOne, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use serde_json::Value;

/// Longest any one wait of these journeys takes (a package install is a few seconds).
const DEADLINE: Duration = Duration::from_secs(180);
const WAIT: &str = "--timeout=180s";

fn real_cluster() -> Option<std::path::PathBuf> {
    berth_devcluster::test_namespace::real_cluster()
}

/// kubectl's answer: whether it exited 0, and what it printed.
struct Ran {
    ok: bool,
    stdout: String,
    stderr: String,
}

async fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Ran> {
    use tokio::io::AsyncWriteExt as _;
    let mut command = tokio::process::Command::new("kubectl");
    // A discovery cache of this cluster's own: dev clusters of earlier tests may have had
    // this address, without berth's CRDs.
    let cache = kubeconfig
        .parent()
        .unwrap_or(Path::new("."))
        .join(format!("kubectl-cache-{}", std::process::id()));
    command
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(&cache)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command
        .spawn()
        .context("running kubectl (is it on PATH?)")?;
    let mut input = child.stdin.take().context("kubectl's stdin")?;
    input
        .write_all(stdin.unwrap_or_default().as_bytes())
        .await?;
    drop(input);
    let out = tokio::time::timeout(DEADLINE + Duration::from_secs(30), child.wait_with_output())
        .await
        .context("kubectl did not finish")??;
    Ok(Ran {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Runs kubectl and fails naming what it printed unless it succeeded.
async fn kubectl_ok(
    kubeconfig: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> anyhow::Result<String> {
    let ran = kubectl(kubeconfig, args, stdin).await?;
    ensure!(
        ran.ok,
        "kubectl {} failed: {}{}",
        args.join(" "),
        ran.stdout,
        ran.stderr
    );
    Ok(ran.stdout)
}

fn application(up: &AllInOne, ns: &str, name: &str, settings: &str, extra_spec: &str) -> String {
    let (k, v) = &up.instance;
    format!(
        "apiVersion: berth.io/v1alpha1
kind: Application
metadata:
  name: {name}
  namespace: {ns}
  labels:
    {k}: \"{v}\"
spec:
  package: hello
  repository: {repo}
  version: 1.0.0
  settings: {settings}
{extra_spec}",
        repo = berth_tests::EXAMPLES_REPO,
    )
}

async fn greeting(kube: &kube::Client, ns: &str, name: &str) -> anyhow::Result<Option<String>> {
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), ns);
    Ok(cms
        .get_opt(name)
        .await?
        .and_then(|cm| cm.data)
        .and_then(|d| d.get("greeting").cloned()))
}

/// The reasons of the Events about `kind`/`name` in `ns`.
async fn event_reasons(
    kubeconfig: &Path,
    ns: &str,
    kind: &str,
    name: &str,
) -> anyhow::Result<Vec<String>> {
    let out = kubectl_ok(kubeconfig, &["get", "events", "-n", ns, "-o", "json"], None).await?;
    let events: Value = serde_json::from_str(&out)?;
    Ok(events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["involvedObject"]["kind"] == kind && e["involvedObject"]["name"] == name)
        .filter_map(|e| e["reason"].as_str().map(String::from))
        .collect())
}

/// Waits until the PackageRepository `repository` is `Stalled=True` with a message naming
/// `needle` (`what` says what is awaited, for the error).
async fn stalled_naming(
    kubeconfig: &Path,
    what: &str,
    repository: &str,
    needle: impl AsRef<str>,
) -> anyhow::Result<()> {
    let needle = needle.as_ref();
    eventually_json(
        kubeconfig,
        what,
        &[&format!("packagerepository/{repository}")],
        |v| {
            condition(v, "Stalled").is_some_and(|c| {
                c["status"] == "True" && c["message"].as_str().is_some_and(|m| m.contains(needle))
            })
        },
    )
    .await
    .map(drop)
}

/// Waits until `check` holds of the resource's JSON.
async fn eventually_json(
    kubeconfig: &Path,
    what: &str,
    get: &[&str],
    check: impl Fn(&Value) -> bool,
) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut args = vec!["get"];
    args.extend_from_slice(get);
    args.extend(["-o", "json"]);
    loop {
        let ran = kubectl(kubeconfig, &args, None).await?;
        if ran.ok {
            let v: Value = serde_json::from_str(&ran.stdout)?;
            if check(&v) {
                return Ok(v);
            }
            if tokio::time::Instant::now() > deadline {
                bail!("{what}: not so within {DEADLINE:?}; last seen {v:#}");
            }
        } else if tokio::time::Instant::now() > deadline {
            bail!("{what}: kubectl get failed: {}", ran.stderr);
        }
        // Polling kubectl, as a person would: the controller's status is the observable.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn condition<'a>(v: &'a Value, type_: &str) -> Option<&'a Value> {
    v["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// An Application applied with kubectl: berth installs it and `kubectl wait` sees it Ready;
/// `kubectl get` shows its package, version, phase and readiness; bad settings are refused at
/// admission naming the field (a server-side dry run too) and change nothing; a change
/// converges under a new observedGeneration; Events tell what happened; the gRPC API may not
/// change it (nor may a resource change a package the gRPC API made); suspended, it takes no
/// new generation; deleted, its finalizer removes the package and then the resource goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applications_are_driven_with_kubectl() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let up = AllInOne::start(&dir.path().join("data"), real_cluster().as_deref()).await?;
    let result = async {
        let kc = up.kubeconfig.clone();
        let kube = berth_tests::cluster::client_for(&kc).await?;
        let ns = TestNamespace::create(&kube, "front").await?;
        // berth up installed its CRDs.
        let resources = kubectl_ok(
            &kc,
            &["api-resources", "--api-group=berth.io", "-o", "name"],
            None,
        )
        .await?;
        for r in [
            "applications.berth.io",
            "modules.berth.io",
            "packagerepositories.berth.io",
        ] {
            ensure!(
                resources.lines().any(|l| l == r),
                "{r} missing from {resources:?}"
            );
        }

        let first = application(&up, &ns, "hello", "{message: kubectl}", "");
        kubectl_ok(&kc, &["apply", "--server-side", "-f", "-"], Some(&first)).await?;
        kubectl_ok(
            &kc,
            &[
                "wait",
                "--for=condition=Ready",
                "-n",
                &ns,
                "application/hello",
                WAIT,
            ],
            None,
        )
        .await?;
        ensure!(
            greeting(&kube, &ns, "hello").await?.as_deref() == Some("Hello, kubectl!"),
            "the greeting: {:?}",
            greeting(&kube, &ns, "hello").await?
        );
        let table = kubectl_ok(&kc, &["get", "app", "-n", &ns], None).await?;
        let mut lines = table.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        ensure!(
            header == ["NAME", "PACKAGE", "VERSION", "PHASE", "READY", "AGE"],
            "kubectl get app's columns: {table}"
        );
        let row: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .collect();
        ensure!(
            row.len() == 6 && row[..5] == ["hello", "hello", "1.0.0", "Running", "True"],
            "{table}"
        );

        // Bad settings are refused by the API server, naming the field, and change nothing.
        let bad = application(&up, &ns, "hello", "{message: kubectl, replicas: many}", "");
        for dry in [true, false] {
            let mut args = vec!["apply", "--server-side", "-f", "-"];
            if dry {
                args.push("--dry-run=server");
            }
            let ran = kubectl(&kc, &args, Some(&bad)).await?;
            ensure!(
                !ran.ok,
                "bad settings were admitted (dry run: {dry}): {}",
                ran.stdout
            );
            ensure!(
                ran.stderr.contains("denied the request") && ran.stderr.contains("replicas"),
                "the refusal names the field: {}",
                ran.stderr
            );
        }
        let stored = eventually_json(
            &kc,
            "the stored spec",
            &["-n", &ns, "application/hello"],
            |_| true,
        )
        .await?;
        ensure!(
            stored["spec"]["settings"] == serde_json::json!({"message": "kubectl"}),
            "a refused apply changed the spec: {}",
            stored["spec"]
        );

        // A change converges under a new generation.
        let changed = application(&up, &ns, "hello", "{message: changed, replicas: 2}", "");
        kubectl_ok(&kc, &["apply", "--server-side", "-f", "-"], Some(&changed)).await?;
        let generation = stored["metadata"]["generation"]
            .as_i64()
            .unwrap_or_default()
            + 1;
        kubectl_ok(
            &kc,
            &[
                "wait",
                &format!("--for=jsonpath={{.status.observedGeneration}}={generation}"),
                "-n",
                &ns,
                "application/hello",
                WAIT,
            ],
            None,
        )
        .await?;
        kubectl_ok(
            &kc,
            &[
                "wait",
                "--for=condition=Ready",
                "-n",
                &ns,
                "application/hello",
                WAIT,
            ],
            None,
        )
        .await?;
        ensure!(greeting(&kube, &ns, "hello").await?.as_deref() == Some("Hello, changed!"));
        let reasons = event_reasons(&kc, &ns, "Application", "hello").await?;
        for r in ["Installed", "Updated"] {
            ensure!(
                reasons.iter().any(|x| x == r),
                "no {r} event among {reasons:?}"
            );
        }

        // One owner per package: the gRPC API may not change or remove it ...
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App.into(),
            name: "hello".into(),
            namespace: ns.to_string(),
        };
        let refused = client
            .update(journey::hello_update(
                &r,
                serde_json::json!({"message": "grpc"}),
            ))
            .await
            .expect_err("a gRPC Update of a resource's package");
        let owner = format!("Application {ns}/hello");
        ensure!(
            refused.code() == tonic::Code::FailedPrecondition && refused.message().contains(&owner),
            "{refused:?}"
        );
        let refused = client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                force: false,
            })
            .await
            .expect_err("a gRPC Remove of a resource's package");
        ensure!(
            refused.code() == tonic::Code::FailedPrecondition && refused.message().contains(&owner),
            "{refused:?}"
        );
        let got = client
            .get(v1::GetRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        ensure!(got.owner == owner, "{got:?}");
        // ... and a resource may not take over a package the gRPC API made.
        let grpc = v1::PackageRef {
            name: "grpc-made".into(),
            ..r.clone()
        };
        client
            .update(journey::hello_update(
                &grpc,
                serde_json::json!({"message": "api"}),
            ))
            .await?;
        let ran = kubectl(
            &kc,
            &["apply", "--server-side", "-f", "-"],
            Some(&application(&up, &ns, "grpc-made", "{message: take}", "")),
        )
        .await?;
        ensure!(
            !ran.ok && ran.stderr.contains("gRPC API"),
            "a resource took over a gRPC-made package: {}{}",
            ran.stdout,
            ran.stderr
        );

        // `berth suspend` (Suspend over gRPC) holds a gRPC-made package's new generations, and
        // is refused for a resource's package, naming it.
        let suspend = v1::SuspendRequest {
            r#ref: Some(grpc.clone()),
        };
        ensure!(client.suspend(suspend.clone()).await?.into_inner().changed);
        let held = client
            .update(journey::hello_update(
                &grpc,
                serde_json::json!({"message": "other"}),
            ))
            .await
            .expect_err("an Update of a suspended package");
        ensure!(
            held.code() == tonic::Code::FailedPrecondition && held.message().contains("suspended"),
            "{held:?}"
        );
        ensure!(client.resume(suspend).await?.into_inner().changed);
        let refused = client
            .suspend(v1::SuspendRequest {
                r#ref: Some(r.clone()),
            })
            .await
            .expect_err("berth suspend of a resource's package");
        ensure!(
            refused.code() == tonic::Code::FailedPrecondition && refused.message().contains(&owner),
            "{refused:?}"
        );

        // Suspended: a spec change waits, nothing converges, until resumed.
        let suspended = application(
            &up,
            &ns,
            "hello",
            "{message: changed, replicas: 2}",
            "  suspend: true\n",
        );
        kubectl_ok(
            &kc,
            &["apply", "--server-side", "-f", "-"],
            Some(&suspended),
        )
        .await?;
        kubectl_ok(
            &kc,
            &[
                "wait",
                "--for=condition=Suspended",
                "-n",
                &ns,
                "application/hello",
                WAIT,
            ],
            None,
        )
        .await?;
        let got = client
            .get(v1::GetRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        ensure!(
            got.suspended,
            "lifecycle does not show the package suspended: {got:?}"
        );
        let held = application(
            &up,
            &ns,
            "hello",
            "{message: held, replicas: 2}",
            "  suspend: true\n",
        );
        kubectl_ok(&kc, &["apply", "--server-side", "-f", "-"], Some(&held)).await?;
        let before = client
            .get(v1::GetRequest {
                r#ref: Some(r.clone()),
            })
            .await?
            .into_inner();
        let resumed = application(
            &up,
            &ns,
            "hello",
            "{message: held, replicas: 2}",
            "  suspend: false\n",
        );
        // The held change did not reach lifecycle while suspended.
        ensure!(
            berth_proto::json::from_opt_struct(before.settings.as_ref())["message"] == "changed",
            "a suspended resource's change was sent: {before:?}"
        );
        kubectl_ok(&kc, &["apply", "--server-side", "-f", "-"], Some(&resumed)).await?;
        let resumed_generation = eventually_json(
            &kc,
            "the resumed spec",
            &["-n", &ns, "application/hello"],
            |v| v["spec"]["suspend"] == false,
        )
        .await?["metadata"]["generation"]
            .as_i64()
            .unwrap_or_default();
        kubectl_ok(
            &kc,
            &[
                "wait",
                &format!("--for=jsonpath={{.status.observedGeneration}}={resumed_generation}"),
                "-n",
                &ns,
                "application/hello",
                WAIT,
            ],
            None,
        )
        .await?;
        kubectl_ok(
            &kc,
            &[
                "wait",
                "--for=condition=Ready",
                "-n",
                &ns,
                "application/hello",
                WAIT,
            ],
            None,
        )
        .await?;
        ensure!(greeting(&kube, &ns, "hello").await?.as_deref() == Some("Hello, held!"));

        // Deleted: the finalizer removes the package, then the resource goes.
        kubectl_ok(
            &kc,
            &[
                "delete",
                "-n",
                &ns,
                "application/hello",
                "--wait=true",
                WAIT,
            ],
            None,
        )
        .await?;
        let gone = client
            .get(v1::GetRequest {
                r#ref: Some(r.clone()),
            })
            .await;
        ensure!(
            matches!(&gone, Err(s) if s.code() == tonic::Code::NotFound),
            "the package outlived its resource: {gone:?}"
        );
        ensure!(
            greeting(&kube, &ns, "hello").await?.is_none(),
            "the package's objects outlived it"
        );
        let reasons = event_reasons(&kc, &ns, "Application", "hello").await?;
        ensure!(
            reasons.iter().any(|x| x == "Removed"),
            "no Removed event among {reasons:?}"
        );
        Ok(())
    }
    .await;
    up.proc.stop().await;
    result
}

/// GitOps: a directory of Applications and a Module (a Deckhouse ModuleConfig with berth's
/// apiVersion and kind, plus the package it names) applied with `kubectl apply
/// --server-side`, waited for with `kubectl wait`, changed, and pruned with `--prune`; berth
/// converges each time, and a pruned resource's package is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_of_resources_converges_with_server_side_apply_and_prune() -> anyhow::Result<()>
{
    let dir = tempfile::tempdir()?;
    let up = AllInOne::start(&dir.path().join("data"), real_cluster().as_deref()).await?;
    let result = async {
        let kc = up.kubeconfig.clone();
        let kube = berth_tests::cluster::client_for(&kc).await?;
        let ns = TestNamespace::create(&kube, "gitops").await?;
        let (k, v) = up.instance.clone();
        let suffix = &v[..8];
        let module_name = format!("front-{suffix}");
        let module = |enabled: bool, role: &str| {
            format!(
                "apiVersion: berth.io/v1alpha1
kind: Module
metadata:
  name: {module_name}
  labels:
    {k}: \"{v}\"
spec:
  enabled: {enabled}
  version: 1
  settings:
    suffix: \"{role}\"
  source: {repo}
  package: clusterwide
  packageVersion: 1.0.0
",
                repo = berth_tests::FIXTURES_REPO,
            )
        };
        let repo = dir.path().join("gitops");
        std::fs::create_dir_all(&repo)?;
        let write = |file: &str, text: &str| std::fs::write(repo.join(file), text);
        write(
            "one.yaml",
            &application(&up, &ns, "one", "{message: one}", ""),
        )?;
        write(
            "two.yaml",
            &application(&up, &ns, "two", "{message: two}", ""),
        )?;
        write("module.yaml", &module(true, suffix))?;
        // kubectl's ApplySet pruning (what works with server-side apply: the older `-l`
        // pruning only prunes objects with a client-side apply's annotation).
        let apply = || {
            let repo = repo.display().to_string();
            let (kc, ns) = (kc.clone(), ns.to_string());
            async move {
                let mut command = tokio::process::Command::new("kubectl");
                command
                    .env("KUBECTL_APPLYSET", "true")
                    .arg("--kubeconfig")
                    .arg(&kc)
                    .arg("--cache-dir")
                    .arg(
                        kc.parent()
                            .unwrap_or(Path::new("."))
                            .join(format!("kubectl-cache-{}", std::process::id())),
                    )
                    .args([
                        "apply",
                        "--server-side",
                        "--prune",
                        "--applyset=gitops",
                        "-n",
                        &ns,
                        "-f",
                        &repo,
                    ]);
                let out = command.output().await.context("running kubectl")?;
                ensure!(
                    out.status.success(),
                    "kubectl apply --prune failed: {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                anyhow::Ok(())
            }
        };
        let wait_all = || {
            let repo = repo.display().to_string();
            let kc = kc.clone();
            async move {
                kubectl_ok(
                    &kc,
                    &["wait", "--for=condition=Ready", "-f", &repo, WAIT],
                    None,
                )
                .await
            }
        };
        apply().await?;
        wait_all().await?;
        ensure!(greeting(&kube, &ns, "one").await?.as_deref() == Some("Hello, one!"));
        ensure!(greeting(&kube, &ns, "two").await?.as_deref() == Some("Hello, two!"));
        let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(kube.clone());
        let role = format!("berth-test-clusterwide-{suffix}");
        ensure!(
            roles.get_opt(&role).await?.is_some(),
            "the Module's ClusterRole {role}"
        );

        // Changed in the directory: applied again, converged again.
        write(
            "two.yaml",
            &application(&up, &ns, "two", "{message: again}", ""),
        )?;
        apply().await?;
        eventually_json(
            &kc,
            "two converged again",
            &["-n", &ns, "application/two"],
            |v| {
                v["status"]["observedGeneration"] == v["metadata"]["generation"]
                    && condition(v, "Ready").is_some_and(|c| c["status"] == "True")
            },
        )
        .await?;
        ensure!(greeting(&kube, &ns, "two").await?.as_deref() == Some("Hello, again!"));

        // The module disabled in the directory: removed, and Ready (its desired state).
        write("module.yaml", &module(false, suffix))?;
        apply().await?;
        eventually_json(
            &kc,
            "the module disabled",
            &[&format!("module/{module_name}")],
            |v| {
                v["status"]["phase"] == "Disabled"
                    && condition(v, "Ready").is_some_and(|c| c["status"] == "True")
            },
        )
        .await?;
        ensure!(
            roles.get_opt(&role).await?.is_none(),
            "a disabled Module's ClusterRole stayed"
        );

        // Pruned: one's file goes, so does one (and its package).
        std::fs::remove_file(repo.join("one.yaml"))?;
        apply().await?;
        kubectl_ok(
            &kc,
            &["wait", "--for=delete", "-n", &ns, "application/one", WAIT],
            None,
        )
        .await?;
        ensure!(
            greeting(&kube, &ns, "one").await?.is_none(),
            "a pruned Application's objects stayed"
        );
        ensure!(
            greeting(&kube, &ns, "two").await?.is_some(),
            "pruning one touched two"
        );
        // Clean up the Module (cluster-scoped) and two.
        kubectl_ok(
            &kc,
            &[
                "delete",
                "-f",
                &repo.display().to_string(),
                "--wait=true",
                WAIT,
            ],
            None,
        )
        .await?;
        Ok(())
    }
    .await;
    up.proc.stop().await;
    result
}

/// A package's settings check answers at admission: its warnings come back as kubectl's
/// warnings (a server-side dry run and an apply alike), its refusal refuses the apply naming
/// why, and the check's verdict on good settings lets them through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_check_answers_kubectl_at_admission() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let up = AllInOne::start(&dir.path().join("data"), real_cluster().as_deref()).await?;
    let result = async {
        let kc = up.kubeconfig.clone();
        let kube = berth_tests::cluster::client_for(&kc).await?;
        let ns = TestNamespace::create(&kube, "checked").await?;
        let (k, v) = &up.instance;
        let resource = |replicas: u32| {
            format!(
                "apiVersion: berth.io/v1alpha1
kind: Application
metadata:
  name: checked
  namespace: {ns}
  labels:
    {k}: \"{v}\"
spec:
  repository: {repo}
  version: 1.0.0
  settings: {{replicas: {replicas}}}
",
                repo = berth_tests::FIXTURES_REPO,
            )
        };
        kubectl_ok(
            &kc,
            &["apply", "--server-side", "-f", "-"],
            Some(&resource(1)),
        )
        .await?;
        kubectl_ok(
            &kc,
            &[
                "wait",
                "--for=condition=Ready",
                "-n",
                &ns,
                "application/checked",
                WAIT,
            ],
            None,
        )
        .await?;
        for dry in [true, false] {
            let mut args = vec!["apply", "--server-side", "-f", "-"];
            if dry {
                args.push("--dry-run=server");
            }
            let warned = kubectl(&kc, &args, Some(&resource(4))).await?;
            ensure!(
                warned.ok
                    && warned
                        .stderr
                        .contains("more than 3 replicas need a bigger node pool"),
                "the settings check's warning (dry run: {dry}): {}{}",
                warned.stdout,
                warned.stderr
            );
        }
        let refused = kubectl(
            &kc,
            &["apply", "--server-side", "-f", "-"],
            Some(&resource(6)),
        )
        .await?;
        ensure!(
            !refused.ok && refused.stderr.contains("replicas must be at most 5, got 6"),
            "the settings check's refusal: {}{}",
            refused.stdout,
            refused.stderr
        );
        kubectl_ok(
            &kc,
            &[
                "delete",
                "-n",
                &ns,
                "application/checked",
                "--wait=true",
                WAIT,
            ],
            None,
        )
        .await?;
        Ok(())
    }
    .await;
    up.proc.stop().await;
    result
}

/// Events tell an upgrade and a failing hook (issue 34): an Application of the `upgrader`
/// fixture moved from 1.0.0 to 1.1.0 gets `Upgraded` naming both versions; one of the
/// `starter` fixture, whose onStartup hook fails until `startupOk` is true, gets a `HookFailed`
/// warning with the hook's message, and goes Ready once the setting is changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_tell_upgrades_and_hook_failures() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let up = AllInOne::start(&dir.path().join("data"), real_cluster().as_deref()).await?;
    let result = async {
        let kc = up.kubeconfig.clone();
        let kube = berth_tests::cluster::client_for(&kc).await?;
        let ns = TestNamespace::create(&kube, "events").await?;
        let (k, v) = up.instance.clone();
        let app = |name: &str, package: &str, version: &str, settings: &str| {
            format!(
                "apiVersion: berth.io/v1alpha1
kind: Application
metadata:
  name: {name}
  namespace: {ns}
  labels:
    {k}: \"{v}\"
spec:
  package: {package}
  repository: {repo}
  version: {version}
  settings: {settings}
",
                repo = berth_tests::FIXTURES_REPO,
            )
        };
        let apply = |yaml: String| {
            let kc = kc.clone();
            async move { kubectl_ok(&kc, &["apply", "-f", "-"], Some(&yaml)).await }
        };
        let wait_ready = |name: &str| {
            let (kc, ns, name) = (kc.clone(), ns.to_string(), format!("application/{name}"));
            async move {
                kubectl_ok(
                    &kc,
                    &["wait", "--for=condition=Ready", "-n", &ns, &name, WAIT],
                    None,
                )
                .await
            }
        };
        let events = |name: &str| {
            let (kc, ns, name) = (kc.clone(), ns.to_string(), name.to_owned());
            async move {
                let out =
                    kubectl_ok(&kc, &["get", "events", "-n", &ns, "-o", "json"], None).await?;
                let all: Value = serde_json::from_str(&out)?;
                anyhow::Ok(
                    all["items"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|e| {
                            e["involvedObject"]["kind"] == "Application"
                                && e["involvedObject"]["name"] == name.as_str()
                        })
                        .map(|e| {
                            (
                                e["type"].as_str().unwrap_or_default().to_owned(),
                                e["reason"].as_str().unwrap_or_default().to_owned(),
                                e["message"].as_str().unwrap_or_default().to_owned(),
                            )
                        })
                        .collect::<Vec<_>>(),
                )
            }
        };

        apply(app("moving", "upgrader", "1.0.0", "{}")).await?;
        wait_ready("moving").await?;
        apply(app("moving", "upgrader", "1.1.0", "{}")).await?;
        eventually_json(
            &kc,
            "moving at 1.1.0, Ready",
            &["-n", &ns, "application/moving"],
            |v| {
                v["status"]["resolvedVersion"] == "1.1.0"
                    && condition(v, "Ready").is_some_and(|c| c["status"] == "True")
            },
        )
        .await?;
        let seen = events("moving").await?;
        ensure!(
            seen.iter().any(|(t, r, m)| t == "Normal"
                && r == "Upgraded"
                && m.contains("upgraded upgrader from 1.0.0 to 1.1.0")),
            "no Upgraded event among {seen:?}"
        );

        apply(app("starting", "starter", "1.0.0", "{startupOk: false}")).await?;
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let failed = loop {
            let seen = events("starting").await?;
            if let Some(e) = seen
                .iter()
                .find(|(t, r, _)| t == "Warning" && r == "HookFailed")
            {
                break e.clone();
            }
            ensure!(
                tokio::time::Instant::now() < deadline,
                "no HookFailed event within {DEADLINE:?}: {seen:?}"
            );
            // Polling kubectl, as a person would.
            tokio::time::sleep(Duration::from_millis(300)).await;
        };
        ensure!(
            failed
                .2
                .contains("onStartup refuses: startupOk is not true"),
            "{failed:?}"
        );
        apply(app("starting", "starter", "1.0.0", "{startupOk: true}")).await?;
        wait_ready("starting").await?;

        for name in ["moving", "starting"] {
            kubectl_ok(
                &kc,
                &["delete", "-n", &ns, &format!("application/{name}"), WAIT],
                None,
            )
            .await?;
        }
        anyhow::Ok(())
    }
    .await;
    up.proc.stop().await;
    result
}

/// Deleting a resource whose Remove cannot go on says why on the resource, and the resource
/// stays until the package is gone: removing what another package needs mandatorily is refused
/// (`Stalled=True RemoveBlocked` naming the dependent, the package keeps running) and goes on
/// once the dependent is deleted; a removal that an object's finalizer holds names the object
/// and the finalizer, and finishes once the finalizer is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_removal_shows_on_the_resource() -> anyhow::Result<()> {
    use kube::api::{Patch, PatchParams};
    let dir = tempfile::tempdir()?;
    let up = AllInOne::start(&dir.path().join("data"), real_cluster().as_deref()).await?;
    let kc = up.kubeconfig.clone();
    let kube = berth_tests::cluster::client_for(&kc).await?;
    let ns = TestNamespace::create(&kube, "blocked").await?;
    let cms: Api<ConfigMap> = Api::namespaced(kube.clone(), &ns);
    let release = || async {
        cms.patch(
            "finalized-held",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
        )
        .await
    };
    let result = async {
        let (k, v) = up.instance.clone();
        let app = |name: &str, package: &str, version: &str| {
            format!(
                "apiVersion: berth.io/v1alpha1
kind: Application
metadata:
  name: {name}
  namespace: {ns}
  labels:
    {k}: \"{v}\"
spec:
  package: {package}
  repository: {repo}
  version: {version}
",
                repo = berth_tests::FIXTURES_REPO,
            )
        };
        let resource = |name: &str| format!("application/{name}");
        for (name, package, version) in [
            ("dep-base", "dep-base", "1.2.0"),
            ("user", "dep-user", "1.0.0"),
            ("held", "finalized", "1.0.0"),
        ] {
            kubectl_ok(
                &kc,
                &["apply", "-f", "-"],
                Some(&app(name, package, version)),
            )
            .await?;
        }
        for name in ["dep-base", "user", "held"] {
            kubectl_ok(
                &kc,
                &[
                    "wait",
                    "--for=condition=Ready",
                    "-n",
                    &ns,
                    &resource(name),
                    WAIT,
                ],
                None,
            )
            .await?;
        }
        let stalled_because = |v: &Value, says: &[&str]| {
            condition(v, "Stalled").is_some_and(|c| {
                c["status"] == "True"
                    && c["reason"] == "RemoveBlocked"
                    && says
                        .iter()
                        .all(|s| c["message"].as_str().unwrap_or_default().contains(s))
            }) && condition(v, "Ready").is_some_and(|c| c["status"] == "False")
        };

        // A mandatory dependency: its Remove is refused, and the package keeps running.
        kubectl_ok(
            &kc,
            &["delete", "-n", &ns, &resource("dep-base"), "--wait=false"],
            None,
        )
        .await?;
        let dependent = format!("{ns}.user");
        eventually_json(
            &kc,
            "dep-base Stalled, naming its dependent",
            &["-n", &ns, &resource("dep-base")],
            |v| stalled_because(v, &[&dependent]),
        )
        .await?;
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        let base = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "dep-base".into(),
            namespace: ns.to_string(),
        };
        let p = client
            .get(v1::GetRequest {
                r#ref: Some(base.clone()),
            })
            .await?
            .into_inner();
        ensure!(
            p.phase == "Running",
            "the refused Remove changed nothing: {p:?}"
        );
        // Once the dependent goes, so does the dependency, by itself.
        kubectl_ok(&kc, &["delete", "-n", &ns, &resource("user"), WAIT], None).await?;
        kubectl_ok(
            &kc,
            &[
                "wait",
                "--for=delete",
                "-n",
                &ns,
                &resource("dep-base"),
                WAIT,
            ],
            None,
        )
        .await?;
        journey::wait_gone(&mut client, &base).await?;

        // A finalizer nothing releases holds the removal: the resource names it.
        kubectl_ok(
            &kc,
            &["delete", "-n", &ns, &resource("held"), "--wait=false"],
            None,
        )
        .await?;
        eventually_json(
            &kc,
            "held Stalled, naming the held object and its finalizer",
            &["-n", &ns, &resource("held")],
            |v| stalled_because(v, &["finalized-held", "example.com/hold"]),
        )
        .await?;
        release().await?;
        kubectl_ok(
            &kc,
            &["wait", "--for=delete", "-n", &ns, &resource("held"), WAIT],
            None,
        )
        .await?;
        ensure!(
            cms.get_opt("finalized-held").await?.is_none(),
            "the held object is gone"
        );
        anyhow::Ok(())
    }
    .await;
    if result.is_err() {
        // Let the namespace go even when the test failed.
        let _ = release().await;
    }
    up.proc.stop().await;
    drop(ns);
    result
}

/// PackageRepository resources define where packages come from: a directory under a
/// repository root, and an OCI registry whose credentials a Secret holds. Each shows Ready with
/// its source (or Stalled naming what is wrong: a directory outside every root, a Secret not
/// there yet, which it then picks up); Applications and gRPC Updates name them as configured
/// repositories; deleting one makes lifecycle forget it, and an Update naming it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn package_repositories_define_where_packages_come_from() -> anyhow::Result<()> {
    let Some(registry) =
        berth_tests::registry::Registry::start_with_users(&[("puller", "s3cret")])?
    else {
        return Ok(());
    };
    let url = format!("oci://{}/berth/packages", registry.addr);
    let auth = berth_package::OciAuth::Basic {
        username: "puller".into(),
        password: "s3cret".into(),
    };
    let oci = berth_package::OciRepository::new(&url, auth, true)?;
    let hello = berth_tests::workspace_root()
        .join(berth_tests::EXAMPLES_REPO)
        .join("hello/1.0.0");
    oci.push(&berth_package::pack(
        &hello,
        berth_package::Limits::default(),
    )?)
    .await?;

    let dir = tempfile::tempdir()?;
    let up = AllInOne::start(&dir.path().join("data"), real_cluster().as_deref()).await?;
    let kc = up.kubeconfig.clone();
    let (k, v) = up.instance.clone();
    let (local, remote, outside) = (
        format!("examples-{v}"),
        format!("registry-{v}"),
        format!("outside-{v}"),
    );
    let result = async {
        let kube = berth_tests::cluster::client_for(&kc).await?;
        let ns = TestNamespace::create(&kube, "pkgrepo").await?;
        let repository = |name: &str, spec: &str| {
            format!(
                "apiVersion: berth.io/v1alpha1
kind: PackageRepository
metadata:
  name: {name}
  labels:
    {k}: \"{v}\"
spec:
{spec}"
            )
        };
        let app = |name: &str, repository: &str| {
            format!(
                "apiVersion: berth.io/v1alpha1
kind: Application
metadata:
  name: {name}
  namespace: {ns}
  labels:
    {k}: \"{v}\"
spec:
  package: hello
  repository: {repository}
  version: 1.0.0
  settings: {{message: {name}}}
"
            )
        };
        let apply = |yaml: String| {
            let kc = kc.clone();
            async move { kubectl_ok(&kc, &["apply", "-f", "-"], Some(&yaml)).await }
        };
        let examples = berth_tests::workspace_root().join(berth_tests::EXAMPLES_REPO);
        apply(repository(
            &local,
            &format!("  directory: {}\n", examples.display()),
        ))
        .await?;
        let ready = eventually_json(
            &kc,
            "the directory repository Ready",
            &[&format!("packagerepository/{local}")],
            |v| condition(v, "Ready").is_some_and(|c| c["status"] == "True"),
        )
        .await?;
        let source = ready["status"]["source"].as_str().unwrap_or_default();
        ensure!(source.contains("directory"), "source {source:?}");

        // Outside every repository root: refused, naming why.
        apply(repository(&outside, "  directory: /etc\n")).await?;
        let roots = "under none of the repository roots";
        stalled_naming(&kc, "the outside directory Stalled", &outside, roots).await?;

        // The registry's credentials come from a Secret that is not there yet.
        apply(repository(
            &remote,
            &format!(
                "  oci: {url}\n  plainHttp: true\n  credentialsSecretRef: {{name: pull, namespace: {ns}}}\n"
            ),
        ))
        .await?;
        let missing = format!("Secret {ns}/pull not found");
        stalled_naming(&kc, "the registry Stalled for its missing Secret", &remote, missing).await?;
        kubectl_ok(
            &kc,
            &[
                "create", "secret", "generic", "pull", "-n", &ns,
                "--from-literal=username=puller", "--from-literal=password=s3cret",
            ],
            None,
        )
        .await?;
        kubectl_ok(
            &kc,
            &["wait", "--for=condition=Ready", &format!("packagerepository/{remote}"), WAIT],
            None,
        )
        .await?;

        // Applications name them as configured repositories.
        apply(app("from-dir", &local)).await?;
        apply(app("from-oci", &remote)).await?;
        for name in ["from-dir", "from-oci"] {
            kubectl_ok(
                &kc,
                &["wait", "--for=condition=Ready", "-n", &ns, &format!("application/{name}"), WAIT],
                None,
            )
            .await?;
            let seen = greeting(&kube, &ns, name).await?;
            ensure!(
                seen.as_deref().is_some_and(|g| g.contains(name)),
                "{name}'s greeting: {seen:?}"
            );
        }
        // So does a gRPC Update.
        let mut client = journey::connect(&up.proc.endpoint()).await?;
        let r = v1::PackageRef {
            kind: v1::PackageKind::App as i32,
            name: "from-grpc".into(),
            namespace: ns.to_string(),
        };
        let g = client
            .update(v1::UpdateRequest {
                r#ref: Some(r.clone()),
                repository: remote.clone(),
                package: "hello".into(),
                version: "1.0.0".into(),
                settings: Some(berth_proto::json::to_struct(
                    &serde_json::json!({"message": "grpc"}),
                )),
                ..Default::default()
            })
            .await?
            .into_inner()
            .generation;
        journey::wait_running(&mut client, &r, g).await?;

        // Dump lists what the resources define (not the refused one), whether credentials are
        // held, never them.
        let dump = client
            .dump(v1::DumpRequest::default())
            .await?
            .into_inner()
            .yaml;
        let doc: Value = serde_saphyr::from_str(&dump)?;
        let listed = |name: &str| {
            doc["repositories"]
                .as_array()
                .and_then(|a| a.iter().find(|r| r["name"] == name))
                .cloned()
                .unwrap_or_default()
        };
        ensure!(
            listed(&remote)["credentials"] == true
                && listed(&remote)["plainHttp"] == true
                && listed(&local)["credentials"] == false
                && listed(&outside).is_null(),
            "the defined repositories in Dump: {:#}",
            doc["repositories"]
        );
        ensure!(!dump.contains("s3cret"), "Dump shows a credential");

        // A change of the credentials Secret is read when it happens (the controller watches
        // Secrets; its periodic read is 300 s away): without its password the registry's
        // repository is Stalled, naming the key.
        kubectl_ok(
            &kc,
            &["patch", "secret", "pull", "-n", &ns, "--type=json",
                "-p", r#"[{"op": "remove", "path": "/data/password"}]"#],
            None,
        )
        .await?;
        let no_password = format!("Secret {ns}/pull has no key \"password\"");
        let what = "the registry Stalled for its Secret without a password";
        stalled_naming(&kc, what, &remote, no_password).await?;

        // Deleted, the repository is forgotten: a new Update naming it is refused.
        kubectl_ok(&kc, &["delete", &format!("packagerepository/{local}"), WAIT], None).await?;
        let refused = client
            .update(v1::UpdateRequest {
                r#ref: Some(v1::PackageRef {
                    name: "late".into(),
                    ..r.clone()
                }),
                repository: local.clone(),
                package: "hello".into(),
                version: "1.0.0".into(),
                ..Default::default()
            })
            .await
            .expect_err("a deleted repository must be refused");
        ensure!(
            refused.code() == tonic::Code::InvalidArgument && refused.message().contains(&local),
            "{refused:?}"
        );
        client
            .remove(v1::RemoveRequest {
                r#ref: Some(r.clone()),
                force: false,
            })
            .await?;
        for name in ["from-dir", "from-oci"] {
            kubectl_ok(
                &kc,
                &["delete", "-n", &ns, &format!("application/{name}"), WAIT],
                None,
            )
            .await?;
        }
        journey::wait_gone(&mut client, &r).await?;
        anyhow::Ok(())
    }
    .await;
    // Cluster-scoped: deleted whatever happened, while the controller still runs.
    for name in [&local, &remote, &outside] {
        let _ = kubectl(
            &kc,
            &[
                "delete",
                "--ignore-not-found",
                &format!("packagerepository/{name}"),
                WAIT,
            ],
            None,
        )
        .await;
    }
    up.proc.stop().await;
    drop(registry);
    result
}
