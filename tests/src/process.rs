//! Real berth processes for tests.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// How long a process may take to announce itself. Generous: the machine may be busy compiling.
const STARTUP_DEADLINE: Duration = Duration::from_secs(60);

/// Path of a workspace binary, next to the test executable's `deps/` directory (or next to a
/// bench binary, which lives beside the others).
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    if let Some(beside) = exe.parent().map(|d| d.join(name))
        && beside.exists()
    {
        return beside;
    }
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the binaries first with `cargo build --workspace --bins`",
        path.display()
    );
    path
}

/// A running berth process; killed when dropped.
pub struct Proc {
    pub name: String,
    /// The metrics address it announced (`metrics on ADDR`) before its announcement line.
    pub metrics: Option<String>,
    /// The view API address it announced (`views on ADDR`) before its announcement line.
    pub views: Option<String>,
    /// The address it announced (`listening on ADDR`), if it serves one.
    pub addr: Option<String>,
    child: Child,
}

/// Environment every process started from now on gets besides this one's (see [`child_env`]).
static CHILD_ENV: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// Gives every process this test starts from now on `key=value` in its environment (the
/// test's own environment stays as it is).
pub fn child_env(key: &str, value: &str) {
    CHILD_ENV
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((key.to_owned(), value.to_owned()));
}

impl Proc {
    /// Starts `name` with `args` and waits for its announcement line: `listening on ADDR` for
    /// servers, or any line starting with `announce` for the others.
    pub async fn start(name: &str, args: &[&str], announce: &str) -> anyhow::Result<Proc> {
        Proc::start_path(&binary(name), args, announce).await
    }

    /// Like [`Proc::start`], for the executable at `path` (e.g. a release build next to a
    /// benchmark binary).
    pub async fn start_path(path: &Path, args: &[&str], announce: &str) -> anyhow::Result<Proc> {
        let mut command = Command::new(path);
        command.args(args);
        Proc::start_command(command, announce).await
    }

    /// Like [`Proc::start`], with `cwd` as the process's working directory (relative paths in
    /// `args` are relative to it).
    pub async fn start_in(
        cwd: &Path,
        name: &str,
        args: &[&str],
        announce: &str,
    ) -> anyhow::Result<Proc> {
        let mut command = Command::new(binary(name));
        command.args(args).current_dir(cwd);
        Proc::start_command(command, announce).await
    }

    /// Like [`Proc::start`], for a command the caller prepared (its program, arguments,
    /// working directory, environment): the harness adds its environment (the hook side
    /// channel, `BERTH_TOKEN_FILE`, then [`child_env`]'s) only where the command does not set
    /// or remove a variable itself.
    pub async fn start_command(mut command: Command, announce: &str) -> anyhow::Result<Proc> {
        let name = Path::new(command.as_std().get_program())
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = name.as_str();
        let given: Vec<std::ffi::OsString> = command
            .as_std()
            .get_envs()
            .map(|(k, _)| k.to_owned())
            .collect();
        let mut env: Vec<(String, std::ffi::OsString)> = vec![
            // Workers and `berth up` let confined hooks write the tests' side channels.
            (
                "BERTH_HOOK_WRITABLE".into(),
                crate::hook_side_root().into_os_string(),
            ),
            // Gateways and `berth up` accept the harness's token (`journey::connect` sends
            // it).
            (
                "BERTH_TOKEN_FILE".into(),
                crate::api_token().file.clone().into_os_string(),
            ),
        ];
        env.extend(
            CHILD_ENV
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|(k, v)| (k.clone(), v.into())),
        );
        env.push((
            "BERTH_LOG".into(),
            std::env::var("BERTH_LOG")
                .unwrap_or_else(|_| "info".into())
                .into(),
        ));
        for (key, value) in env {
            if !given.iter().any(|g| *g == *key) {
                command.env(key, value);
            }
        }
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {name}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut metrics = None;
        let mut views = None;
        let first = tokio::time::timeout(STARTUP_DEADLINE, async {
            while let Some(line) = lines.next_line().await? {
                if let Some(addr) = line.strip_prefix("metrics on ") {
                    metrics = Some(addr.trim().to_owned());
                }
                if let Some(addr) = line.strip_prefix("views on ") {
                    views = Some(addr.trim().to_owned());
                }
                if line.starts_with(announce) {
                    return Ok::<_, std::io::Error>(Some(line));
                }
            }
            Ok(None)
        })
        .await
        .with_context(|| format!("{name} did not announce itself within {STARTUP_DEADLINE:?}"))??;
        let Some(line) = first else {
            bail!("{name} exited before announcing itself")
        };
        // Keep draining stdout so the process never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let addr = line
            .strip_prefix("listening on ")
            .map(|a| a.trim().to_owned());
        Ok(Proc {
            name: name.to_owned(),
            metrics,
            views,
            addr,
            child,
        })
    }

    /// The OS process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    pub fn endpoint(&self) -> String {
        format!(
            "http://{}",
            self.addr.as_deref().expect("a serving process")
        )
    }

    /// Kills the process with SIGKILL (it cannot clean up) and waits until it is gone.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// Stops the process with SIGTERM and waits for it to exit; SIGKILL after a grace period.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

