//! The allocator's settings for a serving node.
//!
//! glibc's malloc gives every thread that allocates under contention an arena of its own, up
//! to eight per core, and memory freed into one arena is reused by that arena only. A node's
//! threads (tokio's workers and blocking pool, RocksDB's flush and compaction threads, the
//! raft log syncer) each allocate and free batches that others made, so the arenas keep free
//! memory the others cannot use: in a three-minute mixed soak (`benches/mixed-soak.sh`) RSS
//! grew 80 MiB more with the default arenas than with as many as the node has cores, and the
//! produce p99 was no worse with fewer. So a node limits them, unless `MALLOC_ARENA_MAX` says
//! otherwise.

/// Limits malloc's arenas to the number of cores (at least 2), unless the environment set
/// `MALLOC_ARENA_MAX`. To be called before the runtime starts its threads.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
            return;
        }
        let cores = std::thread::available_parallelism().map_or(2, |cores| cores.get());
        let arenas = libc::c_int::try_from(cores.max(2)).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only changes a setting of the allocator; called before the
        // threads that would use more arenas exist.
        let accepted = unsafe { libc::mallopt(libc::M_ARENA_MAX, arenas) };
        if accepted != 1 {
            eprintln!("herald: the allocator did not take M_ARENA_MAX {arenas}");
        }
    }
}
