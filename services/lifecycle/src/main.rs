//! `berth-lifecycle`: the lifecycle service as its own process.

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "berth-lifecycle",
    about = "berth lifecycle service: package state, generations, task flows"
)]
struct Args {
    /// Address to serve gRPC on.
    #[arg(long, env = "BERTH_LIFECYCLE_LISTEN", default_value = "127.0.0.1:7072")]
    listen: std::net::SocketAddr,
    /// The lifecycle database: `sqlite://PATH` (created when missing) or
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` (see the README's "Databases").
    #[arg(
        long,
        env = "BERTH_LIFECYCLE_DATABASE",
        default_value = "sqlite://.berth/lifecycle.db"
    )]
    database: String,
    /// The queue broker's gRPC endpoint.
    #[arg(long, env = "BERTH_BROKER", default_value = "http://127.0.0.1:7071")]
    broker: String,
    /// The repositories file: the named repositories and repository roots an Update may name
    /// (see the README's "Repositories"). Without it, every Update is refused.
    #[arg(long, env = "BERTH_REPOSITORIES")]
    repositories: Option<std::path::PathBuf>,
    /// How long a ValidateSettings, or an Update changing a loaded package's settings, waits
    /// for a worker to run the package's settings check and plan the install (seconds); with
    /// no answer by then only the settings schema is checked.
    #[arg(long, env = "BERTH_VALIDATION_TIMEOUT", default_value_t = 30)]
    validation_timeout: u64,
    #[command(flatten)]
    tls: berth_runtime::TlsArgs,
    #[command(flatten)]
    metrics: berth_runtime::MetricsArgs,
    #[arg(long, env = "BERTH_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: berth_runtime::LogFormat,
    #[command(flatten)]
    jq: berth_jq::JqArgs,
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    // A jq evaluator (this executable, started by the service itself to run settings
    // conversions) serves before anything else starts.
    if let Some(code) = berth_jq::run_if_requested() {
        return Ok(code);
    }
    tokio::runtime::Runtime::new()?.block_on(serve(Args::parse()))?;
    Ok(std::process::ExitCode::SUCCESS)
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let _telemetry = berth_runtime::init("berth-lifecycle", args.log_format);
    berth_sql::ensure_sqlite_dir(&args.database)?;
    let tls = args.tls.load(Some(berth_runtime::Role::Lifecycle))?;
    let repositories = match &args.repositories {
        Some(path) => berth_package::Repositories::load(path)?,
        None => berth_package::Repositories::default(),
    };
    let metrics_listener = args.metrics.bind().await?;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(berth_runtime::shutdown_on_signal(shutdown.clone()));
    let metrics = berth_runtime::Metrics::default();
    berth_runtime::metrics::spawn_server(&metrics, metrics_listener, shutdown.clone());
    berth_lifecycle::run(
        berth_lifecycle::Config {
            database_url: args.database,
            broker_endpoint: args.broker,
            tls,
            repositories: std::sync::Arc::new(repositories),
            validation_wait: std::time::Duration::from_secs(args.validation_timeout),
            jq: args.jq.limits(),
            metrics,
        },
        listener,
        shutdown,
    )
    .await?;
    Ok(())
}
