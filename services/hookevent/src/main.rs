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
    tls: berth_runtime::TlsArgs,
    #[command(flatten)]
    metrics: berth_runtime::MetricsArgs,
    #[arg(long, env = "BERTH_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: berth_runtime::LogFormat,
    #[command(flatten)]
    jq: berth_hookevent::jq::JqArgs,
    #[command(flatten)]
    webhook: berth_hookevent::webhook::WebhookArgs,
    /// How many shards the packages are shared out in (a package's shard is a stable hash of
    /// its name modulo this). Every replica must be given the same number.
    #[arg(long, env = "BERTH_HOOKEVENT_SHARDS", default_value_t = berth_hookevent::shards::DEFAULT_SHARDS)]
    shards: u32,
    /// The namespace of the shard Leases (default: the pod's namespace, else `default`).
    #[arg(long, env = "BERTH_HOOKEVENT_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// This replica's identity, written as the holderIdentity of the shard Leases it holds
    /// (default: the host name and a random suffix).
    #[arg(long, env = "BERTH_HOOKEVENT_REPLICA_ID")]
    replica_id: Option<String>,
    /// How long a shard Lease stays valid after its holder last renewed it, in seconds: a
    /// dead replica's shards are taken over after this.
    #[arg(
        long,
        env = "BERTH_HOOKEVENT_LEASE_DURATION_SECS",
        default_value_t = 15
    )]
    lease_duration_secs: u64,
    /// How often a replica renews the shard Leases it holds, and tries for the others, in
    /// seconds (shorter than the lease duration).
    #[arg(long, env = "BERTH_HOOKEVENT_LEASE_RENEW_SECS", default_value_t = 5)]
    lease_renew_secs: u64,
    /// The gRPC endpoint the other replicas forward this replica's packages' calls to
    /// (default: `http://$POD_IP:<listen port>`, else the listen address, loopback when it
    /// is unspecified).
    #[arg(long, env = "BERTH_HOOKEVENT_ADVERTISE_ENDPOINT")]
    advertise_endpoint: Option<String>,
}

/// The endpoint other replicas reach this one at, when `--advertise-endpoint` is not given.
fn default_advertise(listen: std::net::SocketAddr) -> String {
    let port = listen.port();
    if let Ok(ip) = std::env::var("POD_IP")
        && let Ok(ip) = ip.parse::<std::net::IpAddr>()
    {
        return format!("http://{}", std::net::SocketAddr::new(ip, port));
    }
    let ip = match listen.ip() {
        ip if ip.is_unspecified() => std::net::IpAddr::from([127, 0, 0, 1]),
        ip => ip,
    };
    format!("http://{}", std::net::SocketAddr::new(ip, port))
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
    let _telemetry = berth_runtime::init("berth-hookevent", args.log_format);
    berth_sql::ensure_sqlite_dir(&args.database)?;
    let tls = args.tls.load(Some(berth_runtime::Role::Hookevent))?;
    let metrics_listener = args.metrics.bind().await?;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    let local = listener.local_addr()?;
    let shards = berth_hookevent::shards::ShardConfig {
        shards: args.shards,
        leases: Some(berth_hookevent::shards::ShardLeases {
            names: berth_hookevent::shards::NAMES,
            namespace: args
                .lease_namespace
                .clone()
                .unwrap_or_else(berth_hookevent::shards::default_namespace),
            lease: berth_lease::LeaseConfig {
                identity: args
                    .replica_id
                    .clone()
                    .unwrap_or_else(|| berth_lease::default_identity("berth-hookevent")),
                duration: std::time::Duration::from_secs(args.lease_duration_secs),
                renew: std::time::Duration::from_secs(args.lease_renew_secs),
            },
            advertise: Some(
                args.advertise_endpoint
                    .clone()
                    .unwrap_or_else(|| default_advertise(local)),
            ),
        }),
    };
    shards.check().map_err(|e| anyhow::anyhow!("{e}"))?;
    println!("listening on {local}");
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(berth_runtime::shutdown_on_signal(shutdown.clone()));
    let metrics = berth_runtime::Metrics::default();
    berth_runtime::metrics::spawn_server(&metrics, metrics_listener, shutdown.clone());
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
            shards,
        },
        listener,
        shutdown,
    )
    .await?;
    Ok(())
}
