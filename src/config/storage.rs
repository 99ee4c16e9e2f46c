//! `[storage]`: RocksDB sizing and the node's memory budget.
//!
//! `memory_budget_bytes` is split into the block cache, the memtables (sized so that what
//! RocksDB holds of them stays within their share; writers wait for a flush when they are
//! full), the raft log's cache of recently appended entries, and the bytes of records
//! produce requests hold while they are written; the rest of the process (runtime, connections,
//! raft and metadata state, code) gets a fixed reserve. Startup refuses a budget smaller than
//! those parts need.

use serde::Deserialize;

use super::ConfigError;
// The defaults are storage's own, so a store opened without a configuration file (tests, tools)
// is tuned exactly like a node's.
use crate::raft::RECENT_ENTRIES_BUDGET_BYTES;
use crate::storage::{
    DEFAULT_BLOCK_CACHE_BYTES, DEFAULT_BYTES_PER_SYNC, DEFAULT_DIRECT_IO_FOR_FLUSH,
    DEFAULT_DISK_RESERVE_BYTES, DEFAULT_LOG_WRITE_BUFFER_BYTES, DEFAULT_MEMTABLE_BYTES,
};

/// 1 GiB: the default `memory_budget_bytes`.
pub const DEFAULT_MEMORY_BUDGET_BYTES: usize = 1 << 30;
/// What the budget keeps for everything but the block cache, memtables and produced records:
/// the async runtime and its connections, raft and metadata state, the binary itself.
pub const PROCESS_RESERVE_BYTES: usize = 128 << 20;
/// The smallest block cache accepted: 8 MiB.
pub const MIN_BLOCK_CACHE_BYTES: usize = 8 << 20;
/// The smallest memtable (`log_write_buffer_bytes`) accepted: 1 MiB.
pub const MIN_LOG_WRITE_BUFFER_BYTES: usize = 1 << 20;

/// RocksDB sizing and the memory budget.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// The node's memory budget in bytes: block cache + memtables + 64 MiB of recently
    /// appended raft entries + in-flight produce bytes + a fixed reserve of 128 MiB for the
    /// rest of the process.
    pub memory_budget_bytes: usize,
    /// Block cache shared by all column families, in bytes. At least 8 MiB.
    pub block_cache_bytes: usize,
    /// The most memory the memtables take, in bytes; writes wait for a flush (backpressure)
    /// instead of memory growing. At least `4 * log_write_buffer_bytes`: two memtables filling
    /// or waiting for their flush, and the two a finished flush has not handed back yet.
    pub memtable_bytes: usize,
    /// Memtable size of the raft log (where produced data lands first), in bytes. At least
    /// 1 MiB.
    pub log_write_buffer_bytes: usize,
    /// RocksDB writes its flushed and compacted files to the disk every this many bytes while
    /// it writes them, instead of leaving the pages to the kernel until the file's final sync;
    /// 0 leaves them to the kernel.
    pub bytes_per_sync: u64,
    /// Memtable flushes and compactions write their files with direct I/O, so their writeback
    /// does not queue in front of the write-ahead log's syncs. Ignored (with a warning at
    /// startup) where the data directory's file system does not take `O_DIRECT`.
    pub direct_io_for_flush: bool,
    /// Free space kept on the data directory's file system for what must be written when
    /// clients may not: while less is free, produce requests answer 507
    /// `insufficient_storage` and write nothing, while raft replication, metadata, consumer
    /// group commits and the compactions that free space go on. Writes resume by themselves
    /// once more is free. 0: never refuse (RocksDB then fails writes once the disk is full).
    pub disk_reserve_bytes: u64,
    /// Where `herald backup` (`POST /v1/cluster/nodes/{id}/backups`) writes this node's
    /// backups, one directory each [default: the data directory's path followed by
    /// `.backups`]. On the data directory's file system a backup hard-links the store's files
    /// (seconds for any size); on another one it copies them.
    pub backup_dir: Option<std::path::PathBuf>,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            memory_budget_bytes: DEFAULT_MEMORY_BUDGET_BYTES,
            block_cache_bytes: DEFAULT_BLOCK_CACHE_BYTES,
            memtable_bytes: DEFAULT_MEMTABLE_BYTES,
            log_write_buffer_bytes: DEFAULT_LOG_WRITE_BUFFER_BYTES,
            bytes_per_sync: DEFAULT_BYTES_PER_SYNC,
            direct_io_for_flush: DEFAULT_DIRECT_IO_FOR_FLUSH,
            disk_reserve_bytes: DEFAULT_DISK_RESERVE_BYTES,
            backup_dir: None,
        }
    }
}

impl StorageConfig {
    /// What is left of the budget for the records of produce requests being written: the
    /// budget less the block cache, the memtables, the recent raft entries and the process
    /// reserve (0 if they take it all, which `validate` refuses).
    pub fn produce_in_flight_bytes(&self) -> usize {
        self.memory_budget_bytes.saturating_sub(self.fixed_parts())
    }

