//! `berth-hook-exec`: starts one hook process confined to its package instance's principal
//! (cgroup, rlimits, mounts, Landlock, uid), or kills every process of a uid. The protocol and
//! the reasons are in `berth_hooks::isolation::exec`. Shipped beside the services' executables.

fn main() -> std::process::ExitCode {
    berth_hooks::isolation::exec::main()
}
