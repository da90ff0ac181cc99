//! `berth`: the command-line client of the gateway, and `berth up`.

/// mimalloc instead of glibc's allocator: rendering a chart allocates and frees many small
/// values across threads, where glibc's per-thread arenas kept ten times the memory in use
/// and spent a fifth of `berth render`'s time faulting in fresh pages.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's setting of when freed memory goes back to the kernel, in milliseconds.
const PURGE_DELAY: &str = "MIMALLOC_PURGE_DELAY";

/// `berth up` runs every service in one long-running process. By default mimalloc returns
/// freed pages 10 ms later, and only when the thread that freed them allocates again, so a
/// tokio worker thread that goes quiet keeps what it freed: at 1,000 packages `berth up`
/// peaked at 163–166 MiB that way, 135 MiB returning them at once (README, "Scale"). mimalloc
/// reads the setting from the environment when it starts, before `main`, and berth has no
/// unsafe code to set it later, so the process starts itself again with it set (same pid,
/// arguments and descriptors). A `MIMALLOC_PURGE_DELAY` already set is left as it is.
fn return_freed_memory_promptly() {
    use std::os::unix::process::CommandExt as _;
    if std::env::var_os(PURGE_DELAY).is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let failed = std::process::Command::new(&exe)
        .arg0(arg0)
        .args(args)
        .env(PURGE_DELAY, "0")
        .exec();
    // Only returns when it could not: carry on with the default.
    eprintln!(
        "berth up: could not restart {} with {PURGE_DELAY}=0 ({failed}); freed memory returns to the kernel later",
        exe.display()
    );
}

fn main() -> std::process::ExitCode {
    // `berth render` is a short burst of small allocations; huge pages only cost it time and
    // memory (see there). Other commands keep the default, which their children inherit.
    match std::env::args().nth(1).as_deref() {
        Some("render") => berth_helm::memory::prefer_small_pages(),
        Some("up") => return_freed_memory_promptly(),
        _ => {}
    }
    // `berth up` runs hookevent and lifecycle, whose jq evaluators are this executable.
    if let Some(code) = berth_jq::run_if_requested() {
        return code;
    }
    berth_gateway::cli::main()
}