fn sqlite(dir: &Path, name: &str) -> String {
    format!("sqlite://{}", dir.join(name).display())
}

/// Where the services of a [`SplitTopology`] keep their state (their `--database` URLs).
#[derive(Clone, Debug)]
pub struct Databases {
    pub queue: String,
    pub lifecycle: String,
    pub hookevent: String,
}

impl Databases {
    /// A database per service on the PostgreSQL server `pg` (each migrates its own schema and
    /// keeps its own migration history, as in docker-compose.yml).
    pub async fn on_postgres(pg: &berth_testpg::PgServer) -> Databases {
        Databases {
            queue: pg.create_database("berth_queue").await,
            lifecycle: pg.create_database("berth_lifecycle").await,
            hookevent: pg.create_database("berth_hookevent").await,
        }
    }

    /// A SQLite file per service in `dir`.
    pub fn sqlite(dir: &Path) -> Databases {
        Databases {
            queue: sqlite(dir, "queue.db"),
            lifecycle: sqlite(dir, "lifecycle.db"),
            hookevent: sqlite(dir, "hookevent.db"),
        }
    }
}

/// `--tls-ca CA --tls-cert CERT --tls-key KEY` for `role`'s identity in `certs` (a directory
/// `berth certs` or [`berth_runtime::tls::generate`] wrote).
pub fn tls_args(certs: &Path, role: berth_runtime::Role) -> Vec<String> {
    let files = berth_runtime::tls::CertFiles::new(certs, role);
    [
        ("--tls-ca", files.ca),
        ("--tls-cert", files.cert),
        ("--tls-key", files.key),
    ]
    .into_iter()
    .flat_map(|(flag, path)| [flag.to_owned(), path.display().to_string()])
    .collect()
}

/// `--record-key-file <dir>/record.key` for `berth-release`: the key its release records are
/// authenticated with, generated in `dir` the first time (every replica started with the same
/// `dir` shares it, as replicas must).
pub fn record_key_args(dir: &Path) -> anyhow::Result<Vec<String>> {
    let path = dir.join("record.key");
    berth_release::record::RecordKey::load_or_generate(&path)?;
    Ok(vec![
        "--record-key-file".to_owned(),
        path.display().to_string(),
    ])
}

/// A namespace of its own for the shard Leases of the hookevent and release replicas one test
/// starts (`--lease-namespace`): tests sharing a real cluster must not share shards. Deleted
/// with the returned guard on a real cluster.
pub async fn lease_namespace(kubeconfig: &Path) -> anyhow::Result<crate::TestNamespace> {
    let client = crate::cluster::client_for(kubeconfig).await?;
    Ok(crate::TestNamespace::create(&client, "leases").await?)
}

/// `args` followed by `extra`, as the `&str`s [`Proc::start`] takes.
pub(crate) fn with<'a>(args: &[&'a str], extra: &'a [String]) -> Vec<&'a str> {
    args.iter()
        .copied()
        .chain(extra.iter().map(String::as_str))
        .collect()
}

/// A repositories file in `dir` with the harness's roots ([`crate::workspace_root`] and
/// [`crate::temp_repo_root`]) and `entries` (YAML list items, e.g. `"- name: x\n  directory: /y\n"`)
/// as its named repositories.
pub fn repositories_file(dir: &Path, entries: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join("repositories.yaml");
    let body = if entries.is_empty() {
        "repositories: []\n".to_owned()
    } else {
        format!("repositories:\n{entries}")
    };
    std::fs::write(
        &path,
        format!(
            "{body}roots:\n- {}\n- {}\n",
            crate::workspace_root().display(),
            crate::temp_repo_root().display()
        ),
    )?;
    Ok(path)
}

