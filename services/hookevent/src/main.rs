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
    /// `sqlite://PATH` of the hookevent database.
    #[arg(
        long,
        env = "BERTH_HOOKEVENT_DATABASE",
        default_value = "sqlite://.berth/hookevent.db"
    )]
    database: String,
    /// The queue broker's gRPC endpoint.
    #[arg(long, env = "BERTH_BROKER", default_value = "http://127.0.0.1:7071")]
    broker: String,
    /// Kubeconfig of the cluster kubernetes bindings watch; default: in-cluster or `KUBECONFIG`.
    #[arg(long, env = "BERTH_KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    #[command(flatten)]
    tls: berth_telemetry::TlsArgs,
    #[arg(long, env = "BERTH_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: berth_telemetry::LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = berth_telemetry::init("berth-hookevent", args.log_format);
    berth_telemetry::ensure_sqlite_dir(&args.database)?;
    let tls = args.tls.load(Some(berth_telemetry::Role::Hookevent))?;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(berth_telemetry::shutdown_on_signal(shutdown.clone()));
    berth_hookevent::run(
        berth_hookevent::Config {
            database_url: args.database,
            broker_endpoint: args.broker,
            kubeconfig: args.kubeconfig,
            tls,
        },
        listener,
        shutdown,
    )
    .await?;
    Ok(())
}
