//! `queue-test-broker`: a **test fixture**, not part of berth. The broker role of the
//! `berth-queue` binary (`queue-test-broker serve ...`, the same flags and output, through
//! [`berth_queue::cli`]) built from this crate alone, so the queue's process tests
//! (`tests/processes.rs`, `tests/multi_broker.rs`) run real brokers without berth's task
//! handlers (the `berth-queue` binary itself is built by berth-worker).

use berth_queue::cli::ServeArgs;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "queue-test-broker",
    about = "the queue broker alone, for the queue's tests"
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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let _telemetry = berth_runtime::init("queue-test-broker", args.log_format);
    let shutdown = tokio_util::sync::CancellationToken::new();
    tokio::spawn(berth_runtime::shutdown_on_signal(shutdown.clone()));
    let Command::Serve(serve) = args.command;
    berth_queue::cli::serve(serve, shutdown).await?;
    Ok(())
}
