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
    /// Require `authorization: Bearer <token>` on every call.
    #[arg(long, env = "BERTH_TOKEN")]
    token: Option<String>,
    #[arg(long, env = "BERTH_LOG_FORMAT", value_enum, default_value = "text")]
    log_format: berth_telemetry::LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = berth_telemetry::init("berth-gateway", args.log_format);
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!("listening on {}", listener.local_addr()?);
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(berth_telemetry::shutdown_on_signal(shutdown.clone()));
    berth_gateway::run(
        berth_gateway::Config {
            lifecycle_endpoint: args.lifecycle,
            token: args.token,
        },
        listener,
        shutdown,
    )
    .await?;
    Ok(())
}
