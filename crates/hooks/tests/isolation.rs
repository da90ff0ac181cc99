//! Hooks confined to their principal (`isolate_hooks` with a uid range), through real
//! processes: the uid and run directory, another principal's hook trying to reach a running
//! one (issue 30, attack 3), a grandchild that joins berth's own process group (attack 4), a
//! fork bomb and a memory bomb (attack 10), Landlock, the caller's files and mounts, and
//! discovery and settings checks under the identity. Its own test binary: isolation is set up
//! once per process. Needs root (skipped otherwise).

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use berth_hooks::{
    HookUser, Isolation, Limits, Mount, RunDirFile, RunError, RunOutput, Sandbox,
    SettingsCheckRequest, UidRange, check_settings, discover_all, isolate_hooks, run,
};
use common::{request, script, shell_hook, wait_for_file};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const HELPER: &str = env!("CARGO_BIN_EXE_berth-hook-exec");
const BASE: u32 = 3_100_000;

struct Setup {
    /// Everything of this test process: packages, the side channel, run directories.
    root: PathBuf,
    /// A directory every confined hook may write (`Isolation::writable`).
    side: PathBuf,
    notes: Vec<String>,
}

/// Sets isolation up once for this process; `None` (test skipped) when not root.
fn setup() -> Option<&'static Setup> {
    if !nix::unistd::geteuid().is_root() {
        println!("skipped: confining hooks needs root");
        return None;
    }
    static SETUP: OnceLock<Setup> = OnceLock::new();
    Some(SETUP.get_or_init(|| {
        let root = tempfile::Builder::new()
            .prefix("isolation-")
            .tempdir()
            .expect("tempdir")
            .keep();
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let side = root.join("side");
        std::fs::create_dir(&side).unwrap();
        std::fs::set_permissions(&side, std::fs::Permissions::from_mode(0o777)).unwrap();
        let notes = isolate_hooks(Isolation {
            uids: Some(UidRange::new(BASE, BASE + 100).unwrap()),
            tmp_dir: root.join("runs"),
            writable: vec![side.clone()],
            helper: Some(HELPER.into()),
        })
        .expect("isolation sets up");
        Setup { root, side, notes }
    }))
}

/// A package directory (berth's, readable by others, as the cache holds it) with `hooks`.
fn package(setup: &Setup, name: &str, hooks: &[(&str, &str)]) -> PathBuf {
    let dir = setup.root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for (file, body) in hooks {
        script(&dir, file, body);
    }
    dir
}

fn sandbox(principal: u32, dir: &Path) -> Sandbox {
    Sandbox::new(principal, Limits::default(), dir.to_path_buf())
}

/// Runs `pkg/hook` in `sandbox`.
async fn run_in(pkg: &Path, hook: &str, sandbox: Sandbox) -> Result<RunOutput, RunError> {
    let hook = shell_hook(pkg.join(hook));
    let tmp = tempfile::tempdir().unwrap();
    let mut req = request(&hook, tmp.path());
    req.sandbox = Some(sandbox);
    run(req).await
}

fn values(out: &RunOutput) -> Value {
    let mut doc = json!({});
    json_patch::patch(&mut doc, &out.values_patch).expect("the patch applies");
    doc
}

/// The value a `/seen` patch of the hook's carried.
fn seen(out: &RunOutput) -> String {
    values(out)["seen"].as_str().unwrap_or_default().to_owned()
}