/// Every service as its own process, wired over gRPC on OS-chosen ports, with mutual TLS
/// between them (a CA and a certificate per role in `<dir>/certs`). Each serves its metrics on
/// an OS-chosen port too (`Proc::metrics`).
pub struct SplitTopology {
    pub gateway: Proc,
    /// The namespace of hookevent's and release's shard Leases (`--lease-namespace`), the
    /// topology's own.
    pub lease_namespace: crate::TestNamespace,
    /// The CA and the certificates of every role.
    pub certs: PathBuf,
    others: Vec<Proc>,
    /// Lifecycle's command line, to start it again (see [`SplitTopology::restart_lifecycle`]).
    lifecycle_args: Vec<String>,
    /// The first worker's command line without its `--cache-dir`, for further workers (see
    /// [`SplitTopology::add_worker`]).
    worker_args: Vec<String>,
    /// The directory the topology keeps its state in (certificates, package caches).
    dir: PathBuf,
    /// Workers started so far.
    workers: usize,
}

impl SplitTopology {
    pub async fn start(kubeconfig: &Path, dir: &Path) -> anyhow::Result<SplitTopology> {
        SplitTopology::start_with(kubeconfig, dir, &[]).await
    }

    /// Like [`SplitTopology::start`], with `worker_args` appended to the worker's command line
    /// (e.g. `["--hook-timeout", "2"]`).
    pub async fn start_with(
        kubeconfig: &Path,
        dir: &Path,
        worker_args: &[&str],
    ) -> anyhow::Result<SplitTopology> {
        let repositories = repositories_file(dir, "")?;
        SplitTopology::start_configured(kubeconfig, dir, worker_args, &repositories).await
    }

    /// Like [`SplitTopology::start_with`], with `repositories` (a file, see
    /// [`repositories_file`]) given to lifecycle, and to the worker unless `worker_args` give
    /// it `--repositories` of its own.
    pub async fn start_configured(
        kubeconfig: &Path,
        dir: &Path,
        worker_args: &[&str],
        repositories: &Path,
    ) -> anyhow::Result<SplitTopology> {
        SplitTopology::start_full(
            kubeconfig,
            dir,
            worker_args,
            repositories,
            &Databases::sqlite(dir),
        )
        .await
    }

    /// Like [`SplitTopology::start`], with the services' state in `databases` (e.g. databases
    /// on one PostgreSQL server).
    pub async fn start_on(
        kubeconfig: &Path,
        dir: &Path,
        databases: &Databases,
    ) -> anyhow::Result<SplitTopology> {
        let repositories = repositories_file(dir, "")?;
        SplitTopology::start_full(kubeconfig, dir, &[], &repositories, databases).await
    }

