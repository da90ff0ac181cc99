//! Every package instance's hooks run under an OS identity of their own (issue 30; see
//! docs/decisions/hook-identity.md), through real berth processes and the dev cluster (or the
//! cluster `BERTH_TEST_KUBECONFIG` names): an App's hook cannot reach a Module's running hook
//! (attack 3), a grandchild that joins the worker's process group dies with its run (attack 4),
//! bombs stop at the package's limits while berth keeps serving (attack 10), and principal
//! numbers (so uids) are stable across restarts, reused after removal, and bounded by the
//! configured range. Needs root (the workers switch uids); skipped otherwise.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use berth_proto::v1;
use berth_tests::{SplitTopology, TestCluster, TestNamespace, journey};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Api;
use serde_json::{Value, json};

/// Longest a package may take to reach what a test waits for.
const DEADLINE: Duration = Duration::from_secs(120);

fn root() -> bool {
    let root = nix::unistd::geteuid().is_root();
    if !root {
        println!("skipped: hooks run as their principals' uids only when berth is root");
    }
    root
}

/// Writes package `name` 1.0.0 of `package_type` into the repository at `repo`: its
/// package.yaml (with `extra` lines), a chart without templates, a settings schema taking any
/// integer `round`, and `hooks` (made executable).
fn write_package(
    repo: &Path,
    name: &str,
    package_type: &str,
    extra: &str,
    hooks: &[(&str, String)],
) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = repo.join(name).join("1.0.0");
    std::fs::create_dir_all(dir.join("hooks"))?;
    std::fs::create_dir_all(dir.join("openapi"))?;
    std::fs::write(
        dir.join("package.yaml"),
        format!("type: {package_type}\nname: {name}\nversion: 1.0.0\n{extra}"),
    )?;
    std::fs::write(
        dir.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {name}\nversion: 1.0.0\n"),
    )?;
    std::fs::write(
        dir.join("openapi/settings.yaml"),
        "type: object\nproperties:\n  round:\n    type: integer\n",
    )?;
    for (file, body) in hooks {
        let path = dir.join("hooks").join(file);
        std::fs::write(&path, body)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// A shell hook bound to `binding` (order 1) running `body`.
fn hook(binding: &str, body: &str) -> String {
    format!(
        "#!/bin/bash\nif [ \"$1\" = --config ]; then echo '{{\"configVersion\":\"v1\",\"{binding}\":1}}'; exit 0; fi\n{body}"
    )
}

/// Shell lines that add `$seen` to the values as `/seen`.
const REPORT: &str = "printf '[{\"op\":\"add\",\"path\":\"/seen\",\"value\":\"%s\"}]' \"$seen\" > \"$VALUES_JSON_PATCH_PATH\"\n";

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

fn update(r: &v1::PackageRef, repo: &str, settings: Option<Value>) -> v1::UpdateRequest {
    v1::UpdateRequest {
        r#ref: Some(r.clone()),
        repository: repo.into(),
        version: "1.0.0".into(),
        settings: settings.as_ref().map(berth_proto::json::to_struct),
        ..Default::default()
    }
}

fn seen(p: &v1::Package) -> String {
    p.values
        .as_ref()
        .map(berth_proto::json::from_struct)
        .and_then(|v| v["seen"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

async fn install(
    client: &mut journey::Client,
    req: v1::UpdateRequest,
) -> anyhow::Result<v1::Package> {
    let r = req.r#ref.clone().context("a ref")?;
    let accepted = client.update(req).await?.into_inner();
    journey::wait_running(client, &r, accepted.generation).await
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

/// Follows the package until its current generation failed; returns its error.
async fn wait_failed(client: &mut journey::Client, r: &v1::PackageRef) -> anyhow::Result<String> {
    let p = journey::follow(client, r, DEADLINE, "the package to fail", |p| {
        if p.phase == "Running" {
            bail!("the package is Running");
        }
        Ok(p.phase == "Failed")
    })
    .await?;
    Ok(p.last_error)
}

async fn with_topology<F, Fut>(worker_args: &[&str], journey: F) -> anyhow::Result<()>
where
    F: FnOnce(SplitTopology, kube::Client) -> Fut,
    Fut: Future<Output = anyhow::Result<SplitTopology>>,
{
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let topology = SplitTopology::start_with(&cluster.kubeconfig, dir.path(), worker_args).await?;
    let result = match journey(topology, cluster.client.clone()).await {
        Ok(topology) => {
            topology.stop().await;
            Ok(())
        }
        Err(e) => Err(e),
    };
    cluster.stop().await;
    result
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
        .is_some_and(|zombie| !zombie)
}

/// Attack 3: while a Module's onStartup hook runs, an App's hook finds it through the side
/// file the Module's hook left, and tries its environment, its run directory, its settings
/// and its KUBERNETES_PATCH_PATH (appending a cluster-admin binding). Every try is refused,
/// and the Module's object operations apply unchanged: its ConfigMap exists, the binding
/// does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apps_hook_cannot_reach_a_modules_running_hook() -> anyhow::Result<()> {
    if !root() {
        return Ok(());
    }
    with_topology(&[], |topology, kube| async move {
        let ns = TestNamespace::create(&kube, "isolation").await?;
        let side = berth_tests::hook_writable_dir()?;
        let (found, gate) = (side.path().join("module"), side.path().join("gate"));
        let (repo_dir, repo) = berth_tests::temp_repo();
        let binding = format!("hookos-{}", &ns.to_string()[..ns.to_string().len().min(40)]);
        let module_hook = hook(
            "onStartup",
            &format!(
                "echo '{{\"operation\":\"Create\",\"object\":{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"from-module\",\"namespace\":\"{ns}\"}},\"data\":{{\"by\":\"module\"}}}}}}' >> \"$KUBERNETES_PATCH_PATH\"\n\
                 echo \"$$ $KUBERNETES_PATCH_PATH $CONFIG_VALUES_PATH\" > {f}.tmp && mv {f}.tmp {f}\n\
                 for i in $(seq 1200); do [ -e {g} ] && exit 0; sleep 0.05; done\nexit 1\n",
                f = found.display(),
                g = gate.display()
            ),
        );
        let app_hook = hook(
            "onStartup",
            &format!(
                "for i in $(seq 1200); do [ -s {f} ] && break; sleep 0.05; done\n\
                 read pid patch settings < {f}\n\
                 r() {{ if eval \"$1\" >/dev/null 2>&1; then echo -n \"$2=yes \"; else echo -n \"$2=no \"; fi; }}\n\
                 seen=$( r 'cat /proc/$pid/environ' environ; r 'ls $(dirname $patch)' list; r 'cat $settings' settings; \
                   r 'echo {{\\\"operation\\\":\\\"Create\\\",\\\"object\\\":{{\\\"apiVersion\\\":\\\"rbac.authorization.k8s.io/v1\\\",\\\"kind\\\":\\\"ClusterRoleBinding\\\",\\\"metadata\\\":{{\\\"name\\\":\\\"{binding}\\\"}},\\\"roleRef\\\":{{\\\"apiGroup\\\":\\\"rbac.authorization.k8s.io\\\",\\\"kind\\\":\\\"ClusterRole\\\",\\\"name\\\":\\\"cluster-admin\\\"}},\\\"subjects\\\":[{{\\\"kind\\\":\\\"ServiceAccount\\\",\\\"name\\\":\\\"default\\\",\\\"namespace\\\":\\\"{ns}\\\"}}]}}}} >> $patch' patch; \
                   r 'kill -STOP $pid' signal )\n\
                 touch {g}\n{REPORT}",
                f = found.display(),
                g = gate.display()
            ),
        );
        let module_name = format!("isomod{}", std::process::id());
        write_package(repo_dir.path(), &module_name, "Module", "", &[("secret.sh", module_hook)])?;
        write_package(repo_dir.path(), "snoop", "Application", "", &[("snoop.sh", app_hook)])?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let m = module(&module_name);
        let a = app("snoop", &ns);
        let result = async {
            let module_accepted = client
                .update(update(&m, &repo, Some(json!({"round": 7}))))
                .await?
                .into_inner();
            berth_tests::until("the module's hook to run", DEADLINE, Duration::from_millis(50), || {
                let ready = std::fs::metadata(&found).is_ok_and(|m| m.len() > 0);
                async move { Ok(ready.then_some(())) }
            })
            .await?;
            let snooped = install(&mut client, update(&a, &repo, None)).await?;
            ensure!(
                seen(&snooped) == "environ=no list=no settings=no patch=no signal=no ",
                "the app's hook reached the module's: {}",
                seen(&snooped)
            );
            journey::wait_running(&mut client, &m, module_accepted.generation).await?;
            let cm = Api::<ConfigMap>::namespaced(kube.clone(), &ns)
                .get("from-module")
                .await?;
            ensure!(cm.data.unwrap_or_default().get("by").map(String::as_str) == Some("module"));
            ensure!(
                Api::<ClusterRoleBinding>::all(kube.clone())
                    .get_opt(&binding)
                    .await?
                    .is_none(),
                "the app's operation was applied with the module's rights"
            );
            remove(&mut client, &a).await?;
            remove(&mut client, &m).await
        }
        .await;
        result.map(|()| topology)
    })
    .await
}

/// Attack 4: a hook's grandchild that leaves the hook's process group for the worker's own
/// (`setpgid(0, <worker's pgid>)`) is dead once the run is over, and after the package is
/// removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grandchild_in_the_workers_process_group_dies_with_its_run() -> anyhow::Result<()> {
    if !root() {
        return Ok(());
    }
    with_topology(&[], |topology, kube| async move {
        let ns = TestNamespace::create(&kube, "isolation").await?;
        let side = berth_tests::hook_writable_dir()?;
        let pids = side.path().join("pids");
        let (repo_dir, repo) = berth_tests::temp_repo();
        // The worker's process group: field 5 of its stat (the hook's parent is the worker).
        let body = format!(
            "pgid=$(cut -d' ' -f5 /proc/$PPID/stat)\n\
             ( BERTH_PGID=$pgid perl -e 'setpgrp(0, $ENV{{BERTH_PGID}}) or die \"setpgrp: $!\"; open(my $f, \">>\", \"{p}\"); print $f \"$$ \", getpgrp(), \"\\n\"; close $f; close STDOUT; close STDERR; sleep 1000' & )\n\
             for i in $(seq 200); do [ -s {p} ] && exit 0; sleep 0.02; done\nexit 1\n",
            p = pids.display()
        );
        write_package(repo_dir.path(), "joiner", "Application", "", &[("join.sh", hook("onStartup", &body))])?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let r = app("joiner", &ns);
        let result = async {
            install(&mut client, update(&r, &repo, None)).await?;
            let text = std::fs::read_to_string(&pids).context("the grandchild's pid")?;
            let mut fields = text.split_whitespace();
            let pid: i32 = fields.next().context("pid")?.parse()?;
            let pgid: i32 = fields.next().context("pgid")?.parse()?;
            let worker_pgid = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(
                topology.worker().pid().context("the worker's pid")? as i32,
            )))?
            .as_raw();
            ensure!(pgid == worker_pgid, "the grandchild joined the worker's group");
            ensure!(!alive(pid), "the grandchild {pid} outlived its run");
            remove(&mut client, &r).await?;
            ensure!(!alive(pid), "the grandchild {pid} outlived its package");
            Ok(())
        }
        .await;
        result.map(|()| topology)
    })
    .await
}

/// Attack 10: a fork bomb (1,500 processes) stops at the package's process limit, a 1.5 GiB
/// allocation at its memory limit; each package fails naming the limit, and berth keeps
/// serving: a third package installs after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bombs_stop_at_the_packages_limits_and_berth_keeps_serving() -> anyhow::Result<()> {
    if !root() {
        return Ok(());
    }
    with_topology(&[], |topology, kube| async move {
        let ns = TestNamespace::create(&kube, "isolation").await?;
        let (repo_dir, repo) = berth_tests::temp_repo();
        write_package(
            repo_dir.path(),
            "forker",
            "Application",
            "limits:\n  processes: 48\n",
            &[(
                "fork.sh",
                hook(
                    "onStartup",
                    // dash: a refused fork fails it at once (bash retries for some 15 s).
                    "exec /bin/sh -c 'for i in $(seq 1500); do sleep 60 & done; echo all started'\n",
                ),
            )],
        )?;
        write_package(
            repo_dir.path(),
            "hog",
            "Application",
            "limits:\n  memory: 96Mi\n",
            &[(
                "hog.sh",
                hook(
                    "onStartup",
                    "exec /usr/bin/python3 -c 'b = bytearray(1536 * 1024 * 1024); print(len(b))'\n",
                ),
            )],
        )?;
        write_package(
            repo_dir.path(),
            "calm",
            "Application",
            "",
            &[(
                "calm.sh",
                hook("onStartup", &("seen=calm\n".to_owned() + REPORT)),
            )],
        )?;
        let mut client = journey::connect(&topology.gateway.endpoint()).await?;
        let (forker, hog, calm) = (app("forker", &ns), app("hog", &ns), app("calm", &ns));
        let result = async {
            client.update(update(&forker, &repo, None)).await?;
            client.update(update(&hog, &repo, None)).await?;
            let fork_error = wait_failed(&mut client, &forker).await?;
            ensure!(
                fork_error.contains(
                    "fork.sh reached its process limit (48 processes) (limits.processes)"
                ),
                "{fork_error}"
            );
            let hog_error = wait_failed(&mut client, &hog).await?;
            ensure!(
                hog_error.contains("hog.sh reached its memory limit (96 MiB) (limits.memory)"),
                "{hog_error}"
            );
            let p = install(&mut client, update(&calm, &repo, None)).await?;
            ensure!(seen(&p) == "calm");
            for r in [&forker, &hog, &calm] {
                remove(&mut client, r).await?;
            }
            Ok(())
        }
        .await;
        result.map(|()| topology)
    })
    .await
}

