//! `berth-gateway`: the public API as its own process (split mode).

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "berth-gateway",
    about = "berth gateway: the public berth.v1.Packages gRPC API"
)]
struct Args {
    #[arg(long, env = "BERTH_GATEWAY_LISTEN", default_value = berth_gateway::DEFAULT_LISTEN)]
    listen: std::net::SocketAddr,
    #[arg(long, env = "BERTH_LIFECYCLE", default_value = "http://127.0.0.1:7072")]
    lifecycle: String,
    /// Hookevent, where packages' operator views are read (GetViews, the view API).
    #[arg(long, env = "BERTH_HOOKEVENT")]
    hookevent: Option<String>,
    /// Serve operator views as a read-only Kubernetes-style API on this address (needs
    /// --hookevent; over TLS with the public API's certificate, --listen-tls-cert: kubectl
    /// sends tokens over TLS only).
    #[arg(long, env = "BERTH_VIEWS_LISTEN", requires = "hookevent")]
    views_listen: Option<std::net::SocketAddr>,
    /// Refused: a token on the command line is readable by every local process. Use
    /// --token-file or BERTH_TOKEN.
    #[arg(long, hide = true, value_name = "REFUSED")]
    token: Option<String>,
    /// Accept any of the bearer tokens in this file (one per line; `#` comments), and the one
    /// in BERTH_TOKEN if set. Every call must present one (`authorization: Bearer <token>`):
    /// the gateway does not start without a token.
    #[arg(long, env = "BERTH_TOKEN_FILE")]
    token_file: Option<std::path::PathBuf>,
    /// The gateway's identity towards lifecycle (mutual TLS).
    #[command(flatten)]
    tls: berth_runtime::TlsArgs,
    /// Serve the public API over TLS with this certificate (PEM; with --listen-tls-key).
    #[arg(long, env = "BERTH_GATEWAY_TLS_CERT", requires = "listen_tls_key")]
    listen_tls_cert: Option<std::path::PathBuf>,
    /// The public certificate's private key (PEM).
    #[arg(long, env = "BERTH_GATEWAY_TLS_KEY", requires = "listen_tls_cert")]
    listen_tls_key: Option<std::path::PathBuf>,
    #[command(flatten)]
    limits: berth_gateway::cli::LimitArgs,
    #[command(flatten)]
    metrics: berth_runtime::MetricsArgs,
    #[arg(long, env = "BERTH_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: berth_runtime::LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.token.is_some() {
        anyhow::bail!(berth_gateway::auth::TOKEN_FLAG_REFUSED);
    }
    let mut tokens: Vec<String> = berth_gateway::auth::token_from_env().into_iter().collect();
    if let Some(path) = &args.token_file {
        tokens.extend(berth_gateway::read_tokens(path)?);
    }
    let tokens = berth_gateway::Tokens::new(tokens)?;
    let _telemetry = berth_runtime::init("berth-gateway", args.log_format);
    let tls = args.tls.load(Some(berth_runtime::Role::Gateway))?;
    let public_tls = match (&args.listen_tls_cert, &args.listen_tls_key) {
        (Some(cert), Some(key)) => Some(berth_gateway::PublicTls::load(cert, key)?),
        _ => None,
    };
    let metrics_listener = args.metrics.bind().await?;
    let views = match args.views_listen {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr).await?;
            println!("views on {}", l.local_addr()?);
            Some((l, None))
        }
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(berth_runtime::shutdown_on_signal(shutdown.clone()));
    let metrics = berth_runtime::Metrics::default();
    berth_runtime::metrics::spawn_server(&metrics, metrics_listener, shutdown.clone());
    berth_gateway::run(
        berth_gateway::Config {
            lifecycle_endpoint: args.lifecycle,
            hookevent_endpoint: args.hookevent,
            tokens,
            tls,
            public_tls,
            limits: args.limits.limits(),
            metrics,
        },
        listener,
        views,
        shutdown,
    )
    .await?;
    Ok(())
}