    /// Everything configurable at once: `worker_args`, `repositories` (see
    /// [`SplitTopology::start_configured`]) and `databases` (see [`SplitTopology::start_on`]).
    pub async fn start_full(
        kubeconfig: &Path,
        dir: &Path,
        worker_args: &[&str],
        repositories: &Path,
        databases: &Databases,
    ) -> anyhow::Result<SplitTopology> {
        use berth_runtime::Role;
        let repositories = repositories.display().to_string();
        let any = "127.0.0.1:0";
        let certs = dir.join("certs");
        berth_runtime::tls::generate(&certs, &[])?;
        // Every service's identity, and its metrics on a port of its own.
        let tls = |role| {
            let mut args = tls_args(&certs, role);
            args.extend(["--metrics-listen".to_owned(), any.to_owned()]);
            args
        };
        let broker = Proc::start(
            "berth-queue",
            &with(
                &["serve", "--listen", any, "--database", &databases.queue],
                &tls(Role::Broker),
            ),
            "listening on ",
        )
        .await?;
        let b = broker.endpoint();
        let lifecycle_args: Vec<String> = [
            "--listen",
            any,
            "--database",
            &databases.lifecycle,
            "--broker",
            &b,
            "--repositories",
            &repositories,
        ]
        .into_iter()
        .map(str::to_owned)
        .chain(tls(Role::Lifecycle))
        .collect();
        let lifecycle = Proc::start(
            "berth-lifecycle",
            &with(&[], &lifecycle_args),
            "listening on ",
        )
        .await?;
        let kc = kubeconfig.display().to_string();
        let l = lifecycle.endpoint();
        let lease_namespace = lease_namespace(kubeconfig).await?;
        let hookevent = Proc::start(
            "berth-hookevent",
            &with(
                &[
                    "--listen",
                    any,
                    "--database",
                    &databases.hookevent,
                    "--broker",
                    &b,
                    "--lifecycle",
                    &l,
                    "--kubeconfig",
                    &kc,
                    // The API server (the dev cluster, or a real control plane on this
                    // machine) reaches the webhook server on loopback.
                    "--webhook-listen",
                    any,
                    "--lease-namespace",
                    &lease_namespace,
                ],
                &tls(Role::Hookevent),
            ),
            "listening on ",
        )
        .await?;
        let mut release_args = tls(Role::Release);
        release_args.extend(record_key_args(&certs)?);
        let release = Proc::start(
            "berth-release",
            &with(
                &[
                    "--listen",
                    any,
                    "--lifecycle",
                    &l,
                    "--kubeconfig",
                    &kc,
                    "--lease-namespace",
                    &lease_namespace,
                ],
                &release_args,
            ),
            "listening on ",
        )
        .await?;
        let (r, h) = (release.endpoint(), hookevent.endpoint());
        let mut args = vec![
            "work",
            "--broker",
            &b,
            "--lifecycle",
            &l,
            "--release",
            &r,
            "--hookevent",
            &h,
        ];
        // The worker reads the same file unless `worker_args` name one of its own.
        if !worker_args.contains(&"--repositories") {
            args.extend(["--repositories", &repositories]);
        }
        let worker_tls = tls(Role::Worker);
        args.extend(worker_tls.iter().map(String::as_str));
        args.extend_from_slice(worker_args);
        let worker_args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let worker = start_worker(&worker_args, &dir.join("packages")).await?;
        let gateway = Proc::start(
            "berth-gateway",
            &with(
                &["--listen", any, "--lifecycle", &lifecycle.endpoint()],
                &tls(Role::Gateway),
            ),
            "listening on ",
        )
        .await?;
        Ok(SplitTopology {
            gateway,
            lease_namespace,
            certs,
            others: vec![worker, release, hookevent, lifecycle, broker],
            lifecycle_args,
            worker_args,
            dir: dir.to_owned(),
            workers: 1,
        })
    }

    /// Starts one more worker with the first one's command line and a package cache of its
    /// own (`<dir>/packages-<n>`); it leases tasks from the same broker.
    pub async fn add_worker(&mut self) -> anyhow::Result<()> {
        let cache = self.dir.join(format!("packages-{}", self.workers + 1));
        let worker = start_worker(&self.worker_args, &cache).await?;
        self.others.push(worker);
        self.workers += 1;
        Ok(())
    }

    /// Every process of the topology with its role: the gateway, the first worker, release,
    /// hookevent, lifecycle, the broker, and the added workers.
    pub fn procs(&self) -> impl Iterator<Item = (&'static str, &Proc)> {
        const ROLES: [&str; FIRST_ADDED_WORKER] =
            ["worker", "release", "hookevent", "lifecycle", "broker"];
        std::iter::once(("gateway", &self.gateway)).chain(
            self.others
                .iter()
                .enumerate()
                .map(|(i, p)| (ROLES.get(i).copied().unwrap_or("worker"), p)),
        )
    }

    /// Stops lifecycle with SIGTERM, waits for it to exit, and starts it again with the same
    /// command line on the address it had (the other services keep calling it there).
    pub async fn restart_lifecycle(&mut self) -> anyhow::Result<()> {
        const LIFECYCLE: usize = 3;
        let old = self.others.remove(LIFECYCLE);
        let addr = old.addr.clone().context("lifecycle announced no address")?;
        old.stop().await;
        let mut args = self.lifecycle_args.clone();
        let listen = args
            .iter()
            .position(|a| a == "--listen")
            .context("lifecycle's --listen")?;
        args[listen + 1] = addr.clone();
        let new = Proc::start("berth-lifecycle", &with(&[], &args), "listening on ").await?;
        anyhow::ensure!(
            new.addr.as_deref() == Some(addr.as_str()),
            "lifecycle came back on {:?}, not {addr}",
            new.addr
        );
        self.others.insert(LIFECYCLE, new);
        Ok(())
    }

