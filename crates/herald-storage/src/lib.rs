//! Storage: the node's one RocksDB, its column families and key codecs, and the group-commit
//! syncer. This is the only module that imports `rocksdb`.
//!
//! The layers above see typed operations (`WriteSet`, `Cf`, point reads, ordered scans) and
//! never RocksDB handles, so the engine stays swappable and its rules (no TTL, big-endian keys,
//! one WAL) stay in one place.

mod checkpoint;
mod db;
mod disk_space;
mod error;
mod gauges;
mod group_copy;
pub mod keys;
mod log_layout;
pub mod private_files;
mod syncer;
mod write_set;

pub use db::{
    MemoryUsage, Store, StoreOptions, DEFAULT_BLOCK_CACHE_BYTES, DEFAULT_BYTES_PER_SYNC,
    DEFAULT_DIRECT_IO_FOR_FLUSH, DEFAULT_DISK_RESERVE_BYTES, DEFAULT_LOG_WRITE_BUFFER_BYTES,
    DEFAULT_MEMTABLE_BYTES, MAX_QUICK_WRITE_BYTES,
};
pub use disk_space::DiskFull;
pub use error::StorageError;
pub use gauges::StorageGauges;
pub use log_layout::LOG_BLOB_MIN_BYTES;
pub use write_set::WriteSet;

/// The column families, one per purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cf {
    /// Raft log entries of every group, keyed `(group, index)`: the partition log itself.
    RaftLog,
    /// Small per-group raft state: vote, committed, purged, state-machine state, snapshots.
    RaftState,
    /// Per partition: base offset of every applied batch -> raft index holding it.
    OffsetIndex,
    /// Per partition: `(running max timestamp, base offset)` of every applied batch.
    TimeIndex,
    /// Node-level facts: node id, cluster id, format version.
    Node,
}

impl Cf {
    pub const ALL: [Cf; 5] = [
        Cf::RaftLog,
        Cf::RaftState,
        Cf::OffsetIndex,
        Cf::TimeIndex,
        Cf::Node,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Cf::RaftLog => "raft_log",
            Cf::RaftState => "raft_state",
            Cf::OffsetIndex => "offset_index",
            Cf::TimeIndex => "time_index",
            Cf::Node => "node",
        }
    }
}
