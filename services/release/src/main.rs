//! `berth-release`: the release service as its own process.

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "berth-release",
    about = "berth release service: render, apply, record, uninstall"
)]
struct Args {
    #[arg(long, env = "BERTH_RELEASE_LISTEN", default_value = "127.0.0.1:7074")]
    listen: std::net::SocketAddr,
    /// Kubeconfig of the cluster to manage (default: in-cluster, KUBECONFIG or ~/.kube/config).
    #[arg(long, env = "BERTH_KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    /// Release records kept per release, as `helm upgrade --history-max` (at least 1).
    #[arg(long, env = "BERTH_RELEASE_HISTORY_MAX", default_value_t = berth_release::manager::HISTORY_MAX)]
    history_max: usize,
    /// Lifecycle's gRPC endpoint, asked what a request's package is (Apps are confined to
    /// their namespace).
    #[arg(long, env = "BERTH_LIFECYCLE", default_value = "http://127.0.0.1:7072")]
    lifecycle: String,
    /// File holding the key release records are authenticated with (at least 32 bytes, e.g.
    /// `openssl rand -hex 32`). Every replica of an installation needs the same key, kept
    /// across restarts and upgrades: records made with another key are not berth's.
    #[arg(long, env = "BERTH_RECORD_KEY_FILE")]
    record_key_file: std::path::PathBuf,
    #[command(flatten)]
    tls: berth_runtime::TlsArgs,
    #[command(flatten)]
    metrics: berth_runtime::MetricsArgs,
    /// Longest one release's render may take, in seconds.
    #[arg(long, env = "BERTH_RENDER_TIME_LIMIT", default_value_t = 60)]
    render_time_limit: u64,
    /// Most bytes one release's render may produce.
    #[arg(long, env = "BERTH_RENDER_OUTPUT_LIMIT", default_value_t = 32 << 20)]
    render_output_limit: usize,
    /// Most bytes one release's render may build (strings, lists, maps and output together).
    #[arg(long, env = "BERTH_RENDER_MEMORY_LIMIT", default_value_t = berth_helm::render::DEFAULT_MEMORY_BUDGET)]
    render_memory_limit: usize,
    /// How many shards the releases are shared out in (a release's shard is a stable hash of
    /// `<namespace>/<name>` modulo this); the owner of a release's shard repairs its drift.
    /// Every replica must be given the same number.
    #[arg(long, env = "BERTH_RELEASE_SHARDS", default_value_t = berth_lease::shards::DEFAULT_SHARDS)]
    shards: u32,
    /// The namespace of the shard Leases (default: the pod's namespace, else `default`).
    #[arg(long, env = "BERTH_RELEASE_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// This replica's identity, written as the holderIdentity of the shard Leases it holds
    /// (default: the host name and a random suffix).
    #[arg(long, env = "BERTH_RELEASE_REPLICA_ID")]
    replica_id: Option<String>,
    /// How long a shard Lease stays valid after its holder last renewed it, in seconds: a
    /// dead replica's releases are repaired by another one after this.
    #[arg(long, env = "BERTH_RELEASE_LEASE_DURATION_SECS", default_value_t = 15)]
    lease_duration_secs: u64,
    /// How often a replica renews the shard Leases it holds, and tries for the others, in
    /// seconds (shorter than the lease duration).
    #[arg(long, env = "BERTH_RELEASE_LEASE_RENEW_SECS", default_value_t = 5)]
    lease_renew_secs: u64,
    #[arg(long, env = "BERTH_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: berth_runtime::LogFormat,
    /// Pod Security admission level of the App namespaces berth creates (and of existing ones
    /// without an `enforce` label): their `pod-security.kubernetes.io/enforce` and `warn`
    /// labels.
    #[arg(
        long,
        env = "BERTH_APP_POD_SECURITY",
        value_enum,
        default_value = "baseline"
    )]
    app_pod_security: berth_release::principal::PodSecurity,
    /// The API server's URL as hooks on the workers reach it (default: the one release uses).
    #[arg(long, env = "BERTH_HOOK_API_SERVER")]
    hook_api_server: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Renders allocate and free many small values; transparent huge pages made the kernel
    // clear 2 MiB pages for them (a third of a render's time, twice its memory).
    berth_helm::memory::prefer_small_pages();
    let _telemetry = berth_runtime::init("berth-release", args.log_format);
    let shards = berth_release::manager::ShardConfig {
        shards: args.shards,
        leases: Some(berth_lease::shards::ShardLeases {
            names: berth_release::manager::shards::NAMES,
            namespace: args
                .lease_namespace
                .clone()
                .unwrap_or_else(berth_lease::shards::default_namespace),
            lease: berth_lease::LeaseConfig {
                identity: args
                    .replica_id
                    .clone()
                    .unwrap_or_else(berth_release::manager::shards::default_identity),
                duration: std::time::Duration::from_secs(args.lease_duration_secs),
                renew: std::time::Duration::from_secs(args.lease_renew_secs),
            },
            // Nothing is forwarded between release replicas.
            advertise: None,
        }),
    };
    shards.check().map_err(|e| anyhow::anyhow!("{e}"))?;
    let key = berth_release::record::RecordKey::load(&args.record_key_file)?;
    let cluster = berth_release::process::connect(
        args.kubeconfig.as_deref(),
        args.hook_api_server.as_deref(),
    )
    .await?;
    let client = cluster.client.clone();
    let tls = args.tls.load(Some(berth_runtime::Role::Release))?;
    let metrics_listener = args.metrics.bind().await?;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(berth_runtime::shutdown_on_signal(shutdown.clone()));
    let metrics = berth_runtime::Metrics::default();
    berth_runtime::metrics::spawn_server(&metrics, metrics_listener, shutdown.clone());
    let scopes = berth_clients::scope::PackageScopes::connect_lazy(&args.lifecycle, tls.as_ref())?;
    let reporter = berth_release::process::spawn_version_reporter(
        client.clone(),
        &args.lifecycle,
        tls.as_ref(),
        shutdown.clone(),
    )?;
    let service = berth_release::service::ReleaseService::new(client, key)
        .with_package_scopes(scopes)
        .with_principals(cluster.hook_endpoint, args.app_pod_security)
        .with_history_max(args.history_max)
        .with_shards(shards)
        .with_render_limits(berth_release::manager::RenderLimits {
            time: std::time::Duration::from_secs(args.render_time_limit),
            output_bytes: args.render_output_limit,
            memory_bytes: args.render_memory_limit,
        });
    berth_release::process::run_service(service, tls, listener, metrics, shutdown).await?;
    reporter.abort();
    Ok(())
}
