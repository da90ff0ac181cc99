//! The `berth` command line: a thin client of the gateway's public API, plus `berth up`.

mod args;
mod commands;
mod operator;
mod output;
mod package;
mod queues;
mod release;
mod retry;

use std::process::ExitCode;

use clap::Parser;

pub use args::{Cli, Command, LimitArgs};

/// Parses the command line, runs the command and maps failures to a message and exit code 1.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // `berth render` is local and synchronous: it needs no async runtime (nor its threads).
    if let Command::Render(args) = &cli.command {
        return match release::render(args) {
            Ok(code) => code,
            Err(message) => {
                eprintln!("berth: {message}");
                ExitCode::FAILURE
            }
        };
    }
    // `berth operator eval` is local and synchronous too (`views` asks the server).
    if let Command::Operator(args) = &cli.command
        && !matches!(args.command, operator::OperatorCommand::Views { .. })
    {
        return match operator::operator(args) {
            Ok(code) => code,
            Err(message) => {
                eprintln!("berth: {message}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("berth: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("berth: {message}");
            ExitCode::FAILURE
        }
    }
}
