//! Process-wide memory settings for the binaries that render charts (`berth`, the release
//! service, `render-bench`).

/// Turns transparent huge pages off for this process.
///
/// Where the kernel backs memory with huge pages (transparent huge pages `always`, or an
/// allocator asking for them with `madvise(MADV_HUGEPAGE)`, as mimalloc, berth's allocator
/// until 2026-11-27, did), it clears a whole 2 MiB page on the first touch of any byte in it.
/// A render is a short burst of small allocations on two threads: profiling `berth render`
/// with mimalloc showed a third of its time in the kernel clearing such pages, and its peak
/// RSS halved without them (consul: 54 to 26 MiB). Later faults in mappings made before the
/// call also get small pages, so calling this first thing in `main` is enough.
pub fn prefer_small_pages() {
    // Refused only by kernels before 3.15; huge pages then stay as they were.
    let _ = nix::sys::prctl::set_thp_disable(true);
}
