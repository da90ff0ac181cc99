//! `berth`: the command-line client of the gateway, and `berth up`.

/// mimalloc instead of glibc's allocator: rendering a chart allocates and frees many small
/// values across threads, where glibc's per-thread arenas kept ten times the memory in use
/// and spent a fifth of `berth render`'s time faulting in fresh pages.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
