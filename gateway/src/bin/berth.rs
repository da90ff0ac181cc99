//! `berth`: the command-line client of the gateway, and `berth up`.

fn main() -> std::process::ExitCode {
    berth_gateway::cli::main()
}