/// A hook that reports `$1`'s output as `/seen`.
fn reporting(command: &str) -> String {
    format!(
        "#!/bin/bash\nseen=$( {{ {command} ; }} 2>&1 | tr '\\n\"' ' _' )\n\
         printf '[{{\"op\":\"add\",\"path\":\"/seen\",\"value\":\"%s\"}}]' \"$seen\" > \"$VALUES_JSON_PATCH_PATH\"\n"
    )
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

#[tokio::test]
async fn a_principal_runs_as_its_own_uid_with_a_private_run_directory() {
    let Some(setup) = setup() else { return };
    assert!(
        setup
            .notes
            .iter()
            .any(|n| n.contains("uid = gid = 3100000 + principal")),
        "{:?}",
        setup.notes
    );
    // uid, gid, groups, then owner and mode of the run directory and of a file berth wrote
    // into it, then the variables pointing there.
    let pkg = package(
        setup,
        "identity",
        &[(
            "id.sh",
            &reporting(
                "echo $(id -u):$(id -g):$(id -G); stat -c '%u:%a' \"$TMPDIR\" \"$VALUES_PATH\" \"$VALUES_JSON_PATCH_PATH\"; \
                 [ \"$HOME\" = \"$TMPDIR\" ] && [ \"$(dirname \"$VALUES_PATH\")\" = \"$TMPDIR\" ] && echo home-is-run-dir",
            ),
        )],
    );
    let out = run_in(&pkg, "id.sh", sandbox(7, &pkg)).await.expect("runs");
    let uid = BASE + 7;
    assert_eq!(
        seen(&out),
        format!("{uid}:{uid}:{uid} {uid}:700 {uid}:600 {uid}:600 home-is-run-dir "),
        "uid = gid = base + principal, no other group; the run directory and its files are the uid's alone"
    );
    // The run directory is gone, and so is the run's cgroup.
    let runs: Vec<_> = std::fs::read_dir(setup.root.join("runs"))
        .unwrap()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
        .filter(|e| e.file_name().to_string_lossy().starts_with("berth-hook-"))
        .collect();
    assert!(runs.is_empty(), "run directories left: {runs:?}");
    let cgroups = own_berth_cgroups(7);
    assert!(cgroups.is_empty(), "cgroups left: {cgroups:?}");
}

/// The run cgroups of `principal` that exist now, in every hierarchy.
fn own_berth_cgroups(principal: u32) -> Vec<PathBuf> {
    let mut left = Vec::new();
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        let mount = match controllers {
            "" => "/sys/fs/cgroup/unified".to_owned(),
            "pids" | "memory" | "cpu" | "freezer" => format!("/sys/fs/cgroup/{controllers}"),
            _ => continue,
        };
        let dir = Path::new(&mount)
            .join(path.trim_start_matches('/'))
            .join("berth")
            .join(principal.to_string());
        if let Ok(entries) = std::fs::read_dir(&dir) {
            left.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    left
}

/// Attack 3: while a Module's hook runs, an App's hook looks for it in /proc, and tries its
/// environment, its run directory, its settings and its KUBERNETES_PATCH_PATH. All refused;
/// the Module's hook returns exactly the operation it wrote.
#[tokio::test]
async fn another_principals_hook_cannot_reach_a_running_hook() {
    let Some(setup) = setup() else { return };
    let gate = setup.side.join("attack3-gate");
    let found = setup.side.join("attack3-module");
    let _ = std::fs::remove_file(&gate);
    let _ = std::fs::remove_file(&found);
    let module = package(
        setup,
        "module",
        &[(
            "secret.sh",
            &format!(
                "#!/bin/bash\n\
                 echo '{{\"operation\":\"Create\",\"object\":{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"mine\",\"namespace\":\"default\"}}}}}}' >> \"$KUBERNETES_PATCH_PATH\"\n\
                 echo \"$$ $KUBERNETES_PATCH_PATH $CONFIG_VALUES_PATH\" > {found}.tmp && mv {found}.tmp {found}\n\
                 for i in $(seq 400); do [ -e {gate} ] && exit 0; sleep 0.05; done\n\
                 exit 1\n",
                found = found.display(),
                gate = gate.display()
            ),
        )],
    );
    let app = package(
        setup,
        "app",
        &[(
            "snoop.sh",
            &format!(
                "#!/bin/bash\n\
                 read pid patch settings < {found}\n\
                 r() {{ if eval \"$1\" >/dev/null 2>&1; then echo -n \"$2=yes \"; else echo -n \"$2=no \"; fi; }}\n\
                 out=$( r 'cat /proc/$pid/environ' environ; r 'ls $(dirname $patch)' list; r 'cat $settings' settings; \
                   r 'echo {{\\\"operation\\\":\\\"Delete\\\",\\\"kind\\\":\\\"ClusterRole\\\",\\\"name\\\":\\\"admin\\\"}} >> $patch' patch; \
                   r 'kill -STOP $pid' signal; r 'cat /proc/$pid/cmdline' cmdline )\n\
                 touch {gate}\n\
                 printf '[{{\"op\":\"add\",\"path\":\"/seen\",\"value\":\"%s\"}}]' \"$out\" > \"$VALUES_JSON_PATCH_PATH\"\n",
                found = found.display(),
                gate = gate.display()
            ),
        )],
    );
    let mut module_sandbox = sandbox(1, &module);
    module_sandbox.files.push(RunDirFile {
        name: "extra".into(),
        contents: b"password: hunter2".to_vec(),
        env: None,
    });
    let module_run = tokio::spawn(async move {
        let hook = shell_hook(module.join("secret.sh"));
        let tmp = tempfile::tempdir().unwrap();
        let mut req = request(&hook, tmp.path());
        req.config_values = json!({"password": "hunter2"});
        req.sandbox = Some(module_sandbox);
        run(req).await
    });
    wait_for_file(&found, Duration::from_secs(10)).await;
    let app_out = run_in(&app, "snoop.sh", sandbox(2, &app))
        .await
        .expect("the app's hook runs");
    let module_out = module_run
        .await
        .unwrap()
        .expect("the module's hook succeeds");
    assert_eq!(
        seen(&app_out),
        "environ=no list=no settings=no patch=no signal=no cmdline=yes ",
        "only the command line (world-readable, and holding no secret) is visible"
    );
    assert_eq!(
        module_out.kubernetes_operations.len(),
        1,
        "the module's operations are its own: {:?}",
        module_out.kubernetes_operations
    );
}

/// Attack 4: a grandchild that leaves the hook's process group for berth's own (here: this
/// test process's) is dead when the run ends.
#[tokio::test]
async fn a_grandchild_in_berths_process_group_dies_with_the_run() {
    let Some(setup) = setup() else { return };
    let pids = setup.side.join("attack4-pids");
    let _ = std::fs::remove_file(&pids);
    let pkg = package(
        setup,
        "joiner",
        &[(
            "join.sh",
            &format!(
                "#!/bin/bash\n\
                 ( perl -e 'setpgrp(0, $ENV{{BERTH_PGID}}) or die \"setpgrp: $!\"; open(my $f, \">>\", \"{p}\"); print $f \"$$ \", getpgrp(), \"\\n\"; close $f; close STDOUT; close STDERR; sleep 1000' & )\n\
                 for i in $(seq 200); do [ -s {p} ] && exit 0; sleep 0.02; done\n\
                 exit 1\n",
                p = pids.display()
            ),
        )],
    );
    let hook = shell_hook(pkg.join("join.sh"));
    let tmp = tempfile::tempdir().unwrap();
    let mut req = request(&hook, tmp.path());
    let own_pgid = nix::unistd::getpgrp().as_raw();
    req.env = vec![("BERTH_PGID".into(), own_pgid.to_string())];
    req.sandbox = Some(sandbox(3, &pkg));
    run(req).await.expect("the hook succeeds");
    let text = std::fs::read_to_string(&pids).expect("the grandchild wrote its pid");
    let mut fields = text.split_whitespace();
    let (pid, pgid): (i32, i32) = (
        fields.next().unwrap().parse().unwrap(),
        fields.next().unwrap().parse().unwrap(),
    );
    assert_eq!(pgid, own_pgid, "it joined this process's group");
    assert!(!alive(pid), "the grandchild {pid} outlived its run");
}

/// Attack 10: a fork bomb stops at the package's process limit and a 1.5 GiB allocation at
/// its memory limit; each run fails naming the limit, and this process is unharmed.
#[tokio::test]
async fn fork_and_memory_bombs_stop_at_their_limits() {
    let Some(setup) = setup() else { return };
    let pkg = package(
        setup,
        "bombs",
        &[
            (
                "fork.sh",
                "#!/bin/sh\nfor i in $(seq 1500); do sleep 30 & done\necho all started\n",
            ),
            (
                "memory.py",
                "#!/usr/bin/python3\nb = bytearray(1536 * 1024 * 1024)\nprint('allocated', len(b))\n",
            ),
        ],
    );
    let mut bounded = sandbox(4, &pkg);
    bounded.limits = Limits {
        processes: 64,
        memory_bytes: 128 << 20,
        cpu_millis: 1000,
    };
    let fork = run_in(&pkg, "fork.sh", bounded.clone()).await.unwrap_err();
    assert!(
        matches!(&fork, RunError::Limit { .. })
            && fork
                .to_string()
                .contains("process limit (64 processes) (limits.processes)"),
        "{fork}"
    );
    let memory = run_in(&pkg, "memory.py", bounded).await.unwrap_err();
    assert!(
        matches!(&memory, RunError::Limit { .. })
            && memory
                .to_string()
                .contains("memory limit (128 MiB) (limits.memory)")
            && memory.to_string().contains("exit code 137"),
        "{memory}"
    );
    assert!(
        own_berth_cgroups(4).is_empty(),
        "the runs' cgroups are gone"
    );
}

/// Landlock: a confined hook reads its package and the system, writes its run directory and
/// the configured writable directory, and nothing else: not another package's files, not a
/// world-writable directory elsewhere.
#[tokio::test]
async fn a_hook_writes_only_its_run_directory_and_reads_only_its_package() {
    let Some(setup) = setup() else { return };
    let other = package(setup, "other-package", &[("data.sh", "#!/bin/sh\n")]);
    std::fs::write(other.join("secret.txt"), "other's").unwrap();
    std::fs::set_permissions(
        other.join("secret.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let open = setup.root.join("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let pkg = package(setup, "walled", &[]);
    std::fs::write(pkg.join("mine.txt"), "mine").unwrap();
    std::fs::set_permissions(pkg.join("mine.txt"), std::fs::Permissions::from_mode(0o644)).unwrap();
    script(
        &pkg,
        "walls.sh",
        &reporting(&format!(
            "r() {{ if eval \"$1\" >/dev/null 2>&1; then echo -n \"$2=yes \"; else echo -n \"$2=no \"; fi; }}; \
             r 'cat {mine}' own; r 'cat /etc/hostname' etc; r 'cat {secret}' other; r 'ls {other}' list-other; \
             r 'echo x > $TMPDIR/scratch' run-dir; r 'echo x > {open}/x' elsewhere; r 'echo x > /tmp/berth-landlock-$$' tmp; \
             r 'echo x > {side}/walls-$$' writable; r 'echo x > /dev/null' dev-null; r 'echo x >> {mine}' own-write",
            mine = pkg.join("mine.txt").display(),
            secret = other.join("secret.txt").display(),
            other = other.display(),
            open = open.display(),
            side = setup.side.display(),
        )),
    );
    let out = run_in(&pkg, "walls.sh", sandbox(5, &pkg))
        .await
        .expect("runs");
    assert_eq!(
        seen(&out),
        "own=yes etc=yes other=no list-other=no run-dir=yes elsewhere=no tmp=no writable=yes dev-null=yes own-write=no "
    );
    assert!(
        std::fs::read_dir(&open).unwrap().next().is_none(),
        "nothing was written elsewhere"
    );
}

/// A caller's files land in the run directory (the uid's, 0600, named by their variable);
/// a mounted one shows at its fixed path in the hook's own mount namespace only, hiding what
/// the directory held.
#[tokio::test]
async fn callers_files_and_mounts_reach_the_hook_alone() {
    let Some(setup) = setup() else { return };
    let target_dir = setup.root.join("mnt/serviceaccount");
    std::fs::create_dir_all(&target_dir).unwrap();
    std::fs::write(target_dir.join("worker-token"), "the worker's own").unwrap();
    let target = target_dir.join("token");
    let pkg = package(
        setup,
        "files",
        &[(
            "files.sh",
            &reporting(&format!(
                "cat \"$KUBECONFIG\"; stat -c '%u:%a' \"$KUBECONFIG\"; cat {target}; ls {dir}",
                target = target.display(),
                dir = target_dir.display()
            )),
        )],
    );
    let mut sb = sandbox(6, &pkg);
    sb.files = vec![
        RunDirFile {
            name: "kubeconfig".into(),
            contents: b"apiVersion: v1".to_vec(),
            env: Some("KUBECONFIG".into()),
        },
        RunDirFile {
            name: "token".into(),
            contents: b"principal-token".to_vec(),
            env: None,
        },
    ];
    sb.mounts = vec![Mount {
        file: "token".into(),
        target: target.clone(),
    }];
    let out = run_in(&pkg, "files.sh", sb.clone()).await.expect("runs");
    let uid = BASE + 6;
    assert_eq!(
        seen(&out),
        format!("apiVersion: v1{uid}:600 principal-tokentoken ")
    );
    // This process's namespace never saw the mount.
    assert!(!target.exists());
    assert_eq!(
        std::fs::read_to_string(target_dir.join("worker-token")).unwrap(),
        "the worker's own"
    );
    // Names that are berth's, or not plain, are refused before anything runs.
    sb.files[1].name = "values.json".into();
    let refused = run_in(&pkg, "files.sh", sb).await.unwrap_err();
    assert!(
        matches!(&refused, RunError::Prepare { .. }) && refused.to_string().contains("values.json"),
        "{refused}"
    );
}

/// Discovery's config queries and the settings check run as the principal too.
#[tokio::test]
async fn discovery_and_settings_checks_run_as_the_principal() {
    let Some(setup) = setup() else { return };
    let uid = BASE + 8;
    let pkg = package(
        setup,
        "queried",
        &[
            (
                "hooks/who.sh",
                &format!(
                    "#!/bin/sh\nif [ \"$(id -u)\" != {uid} ]; then echo \"ran as $(id -u)\" >&2; exit 1; fi\n\
                     echo '{{\"configVersion\":\"v1\",\"onStartup\":1}}'\n"
                ),
            ),
            ("hooks/batch", common::BATCH_HOOK),
        ],
    );
    let found = discover_all(
        &pkg.join("hooks"),
        Duration::from_secs(20),
        Some(&sandbox(8, &pkg)),
    )
    .await
    .expect("discovered as the principal");
    assert!(found.hooks.iter().any(|h| h.name == "who.sh"));
    let check = found
        .settings_check
        .expect("the batch hook checks settings");
    let settings = json!({"replicas": 0});
    let verdict = check_settings(SettingsCheckRequest {
        executable: &check,
        settings: &settings,
        env: Vec::new(),
        timeout: Duration::from_secs(20),
        cancel: CancellationToken::new(),
        tmp_dir: None,
        sandbox: Some(sandbox(8, &pkg)),
    })
    .await
    .expect("the check runs");
    assert!(!verdict.valid, "it read the settings as the principal");
}

/// Where hooks run as principals, a run without one is refused, and a principal past the
/// range fails naming the range.
#[tokio::test]
async fn runs_without_a_principal_or_past_the_range_are_refused() {
    let Some(setup) = setup() else { return };
    let pkg = package(setup, "nameless", &[("true.sh", "#!/bin/sh\n")]);
    let hook = shell_hook(pkg.join("true.sh"));
    let tmp = tempfile::tempdir().unwrap();
    let unnamed = run(request(&hook, tmp.path())).await.unwrap_err();
    assert!(unnamed.to_string().contains("names none"), "{unnamed}");
    let past = run_in(&pkg, "true.sh", sandbox(101, &pkg))
        .await
        .unwrap_err();
    assert!(
        past.to_string().contains("3100000-3100100") && past.to_string().contains("1 to 100"),
        "{past}"
    );
    assert_eq!(
        berth_hooks::principal_user(100),
        Ok(Some(HookUser {
            uid: BASE + 100,
            gid: BASE + 100
        }))
    );
}

/// `berth-hook-exec` itself: usage errors, a program it cannot run, and the uid-wide kill
/// (from a real uid the killed processes cannot signal).
#[tokio::test]
async fn the_helper_refuses_bad_usage_and_kills_a_uid() {
    let Some(_) = setup() else { return };
    let usage = std::process::Command::new(HELPER)
        .args(["--uid", "1", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(2));
    let missing = std::process::Command::new(HELPER)
        .args(["--", "/nonexistent/hook"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(126));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot run /nonexistent/hook"));

    let uid = (BASE + 50).to_string();
    let mut victim = std::process::Command::new(HELPER)
        .args(["--uid", &uid, "--gid", &uid, "--", "/bin/sleep", "1000"])
        .spawn()
        .unwrap();
    let pid = victim.id() as i32;
    // Wait until it runs as the uid.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let runs_as = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| {
                        l.strip_prefix("Uid:")
                            .map(|u| u.split_whitespace().next().map(str::to_owned))
                    })
                    .flatten()
            })
    };
    while runs_as(pid) != Some((BASE + 50).to_string()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the victim never became the uid"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let killed = std::process::Command::new(HELPER)
        .args([
            "--kill-uid",
            &uid,
            "--gid",
            &uid,
            "--ruid",
            &BASE.to_string(),
        ])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = victim.wait().unwrap();
    use std::os::unix::process::ExitStatusExt as _;
    assert_eq!(status.signal(), Some(9), "{status:?}");
}
