//! `berth-queue`: the task queue broker (`serve`, berth-queue's broker) or a worker running
//! berth's tasks (`work`) as its own process. Built by berth-worker, which has both roles.

use std::path::PathBuf;
use std::time::Duration;

use berth_queue::cli::ServeArgs;
use berth_queue::worker::WorkerConfig;
use berth_worker::TaskConfig;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "berth-queue",
    about = "berth task queue: the broker and its workers"
)]
struct Args {
    #[arg(
        long,
        env = "BERTH_LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    log_format: berth_runtime::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the broker.
    Serve(ServeArgs),
    /// Run a worker that leases and executes tasks.
    Work {
        #[arg(long, env = "BERTH_BROKER", default_value = "http://127.0.0.1:7071")]
        broker: String,
        #[arg(long, env = "BERTH_LIFECYCLE", default_value = "http://127.0.0.1:7072")]
        lifecycle: String,
        #[arg(long, env = "BERTH_RELEASE", default_value = "http://127.0.0.1:7074")]
        release: String,
        #[arg(long, env = "BERTH_HOOKEVENT", default_value = "http://127.0.0.1:7073")]
        hookevent: String,
        /// Package cache of this worker.
        #[arg(long, env = "BERTH_CACHE_DIR", default_value = ".berth/packages")]
        cache_dir: PathBuf,
        /// Tasks (of different queues) run at once.
        #[arg(long, env = "BERTH_WORKER_CONCURRENCY", default_value_t = 4)]
        concurrency: usize,
        /// Seconds a hook may run before its process group is killed.
        #[arg(long, env = "BERTH_HOOK_TIMEOUT", default_value_t = 300)]
        hook_timeout: u64,
        /// Task durations and the metrics hooks write.
        #[command(flatten)]
        metrics: berth_runtime::MetricsArgs,
        /// Seconds a Run waits for the release to become ready before failing (and retrying).
        #[arg(long, env = "BERTH_READY_TIMEOUT", default_value_t = 300)]
        ready_timeout: u64,
        /// Directory for hook runs' temporary files (default: the system temp directory). Put
        /// it on a tmpfs: creating those files on a disk is most of a hook's start time.
        #[arg(long, env = "BERTH_HOOK_TMP_DIR")]
        hook_tmp_dir: Option<PathBuf>,
        /// The repositories file (the same as lifecycle's): where the repositories an Update
        /// names are.
        #[arg(long, env = "BERTH_REPOSITORIES")]
        repositories: Option<PathBuf>,
        #[command(flatten)]
        tls: berth_runtime::TlsArgs,
        /// Worker id in leases and Dump (default: random).
        #[arg(long, env = "BERTH_WORKER_ID")]
        id: Option<String>,
        /// How hooks are confined. The cache directory and the hook tmp directory must be
        /// reachable (every parent searchable) by the hooks' uids, or the worker refuses to
        /// start.
        #[command(flatten)]
        isolation: Box<berth_worker::HookIsolationArgs>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // One binary, two roles; each traces as the service it is.
    let service = match args.command {
        Command::Serve(_) => berth_runtime::Role::Broker.service_name(),
        Command::Work { .. } => berth_runtime::Role::Worker.service_name(),
    };
    let _telemetry = berth_runtime::init(service, args.log_format);
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(berth_runtime::shutdown_on_signal(shutdown.clone()));
    match args.command {
        Command::Serve(serve) => berth_queue::cli::serve(serve, shutdown).await?,
        Command::Work {
            broker,
            lifecycle,
            release,
            hookevent,
            cache_dir,
            concurrency,
            hook_timeout,
            ready_timeout,
            id,
            metrics,
            hook_tmp_dir,
            repositories,
            tls,
            isolation,
        } => {
            let repositories = match &repositories {
                Some(path) => berth_package::Repositories::load(path)?,
                None => berth_package::Repositories::default(),
            };
            let tls = tls.load(Some(berth_runtime::Role::Worker))?;
            std::fs::create_dir_all(&cache_dir)?;
            if let Some(dir) = &hook_tmp_dir {
                std::fs::create_dir_all(dir)?;
            }
            // As root, each package instance's hooks run as a uid of its own, which must
            // reach the package cache and the runs' files.
            let tmp = hook_tmp_dir.clone().unwrap_or_else(std::env::temp_dir);
            isolation
                .apply(
                    &tmp,
                    &[("--cache-dir", &cache_dir), ("--hook-tmp-dir", &tmp)],
                )
                .map_err(|e| anyhow::anyhow!(e))?;
            let tasks = TaskConfig {
                lifecycle_endpoint: lifecycle,
                release_endpoint: release,
                hookevent_endpoint: hookevent,
                cache_dir,
                repositories: std::sync::Arc::new(repositories),
                hook_timeout: Duration::from_secs(hook_timeout),
                ready_timeout: Duration::from_secs(ready_timeout),
                hook_tmp_dir,
                tls,
                hook_limit_caps: isolation.caps(),
            };
            let mut config = WorkerConfig {
                concurrency,
                ..Default::default()
            };
            if let Some(id) = id {
                config.id = id;
            }
            // The metrics line comes first: harnesses wait for `worker ` and may stop reading.
            let metrics_listener = metrics.bind().await?;
            println!("worker {} started", config.id);
            let metrics = berth_runtime::Metrics::default();
            berth_runtime::metrics::spawn_server(&metrics, metrics_listener, shutdown.clone());
            berth_worker::process::work(&broker, tasks, config, &metrics, shutdown).await?;
        }
    }
    Ok(())
}