/// Principal numbers, seen as the uids hooks run as: the first packages of a fresh lifecycle
/// are 1 and 2 (uids 2000001, 2000002, their run directories theirs and 0700); with the range
/// `2000000-2000002` a third fails naming the range; a restarted lifecycle gives the same
/// numbers; after a removal, the next new package takes the freed number.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn principals_are_stable_reused_after_removal_and_bounded_by_the_range() -> anyhow::Result<()>
{
    if !root() {
        return Ok(());
    }
    with_topology(
        &["--hook-uids", "2000000-2000002"],
        |mut topology, kube| async move {
            let ns = TestNamespace::create(&kube, "isolation").await?;
            let (repo_dir, repo) = berth_tests::temp_repo();
            let body = format!("seen=\"$(id -u) $(stat -c '%u:%a' \"$TMPDIR\")\"\n{REPORT}");
            for name in ["one", "two", "three", "four"] {
                write_package(
                    repo_dir.path(),
                    name,
                    "Application",
                    "",
                    &[("id.sh", hook("beforeHelm", &body))],
                )?;
            }
            let mut client = journey::connect(&topology.gateway.endpoint()).await?;
            let [one, two, three, four] = ["one", "two", "three", "four"].map(|n| app(n, &ns));
            let result = async {
                let p = install(&mut client, update(&one, &repo, None)).await?;
                ensure!(seen(&p) == "2000001 2000001:700", "one: {}", seen(&p));
                let p = install(&mut client, update(&two, &repo, None)).await?;
                ensure!(seen(&p) == "2000002 2000002:700", "two: {}", seen(&p));
                client.update(update(&three, &repo, None)).await?;
                let error = wait_failed(&mut client, &three).await?;
                ensure!(
                    error.contains("principal 3") && error.contains("2000000-2000002"),
                    "the third package's failure names the range: {error}"
                );
                topology.restart_lifecycle().await?;
                let p =
                    install(&mut client, update(&one, &repo, Some(json!({"round": 2})))).await?;
                ensure!(
                    seen(&p) == "2000001 2000001:700",
                    "one after a restart: {}",
                    seen(&p)
                );
                remove(&mut client, &one).await?;
                let p = install(&mut client, update(&four, &repo, None)).await?;
                ensure!(
                    seen(&p) == "2000001 2000001:700",
                    "four takes one's number: {}",
                    seen(&p)
                );
                for r in [&two, &three, &four] {
                    remove(&mut client, r).await?;
                }
                Ok(())
            }
            .await;
            result.map(|()| topology)
        },
    )
    .await
}
