//! `berth-controller`: berth's Kubernetes front end as its own process (split mode).

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "berth-controller",
    about = "berth's Kubernetes front end: Application, Module and PackageRepository resources"
)]
struct Args {
    /// Lifecycle's gRPC endpoint.
    #[arg(long, env = "BERTH_LIFECYCLE", default_value = "http://127.0.0.1:7072")]
    lifecycle: String,
    /// Kubeconfig of the cluster (default: in-cluster, KUBECONFIG or ~/.kube/config).
    #[arg(long, env = "BERTH_KUBECONFIG")]
    kubeconfig: Option<std::path::PathBuf>,
    /// Where the admission webhook listens; unset: no webhook.
    #[arg(long, env = "BERTH_CONTROLLER_WEBHOOK_LISTEN")]
    webhook_listen: Option<std::net::SocketAddr>,
    /// `https://HOST[:PORT]` at which the API server reaches the webhook (the name in its
    /// certificate); default `https://<the address it listens on>`.
    #[arg(long, env = "BERTH_CONTROLLER_WEBHOOK_URL")]
    webhook_url: Option<String>,
    /// Do not apply the CustomResourceDefinitions at start (a chart installed them).
    #[arg(long, env = "BERTH_CONTROLLER_SKIP_CRDS")]
    skip_crds: bool,
    /// The namespace of the controller's Lease (default: the pod's namespace, else `default`).
    #[arg(long, env = "BERTH_CONTROLLER_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// This replica's identity in the Lease (default: the host name and a random suffix).
    #[arg(long, env = "BERTH_CONTROLLER_REPLICA_ID")]
    replica_id: Option<String>,
    /// Only resources with these labels (`key=value,...`) are this controller's, so several
    /// berth installations may share a cluster.
    #[arg(long, env = "BERTH_CONTROLLER_WATCH_LABEL_SELECTOR")]
    watch_label_selector: Option<String>,
    /// The namespace whose Secrets are watched for PackageRepository credentials (default:
    /// every namespace, which needs list and watch on Secrets cluster-wide).
    #[arg(long, env = "BERTH_CONTROLLER_CREDENTIALS_NAMESPACE")]
    credentials_namespace: Option<String>,
    #[command(flatten)]
    tls: berth_runtime::TlsArgs,
    #[arg(long, env = "BERTH_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: berth_runtime::LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = berth_runtime::init("berth-controller", args.log_format);
    let tls = args.tls.load(Some(berth_runtime::Role::Controller))?;
    let lease = berth_lease::LeaseConfig::new(
        args.replica_id
            .clone()
            .unwrap_or_else(|| berth_lease::default_identity("berth-controller")),
    );
    lease.check().map_err(|e| anyhow::anyhow!("{e}"))?;
    let config = berth_controller::Config {
        lifecycle_endpoint: args.lifecycle,
        tls,
        kubeconfig: args.kubeconfig,
        webhook: args
            .webhook_listen
            .map(|listen| berth_controller::webhook::WebhookListen {
                listen,
                url: args.webhook_url.clone(),
            }),
        lease: Some(berth_controller::LeaseSettings {
            namespace: args
                .lease_namespace
                .unwrap_or_else(berth_lease::shards::default_namespace),
            config: lease,
        }),
        install_crds: !args.skip_crds,
        selector: args.watch_label_selector,
        credentials_namespace: args.credentials_namespace,
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(berth_runtime::shutdown_on_signal(shutdown.clone()));
    berth_controller::run(config, shutdown, || println!("controller ready")).await?;
    Ok(())
}
