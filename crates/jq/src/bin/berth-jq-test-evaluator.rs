//! A jq evaluator and nothing else, for `berth-jq`'s own tests: services start their own
//! executable as the evaluator (their `main` calls `berth_jq::run_if_requested` first).

fn main() -> std::process::ExitCode {
    berth_jq::run_if_requested().unwrap_or_else(|| {
        eprintln!(
            "this is a test fixture: run it as `{} MEMORY STACK OUTPUT`",
            berth_jq::EVALUATOR_ARG
        );
        std::process::ExitCode::from(2)
    })
}
