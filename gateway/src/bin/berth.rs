//! `berth`: the command-line client of the gateway, and `berth up`.

// The system allocator. mimalloc (used until 2026-11-27) kept more resident in `berth up`: at
// 1,000 packages with 8 tasks at once its peak RSS was 131–168 MiB where glibc's malloc gave
// 93–111 MiB at the same speed, and `berth render` of the largest corpus charts took as long
// with glibc in 15–25 % less memory (docs/benchmarks.md, "Scale").

fn main() -> std::process::ExitCode {
    // `berth render` is a short burst of small allocations; huge pages only cost it time and
    // memory (see there). Other commands keep the default, which their children inherit.
    if std::env::args().nth(1).as_deref() == Some("render") {
        berth_helm::memory::prefer_small_pages();
    }
    // `berth up` runs hookevent and lifecycle, whose jq evaluators are this executable.
    if let Some(code) = berth_jq::run_if_requested() {
        return code;
    }
    berth_gateway::cli::main()
}