    /// The parts of the budget that do not depend on the load: block cache, memtables, the
    /// recent raft entries and the process reserve.
    fn fixed_parts(&self) -> usize {
        self.block_cache_bytes
            .saturating_add(self.memtable_bytes)
            .saturating_add(RECENT_ENTRIES_BUDGET_BYTES)
            .saturating_add(PROCESS_RESERVE_BYTES)
    }

    /// Checks the parts fit the budget; `max_body_bytes` is the largest produce request, which
    /// must fit in the in-flight share on its own.
    pub fn validate(&self, max_body_bytes: usize) -> Result<(), ConfigError> {
        if self.block_cache_bytes < MIN_BLOCK_CACHE_BYTES {
            return Err(ConfigError::Invalid(format!(
                "storage.block_cache_bytes must be at least {MIN_BLOCK_CACHE_BYTES} (8 MiB), got {}",
                self.block_cache_bytes
            )));
        }
        if self.log_write_buffer_bytes < MIN_LOG_WRITE_BUFFER_BYTES
            || self.memtable_bytes < self.log_write_buffer_bytes.saturating_mul(4)
        {
            return Err(ConfigError::Invalid(format!(
                "storage.log_write_buffer_bytes must be at least {MIN_LOG_WRITE_BUFFER_BYTES} (1 MiB) and storage.memtable_bytes at least four times it (one memtable fills while another flushes, and a finished flush hands its memtables back only after writers went on), got {} and {}",
                self.log_write_buffer_bytes, self.memtable_bytes
            )));
        }
        let needed = self.fixed_parts().saturating_add(max_body_bytes);
        if self.memory_budget_bytes < needed {
            return Err(ConfigError::Invalid(format!(
                "storage.memory_budget_bytes is {} but its parts need at least {needed}: block_cache_bytes {} + memtable_bytes {} + {RECENT_ENTRIES_BUDGET_BYTES} of recently appended raft entries + a reserve of {PROCESS_RESERVE_BYTES} for the process + room for one produce request of max_body_bytes {max_body_bytes}",
                self.memory_budget_bytes, self.block_cache_bytes, self.memtable_bytes
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_budget_leaves_room_for_produced_records() {
        let config = StorageConfig::default();
        config.validate(16 << 20).unwrap();
        assert_eq!(config.memory_budget_bytes, 1 << 30);
        assert_eq!(config.produce_in_flight_bytes(), 320 << 20);
    }

    #[test]
    fn a_budget_smaller_than_its_parts_is_refused() {
        let small = StorageConfig {
            memory_budget_bytes: 512 << 20,
            ..StorageConfig::default()
        };
        let error = small.validate(16 << 20).unwrap_err().to_string();
        assert!(error.contains("memory_budget_bytes"), "{error}");
        // Exactly enough is accepted: the parts plus one largest request.
        let exact = StorageConfig {
            memory_budget_bytes: (256 << 20)
                + (256 << 20)
                + RECENT_ENTRIES_BUDGET_BYTES
                + PROCESS_RESERVE_BYTES
                + (16 << 20),
            ..StorageConfig::default()
        };
        exact.validate(16 << 20).unwrap();
        assert_eq!(exact.produce_in_flight_bytes(), 16 << 20);
    }

    #[test]
    fn parts_below_their_minimum_are_refused() {
        let invalid = |config: StorageConfig, key: &str| {
            let error = config.validate(1 << 20).expect_err(key).to_string();
            assert!(error.contains(key), "{error}");
        };
        invalid(
            StorageConfig {
                block_cache_bytes: 1 << 20,
                ..StorageConfig::default()
            },
            "block_cache_bytes",
        );
        invalid(
            StorageConfig {
                memtable_bytes: 100 << 20,
                ..StorageConfig::default()
            },
            "memtable_bytes",
        );
        // Two 64 MiB memtables would fit, but not the two a flush hands back late.
        invalid(
            StorageConfig {
                memtable_bytes: 128 << 20,
                ..StorageConfig::default()
            },
            "memtable_bytes",
        );
        invalid(
            StorageConfig {
                log_write_buffer_bytes: 1000,
                ..StorageConfig::default()
            },
            "log_write_buffer_bytes",
        );
    }

    #[test]
    fn toml_sets_the_budget() {
        let config: StorageConfig =
            toml::from_str("memory_budget_bytes = 2147483648\nmemtable_bytes = 536870912\n")
                .unwrap();
        assert_eq!(config.memory_budget_bytes, 2 << 30);
        assert_eq!(config.memtable_bytes, 512 << 20);
        assert_eq!(config.block_cache_bytes, 256 << 20);
        assert_eq!(config.bytes_per_sync, DEFAULT_BYTES_PER_SYNC);
        config.validate(16 << 20).unwrap();
        let unsynced: StorageConfig = toml::from_str("bytes_per_sync = 0\n").unwrap();
        assert_eq!(unsynced.bytes_per_sync, 0);
        assert!(config.direct_io_for_flush);
        let buffered: StorageConfig = toml::from_str("direct_io_for_flush = false\n").unwrap();
        assert!(!buffered.direct_io_for_flush);
    }
}
