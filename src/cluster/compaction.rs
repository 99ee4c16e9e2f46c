//! Log compaction by key, driven by each partition's leader (planning) and run by every
//! replica (cleaning). See `docs/architecture.md` § Compaction.

/// How this node's cleaner behaves. The budget is shared by every partition on the node: one
/// pass runs at a time.
#[derive(Debug, Clone, Copy)]
pub struct CleanerOptions {
    /// Bytes per second the cleaner may read and write, all partitions together.
    pub io_max_bytes_per_sec: u64,
    /// Memory for the key map of one pass; a leader plans passes that fit in it.
    pub dedupe_buffer_bytes: usize,
    /// A partition is cleaned once this share of its messages is dirty (written since the
    /// last pass).
    pub min_dirty_ratio: f64,
}

impl Default for CleanerOptions {
    fn default() -> Self {
        CleanerOptions {
            io_max_bytes_per_sec: 64 << 20,
            dedupe_buffer_bytes: 128 << 20,
            min_dirty_ratio: 0.5,
        }
    }
}