    /// The queue worker.
    pub fn worker(&self) -> &Proc {
        &self.others[0]
    }

    /// The release service.
    pub fn release(&self) -> &Proc {
        &self.others[1]
    }

    /// The hookevent service.
    pub fn hookevent(&self) -> &Proc {
        &self.others[2]
    }

    /// The lifecycle service.
    pub fn lifecycle(&self) -> &Proc {
        &self.others[3]
    }

    /// The queue broker.
    pub fn broker(&self) -> &Proc {
        &self.others[4]
    }

    /// The OS process id of the service binary `name` (e.g. `berth-lifecycle`), while it runs.
    pub fn pid_of(&self, name: &str) -> Option<u32> {
        self.others.iter().find(|p| p.name == name)?.pid()
    }

    pub async fn stop(mut self) {
        self.gateway.stop().await;
        // The added workers first, while the services they call are still there.
        let added = self.others.split_off(FIRST_ADDED_WORKER);
        for p in added.into_iter().chain(self.others) {
            p.stop().await;
        }
    }
}

/// Where [`SplitTopology::add_worker`] puts the workers it starts in `others` (after the
/// first worker, release, hookevent, lifecycle and the broker).
const FIRST_ADDED_WORKER: usize = 5;

/// `berth-queue work` (built by berth-worker: berth's task handlers on the queue's runtime)
/// with `args` and its package cache in `cache`.
async fn start_worker(args: &[String], cache: &Path) -> anyhow::Result<Proc> {
    let cache = cache.display().to_string();
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(["--cache-dir", &cache]);
    Proc::start("berth-queue", &args, "worker ").await
}

/// `berth up` as one process.
pub struct AllInOne {
    pub proc: Proc,
    pub kubeconfig: PathBuf,
    /// The label (key, value) that makes a berth.io resource this `berth up`'s: its controller
    /// watches only resources carrying it (`--watch-label-selector`), so the `berth up`s of
    /// tests running at once on one real cluster leave each other's resources alone.
    pub instance: (String, String),
}

impl AllInOne {
    /// Starts `berth up` in `data_dir`, against `kubeconfig` or its own embedded dev cluster.
    /// Its metrics are served on an OS-chosen port (`proc.metrics`). Its repository
    /// roots are [`crate::workspace_root`] and [`crate::temp_repo_root`].
    pub async fn start(data_dir: &Path, kubeconfig: Option<&Path>) -> anyhow::Result<AllInOne> {
        AllInOne::start_with(data_dir, kubeconfig, &[]).await
    }

    /// Like [`AllInOne::start`], with `extra` arguments (e.g. `--repository NAME=SOURCE`).
    pub async fn start_with(
        data_dir: &Path,
        kubeconfig: Option<&Path>,
        extra: &[&str],
    ) -> anyhow::Result<AllInOne> {
        let dd = data_dir.display().to_string();
        let instance = (
            "berth.io/test-instance".to_owned(),
            uuid::Uuid::new_v4().simple().to_string()[..12].to_owned(),
        );
        let selector = format!("{}={}", instance.0, instance.1);
        let (workspace, temp) = (
            crate::workspace_root().display().to_string(),
            crate::temp_repo_root().display().to_string(),
        );
        let mut args = vec![
            "up",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            &dd,
            "--metrics-listen",
            "127.0.0.1:0",
            "--views-listen",
            "127.0.0.1:0",
            "--repository-root",
            &workspace,
            "--repository-root",
            &temp,
            "--watch-label-selector",
            &selector,
        ];
        args.extend_from_slice(extra);
        let kc;
        if let Some(k) = kubeconfig {
            kc = k.display().to_string();
            // The real cluster runs on this machine: it reaches a loopback webhook.
            args.extend([
                "--kubeconfig",
                &kc,
                "--controller-webhook-listen",
                "127.0.0.1:0",
            ]);
        }
        let proc = Proc::start("berth", &args, "listening on ").await?;
        let kubeconfig = kubeconfig
            .map(Path::to_path_buf)
            .unwrap_or_else(|| data_dir.join("kubeconfig"));
        Ok(AllInOne {
            proc,
            kubeconfig,
            instance,
        })
    }
}
