//! `berth-hookevent`: the hookevent service as its own process.

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "berth-hookevent",
    about = "berth hookevent service: schedule (and watch) bindings into HookRun tasks"
)]
struct Args {
    /// Address to serve gRPC on.
    #[arg(long, env = "BERTH_HOOKEVENT_LISTEN", default_value = "127.0.0.1:7073")]
    listen: std::net::SocketAddr,
    /// The hookevent database: `sqlite://PATH` (created when missing) or
    /// `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` (see the README's "Databases").
    #[arg(
        long,
        env = "BERTH_HOOKEVENT_DATABASE",
        default_value = "sqlite://.berth/hookevent.db"
    )]
    database: String,
    /// The queue broker's gRPC endpoint.
    #[arg(long, env = "BERTH_BROKER", default_value = "http://127.0.0.1:7071")]
    broker: String,
    /// Lifecycle's gRPC endpoint, asked what a package is (apps are confined to their
    /// namespace).
    #[arg(long, env = "BERTH_LIFECYCLE", default_value = "http://127.0.0.1:7072")]
    lifecycle: String,
    /// Kubeconfig of the cluster kubernetes bindings watch; default: in-cluster or `KUBECONFIG`.
    #[arg(long, env = "BERTH_KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    #[command(flatten)]
    tls: berth_telemetry::TlsArgs,
    #[command(flatten)]
    metrics: berth_telemetry::MetricsArgs,
    #[arg(long, env = "BERTH_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: berth_telemetry::LogFormat,
    #[command(flatten)]
    jq: berth_hookevent::jq::JqArgs,
    #[command(flatten)]
    webhook: berth_hookevent::webhook::WebhookArgs,
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    // A jq evaluator (this executable, started by the service itself) serves before anything
    // else starts.
    if let Some(code) = berth_hookevent::run_jq_evaluator_if_requested() {
        return Ok(code);
    }
    tokio::runtime::Runtime::new()?.block_on(serve(Args::parse()))?;
    Ok(std::process::ExitCode::SUCCESS)
}

async fn serve(args: Args) -> anyhow::Result<()> {
    let _telemetry = berth_telemetry::init("berth-hookevent", args.log_format);
    berth_telemetry::ensure_sqlite_dir(&args.database)?;
    let tls = args.tls.load(Some(berth_telemetry::Role::Hookevent))?;
    let metrics_listener = args.metrics.bind().await?;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(berth_telemetry::shutdown_on_signal(shutdown.clone()));
    let metrics = berth_telemetry::Metrics::default();
    berth_telemetry::metrics::spawn_server(&metrics, metrics_listener, shutdown.clone());
    berth_hookevent::run(
        berth_hookevent::Config {
            database_url: args.database,
            broker_endpoint: args.broker,
            kubeconfig: args.kubeconfig,
            lifecycle_endpoint: args.lifecycle,
            tls,
            jq: args.jq.limits(),
            webhook: args.webhook.listen(),
            metrics,
        },
        listener,
        shutdown,
    )
    .await?;
    Ok(())
}
