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
    #[command(flatten)]
    tls: berth_telemetry::TlsArgs,
    #[command(flatten)]
    metrics: berth_telemetry::MetricsArgs,
    #[arg(long, env = "BERTH_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: berth_telemetry::LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = berth_telemetry::init("berth-lifecycle", args.log_format);
    berth_telemetry::ensure_sqlite_dir(&args.database)?;
    let tls = args.tls.load(Some(berth_telemetry::Role::Lifecycle))?;
    let repositories = match &args.repositories {
        Some(path) => berth_package::Repositories::load(path)?,
        None => berth_package::Repositories::default(),
    };
    let metrics_listener = args.metrics.bind().await?;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(berth_telemetry::shutdown_on_signal(shutdown.clone()));
    let metrics = berth_telemetry::Metrics::default();
    berth_telemetry::metrics::spawn_server(&metrics, metrics_listener, shutdown.clone());
    berth_lifecycle::run(
        berth_lifecycle::Config {
            database_url: args.database,
            broker_endpoint: args.broker,
            tls,
            repositories: std::sync::Arc::new(repositories),
            metrics,
        },
        listener,
        shutdown,
    )
    .await?;
    Ok(())
}
